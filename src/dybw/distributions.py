"""Delay distributions by registry: ``straggler.<compute|link|control>.dist`` names one of these classes.

Every delay is drawn as (:mod:`dybw.stragglers`)

    delay = (shift + scale * Z) * slow_mixture * slow_persistent

and a distribution owns only ``Z``: how it turns the uniforms ``(u0, u1)`` of a stream position into a
unit random variable, its mean, and the caption text of the figures.  A position always consumes three
uniforms ``(u0, u1, u2)`` (``u2`` decides the transient slow-down), whatever the distribution, so
switching it keeps the draws paired (common random numbers).

==============  =================================  ==============================
``dist``        Z from uniforms u0, u1             meaning of ``scale``
==============  =================================  ==============================
constant        0                                  (unused: delay = shift)
shifted_exp     -ln(1 - u0)          (mean 1)      mean of the exponential part
pareto          (1 - u0)^(-1/alpha)  (Z >= 1)      the Pareto minimum x_m
lognormal       exp(sigma * N(0,1))  (median 1)    median of the log-normal part
uniform         u0                                 width of [shift, shift + scale]
trace           replayed from a CSV                (unused)
==============  =================================  ==============================

A distribution of one's own is one class (in a plugin module or package: docs/extending.md) plus a
straggler preset yaml.  Parameters of its own go in a subclass of :class:`DelaySpec` named as its
``Spec``; they enter only the configs that choose it, so no existing job's ``config_hash`` changes::

    @dataclass
    class WeibullSpec(DelaySpec):
        shape: Annotated[float, Finite(0, strict=True)]

    @DISTRIBUTIONS.register
    class Weibull(Distribution):
        name, Spec = "weibull", WeibullSpec

        def unit(self, spec, u0, u1):
            return (-np.log1p(-u0)) ** (1 / spec.shape)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar

import numpy as np

from .errors import ConfigError
from .registry import Registry
from .schema import Finite, Range, Section

DISTRIBUTIONS = Registry("straggler.dist", "delay distribution")
PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class DelaySpec:
    """The keys every delay distribution has (defaults: conf/straggler/_delays.yaml).  ``alpha`` and
    ``sigma`` belong to pareto and lognormal but are kept in every spec: the configs of existing jobs, and
    their hashes, carry them."""

    dist: str
    shift: Annotated[float, Finite(0, unit="seconds")]
    scale: Annotated[float, Finite(0, unit="seconds")]
    alpha: Annotated[float, Finite(0, strict=True, what="a finite Pareto shape")]
    sigma: Annotated[float, Finite(0)]
    slow_prob: Annotated[float, Range(0, 1)]
    slow_factor: Annotated[float, Finite(0, strict=True)]
    persistent_ids: list  # worker ids, checked against num_workers by the config's cross-checks
    persistent_fraction: Annotated[float, Range(0, 1)]
    persistent_factor: Annotated[float, Finite(0, strict=True)]
    path: str

    @property
    def distribution(self) -> Distribution:
        return DISTRIBUTIONS[self.dist]()

    def check_path(self, where: str) -> None:
        """A replayed trace must exist (the one check that needs the file system)."""
        if self.distribution.replayed and not self.resolved_path().is_file():
            raise ConfigError(f"{where}.path", self.path, "the trace CSV does not exist")

    def resolved_path(self) -> Path:
        """``path`` as given, or relative to the project root (where ``conf/`` is) if not found here."""
        path = Path(self.path)
        if path.is_absolute() or path.exists():
            return path
        return PROJECT_ROOT / path

    def unit_draws(self, u: np.ndarray) -> np.ndarray:
        """``shift + scale * Z`` times the mixture factor, for uniforms ``u`` of shape ``[..., 3]``."""
        with np.errstate(over="ignore"):  # an overflow becomes inf, reported by DelaySampler in one line
            z = self.distribution.unit(self, u[..., 0], u[..., 1])
            delay = self.shift + self.scale * z
            return np.where(u[..., 2] < self.slow_prob, delay * self.slow_factor, delay)

    @property
    def mean(self) -> float:
        """Expected delay of one draw without the persistent factor (inf for Pareto with alpha <= 1)."""
        base = self.shift + self.scale * self.distribution.mean_unit(self)
        return base * (1 - self.slow_prob + self.slow_prob * self.slow_factor)


class Distribution:
    """The unit variable ``Z`` of ``delay = shift + scale * Z``: one subclass per ``dist``."""

    name: ClassVar[str]
    Spec: ClassVar[type] = DelaySpec  # its config keys: DelaySpec's, plus any of its own in a subclass
    replayed: ClassVar[bool] = False  # True: delays come from a file (DelaySampler replays, nothing is drawn)

    def unit(self, spec: DelaySpec, u0: np.ndarray, u1: np.ndarray) -> np.ndarray:
        """``Z`` for uniforms ``u0, u1`` in ``[0, 1)`` (elementwise)."""
        raise NotImplementedError

    def mean_unit(self, spec: DelaySpec) -> float:
        """``E[Z]``."""
        raise NotImplementedError

    def describe(self, spec: dict) -> str:
        """The delay in a caption, from the plain config section (``shift``, ``scale`` in seconds)."""
        return f"{ms(spec['shift'])} + {self.name}(scale {ms(spec['scale'])})"


def ms(seconds: float) -> str:
    return f"{1000 * seconds:g} ms"


def delay_spec(plain: dict) -> DelaySpec:
    """The spec of a plain (composed, already validated) config section, as its distribution's ``Spec``."""
    return DISTRIBUTIONS[plain["dist"]].Spec(**plain)


