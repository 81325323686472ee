"""Neighbour exchange between ranks that host groups of workers.

Workers are split into ``R`` contiguous groups, group r on rank r.  Rank r must receive, from every other
rank q, the rows of q's workers that neighbour one of r's workers, and send q the rows of its own
workers that neighbour one of q's.  One buffer per rank pair and iteration: ``[rows, P]`` float32,
upper-case non-blocking mpi4py calls (no pickling), tagged by the iteration.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

TAG_MODULUS = 32000  # MPI guarantees tags up to at least 32767


def worker_groups(num_workers: int, ranks: int) -> list[np.ndarray]:
    """Contiguous, balanced groups: rank r hosts ``groups[r]``."""
    return [g.astype(np.int64) for g in np.array_split(np.arange(num_workers), ranks)]


def hosting_order(adjacency: np.ndarray, groups: list[np.ndarray], rank: int) -> np.ndarray:
    """Rank ``rank``'s workers in the order it stores their rows: by the sorted list of peer ranks each
    is sent to (lexicographically; workers no peer needs last), then by id.

    A peer's rows are then one slice of the rank's ``[M, P]`` output -- a plain send, no MPI datatype --
    for every rank with up to two peers (2 or 3 ranks) and for the first peer of any rank.  The order
    does not change any number: a worker's step and its mixing sum do not depend on where its row is.
    """
    mine = groups[rank]
    peers_of = [
        tuple(peer for peer, theirs in enumerate(groups) if peer != rank and adjacency[worker, theirs].any())
        for worker in mine
    ]
    order = sorted(range(len(mine)), key=lambda a: (not peers_of[a], peers_of[a], mine[a]))
    return mine[order]


@dataclass
class ExchangePlan:
    """What rank ``rank`` sends to and receives from each peer rank."""

    rank: int
    orders: list[np.ndarray]  # every rank's workers in their hosting order (:func:`hosting_order`)
    send_rows: dict[int, np.ndarray]  # peer -> positions (within mine) of rows to send
    recv_workers: dict[int, np.ndarray]  # peer -> global ids of the rows received, in the order sent
    columns: np.ndarray  # global ids of [mine, received rows of every peer in order]

    @property
    def mine(self) -> np.ndarray:
        """This rank's workers (global ids) in the order its rows are stored."""
        return self.orders[self.rank]

    @classmethod
    def build(cls, adjacency: np.ndarray, groups: list[np.ndarray], rank: int) -> ExchangePlan:
        orders = [hosting_order(adjacency, groups, r) for r in range(len(groups))]
        mine = orders[rank]
        send_rows, recv_workers = {}, {}
        for peer, theirs in enumerate(orders):
            if peer == rank:
                continue
            links = adjacency[np.ix_(mine, theirs)]
            if links.any():
                send_rows[peer] = np.flatnonzero(links.any(axis=1))
                recv_workers[peer] = theirs[links.any(axis=0)]  # the peer sends them in its order
        columns = np.concatenate([mine, *[recv_workers[p] for p in sorted(recv_workers)]]) if recv_workers else mine
        return cls(rank, orders, send_rows, recv_workers, columns.astype(np.int64))


class WaitBeat:
    """Calls ``on_wait`` every ``interval`` seconds from a daemon thread while the main thread waits.

    The wait itself is the blocking ``MPI_Waitall`` (mpi4py releases the GIL in it): polling with sleeps
    would make both ranks of a pair stall each other, since MPICH only moves shared-memory messages
    inside MPI calls.  A rank blocked on a peer keeps beating; one stuck in its own work falls silent.
    The main thread only flips a flag around each wait: waking the helper per exchange (an Event) cost
    the exchange ~1-2 µs, a tenth of a small model's.
    """

    def __init__(self, on_wait, interval: float = 0.25):
        self.on_wait, self.interval = on_wait, interval
        self.blocked = False
        threading.Thread(target=self._run, daemon=True, name="dybw-wait-beat").start()

    def _run(self):
        while True:
            time.sleep(self.interval)
            if self.blocked:
                self.on_wait()


def wait_all(requests, beat: WaitBeat | None = None) -> None:
    """``MPI_Waitall``, beating the heartbeat meanwhile when ``beat`` is given."""
    from mpi4py import MPI

    if beat is None:
        MPI.Request.Waitall(requests)
        return
    beat.blocked = True
    try:
        MPI.Request.Waitall(requests)
    finally:
        beat.blocked = False


def aligned_zeros(shape, alignment: int = 64) -> np.ndarray:
    """float32 zeros starting on an ``alignment``-byte boundary: TensorFlow reads such a buffer in place
    through DLPack (and aborts on a misaligned one)."""
    size = int(np.prod(shape)) * 4
    raw = np.zeros(size + alignment, np.uint8)
    offset = -raw.ctypes.data % alignment
    return raw[offset : offset + size].view(np.float32).reshape(shape)


class NeighbourExchange:
    """Moves one iteration's rows between ranks: what the mixing of this rank's rows needs.

    The rows of a peer's workers arrive in ``received`` ``[Q, P]``, peer after peer in the plan's order
    (``plan.columns[M:]``), each peer's rows contiguous: one plain receive per peer, as a bare exchange
    would post.  A peer gets the rows of this rank's ``[M, P]`` output it needs straight from that output
    -- one contiguous slice, or an MPI indexed datatype when they are not adjacent -- so nothing is
    packed, stacked or copied in Python; the mixing reads both buffers in place
    (``trainer.StackedTrainer.mix``).
    """

    def __init__(self, comm, plan: ExchangePlan, num_params: int, on_wait=None):
        from mpi4py import MPI

        self.comm = comm
        self.beat = WaitBeat(on_wait) if on_wait is not None else None  # the heartbeat while blocked
        counts = [len(plan.recv_workers[peer]) for peer in sorted(plan.recv_workers)]
        self.received = aligned_zeros((sum(counts), num_params))  # TF reads it in place: 64-byte aligned
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(int)
        self.receives = [
            (peer, self.received[start:stop])
            for peer, start, stop in zip(sorted(plan.recv_workers), offsets[:-1], offsets[1:])
        ]
        row = MPI.FLOAT.Create_contiguous(num_params).Commit()
        self.sends = []
        for peer in sorted(plan.send_rows):
            rows = plan.send_rows[peer]
            if (np.diff(rows) == 1).all():  # adjacent rows: a slice of the output, no datatype needed
                self.sends.append((peer, slice(int(rows[0]), int(rows[-1]) + 1), None))
            else:
                self.sends.append((peer, None, row.Create_indexed_block(1, [int(r) for r in rows]).Commit()))
        row.Free()  # the row type lives on inside the types built from it

    def post(self, rows: np.ndarray, iteration: int) -> list:
        """Start the iteration's receives and sends (from ``rows``); returns the requests."""
        tag = iteration % TAG_MODULUS
        requests = [self.comm.Irecv(buffer, source=peer, tag=tag) for peer, buffer in self.receives]
        for peer, adjacent, rows_type in self.sends:
            message = rows[adjacent] if rows_type is None else [rows, 1, rows_type]
            requests.append(self.comm.Isend(message, dest=peer, tag=tag))
        return requests

    def exchange(self, rows: np.ndarray, iteration: int) -> np.ndarray:
        """``rows`` = this rank's ``[M, P]`` (C-contiguous, may be read-only); returns ``received``."""
        wait_all(self.post(rows, iteration), self.beat)
        return self.received
