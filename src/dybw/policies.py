"""Stop rules: when worker j stops listening for its neighbours' iteration-k messages.

Inputs are arrays with any leading batch shape ``[...]`` (e.g. a chunk of lock-step iterations):

- ``ready[..., j]``       time worker j's own message is ready (its local step is done, for ATC),
- ``arrivals[..., j, i]`` arrival time at j of neighbour i's message, ``+inf`` where i is not a neighbour.

``a_j^(p)`` denotes the p-th smallest arrival at j.  Every policy returns ``stop[..., j] >= ready[..., j]``;
the used set is then ``S_j = {i : arrivals[j, i] <= stop_j}`` (a message already here is never ignored).
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod

import numpy as np

from .errors import ConfigError


def order_statistic(arrivals: np.ndarray, p: np.ndarray) -> np.ndarray:
    """``a_j^(p_j)``: the ``p_j``-th smallest arrival at each worker j (``p_j >= 1``)."""
    ranked = np.sort(arrivals, axis=-1)
    index = np.broadcast_to(np.asarray(p) - 1, ranked.shape[:-1])[..., None]
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


class Policy(ABC):
    """A stop rule; subclasses implement :meth:`stop`."""

    name = "policy"

    def __init__(self, degrees: np.ndarray):
        self.degrees = np.asarray(degrees)

    @abstractmethod
    def stop(self, ready: np.ndarray, arrivals: np.ndarray, lockstep: bool) -> np.ndarray:
        """``stop[..., j]``: when worker j stops listening (``>= ready[..., j]``)."""


class CbFull(Policy):
    """cb-Full: wait for every neighbour.  ``stop_j = max(ready_j, a_j^(d_j))``."""

    name = "cb_full"

    def stop(self, ready, arrivals, lockstep):
        return np.maximum(ready, order_statistic(arrivals, self.degrees))


class CbStatic(Policy):
    """cb-Static(b): wait for the fastest ``p_j = d_j - b`` neighbours (``b`` backup workers).

    ``stop_j = max(ready_j, a_j^(d_j - b))`` with ``p_j`` clamped to ``[1, d_j]``.
    """

    name = "cb_static"

    def __init__(self, degrees, b: int):
        super().__init__(degrees)
        self.b = b
        self.waits = clamp_waits(self.degrees - b, self.degrees, "algo.b", b)

    def stop(self, ready, arrivals, lockstep):
        return np.maximum(ready, order_statistic(arrivals, self.waits))


class CbDyBW(Policy):
    """cb-DyBW: dynamic backup workers through a global threshold (our reading of Algorithm 2).

    Worker j becomes eligible at ``r_j = max(ready_j, a_j^(m_j))`` (``m = algo.min_neighbors``).  In
    lock-step the iteration cannot end before ``theta = max_j r_j``, so every worker keeps listening until
    then: ``stop_j = theta``.  Without a barrier (``sync=free``) the rule is the local one:
    ``stop_j = r_j``.  The realised backup count ``b_j = d_j - |S_j|`` changes every iteration.
    """

    name = "cb_dybw"

    def __init__(self, degrees, min_neighbors: int):
        super().__init__(degrees)
        self.min_neighbors = min_neighbors
        self.waits = clamp_waits(
            np.full_like(self.degrees, min_neighbors), self.degrees, "algo.min_neighbors", min_neighbors
        )

    def eligible(self, ready, arrivals):
        """``r_j = max(ready_j, a_j^(m_j))``."""
        return np.maximum(ready, order_statistic(arrivals, self.waits))

    def stop(self, ready, arrivals, lockstep):
        eligible = self.eligible(ready, arrivals)
        if not lockstep:
            return eligible
        return np.broadcast_to(eligible.max(axis=-1, keepdims=True), eligible.shape).copy()


POLICIES = {"cb_full": CbFull, "cb_static": CbStatic, "cb_dybw": CbDyBW}


def make_policy(algo, degrees: np.ndarray) -> Policy:
    """The policy named by ``algo.name`` with its parameters."""
    if algo.name == "cb_full":
        return CbFull(degrees)
    if algo.name == "cb_static":
        return CbStatic(degrees, int(algo.b))
    if algo.name == "cb_dybw":
        return CbDyBW(degrees, int(algo.min_neighbors))
    raise ConfigError("algo", algo.name, "choose one of: " + ", ".join(sorted(POLICIES)))