def spec_section() -> Section:
    """A delay spec's config section: its dataclass is the ``Spec`` of the distribution ``dist`` names."""
    return Section(
        lambda name, where: DISTRIBUTIONS.get(name, where).Spec,
        DelaySpec,
        lambda: [cls.Spec for _, cls in DISTRIBUTIONS.items()],
        key="dist",
    )


@DISTRIBUTIONS.register
class Constant(Distribution):
    """``Z = 0``: every delay is ``shift``."""

    name = "constant"

    def unit(self, spec, u0, u1):
        return np.zeros_like(u0)

    def mean_unit(self, spec):
        return 0.0

    def describe(self, spec):
        return ms(spec["shift"])


@DISTRIBUTIONS.register
class ShiftedExponential(Distribution):
    """``Z = -ln(1 - u0)``, exponential with mean 1: ``scale`` is the mean of the random part."""

    name = "shifted_exp"

    def unit(self, spec, u0, u1):
        return -np.log1p(-u0)

    def mean_unit(self, spec):
        return 1.0

    def describe(self, spec):
        return f"{ms(spec['shift'])} + Exp(mean {ms(spec['scale'])})"


@DISTRIBUTIONS.register
class Pareto(Distribution):
    """``Z = (1 - u0)^(-1/alpha) >= 1``: ``scale`` is the minimum x_m; ``E[Z] = alpha / (alpha - 1)``, infinite
    for ``alpha <= 1``."""

    name = "pareto"

    def unit(self, spec, u0, u1):
        return (1.0 - u0) ** (-1.0 / spec.alpha)

    def mean_unit(self, spec):
        return spec.alpha / (spec.alpha - 1) if spec.alpha > 1 else np.inf

    def describe(self, spec):
        return f"{ms(spec['shift'])} + Pareto(x_m {ms(spec['scale'])}, alpha {spec['alpha']:g})"


@DISTRIBUTIONS.register
class LogNormal(Distribution):
    """``Z = exp(sigma * N)``, ``N = sqrt(-2 ln(1 - u0)) cos(2 pi u1)`` (Box-Muller): median 1, so ``scale``
    is the median of the random part; ``E[Z] = exp(sigma^2 / 2)``."""

    name = "lognormal"

    def unit(self, spec, u0, u1):
        normal = np.sqrt(-2.0 * np.log1p(-u0)) * np.cos(2.0 * np.pi * u1)  # 1 - u0 in (0, 1]: a finite log
        return np.exp(spec.sigma * normal)

    def mean_unit(self, spec):
        return float(np.exp(spec.sigma**2 / 2))

    def describe(self, spec):
        return f"{ms(spec['shift'])} + LogNormal(median {ms(spec['scale'])}, sigma {spec['sigma']:g})"


@DISTRIBUTIONS.register
class Uniform(Distribution):
    """``Z = u0``: the delay is uniform on ``[shift, shift + scale]``."""

    name = "uniform"

    def unit(self, spec, u0, u1):
        return u0

    def mean_unit(self, spec):
        return 0.5

    def describe(self, spec):
        return f"U[{ms(spec['shift'])}, {ms(spec['shift'] + spec['scale'])}]"


@DISTRIBUTIONS.register
class Trace(Distribution):
    """Delays replayed cyclically from the CSV ``path`` (:class:`dybw.stragglers.DelaySampler`); nothing is
    drawn, and the shift, scale and transient slow-down do not apply."""

    name = "trace"
    replayed = True

    def unit(self, spec, u0, u1):
        return np.zeros_like(u0)

    def mean_unit(self, spec):
        return 0.0

    def describe(self, spec):
        return f"trace {spec['path']}"
