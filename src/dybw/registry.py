"""Registries: the one place where a class is found by the name a config gives it.

Algorithms (``algo.name``), runners (``runner.name``) and models (``model.name``) each have a
:class:`Registry`.  A class registers itself with the registry's decorator; configuration, the engines
and the figures ask the class (its schema, label, capabilities) instead of comparing names::

    @ALGORITHMS.register
    class WaitForTwo(StopPolicy):
        name = "wait_two"
        ...

Classes outside dybw (a test, a user's package) register the same way: name their module in the
``plugins`` config key (``python run.py plugins=[my_pkg.policies] algo=wait_two``) and every process of
a job, MPI ranks included, imports it before the config is checked.  A plugin that brings a config
option of its own (``algo=wait_two``) gives its defaults as ``default_config``; they are stored as
that option of the group in Hydra's ConfigStore, where ``conf/`` yaml files are found too.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from .errors import ConfigError


class Registry:
    """Classes by name, for one config group (``group``: the config key whose ``name`` selects them)."""

    def __init__(self, group: str, what: str):
        self.group, self.what = group, what
        self._classes: dict[str, type] = {}

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
        if name not in self._classes:
            raise ConfigError(where or f"{self.group}.name", name, "choose one of: " + ", ".join(sorted(self)))
        return self._classes[name]

    __getitem__ = get

    def __contains__(self, name) -> bool:
        return name in self._classes

    def __iter__(self):
        return iter(self._classes)

    def __len__(self) -> int:
        return len(self._classes)

    def items(self):
        return self._classes.items()


def import_plugins(modules: Iterable[str]) -> None:
    """Import the ``plugins`` modules (each registers its classes); a failure is one line naming it."""
    for index, module in enumerate(modules):
        try:
            importlib.import_module(module)
        except Exception as error:  # noqa: BLE001 - any failure of a user's module is reported the same way
            raise ConfigError(
                f"plugins[{index}]", module, f"cannot be imported ({type(error).__name__}: {error})"
            ) from None
