"""The agreements of :mod:`dybw.agreement` executed by the wall clock's ranks with real messages.

A lock-step rank *enters* an agreement when its own value is reached (its ``finish_j``, or for cb-DyBW
its eligibility ``r_j``) and *learns* that every rank has entered at ``L_j``.  Each rank-side class
below is the message protocol whose timing the virtual clock computes for the same name:

- ``instant``: a barrier with no emulated delay (the idealisation): every rank learns ``max_j t_j``.
  Ranks on one host share a file in memory and a doorbell; elsewhere it is MPI's ``MPI_Ibarrier``.
- ``allreduce``: recursive doubling between ranks.  With ``P = 2^floor(log2 N)``, an extra rank
  ``e >= P`` first sends to ``e - P``; then in round ``s`` rank ``j < P`` sends to ``j XOR 2^s`` and
  waits for that partner's round-``s`` message; after the rounds ``e - P`` sends the result back to
  ``e``.  A rank sends each message the moment it begins that step.
- ``flood``: every rank sends the set of ranks it knows have entered to its graph neighbours, at its own
  entry and whenever the set grows; it learns when the set is everyone.  ``L_j = max_i (t_i + dist_ij)``.

Control messages go through the same :class:`~dybw.mpi.mailbox.Outbox` as the data, held for their
delay from the control streams the virtual clock uses (``DelaySampler.control(k0, count, phase,
pairs)``, pairs in the order of the virtual agreement's ``pairs``), so both clocks pay the same draws.
A control message is ``uint64 [iteration, phase, step, mask words...]``.
"""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path
from typing import ClassVar

import numpy as np

from ..clock import PHASES
from ..registry import Registry

WALL_AGREEMENTS = Registry("protocol.agreement", "wall-clock agreement")
HEADER = 3  # iteration, phase, step


class WallAgreement:
    """One rank's side of an agreement (the same name as the virtual :class:`dybw.agreement.Agreement`).

    ``send(due, peer, message)`` queues a control message; ``delays[phase]`` is ``[K, M]``: each
    iteration's control delays of the virtual agreement's ``pairs``.  :meth:`progress` is called at every
    poll and returns what became known."""

    name: ClassVar[str]
    uses_messages: ClassVar[bool] = True

    def __init__(self, rank: int, size: int, agreement, links: np.ndarray, delays: dict, send, comm, bell=None):
        self.rank, self.size = rank, size
        self.bell = bell  # the ranks' doorbells (mailbox.Doorbell) when they share a host, else None
        self.agreement = agreement
        self.links = np.asarray(links, dtype=np.int64).reshape(-1, 2)
        self.delays = delays
        self.send = send
        self.comm = comm
        self.words = (size + 63) // 64
        self._learned: dict[tuple[int, int], float] = {}
        self._finished = -1  # iterations <= this are over: their late messages are dropped

    @property
    def peers(self) -> list[int]:
        """The ranks this one exchanges control messages with (both directions)."""
        return []

    def message_size(self) -> int:
        return HEADER + self.words

    # -- what the engine calls ------------------------------------------------------------------
    def enter(self, k: int, phase: str, now: float) -> None:
        raise NotImplementedError

    def receive(self, peer: int, message: np.ndarray, now: float) -> None:
        raise NotImplementedError

    def learned(self, k: int, phase: str, now: float) -> float | None:
        """When this rank learned that every rank has entered ``(k, phase)``, or None (not yet)."""
        return self._learned.get((k, PHASES.index(phase)))

    def heard(self, note: bytes) -> None:
        """A doorbell's note from another rank (only the one-host barrier sends any)."""

    def forget(self, k: int) -> None:
        """Iteration k is over for this rank: drop its state (and later messages for it)."""
        self._finished = max(self._finished, k)
        for key in [key for key in self._learned if key[0] <= k]:
            del self._learned[key]

    # -- helpers --------------------------------------------------------------------------------
    def _message(self, k: int, phase: int, step: int, mask: int = 0) -> np.ndarray:
        message = np.empty(self.message_size(), dtype=np.uint64)
        message[:HEADER] = (k, phase, step)
        for w in range(self.words):
            message[HEADER + w] = (mask >> (64 * w)) & 0xFFFFFFFFFFFFFFFF
        return message

    def _mask(self, message: np.ndarray) -> int:
        return sum(int(message[HEADER + w]) << (64 * w) for w in range(self.words))


@WALL_AGREEMENTS.register
class Barrier(WallAgreement):
    """``instant``: every rank learns the moment the last rank entered, ``max_j t_j``.

    Ranks on one host (they have a doorbell): an entering rank appends its entry time to a file in shared
    memory named after the job, the iteration and the phase (8 bytes: one atomic ``O_APPEND`` write).  A
    rank that finds all ``N`` entries there takes their maximum and rings every other rank with it.  So
    each rank's learned time is exactly the idealised agreement's, whatever a rank sleeping on a shared
    core takes to wake up (the engine measures that lag separately).
    Ranks on several hosts: MPI's non-blocking barrier, learned at the poll that finds it complete."""

    name = "instant"
    uses_messages = False
    NOTE = struct.Struct("<qqd")  # iteration, phase index, the moment every rank had entered

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._requests: dict[tuple[int, int], object] = {}
        self._folder = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())

    def enter(self, k, phase, now):
        key = (k, PHASES.index(phase))
        if self.bell is None:
            self._requests[key] = self.comm.Ibarrier()
            return
        path = self._folder / f"dybw-{self.bell.token}-{key[0]}-{key[1]}"
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(descriptor, struct.pack("<d", now))
            size = 8 * self.size
            if os.fstat(descriptor).st_size < size:
                return
            # Every rank is in.  Two ranks may both see that (an entry landed between the other's write and
            # its fstat); both then send the same moment, and a second ring changes nothing.
            moment = max(struct.unpack(f"<{self.size}d", os.pread(descriptor, size, 0)))
        finally:
            os.close(descriptor)
        path.unlink(missing_ok=True)
        self._learned[key] = moment
        note = self.NOTE.pack(*key, moment)
        for rank in range(self.size):
            if rank != self.rank:
                self.bell.ring(rank, note)

    def heard(self, note):
        if len(note) == self.NOTE.size:
            k, phase, moment = self.NOTE.unpack(note)
            if k > self._finished:
                self._learned[(k, phase)] = moment

    def receive(self, peer, message, now):
        raise AssertionError("the barrier sends no control messages of ours")

    def learned(self, k, phase, now):
        key = (k, PHASES.index(phase))
        if key not in self._learned and key in self._requests and self._requests[key].Test():
            del self._requests[key]
            self._learned[key] = now
        return self._learned.get(key)


