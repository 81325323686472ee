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


@dataclass
class ExchangePlan:
    """What rank ``rank`` sends to and receives from each peer rank."""

    rank: int
    mine: np.ndarray  # hosted workers (global ids)
    send_rows: dict[int, np.ndarray]  # peer -> positions (within mine) of rows to send
    recv_workers: dict[int, np.ndarray]  # peer -> global ids of the rows received
    columns: np.ndarray  # global ids of [mine, received rows of every peer in order]

    @classmethod
    def build(cls, adjacency: np.ndarray, groups: list[np.ndarray], rank: int) -> "ExchangePlan":
        mine = groups[rank]
        send_rows, recv_workers = {}, {}
        for peer, theirs in enumerate(groups):
            if peer == rank:
                continue
            links = adjacency[np.ix_(mine, theirs)]
            if links.any():
                send_rows[peer] = np.flatnonzero(links.any(axis=1))
                recv_workers[peer] = theirs[links.any(axis=0)]
        columns = np.concatenate([mine, *[recv_workers[p] for p in sorted(recv_workers)]]) if recv_workers else mine
        return cls(rank, mine, send_rows, recv_workers, columns.astype(np.int64))


class WaitBeat:
    """Calls ``on_wait`` every ``interval`` seconds from a daemon thread while the main thread waits.

    The wait itself is the blocking ``MPI_Waitall`` (mpi4py releases the GIL in it): polling with sleeps
    would make both ranks of a pair stall each other, since MPICH only moves shared-memory messages
    inside MPI calls.  A rank blocked on a peer keeps beating; one stuck in its own work falls silent.
    """

    def __init__(self, on_wait, interval: float = 0.25):
        self.on_wait, self.interval = on_wait, interval
        self.waiting = threading.Event()
        threading.Thread(target=self._run, daemon=True, name="dybw-wait-beat").start()

    def _run(self):
        while True:
            self.waiting.wait()
            time.sleep(self.interval)
            if self.waiting.is_set():
                self.on_wait()


def wait_all(requests, beat: WaitBeat | None = None) -> None:
    """``MPI_Waitall``, beating the heartbeat meanwhile when ``beat`` is given."""
    from mpi4py import MPI

    if beat is not None:
        beat.waiting.set()
    try:
        MPI.Request.Waitall(requests)
    finally:
        if beat is not None:
            beat.waiting.clear()


def aligned_zeros(shape, alignment: int = 64) -> np.ndarray:
    """float32 zeros starting on an ``alignment``-byte boundary: TensorFlow reads such a buffer in place
    through DLPack (and aborts on a misaligned one)."""
    size = int(np.prod(shape)) * 4
    raw = np.zeros(size + alignment, np.uint8)
    offset = -raw.ctypes.data % alignment
    return raw[offset:offset + size].view(np.float32).reshape(shape)


class NeighbourExchange:
    """Moves one iteration's rows into the mixing block ``Y`` ``[N, P]`` of this rank.

    This rank's rows are copied into their place and sent to the peers that need them; a peer's rows
    are received straight into theirs.  An MPI indexed datatype describes which rows of a buffer a
    message holds, so nothing is packed or stacked in Python: the bytes on the wire are the plan's rows
    and MPI copies them once.  Rows of workers this rank never hears from stay zero -- their weights in
    this rank's rows of ``W`` are zero too.
    """

    def __init__(self, comm, plan: ExchangePlan, num_workers: int, num_params: int, on_wait=None):
        from mpi4py import MPI

        self.comm = comm
        self.beat = WaitBeat(on_wait) if on_wait is not None else None  # the heartbeat while blocked
        self.block = aligned_zeros((num_workers, num_params))
        self.mine = slice(int(plan.mine[0]), int(plan.mine[-1]) + 1)  # groups are contiguous
        row = MPI.FLOAT.Create_contiguous(num_params).Commit()

        def rows_type(rows):
            return row.Create_indexed_block(1, [int(r) for r in rows]).Commit()

        self.receives = [(peer, rows_type(plan.recv_workers[peer])) for peer in sorted(plan.recv_workers)]
        self.sends = [(peer, rows_type(plan.send_rows[peer])) for peer in sorted(plan.send_rows)]
        row.Free()  # the row type lives on inside the types built from it

    def post(self, rows: np.ndarray, iteration: int) -> list:
        """Start the iteration's receives (into the block) and sends (from ``rows``); returns the requests."""
        tag = iteration % TAG_MODULUS
        requests = [self.comm.Irecv([self.block, 1, rows_type], source=peer, tag=tag)
                    for peer, rows_type in self.receives]
        return requests + [self.comm.Isend([rows, 1, rows_type], dest=peer, tag=tag) for peer, rows_type in self.sends]

    def exchange(self, rows: np.ndarray, iteration: int) -> np.ndarray:
        """``rows`` = this rank's ``[len(mine), P]`` (C-contiguous, may be read-only); returns the block."""
        requests = self.post(rows, iteration)
        self.block[self.mine] = rows  # while the messages move (MPI allows reading a send buffer)
        wait_all(requests, self.beat)
        return self.block
