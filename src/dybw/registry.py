"""Registries: the one place where a class is found by the name a config gives it.

Algorithms (``algo.name``), runners (``runner.name``) and models (``model.name``) each have a
:class:`Registry`.  A class registers itself with the registry's decorator; configuration, the engines
and the figures ask the class (its schema, label, capabilities) instead of comparing names::

    @ALGORITHMS.register
    class WaitForTwo(StopPolicy):
        name = "wait_two"
        ...

Classes outside dybw (a test, a user's package) register the same way.  An installed package declares
its modules under the ``dybw.plugins`` entry-point group (``[project.entry-points."dybw.plugins"]`` in
its pyproject.toml) and every process imports them before it first looks a name up; an unpackaged
module is named in the ``plugins`` config key instead (``python run.py plugins=[my_policies]
algo=wait_two``), and every process of a job, MPI ranks included, imports it before the config is
checked.  A plugin that brings a config
option of its own (``algo=wait_two``) gives its defaults as ``default_config``; they are stored as
that option of the group in Hydra's ConfigStore, where ``conf/`` yaml files are found too.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from importlib.metadata import entry_points

from .errors import ConfigError

ENTRY_POINT_GROUP = "dybw.plugins"
REGISTRIES: dict[str, Registry] = {}  # by config group: algo, runner, model


class Registry:
    """Classes by name, for one config group (``group``: the config key whose ``name`` selects them)."""

    def __init__(self, group: str, what: str):
        self.group, self.what = group, what
        self._classes: dict[str, type] = {}
        REGISTRIES.setdefault(group, self)  # the wall clock's agreements share protocol.agreement

    def plugin_hint(self) -> str:
        """Where a class of the user's own comes from: said wherever an unknown name is reported."""
        return (
            f"{self.what}s of your own come from a package's '{ENTRY_POINT_GROUP}' entry point "
            "or from plugins=[<module>]"
        )

    def register(self, cls: type) -> type:
        """Class decorator: file ``cls`` under ``cls.name`` (and its ``default_config`` under the group)."""
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name:
            raise TypeError(f"a registered {self.what} needs a class attribute 'name' (got {name!r})")
        known = self._classes.get(name)
        if known is not None and known is not cls and known.__qualname__ != cls.__qualname__:
            raise TypeError(f"{self.what} {name!r} is already registered by {known.__module__}.{known.__qualname__}")
        self._classes[name] = cls
        defaults = getattr(cls, "default_config", None)
        if defaults is not None:
            from hydra.core.config_store import ConfigStore

            ConfigStore.instance().store(group=self.group, name=name, node={"name": name, **defaults})
        return cls

    def get(self, name, where: str | None = None) -> type:
        """The class registered as ``name``; an unknown name is one line listing the known ones."""
        if name not in self:
            raise ConfigError(
                where or f"{self.group}.name",
                name,
                "choose one of: " + ", ".join(sorted(self)) + f" ({self.plugin_hint()})",
            )
        return self._classes[name]

    __getitem__ = get

    def __contains__(self, name) -> bool:
        import_installed_plugins()
        return name in self._classes

    def __iter__(self):
        import_installed_plugins()
        return iter(self._classes)

    def __len__(self) -> int:
        import_installed_plugins()
        return len(self._classes)

    def items(self):
        import_installed_plugins()
        return self._classes.items()


_installed_imported = False


def import_installed_plugins() -> None:
    """Import, once per process, every module that an installed package declares in the ``dybw.plugins``
    entry-point group; a failure is one line naming the entry point and its package."""
    global _installed_imported
    if _installed_imported:
        return
    _installed_imported = True  # first: a plugin that looks a name up while it is imported must not recurse
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            point.load()
        except Exception as error:  # noqa: BLE001 - any failure of an installed plugin is reported the same way
            package = point.dist.name if point.dist is not None else "an installed package"
            raise ConfigError(
                f"entry point {ENTRY_POINT_GROUP}:{point.name}",
                point.value,
                f"declared by {package} cannot be imported ({type(error).__name__}: {error})",
            ) from None


def import_plugins(modules: Iterable[str]) -> None:
    """Import the ``plugins`` modules (each registers its classes); a failure is one line naming it."""
    for index, module in enumerate(modules):
        try:
            importlib.import_module(module)
        except Exception as error:  # noqa: BLE001 - any failure of a user's module is reported the same way
            raise ConfigError(
                f"plugins[{index}]", module, f"cannot be imported ({type(error).__name__}: {error})"
            ) from None
