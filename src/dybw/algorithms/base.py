"""What every algorithm is: a registered class that owns its config keys, its label and what it needs.

An algorithm is chosen by ``algo.name``; :data:`ALGORITHMS` finds its class.  The class declares

- ``Config``: the dataclass of its keys (those of :class:`AlgoConfig` plus its own, e.g. ``b``), whose
  defaults live in ``conf/algo/<name>.yaml``;
- ``label`` / :meth:`label_for` and ``color``: how figures and tables name and draw it;
- ``engine``: which engine runs it (:data:`ENGINES`: ``iteration``, every worker's k-th step belongs to
  iteration k and the lock-step or free virtual clock decides the timing; ``event``, asynchronous steps
  processed in virtual-time order);
- ``clocks``: the clocks it runs on (``virtual``; ``wall``: MPI ranks with real delays);
- :meth:`check`: the checks that need the graph (a ``b`` no worker can honour); :meth:`check_options`:
  those that need the whole config (an option the algorithm does not use).

The stop policies (:class:`StopPolicy`) are the algorithms of the paper; :mod:`.ad_psgd` is asynchronous.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, ClassVar

import numpy as np

from ..clock import UPDATE_ORDERS
from ..errors import ConfigError
from ..mixing import MIXING_RULES
from ..registry import Registry
from ..schema import Choice, Finite, Range

ALGORITHMS = Registry("algo", "algorithm")

# What each engine is, for messages (a runner that lacks an engine names it and what it does).
ENGINES = {
    "iteration": "every worker's k-th step belongs to iteration k",
    "event": "asynchronous steps in virtual-time order, no common iterations",
}


@dataclass
class AlgoConfig:
    """The keys every algorithm has."""

    name: str
    update: Annotated[str, Choice(*UPDATE_ORDERS)]  # atc: local step, then average | cta: the other order
    mixing: Annotated[str, Choice(*MIXING_RULES)]  # weights of the used neighbours (mixing.py)
    eta0: Annotated[float, Finite(0, strict=True)]  # eta(k) = eta0 * delta^k
    delta: Annotated[float, Range(0, 1, low_open=True)]


class Algorithm:
    """Base of every algorithm; subclasses set the class attributes below and register themselves."""

    name: ClassVar[str]
    Config: ClassVar[type] = AlgoConfig
    label: ClassVar[str]
    color: ClassVar[str | None] = None  # None: figures pick one from their extra palette
    engine: ClassVar[str] = "iteration"
    clocks: ClassVar[tuple[str, ...]] = ("virtual", "wall")
    default_config: ClassVar[dict | None] = None  # a plugin's defaults (built-ins: conf/algo/<name>.yaml)

    @classmethod
    def own_keys(cls) -> list[str]:
        """The keys of ``Config`` beyond those every algorithm has (``b`` for cb_static)."""
        common = {f.name for f in dataclasses.fields(AlgoConfig)}
        return [f.name for f in dataclasses.fields(cls.Config) if f.name not in common]

    @classmethod
    def check(cls, config, graph) -> None:
        """Checks of ``config`` that need the graph; a value no worker can honour is a ConfigError."""

    @classmethod
    def check_options(cls, cfg) -> None:
        """Checks of the whole run config ``cfg`` (e.g. an option outside ``algo`` it does not use)."""

    @classmethod
    def label_for(cls, params: Mapping) -> str:
        """The name figures and tables give a run with these ``algo`` keys (a plain dict)."""
        return cls.label

    @classmethod
    def color_for(cls, params: Mapping) -> str | None:
        return cls.color


def order_statistic(arrivals: np.ndarray, p: np.ndarray) -> np.ndarray:
    """``a_j^(p_j)``: the ``p_j``-th smallest arrival at each worker j (``p_j >= 1``)."""
    ranked = np.sort(arrivals, axis=-1)
    index = np.asarray(p) - 1
    if ranked.ndim == 2 and index.shape == ranked.shape[:1]:  # one iteration: the clock's agreed lock-step path
        return ranked[np.arange(len(index)), index]  # plain indexing: 5 us against 18 for 16 workers
    index = np.broadcast_to(index, ranked.shape[:-1])[..., None]
    return np.take_along_axis(ranked, index, axis=-1)[..., 0]


def clamp_waits(wanted: np.ndarray, degrees: np.ndarray, field: str, value) -> np.ndarray:
    """Per-worker number of neighbours to wait for, clamped to ``1 <= p_j <= d_j``.

    Clamping is what a worker with fewer neighbours than the rule asks for can do; it is reported once.
    A value that no worker can honour is a configuration error instead.
    """
    clamped = np.clip(wanted, 1, degrees)
    if np.all(clamped != wanted):
        raise ConfigError(field, value, f"no worker can honour it (degrees {int(degrees.min())}..{int(degrees.max())})")
    if np.any(clamped != wanted):
        changed = np.flatnonzero(clamped != wanted)
        warnings.warn(
            f"{field}={value}: clamped for workers {changed.tolist()} to 1 <= waited neighbours <= degree", stacklevel=3
        )
    return clamped


class StopPolicy(Algorithm):
    """A stop rule: when worker j stops listening for its neighbours' iteration-k messages.

    Inputs have any leading batch shape ``[...]`` (a chunk of iterations): ``ready[..., j]`` is when worker
    j's own message is ready, ``arrivals[..., j, i]`` when neighbour i's message reaches j (``+inf`` for a
    non-neighbour).  Worker j waits for its ``p_j = waits[j]`` fastest neighbours, and at most ``timeout``
    seconds after its own message is ready; it becomes *eligible* at

        r_j = max(ready_j, min(a_j^(p_j), ready_j + timeout))

    A local rule (``threshold = False``) stops there: ``stop_j = r_j``.  A threshold rule, in lock-step,
    keeps every worker listening until the last one is eligible, ``stop_j = theta = max_i r_i`` -- which
    the workers must agree on (the clock's agreement) -- and is local without a barrier.  The used set is
    then ``S_j = {i : a_ij <= stop_j}``: a message already here is never ignored.
    """

    threshold: ClassVar[bool] = False
    sends: ClassVar[bool] = True  # False: a worker sends nothing (so it uses nothing: S_j is empty)
    timeout: float = np.inf

    def __init__(self, degrees: np.ndarray):
        self.degrees = np.asarray(degrees)
        self.waits = self.degrees.copy()

    @classmethod
    def build(cls, config, degrees: np.ndarray) -> StopPolicy:
        """The policy of ``config`` (its own keys become constructor arguments) for a graph's degrees."""
        return cls(degrees, **{key: getattr(config, key) for key in cls.own_keys()})

    def eligible(self, ready: np.ndarray, arrivals: np.ndarray) -> np.ndarray:
        """``r_j = max(ready_j, min(a_j^(p_j), ready_j + timeout))``."""
        waited = order_statistic(arrivals, self.waits)
        if np.isfinite(self.timeout):
            waited = np.minimum(waited, ready + self.timeout)
        return np.maximum(ready, waited)

    def stop(self, ready: np.ndarray, arrivals: np.ndarray, lockstep: bool) -> np.ndarray:
        """``stop[..., j]`` (``>= ready[..., j]``): ``r_j``, or ``theta`` for a threshold rule in lock-step."""
        eligible = self.eligible(ready, arrivals)
        if not (self.threshold and lockstep):
            return eligible
        return np.broadcast_to(eligible.max(axis=-1, keepdims=True), eligible.shape).copy()


def build_algorithm(config, degrees: np.ndarray):
    """The algorithm object ``config`` (typed ``algo`` section) names, for a graph's degrees."""
    return ALGORITHMS[config.name].build(config, degrees)
