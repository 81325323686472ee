"""Figures by name: an experiment spec's ``figure:`` key names a drawing function registered here.

A drawing function takes the spec's :class:`~dybw.figures.scaffold.Context` (its jobs, the results root, the
output folder) and returns a :class:`~dybw.figures.scaffold.Drawn`; :func:`dybw.figures.style.finish` puts
the title, legend and caption on the figure and saves it.  The built-in figures register themselves in
their modules; a figure of one's own registers the same way from a plugin (a package's ``dybw.plugins``
entry point, docs/extending.md)::

    @figure("my_figure")
    def my_figure(ctx: Context) -> Drawn: ...
"""

from __future__ import annotations

from collections.abc import Callable

FIGURES: dict[str, Callable] = {}


def figure(name: str) -> Callable[[Callable], Callable]:
    """Decorator: register the drawing function under ``name`` (a spec's ``figure: name``)."""

    def register(draw: Callable) -> Callable:
        known = FIGURES.get(name)
        if known is not None and known.__qualname__ != draw.__qualname__:
            raise TypeError(f"figure {name!r} is already registered by {known.__module__}.{known.__qualname__}")
        FIGURES[name] = draw
        return draw

    return register


def figures() -> dict[str, Callable]:
    """Every registered figure: those of the modules imported so far (the built-in ones register when
    ``python -m dybw.figures`` imports them) and those of installed plugins."""
    from ..registry import import_installed_plugins

    import_installed_plugins()
    return FIGURES