@WALL_AGREEMENTS.register
class RecursiveDoubling(WallAgreement):
    """``allreduce``: fold in, ``log2 P`` rounds of pairwise exchanges, fold out (module docstring)."""

    name = "allreduce"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        core = self.agreement.core
        n_in = len(self.agreement.fold_in)
        rounds = len(self.agreement.rounds)
        j = self.rank
        # The steps of this rank, in order: ("send", peer, step, pair index) or ("wait", peer, step).
        # Steps: 0 = fold in, 1..rounds = the rounds, rounds + 1 = fold out.
        steps: list[tuple] = []
        if j >= core:
            steps += [("send", j - core, 0, j - core), ("wait", j - core, rounds + 1)]
        else:
            if j + core < self.size:
                steps.append(("wait", j + core, 0))
            for s in range(rounds):
                partner = j ^ (1 << s)
                steps += [("send", partner, s + 1, n_in + s * core + partner), ("wait", partner, s + 1)]
            if j + core < self.size:
                steps.append(("send", j + core, rounds + 1, n_in + rounds * core + j))
        self.steps = steps
        self._peers = sorted({step[1] for step in steps})
        self._state: dict[tuple[int, int], _Doubling] = {}  # per (k, phase): where this rank is
        for step in steps:  # the pair index names this very message in the virtual agreement
            if step[0] == "send":
                assert tuple(self.agreement.pairs[step[3]]) == (j, step[1]), (j, step)

    @property
    def peers(self):
        return self._peers

    def _progress(self, key, state, now):
        """Take every step that can be taken now: send at once, wait for a step's message."""
        k, phase = key
        while state.next < len(self.steps):
            step = self.steps[state.next]
            if step[0] == "wait":
                if step[2] not in state.heard:
                    return
            else:
                delay = self.delays[PHASES[phase]][k, step[3]]
                self.send(now + delay, step[1], self._message(k, phase, step[2]))
            state.next += 1
        self._learned[key] = now
        del self._state[key]

    def enter(self, k, phase, now):
        key = (k, PHASES.index(phase))
        state = self._state.setdefault(key, _Doubling())
        state.entered = True
        self._progress(key, state, now)

    def receive(self, peer, message, now):
        k, phase, step = (int(v) for v in message[:HEADER])
        key = (k, phase)
        if k <= self._finished or key in self._learned:
            return
        state = self._state.setdefault(key, _Doubling())
        state.heard.add(step)
        if state.entered:  # a message that arrives first waits for the rank to enter
            self._progress(key, state, now)

    def forget(self, k):
        super().forget(k)
        for key in [key for key in self._state if key[0] <= k]:
            del self._state[key]


class _Doubling:
    """One rank's place in one recursive doubling: entered yet, next step, the steps' messages heard."""

    __slots__ = ("entered", "next", "heard")

    def __init__(self):
        self.entered, self.next, self.heard = False, 0, set()


@WALL_AGREEMENTS.register
class Flooding(WallAgreement):
    """``flood``: the set of ranks known to have entered, forwarded to the graph neighbours whenever it
    grows; one control delay per directed link, iteration and phase (the virtual clock's draws)."""

    name = "flood"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        outgoing = np.flatnonzero(self.links[:, 0] == self.rank)
        self.neighbours = [int(i) for i in self.links[outgoing, 1]]
        self.link_index = [int(i) for i in outgoing]  # the pairs of Flood are the directed links
        self.everyone = (1 << self.size) - 1
        self._known: dict[tuple[int, int], int] = {}

    @property
    def peers(self):
        return self.neighbours

    def _grow(self, key, mask, now):
        known = self._known.get(key, 0)
        if mask & ~known == 0:
            return
        known |= mask
        self._known[key] = known
        k, phase = key
        delays = self.delays[PHASES[phase]][k]
        message = self._message(k, phase, 0, known)
        for neighbour, link in zip(self.neighbours, self.link_index):
            self.send(now + delays[link], neighbour, message)
        if known == self.everyone:
            self._learned[key] = now
            del self._known[key]

    def enter(self, k, phase, now):
        self._grow((k, PHASES.index(phase)), 1 << self.rank, now)

    def receive(self, peer, message, now):
        k, phase = int(message[0]), int(message[1])
        if k <= self._finished or (k, phase) in self._learned:
            return
        self._grow((k, phase), self._mask(message), now)

    def forget(self, k):
        super().forget(k)
        for key in [key for key in self._known if key[0] <= k]:
            del self._known[key]


def build_wall_agreement(name: str, **kwargs) -> WallAgreement:
    return WALL_AGREEMENTS[name](**kwargs)
