"""The virtual clock: start, ready, stop and finish times of every worker, and who uses whom.

Times are seconds.  For iteration k (docs/protocol.md), with ``C_j`` the compute time and ``D_l`` the delay
of directed link ``l = i -> j``:

ATC (adapt, then combine)::

    ready_j  = start_j + C_j                 # own update y_j leaves
    a_l      = ready_i + D_l                 # arrival of i's update at j
    r_j      = policy(ready_j, a_(.j))       # eligible: the stop policy's own rule
    stop_j   = r_j, or L_j for a threshold policy in lock-step (when j learns that max_i r_i is reached)
    finish_j = stop_j                        # combining is instantaneous

CTA (combine, then adapt: the message is x_j, sent at the start)::

    ready_j  = start_j,   a_l = start_i + D_l,   stop_j as above,   finish_j = stop_j + C_j

``S_j = {i in N_j : a_ij <= stop_j}``.  The end of iteration k is ``E(k) = max_j finish_j(k)``.
Lock-step: worker j starts iteration k+1 when it learns that iteration k is over, through the
agreement (:mod:`dybw.agreement`): ``start_j(k+1) = L_j(finish(k))``; with ``instant`` that is ``E(k)``
for everyone.  A threshold policy under ATC ends the iteration with its own agreement (nothing follows
theta), so ``start_j(k+1) = finish_j(k)``.  Free: ``start_j(k+1) = finish_j(k)``, no agreement.  A message
is matched by its iteration tag, so one that arrives after ``stop_j`` is dropped and one that arrives
before ``start_j`` waits in the inbox: both are what ``a_ij <= stop_j`` says.

Everything is kept per directed link (``[T, L]``, never ``[T, N, N]``), so the clock scales with the
number of links.  Lock-step iterations are computed relative to their reference start ``E(k-1)``:
``start_j = E(k-1) + sigma_j`` with ``sigma = 0`` under ``instant``, and ``E(k) = E(k-1) + T(k)`` is
accumulated left to right, so the floats do not depend on how iterations are chunked (a resumed run
reproduces an uninterrupted one bit for bit).  With ``instant`` a whole chunk is computed at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .agreement import build_agreement

SYNC_MODES = ("lockstep", "free")
UPDATE_ORDERS = ("atc", "cta")
PHASES = ("threshold", "end")  # the two global facts a lock-step iteration may need to agree on
HISTORY = ("start", "waited", "tail", "arrivals")  # an adaptive policy's record of one iteration


@dataclass
class TimingChunk:
    """Times of iterations ``first .. first+T-1`` for every worker (arrays ``[T, N]`` unless noted)."""

    first: int
    start: np.ndarray
    ready: np.ndarray
    stop: np.ndarray
    finish: np.ndarray
    used: np.ndarray  # bool [T, L]: used[t, l] = the sender of link l is in the receiver's S_j
    end: np.ndarray  # [T]: E(k)
    links: np.ndarray  # [L, 2] (sender, receiver) of each link
    next_offset: np.ndarray  # lock-step: start_j(k+1) - E(k), the offset each worker starts the next one at
    history: list | None = None  # an adaptive policy's history before this chunk, then one entry per iteration

    @property
    def used_count(self) -> np.ndarray:
        """``|S_j(k)|``, ``[T, N]``."""
        iterations, workers = self.start.shape
        # one bincount over (t, receiver) pairs instead of one per iteration
        slots = np.arange(iterations)[:, None] * workers + self.links[:, 1]
        return np.bincount(slots[self.used], minlength=iterations * workers).reshape(iterations, workers)

    def used_matrix(self) -> np.ndarray:
        """``used[t, j, i] = i in S_j(k)``, ``[T, N, N]`` (for the mixing weights of a small N)."""
        n = self.start.shape[1]
        matrix = np.zeros((len(self.used), n, n), dtype=bool)
        matrix[:, self.links[:, 1], self.links[:, 0]] = self.used
        return matrix

    def __len__(self) -> int:
        return len(self.end)


class VirtualClock:
    """Advances the virtual clock chunk by chunk for one graph, stop policy, sync mode, update order and
    agreement.  ``control(k0, count, phase, pairs)`` draws the agreement's control-message delays."""

    def __init__(
        self,
        num_workers: int,
        links: np.ndarray,
        policy,
        sync: str = "lockstep",
        update: str = "atc",
        agreement: str = "instant",
        control=None,
    ):
        self.num_workers = num_workers
        self.links = np.asarray(links, dtype=np.int64).reshape(-1, 2)
        self.src, self.dst = self.links.T
        self.policy = policy
        self.lockstep = sync == "lockstep"
        self.atc = update == "atc"
        self.agreement = build_agreement(agreement, num_workers, self.links)
        self.control = control
        self.adaptive = getattr(policy, "adaptive", False)  # decides its waits per iteration from its history
        # incoming[j, s]: the s-th link into j (padded with L, a link that never arrives)
        degree = np.bincount(self.dst, minlength=num_workers)
        order = np.argsort(self.dst, kind="stable")
        slot = np.arange(len(order)) - np.repeat(np.cumsum(degree) - degree, degree)
        self.incoming = np.full((num_workers, max(int(degree.max(initial=0)), 1)), len(self.links))
        self.incoming[self.dst[order], slot] = order
        self.offset = np.zeros(num_workers)  # lock-step: start_j - E(k-1) of the next iteration (sigma)
        self.next_start = np.zeros(num_workers)  # free: start_j of the next iteration
        self.last_end = 0.0  # E(k-1)
        self.iteration = 0

    # -- one iteration, relative to its start (leading batch axes allowed) -----------------------------
    def _eligible(self, start, compute, link_delays):
        """``ready``, the link arrivals ``a [..., L]`` and the eligible times ``r`` for ``start [..., N]``."""
        ready = start + compute if self.atc else start
        arrivals = ready[..., self.src] + link_delays
        if not self.policy.sends:  # nothing is sent: nothing ever arrives
            arrivals = np.full_like(arrivals, np.inf)
        padded = np.concatenate([arrivals, np.full(arrivals.shape[:-1] + (1,), np.inf)], axis=-1)
        return ready, arrivals, padded[..., self.incoming]

    def _finish(self, ready, stop, compute, arrivals):
        finish = stop if self.atc else stop + compute
        # A message at +inf never arrives (a link delay too large to represent).
        used = (arrivals <= stop[..., self.dst]) & np.isfinite(arrivals)
        return finish, used

    def _uses_agreement(self) -> bool:
        return self.lockstep and self.agreement.name != "instant"

    # -- state ---------------------------------------------------------------------------------------
    def state_after(self, chunk: TimingChunk, t: int) -> dict:
        """The clock's state once iteration ``chunk.first + t`` is done (to checkpoint mid-chunk)."""
        state = {
            "offset": chunk.next_offset[t].copy(),
            "next_start": chunk.finish[t].copy(),  # free: start_j(k+1) = finish_j(k)
            "last_end": float(chunk.end[t]),
            "iteration": chunk.first + t + 1,
        }
        if chunk.history is not None:  # what an adaptive policy has seen by then: its last `window` iterations
            before = len(chunk.history) - len(chunk)
            kept = chunk.history[: before + t + 1][-self.policy.window :]
            for i, name in enumerate(HISTORY):
                state[f"history_{name}"] = np.stack([entry[i] for entry in kept])
        return state

    def restore(self, state: dict) -> None:
        self.offset = np.array(state["offset"], dtype=np.float64)
        self.next_start = np.array(state["next_start"], dtype=np.float64)
        self.last_end = float(state["last_end"])
        self.iteration = int(state["iteration"])
        if getattr(self.policy, "adaptive", False) and "history_start" in state:
            columns = [np.asarray(state[f"history_{name}"]) for name in HISTORY]
            self.policy.restore_history(list(zip(*columns)))

    # -- advancing -------------------------------------------------------------------------------------
    def advance(self, compute: np.ndarray, link_delays: np.ndarray) -> TimingChunk:
        """Times of the next ``T`` iterations given ``C`` ``[T, N]`` and ``D`` ``[T, L]``."""
        if not self.lockstep:
            return self._advance_free(compute, link_delays)
        if not self._uses_agreement() and not self.adaptive:
            return self._advance_lockstep_instant(compute, link_delays)
        return self._advance_lockstep_agreed(compute, link_delays)

    def _chunk(self, first, start, ready, stop, finish, used, end, next_offset, history=None) -> TimingChunk:
        self.iteration += len(end)
        return TimingChunk(first, start, ready, stop, finish, used, end, self.links, next_offset, history)

    def _decide(self, now: np.ndarray) -> None:
        """An adaptive policy's choice for the iteration that starts at ``now`` (absolute times)."""
        if self.adaptive:
            self.policy.decide(now, self.links, self.incoming)

    def _observe(self, history, start, ready, stop, finish, arrivals) -> None:
        if self.adaptive:
            self.policy.observe(start, ready, stop, finish, arrivals)
            history.append(self.policy.history[-1])

    def _advance_lockstep_instant(self, compute, link_delays) -> TimingChunk:
        """Every iteration starts at E(k-1) for all workers: all T at once, relative to their start."""
        first = self.iteration
        relative = np.zeros_like(compute)
        ready, arrivals, incoming = self._eligible(relative, compute, link_delays)
        stop = self.policy.stop(ready, incoming, True)
        finish, used = self._finish(ready, stop, compute, arrivals)
        end = np.add.accumulate(np.concatenate([[self.last_end], finish.max(axis=-1)]))[1:]
        offset = np.concatenate([[self.last_end], end[:-1]])[:, None]
        self.last_end = float(end[-1])
        self.offset[:] = 0.0
        starts = (offset + relative, offset + ready, offset + stop, offset + finish)
        return self._chunk(first, *starts, used, end, np.zeros_like(compute))

    def _advance_lockstep_agreed(self, compute, link_delays) -> TimingChunk:
        """One iteration at a time: when each worker learns a global fact carries into the next start."""
        first, count = self.iteration, len(compute)
        pairs = self.agreement.pairs
        if self.control is not None:
            control = {phase: self.control(first, count, phase, pairs) for phase in self._phases()}
        else:  # instant (an adaptive policy's way here): no control message to draw
            control = {phase: np.zeros((count, len(pairs))) for phase in self._phases()}
        start, ready, stop, finish = (np.empty_like(compute) for _ in range(4))
        used = np.empty(link_delays.shape, dtype=bool)
        end, next_offset = np.empty(count), np.empty_like(compute)
        history = list(self.policy.history) if self.adaptive else None
        for t in range(count):
            relative = self.offset.copy()
            self._decide(self.last_end + relative)
            ready_t, arrivals, incoming = self._eligible(relative, compute[t], link_delays[t])
            eligible = self.policy.eligible(ready_t, incoming)
            # A threshold policy keeps every worker listening until it learns that all are eligible.
            threshold = self.policy.threshold
            stop_t = self.agreement.learn(eligible, control["threshold"][t]) if threshold else eligible
            finish_t, used[t] = self._finish(ready_t, stop_t, compute[t], arrivals)
            if self.policy.threshold and self.atc:
                next_start = finish_t  # theta's agreement ended the iteration: nothing follows it
            else:
                next_start = self.agreement.learn(finish_t, control["end"][t])
            duration = finish_t.max()
            end[t] = self.last_end + duration
            for out, value in ((start, relative), (ready, ready_t), (stop, stop_t), (finish, finish_t)):
                out[t] = self.last_end + value
            self._observe(history, start[t], ready[t], stop[t], finish[t], self.last_end + arrivals)
            self.offset = next_offset[t] = next_start - duration
            self.last_end = float(end[t])
        return self._chunk(first, start, ready, stop, finish, used, end, next_offset, history)

    def _phases(self) -> list[str]:
        phases = ["end"] if not (self.policy.threshold and self.atc) else []
        return (["threshold"] if self.policy.threshold else []) + phases

    def _advance_free(self, compute, link_delays) -> TimingChunk:
        """No barrier and no agreement: ``start_j(k+1) = finish_j(k)``; a threshold policy stops at ``r_j``."""
        first, count = self.iteration, len(compute)
        start, ready, stop, finish = (np.empty_like(compute) for _ in range(4))
        used = np.empty(link_delays.shape, dtype=bool)
        history = list(self.policy.history) if self.adaptive else None
        for t in range(count):
            start[t] = self.next_start
            self._decide(start[t])
            ready[t], arrivals, incoming = self._eligible(start[t], compute[t], link_delays[t])
            stop[t] = self.policy.stop(ready[t], incoming, False)
            finish[t], used[t] = self._finish(ready[t], stop[t], compute[t], arrivals)
            self._observe(history, start[t], ready[t], stop[t], finish[t], arrivals)
            self.next_start = finish[t].copy()
        end = np.maximum.accumulate(np.maximum(finish.max(axis=-1), self.last_end))
        self.last_end = float(end[-1])
        return self._chunk(first, start, ready, stop, finish, used, end, np.zeros_like(compute), history)
