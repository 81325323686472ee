"""cb_adaptive: each worker chooses how many neighbours to wait for from what it has seen itself.

A local, DBW-style rule (after Xu, Neglia and Sebastianelli's dynamic backup workers for parameter
servers): no global agreement, no threshold.  At the start of iteration k, worker j picks

    p_j(k) = argmax_{1 <= p <= d_j}  progress(p) / T_j(p)

- ``progress(p) = 1 - beta / (p + 1)``: the expected loss decrease of an iteration whose model averages
  ``p + 1`` local steps, in the model of SGD progress with an effective batch of ``p + 1`` gradients
  (``E[dL] ~ a - b/m``: the gradient-noise part of the decrease shrinks like 1/m; ``beta`` = the noise
  share ``b/a``, ``algo.noise``).  More neighbours average away more noise, with diminishing returns.
- ``T_j(p)``: the time from j's start to the end of its own part of the iteration had it waited for p
  neighbours, averaged over its last ``algo.window`` iterations:
  ``T_j(p) = mean_k' [ max(ready_j - start_j, o_j^(p)(k')) + (finish_j - stop_j) ]``, with
  ``o_j^(p)(k')`` the p-th smallest offset ``a_ij(k') - start_j(k')`` of its neighbours' messages in
  iteration k', and ``finish - stop`` the compute that follows the decision under CTA (0 under ATC).

The estimate is j's own time only.  In lock-step j may then wait at the barrier for slower workers, time
it could have spent listening; a local rule cannot tell that idle time from the delay it causes itself
(counting its observed barrier wait as free time feeds back: every worker waits longer, so the barrier
comes later -- on the 'paper' preset that version ran 2.3x longer iterations).  Using that idle time
needs the global threshold of cb-DyBW; this rule is the local alternative, with no global information.

Only what j has seen by its decision enters: a message of a past iteration that has not arrived yet
counts as arriving now (a lower bound on its delay; the estimate catches up when it arrives, "late
ones it has seen since").  The first iteration, with no history, waits for every neighbour.  Ties in
the rate go to the larger p (more averaging for the same rate).  Then the usual stop rule applies:
``stop_j = max(ready_j, a_j^(p_j))`` and ``S_j`` = everyone who arrived by then.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, ClassVar

import numpy as np

from ..schema import AtLeast, Range
from .base import ALGORITHMS, AlgoConfig, StopPolicy


@dataclass
class CbAdaptiveConfig(AlgoConfig):
    window: Annotated[int, AtLeast(1)]  # iterations of history the estimate averages over
    noise: Annotated[float, Range(0, 1, high_open=True)]  # beta: the gradient-noise share of an iteration's progress


def choose_waits(waited, tail, offsets, degrees, noise: float):
    """``p_j`` maximising ``progress(p) / T_j(p)`` (module docstring), for workers ``[..., N]``.

    ``waited [W, N]``: ``ready - start`` per past iteration; ``tail [W, N]``: ``finish - stop``;
    ``offsets [W, N, S]``: neighbours' arrival offsets from j's start (``+inf`` in the padding slots)."""
    ranked = np.sort(offsets, axis=-1)  # [W, N, S]: o^(p) for p = 1..S
    estimate = (np.maximum(waited[..., None], ranked) + tail[..., None]).mean(axis=0)  # [N, S]
    p = np.arange(1, offsets.shape[-1] + 1)
    with np.errstate(divide="ignore"):  # free waits (zero delays) have an infinite rate: wait for everyone
        rate = (1.0 - noise / (p + 1.0)) / estimate
    rate = np.where(p[None, :] <= np.asarray(degrees)[:, None], rate, -np.inf)
    best_from_the_end = np.argmax(rate[:, ::-1], axis=-1)  # the largest p among equal rates
    return offsets.shape[-1] - best_from_the_end


@ALGORITHMS.register
class CbAdaptive(StopPolicy):
    """Per worker and iteration, the number of neighbours that maximises estimated progress per second."""

    name = "cb_adaptive"
    label = "cb-Adaptive"
    color = "#CC78BC"
    Config = CbAdaptiveConfig
    adaptive: ClassVar[bool] = True  # the wall clock's ranks each keep their own history (mpi/wall.py)

    def __init__(self, degrees, window: int, noise: float):
        super().__init__(degrees)
        self.window, self.noise = int(window), float(noise)
        self.history: list[tuple] = []  # (start [N], waited [N], tail [N], arrivals [L]), absolute times

    @classmethod
    def label_for(cls, params: Mapping) -> str:
        return cls.label

    def decide(self, now: np.ndarray, links: np.ndarray, incoming: np.ndarray) -> None:
        """Set ``waits`` for the iteration every worker starts at ``now [N]`` (absolute times)."""
        if not self.history:
            self.waits = self.degrees.copy()
            return
        starts, waited, tails, arrivals = (np.stack(column) for column in zip(*self.history))
        seen = np.minimum(arrivals, now[links[:, 1]][None, :])  # [W, L]: not arrived yet -> arriving now
        offsets = seen - starts[:, links[:, 1]]
        padded = np.concatenate([offsets, np.full((len(offsets), 1), np.inf)], axis=1)[:, incoming]
        self.waits = choose_waits(waited, tails, padded, self.degrees, self.noise)

    def observe(self, start, ready, stop, finish, arrivals) -> None:
        """Remember one iteration (absolute times: ``[N]`` per worker, ``arrivals [L]`` per link)."""
        self.history.append((start, ready - start, finish - stop, arrivals))
        del self.history[: -self.window]

    def restore_history(self, history: list[tuple]) -> None:
        self.history = [tuple(np.asarray(a) for a in entry) for entry in history][-self.window :]
