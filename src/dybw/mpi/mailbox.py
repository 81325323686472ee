"""The wall clock's messages: held until their delay has passed, always received, kept only while useful.

- :class:`Outbox`: a message leaves when its sender's emulated delay is over (``due``), as one
  non-blocking send; data and control messages share it, so both pay their delays the same way.
- :class:`Channel`: one posted receive per peer on one communicator (any tag), so every message is
  matched and nothing relies on ``MPI_Cancel``; a DONE marker from a peer ends its receives.
- :class:`Inbox`: data messages of the iterations not yet combined.  A message of an iteration already
  combined is dropped on arrival (too late to be used), and combining iteration k drops what is older,
  so in lock-step the inbox holds the current and the next iteration's messages at most.
- :class:`Doorbell`: lets a sender wake the rank it just sent to, so a waiting rank sleeps until something
  happens instead of polling (ranks on one host).

All of them only ever test requests (never block), so a rank can sleep between polls.
"""

from __future__ import annotations

import contextlib
import heapq
import select
import socket
from collections.abc import Callable

import numpy as np

MESSAGE_TAG, DONE_TAG = 0, 1


class Doorbell:
    """One Linux abstract-namespace datagram socket per rank, named after the job (``token``).

    :meth:`ring` wakes a peer and may pass it a short note; :meth:`wait` sleeps until this rank is rung or
    ``seconds`` have passed, and :meth:`notes` takes the rings.  The bell carries no data: a message travels
    through MPI as always, and the ring only says "poll now".  An eager ``Isend`` is received without the
    sender polling again (MPICH's shared memory), so the sender rings right after sending and may sleep.
    """

    def __init__(self, token: str, rank: int):
        self.token = token
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.bind(self._address(rank))
        self.socket.setblocking(False)

    def _address(self, rank: int) -> bytes:
        return b"\0dybw-" + self.token.encode() + b"-%d" % rank

    def ring(self, rank: int, note: bytes = b"") -> None:
        # A full or vanished peer socket costs that peer at most one capped sleep: never an error here.
        with contextlib.suppress(OSError):
            self.socket.sendto(note, self._address(rank))

    def wait(self, seconds: float) -> None:
        """Sleep until rung (a ring not yet taken by :meth:`notes` counts) or ``seconds`` have passed."""
        if seconds > 0:
            select.select([self.socket], [], [], seconds)

    def notes(self) -> list[bytes]:
        """Take every ring since the last call; returns the non-empty notes among them."""
        notes = []
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while True:
                note = self.socket.recv(64)
                if note:
                    notes.append(note)
        return notes

    def close(self) -> None:
        self.socket.close()


class Outbox:
    """Messages held until ``due`` (the sender's clock), then sent with ``Isend`` (and the receiver rung, if
    there is a ``bell``); sends are completed by testing, and the payload is kept alive until then."""

    def __init__(self, bell: Doorbell | None = None):
        self.bell = bell
        self._held: list = []  # heap of (due, sequence, comm, destination, payload)
        self._sending: list = []  # requests in flight
        self._payloads: list = []  # their buffers, kept alive until they complete
        self._sequence = 0
        self.sent = 0

    def put(self, due: float, comm, destination: int, payload: np.ndarray) -> None:
        self._sequence += 1  # FIFO among equal due times, so a link never reorders its messages
        heapq.heappush(self._held, (due, self._sequence, comm, destination, payload))

    @property
    def next_due(self) -> float:
        return self._held[0][0] if self._held else float("inf")

    def flush(self, now: float) -> None:
        """Send every message due by ``now``; forget the sends that completed."""
        from mpi4py import MPI

        while self._held and self._held[0][0] <= now:
            _, _, comm, destination, payload = heapq.heappop(self._held)
            self._sending.append(comm.Isend(payload, dest=destination, tag=MESSAGE_TAG))
            self._payloads.append(payload)
            self.sent += 1
            if self.bell is not None:
                self.bell.ring(destination)
        if self._sending:
            completed = MPI.Request.Testsome(self._sending)
            if completed:
                keep = np.ones(len(self._sending), dtype=bool)
                keep[completed] = False
                self._sending = [r for r, k in zip(self._sending, keep) if k]
                self._payloads = [p for p, k in zip(self._payloads, keep) if k]

    def empty(self) -> bool:
        return not self._held and not self._sending


class Channel:
    """One posted receive per peer on ``comm``; :meth:`arrived` returns the messages completed since the
    last call, each in a buffer of its own (a fresh one is posted in its place), in peer order."""

    def __init__(self, comm, peers, make_buffer: Callable[[], np.ndarray]):
        self.comm = comm
        self.peers = [int(p) for p in peers]
        self.make_buffer = make_buffer
        self.done_from: set[int] = set()
        self._buffers: list[np.ndarray] = []
        self._requests: list = []
        self._statuses: list = []

    def post(self) -> None:
        from mpi4py import MPI

        self._statuses = [MPI.Status() for _ in self.peers]
        self._buffers = [self.make_buffer() for _ in self.peers]
        self._requests = [self._receive(peer, buffer) for peer, buffer in zip(self.peers, self._buffers)]

    def _receive(self, peer: int, buffer: np.ndarray):
        from mpi4py import MPI

        return self.comm.Irecv(buffer, source=peer, tag=MPI.ANY_TAG)

    def arrived(self) -> list[tuple[int, np.ndarray]]:
        from mpi4py import MPI

        messages = []
        # One test may complete one message per peer while the next already waits: test until none is new.
        while self._requests and not self.all_done():
            statuses = self._statuses
            completed = MPI.Request.Testsome(self._requests, statuses)
            if not completed:
                break
            for index, status in zip(completed, statuses):  # statuses come in the order of completion
                peer = self.peers[index]
                if status.Get_tag() == DONE_TAG:
                    self.done_from.add(peer)  # nothing follows a DONE marker: its receive stays completed
                    continue
                messages.append((peer, self._buffers[index]))
                self._buffers[index] = self.make_buffer()
                self._requests[index] = self._receive(peer, self._buffers[index])
        return messages

    def send_done(self) -> list:
        """Tell every peer that nothing more follows (the requests, to complete)."""
        return [self.comm.Isend(np.empty(0, np.uint8), dest=peer, tag=DONE_TAG) for peer in self.peers]

    def all_done(self) -> bool:
        return len(self.done_from) == len(self.peers)


class Inbox:
    """Data messages by iteration and sender, for the iterations not yet combined (``> combined``)."""

    def __init__(self):
        self._held: dict[int, dict[int, np.ndarray]] = {}
        self.combined = -1  # the last iteration whose messages were taken
        self.messages = 0

    def put(self, iteration: int, sender: int, payload: np.ndarray) -> bool:
        """Keep a message; False (dropped) when its iteration is already combined."""
        if iteration <= self.combined:
            return False
        held = self._held.setdefault(iteration, {})
        self.messages += sender not in held
        held[sender] = payload
        return True

    def count(self, iteration: int) -> int:
        return len(self._held.get(iteration, ()))

    def take(self, iteration: int) -> dict[int, np.ndarray]:
        """Iteration ``iteration``'s messages, removed; from now on its late messages are dropped."""
        taken = self._held.pop(iteration, {})
        self.combined = max(self.combined, iteration)
        for older in [k for k in self._held if k <= self.combined]:
            del self._held[older]
        self.messages = sum(len(held) for held in self._held.values())
        return taken

    def iterations(self) -> list[int]:
        return sorted(self._held)

    @property
    def newest(self) -> int:
        """The latest iteration a message is held for (``combined`` when none is)."""
        return max(self._held, default=self.combined)
