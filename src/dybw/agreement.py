"""How workers agree on a global maximum: when each worker learns it (``protocol.agreement``).

Lock-step needs two global facts the paper's setting takes for free: that iteration k is over for
everyone (the barrier ``E(k) = max_j finish_j``), and, for cb-DyBW, that every worker is eligible
(``theta = max_j r_j``).  An agreement turns the workers' entry times ``t_j`` (when each has its own
value: its ``finish_j`` or its ``r_j``) into the times ``L_j >= max_i t_i`` at which each learns that
the maximum is reached, paying a control-message delay ``delta`` per message (``straggler.control``,
drawn per iteration from the streams ``(seed, "control", phase, i, j)``):

- ``instant``:   ``L_j = max_i t_i`` -- no message costs anything (the paper's idealisation);
- ``allreduce``: a max-all-reduce by recursive doubling between workers ``0..N-1``.  With
  ``P = 2^floor(log2 N)``, round ``s`` pairs ``j`` with ``j XOR 2^s``; a worker enters round ``s+1``
  once it has its partner's round-``s`` message: ``tau_j <- max(tau_j, tau_q + delta_qj)``.  For N not a
  power of two (the standard fix, as MPICH's recursive doubling does it), each extra worker
  ``e = P..N-1`` first sends to ``e - P`` (``tau_{e-P} <- max(tau_{e-P}, t_e + delta)``) and receives the
  result back after the ``log2 P`` rounds (``L_e = L_{e-P} + delta``): ``ceil(log2 N) + 1`` message
  delays on its longest path instead of ``log2 N``;
- ``flood``: over the communication graph itself, every worker forwarding what it newly learns to its
  neighbours at once: ``L_j = max_i (t_i + dist_ij)``, with ``dist`` the shortest path from i to j over
  the graph's links weighted by this iteration's control delays (the fully distributed reading).

With every control delay 0, ``allreduce`` and ``flood`` give ``max_i t_i`` exactly, i.e. ``instant``'s bits.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from .registry import Registry

AGREEMENTS = Registry("protocol.agreement", "agreement")


class Agreement:
    """Learning times ``L [N]`` from entry times ``t [N]`` and the control delays of ``pairs``."""

    name: ClassVar[str]

    def __init__(self, num_workers: int, links: np.ndarray):
        self.num_workers = num_workers
        self.links = np.asarray(links, dtype=np.int64).reshape(-1, 2)

    @property
    def pairs(self) -> np.ndarray:
        """Directed ``(sender, receiver)`` pairs whose control delays :meth:`learn` uses, ``[M, 2]``."""
        return np.zeros((0, 2), dtype=np.int64)

    def learn(self, entry: np.ndarray, delays: np.ndarray) -> np.ndarray:
        """``L_j`` for entry times ``entry [N]`` and the pairs' control delays ``delays [M]``."""
        raise NotImplementedError


@AGREEMENTS.register
class Instant(Agreement):
    """``L_j = max_i t_i``: a global maximum known everywhere at no cost."""

    name = "instant"

    def learn(self, entry, delays):
        return np.full(self.num_workers, entry.max())


@AGREEMENTS.register
class AllReduce(Agreement):
    """A max-all-reduce by recursive doubling (extra workers fold in before and out after)."""

    name = "allreduce"

    def __init__(self, num_workers, links):
        super().__init__(num_workers, links)
        self.core = 1 << (num_workers.bit_length() - 1)  # P = 2^floor(log2 N)
        extra = np.arange(self.core, num_workers)
        self.fold_in = np.stack([extra, extra - self.core], axis=1)  # e -> e - P
        self.rounds = []
        for s in range(self.core.bit_length() - 1):
            workers = np.arange(self.core)
            self.rounds.append(np.stack([workers ^ (1 << s), workers], axis=1))  # partner -> worker
        self.fold_out = self.fold_in[:, ::-1]  # e - P -> e
        self._pairs = np.concatenate([self.fold_in, *self.rounds, self.fold_out]).reshape(-1, 2)

    @property
    def pairs(self):
        return self._pairs

    def learn(self, entry, delays):
        n_in, n_round = len(self.fold_in), self.core
        tau = np.array(entry[: self.core], dtype=np.float64)
        if n_in:
            np.maximum.at(tau, self.fold_in[:, 1], entry[self.fold_in[:, 0]] + delays[:n_in])
        offset = n_in
        for round_pairs in self.rounds:
            heard = tau[round_pairs[:, 0]] + delays[offset : offset + n_round]
            tau = np.maximum(tau, heard)
            offset += n_round
        learned = np.empty(self.num_workers)
        learned[: self.core] = tau
        if n_in:
            learned[self.fold_out[:, 1]] = tau[self.fold_out[:, 0]] + delays[offset : offset + n_in]
        return learned


@AGREEMENTS.register
class Flood(Agreement):
    """Flooding a running maximum over the graph: ``L_j = max_i (t_i + dist_ij)``.

    ``reach[i, j]``, when origin i's news reaches j, is relaxed along the links until nothing changes
    (Bellman-Ford with the origins' entry times as starting values): ``reach[i, j] = min over links u -> j
    of reach[i, u] + delta_uj``.  Each time is a sum along its path, left to right, as the messages add
    their delays -- the bits of an event-driven simulation of the flood.
    """

    name = "flood"

    def __init__(self, num_workers, links):
        super().__init__(num_workers, links)
        receivers = self.links[:, 1]
        degree = np.bincount(receivers, minlength=num_workers)
        order = np.argsort(receivers, kind="stable")
        slot = np.arange(len(order)) - np.repeat(np.cumsum(degree) - degree, degree)
        # incoming[j, s]: the s-th link into j, padded with L (an extra link that never delivers)
        self.incoming = np.full((num_workers, max(int(degree.max(initial=0)), 1)), len(self.links))
        self.incoming[receivers[order], slot] = order

    @property
    def pairs(self):
        return self.links

    def learn(self, entry, delays):
        n = self.num_workers
        senders = np.append(self.links[:, 0], 0)[self.incoming]  # [N, S] the sender of each incoming link
        delay = np.append(delays, np.inf)[self.incoming]  # [N, S]
        reach = np.full((n, n), np.inf)
        reach[np.arange(n), np.arange(n)] = entry
        for _ in range(n):
            relayed = (reach[:, senders] + delay[None]).min(axis=-1)  # [origin, receiver]
            better = np.minimum(reach, relayed)
            if np.array_equal(better, reach):
                break
            reach = better
        return reach.max(axis=0)


def build_agreement(name: str, num_workers: int, links: np.ndarray) -> Agreement:
    return AGREEMENTS[name](num_workers, links)
