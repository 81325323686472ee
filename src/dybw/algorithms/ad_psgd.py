"""ad_psgd: asynchronous decentralised SGD (AD-PSGD, Lian et al. 2018) -- pairwise gossip, no iterations."""

from __future__ import annotations

import warnings

import numpy as np

from .base import ALGORITHMS, Algorithm


@ALGORITHMS.register
class AdPsgd(Algorithm):
    """Every worker i loops over its own steps k = 0, 1, ... without waiting for anybody:

    1. read ``x_i`` and take the minibatch gradient there: ``g_i(k) = grad f_i(x_i; batch_i(k))``, which
       takes ``C_i(k)`` seconds;
    2. pick a neighbour ``j = N_i[floor(u_i(k) d_i)]`` uniformly (``u_i(k)`` position k of the stream
       ``(seed, "gossip", i)``; ``N_i`` in ascending order);
    3. atomically average with it, ``x_i, x_j <- (x_i + x_j) / 2``: i's model travels to j in
       ``D_ij(k)`` seconds, the average is taken there, and travels back in ``D_ji(k)``;
    4. apply its gradient to its current model: ``x_i <- x_i - eta(k) g_i(k)``, ``eta(k) = eta0 delta^k``.

    Its times, with ``start_i(0) = 0``::

        ready_i(k)   = start_i(k) + C_i(k)          the gradient is ready
        average_i(k) = ready_i(k) + D_ij(k)         the averaging happens (at j, atomically)
        stop_i(k)    = average_i(k) + D_ji(k)       the average is back: i applies g_i(k)
        start_i(k+1) = finish_i(k) = stop_i(k)

    A worker's times depend only on its own delays: nobody waits for anybody.  The averaging is one
    instant, ``average_i(k)``, and reads both models as they are then: ``x_j`` with every event before it
    applied (in particular j's own gradient steps that ended earlier), but not j's gradient in flight --
    j is not interrupted: its step goes on and applies its own gradient, computed on the model j read, to
    whatever ``x_j`` is at ``stop_j``.  Likewise ``x_i`` may have been averaged by others between
    ``start_i(k)`` and ``stop_i(k)``: ``g_i(k)`` is then stale, as in the paper.  The engine
    (:mod:`dybw.event_engine`) processes the events -- reads, averagings, gradient applications -- in
    virtual-time order, ties broken by worker id.  Pairwise averaging keeps ``sum_i x_i`` (exactly, in
    exact arithmetic), so with a zero gradient the average model never moves while the workers reach
    consensus.

    It has no iterations, barrier or agreement, and its weights are always 1/2: ``protocol.sync``,
    ``protocol.agreement``, ``algo.update`` and ``algo.mixing`` do not apply, which
    :meth:`check_options` says once.
    """

    name = "ad_psgd"
    label = "AD-PSGD"
    color = "#8c564b"
    engine = "event"
    clocks = ("virtual",)
    IGNORED_OPTIONS = ("protocol.sync", "protocol.agreement", "algo.update", "algo.mixing")

    def __init__(self, degrees: np.ndarray):
        self.degrees = np.asarray(degrees)

    @classmethod
    def build(cls, config, degrees: np.ndarray) -> AdPsgd:
        return cls(degrees)

    @classmethod
    def check_options(cls, cfg) -> None:
        """One warning line naming the options this algorithm ignores, with their values (the same text
        is shown once per process)."""
        values = {"protocol": cfg.protocol, "algo": cfg.algo}
        ignored = ", ".join(
            f"{key}={getattr(values[key.split('.')[0]], key.split('.')[1])}" for key in cls.IGNORED_OPTIONS
        )
        warnings.warn(
            f"algo={cls.name} ignores {ignored}: asynchronous gossip has no iterations, barrier or agreement, "
            "and averages pairs with weights 1/2",
            stacklevel=1,  # the line shown under it is this call, not the caller's
        )

    @staticmethod
    def partner(neighbours: np.ndarray, u: float) -> int:
        """``N_i[floor(u d_i)]``: the neighbour a uniform ``u`` in [0, 1) picks (``neighbours`` ascending)."""
        return int(neighbours[min(int(u * len(neighbours)), len(neighbours) - 1)])

    @staticmethod
    def step_times(start: float, compute: float, there: float, back: float) -> tuple[float, float, float]:
        """``(ready, average, stop)`` of a step that starts at ``start``: compute, the model to the partner,
        the average back (float64, added left to right)."""
        ready = start + compute
        average = ready + there
        return ready, average, average + back
