"""The virtual clock: start, ready, stop and finish times of every worker, and who uses whom.

Times are seconds.  For iteration k (docs/protocol.md), with ``C_j`` the compute time and ``D_ij`` the delay
of link i -> j:

ATC (adapt, then combine)::

    ready_j  = start_j + C_j                 # own update y_j leaves
    a_ij     = ready_i + D_ij                # arrival of i's update at j
    stop_j   = policy(ready, a)              # stop listening
    finish_j = stop_j                        # combining is instantaneous

CTA (combine, then adapt: the message is x_j, sent at the start)::

    ready_j  = start_j,   a_ij = start_i + D_ij,   stop_j = policy(ready, a),   finish_j = stop_j + C_j

``S_j = {i in N_j : a_ij <= stop_j}``.  Lock-step: ``E(k) = max_j finish_j(k)`` and every worker starts
iteration k+1 at ``E(k)``.  Free: ``start_j(k+1) = finish_j(k)``, ``E(k) = max_j finish_j(k)``.  A message
is matched by its iteration tag, so one that arrives after ``stop_j`` is dropped and one that arrives
before ``start_j`` waits in the inbox: both are what ``a_ij <= stop_j`` says.

The timing never depends on the model, so a whole chunk of lock-step iterations is computed at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SYNC_MODES = ("lockstep", "free")
UPDATE_ORDERS = ("atc", "cta")


@dataclass
class TimingChunk:
    """Times of iterations ``first .. first+T-1`` for every worker (arrays ``[T, N]`` unless noted)."""

    first: int
    start: np.ndarray
    ready: np.ndarray
    stop: np.ndarray
    finish: np.ndarray
    used: np.ndarray  # bool [T, N, N]: used[t, j, i] = i in S_j
    end: np.ndarray  # [T]: E(k)

    @property
    def used_count(self) -> np.ndarray:
        """``|S_j(k)|``, ``[T, N]``."""
        return self.used.sum(axis=-1)

    def __len__(self) -> int:
        return len(self.end)


class VirtualClock:
    """Advances the virtual clock chunk by chunk for one graph, stop policy, sync mode and update order."""

    def __init__(self, num_workers: int, links: np.ndarray, policy, sync: str = "lockstep", update: str = "atc"):
        self.num_workers = num_workers
        self.src, self.dst = np.asarray(links, dtype=np.int64).reshape(-1, 2).T
        self.policy = policy
        self.lockstep = sync == "lockstep"
        self.atc = update == "atc"
        self.next_start = np.zeros(num_workers)  # start_j of the next iteration
        self.last_end = 0.0  # E(k-1)
        self.iteration = 0

    def _arrivals(self, sent: np.ndarray, link_delays: np.ndarray) -> np.ndarray:
        """``a[..., j, i] = sent[..., i] + D_ij``; ``+inf`` where i is not a neighbour of j."""
        shape = sent.shape[:-1] + (self.num_workers, self.num_workers)
        arrivals = np.full(shape, np.inf)
        arrivals[..., self.dst, self.src] = sent[..., self.src] + link_delays
        return arrivals

    def _iteration(self, start, compute, link_delays):
        """One step of the rule in the module docstring for ``start``, ``compute`` of shape ``[..., N]``."""
        ready = start + compute if self.atc else start
        arrivals = self._arrivals(ready, link_delays)
        stop = self.policy.stop(ready, arrivals, self.lockstep)
        finish = stop if self.atc else stop + compute
        # A message at +inf never arrives (a non-neighbour, or a link delay too large to represent).
        used = (arrivals <= stop[..., None]) & np.isfinite(arrivals)
        return ready, stop, finish, used

    def state_after(self, chunk: TimingChunk, t: int) -> dict:
        """The clock's state once iteration ``chunk.first + t`` is done (to checkpoint mid-chunk)."""
        next_start = chunk.finish[t] if not self.lockstep else np.full(self.num_workers, chunk.end[t])
        return {"next_start": next_start.copy(), "last_end": float(chunk.end[t]), "iteration": chunk.first + t + 1}

    def restore(self, state: dict) -> None:
        self.next_start = np.array(state["next_start"], dtype=np.float64)
        self.last_end = float(state["last_end"])
        self.iteration = int(state["iteration"])

    def advance(self, compute: np.ndarray, link_delays: np.ndarray) -> TimingChunk:
        """Times of the next ``T`` iterations given ``C`` ``[T, N]`` and ``D`` ``[T, L]``."""
        first, count = self.iteration, len(compute)
        if self.lockstep:
            # Every iteration starts at E(k-1) for all workers: solve all T at once relative to their
            # start, then place them with a cumulative sum of the durations.
            relative = np.zeros_like(compute)
            ready, stop, finish, used = self._iteration(relative, compute, link_delays)
            # E(k) = E(k-1) + T(k), accumulated left to right from the last end: the same floats whatever
            # the chunk boundaries (a resumed run must reproduce an uninterrupted one bit for bit).
            end = np.add.accumulate(np.concatenate([[self.last_end], finish.max(axis=-1)]))[1:]
            offset = np.concatenate([[self.last_end], end[:-1]])[:, None]
            start, ready, stop, finish = offset + relative, offset + ready, offset + stop, offset + finish
            self.next_start[:] = end[-1]
        else:
            start = np.empty_like(compute)
            ready, stop, finish = (np.empty_like(compute) for _ in range(3))
            used = np.empty((count, self.num_workers, self.num_workers), dtype=bool)
            for t in range(count):
                start[t] = self.next_start
                ready[t], stop[t], finish[t], used[t] = self._iteration(start[t], compute[t], link_delays[t])
                self.next_start = finish[t].copy()
            end = np.maximum.accumulate(np.maximum(finish.max(axis=-1), self.last_end))
        self.last_end = float(end[-1])
        self.iteration += count
        return TimingChunk(first, start, ready, stop, finish, used, end)
