"""Typed configs from plain dicts: types and ranges declared beside the fields, checked in one place.

A config section is a dataclass whose fields carry their constraint in the annotation::

    @dataclass
    class TopologyConfig:
        p: Annotated[float, Range(0, 1, low_open=True)]   # "allowed range (0, 1]"

:func:`build` converts a plain (composed, resolved) dict into such a dataclass, field by field: the type
first ("must be an integer"), then the constraint, and an unknown key lists the valid ones.  Every
failure is a :class:`~dybw.errors.ConfigError` naming the dotted field, the value and what is allowed,
which ``run.py`` prints as one line.

The dataclasses have no defaults: the yaml files under ``conf/`` are the only place defaults live, and
a key the composed config lacks is reported as missing.  A field whose type is a :class:`Section`
chooses its dataclass from the value's ``name`` (an algorithm's or a runner's own keys, from its
registry).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass

from .errors import ConfigError

# --------------------------------------------------------------------------------------------------
# Constraints (the third argument of ConfigError is what the user reads after "is invalid: ")


@dataclass(frozen=True)
class Choice:
    """One of ``values``: "choose one of: a, b, c" (sorted)."""

    values: tuple

    def __init__(self, *values):
        object.__setattr__(self, "values", tuple(values))

    def check(self, where: str, value) -> None:
        if value not in self.values:
            raise ConfigError(where, value, "choose one of: " + ", ".join(sorted(map(str, self.values))))


@dataclass(frozen=True)
class AtLeast:
    """An integer ``>= low``: "must be >= low"."""

    low: int

    def check(self, where: str, value) -> None:
        if value < self.low:
            raise ConfigError(where, value, f"must be >= {self.low}")


@dataclass(frozen=True)
class Range:
    """A finite number in ``[low, high]`` (ends open on request): "allowed range (0, 1]"."""

    low: float
    high: float
    low_open: bool = False
    high_open: bool = False

    def check(self, where: str, value) -> None:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        if not (math.isfinite(value) and above and below):
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            raise ConfigError(where, value, f"allowed range {left}{self.low:g}, {self.high:g}{right}")


@dataclass(frozen=True)
class Finite:
    """A finite number ``> low`` (strict) or ``>= low``: "must be a finite number >= 0 (seconds)"."""

    low: float = 0.0
    strict: bool = False
    unit: str = ""
    what: str = "a finite number"

    def check(self, where: str, value) -> None:
        if not (math.isfinite(value) and (value > self.low if self.strict else value >= self.low)):
            unit = f" ({self.unit})" if self.unit else ""
            raise ConfigError(where, value, f"must be {self.what} {'>' if self.strict else '>='} {self.low:g}{unit}")


@dataclass(frozen=True)
class NonNegative:
    """A number ``>= 0`` that may be infinite, not NaN: "must be a number >= 0 (seconds), or inf"."""

    unit: str = ""

    def check(self, where: str, value) -> None:
        if math.isnan(value) or value < 0:
            unit = f" ({self.unit})" if self.unit else ""
            raise ConfigError(where, value, f"must be a number >= 0{unit}, or inf")


@dataclass(frozen=True)
class IsFinite:
    """Not NaN or infinite: "must be a finite number" (``what`` says more)."""

    what: str = "a finite number"

    def check(self, where: str, value) -> None:
        if not math.isfinite(value):
            raise ConfigError(where, value, f"must be {self.what}")


@dataclass(frozen=True)
class NonEmpty:
    """A string with something other than spaces in it."""

    what: str

    def check(self, where: str, value) -> None:
        if not str(value).strip():
            raise ConfigError(where, value, f"must be a non-empty {self.what}")


class Section:
    """Marks a field whose dataclass is chosen by the value's ``name`` (or another ``key``, e.g. a delay's
    ``dist``): ``resolve(name, where)`` returns it (or raises the one-line error listing the valid names);
    ``base`` holds the keys every choice has and ``choices()`` lists every dataclass a name can choose."""

    def __init__(self, resolve, base, choices, key: str = "name"):
        self.resolve, self.base, self.choices, self.key = resolve, base, choices, key


# --------------------------------------------------------------------------------------------------
# Conversion


def _constraints(kind) -> tuple[object, list]:
    """``(bare type, [constraints])`` of an annotation (``Annotated[int, AtLeast(1)]`` -> ``int, [AtLeast(1)]``)."""
    if typing.get_origin(kind) is typing.Annotated:
        bare, *extras = typing.get_args(kind)
        return bare, list(extras)
    return kind, []


def _is_optional(kind) -> bool:
    return typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in typing.get_args(kind)


def convert(kind, value, where: str):
    """``value`` as the annotation ``kind`` says (type, then constraints); a one-line error otherwise."""
    kind, constraints = _constraints(kind)
    section = next((c for c in constraints if isinstance(c, Section)), None)
    if section is not None:
        if not isinstance(value, dict):
            names = ", ".join(f.name for f in dataclasses.fields(section.base))
            raise ConfigError(where, value, f"must be a mapping with keys {names}")
        return build(section.resolve(value.get(section.key), f"{where}.{section.key}"), value, where)
    if _is_optional(kind):
        if value is None:
            return None
        (inner,) = [a for a in typing.get_args(kind) if a is not type(None)]
        converted = convert(inner, value, where)
    else:
        converted = _convert_type(kind, value, where)
    for constraint in constraints:
        constraint.check(where, converted)
    return converted


def _convert_type(kind, value, where: str):
    origin = typing.get_origin(kind)
    if dataclasses.is_dataclass(kind):
        return build(kind, value, where)
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(where, value, "must be true or false")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(where, value, "must be an integer")
    if kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(where, value, "must be a number")
    if kind is str:
        if isinstance(value, str):
            return value
        raise ConfigError(where, value, "must be a string")
    if kind is dict or origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(where, value, "must be a mapping")
        return dict(value)
    if kind is list or origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(where, value, "must be a list")
        args = typing.get_args(kind)
        return [convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)] if args else list(value)
    return value


def field_names(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


@functools.cache
def type_hints(cls) -> dict:
    """The resolved annotations of a config dataclass, ``Annotated`` constraints kept.  Cached: resolving them
    evaluates every annotation's string again (``from __future__ import annotations``), and a sweep of hundreds
    of jobs builds the same few classes thousands of times."""
    return typing.get_type_hints(cls, include_extras=True)


def build(cls, data, where: str = ""):
    """``cls(**data)`` with every field converted and checked; unknown and missing keys are errors."""
    prefix = f"{where}." if where else ""
    names = field_names(cls)
    if not isinstance(data, dict):
        raise ConfigError(where or "config", data, f"must be a mapping with keys {', '.join(names)}")
    unknown = [key for key in data if key not in names]
    if unknown:
        raise ConfigError(prefix + unknown[0], data[unknown[0]], f"unknown key; valid keys here: {', '.join(names)}")
    missing = [name for name in names if name not in data]
    if missing:
        raise ConfigError(prefix + missing[0], None, f"the config must set {', '.join(missing)}", missing=True)
    hints = type_hints(cls)
    return cls(**{name: convert(hints[name], data[name], prefix + name) for name in names})


def section_classes(cls, name: str) -> list[type]:
    """The dataclasses field ``name`` of ``cls`` can be built from (every choice of a :class:`Section`,
    its base first), or ``[]`` for a plain field."""
    kind, constraints = _constraints(type_hints(cls)[name])
    section = next((c for c in constraints if isinstance(c, Section)), None)
    if section is not None:
        return list(dict.fromkeys([section.base, *section.choices()]))
    return [kind] if dataclasses.is_dataclass(kind) else []
