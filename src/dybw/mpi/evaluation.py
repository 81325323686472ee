"""An evaluation shared by the ranks (both MPI engines).

Every rank counts its workers' right test predictions; rank 0 gathers the counts and the parameters
(back in worker order) and averages the parameters; every rank receives ``xbar`` and sums the losses and
right predictions over its share of the evaluation chunks (``trainer.StackedTrainer.chunk_sums``); rank 0
adds the shares up in chunk order.  The chunk sums are the local backend's bits, so the metrics are too,
and each rank does about ``1/R`` of an evaluation's work.  A light evaluation or a probe
(:mod:`dybw.evaluation`) shares the test set's chunks only and counts nothing; rank 0's decision to
replay the interval in which the target was reached reaches the other ranks by :meth:`share_flag`.
"""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np

from ..evaluation import FULL


class SharedEvaluation:
    """Mixin for an engine with ``comm``, ``cfg`` and ``trainer``; ``_wait(requests)`` completes MPI
    requests, ``_hosting_orders()`` lists every rank's workers in the order it stores their rows, and
    ``on_evaluate`` (if not None) makes the context every evaluation runs in (the heartbeat's phase)."""

    on_evaluate = None

    def _evaluate(self, kind: str = FULL) -> dict | None:
        with self.on_evaluate() if self.on_evaluate is not None else nullcontext():
            return super()._evaluate(kind)

    def _wait(self, requests) -> None:
        from mpi4py import MPI

        MPI.Request.Waitall(requests)

    def _hosting_orders(self) -> list[np.ndarray]:
        raise NotImplementedError

    def gather_params(self) -> np.ndarray | None:
        """All workers' parameters ``[N, P]`` on rank 0 (None elsewhere)."""
        return self._gather_rows(np.from_dlpack(self.trainer.params), self.trainer.params.shape[1])

    def gather_counts(self, counts: np.ndarray) -> np.ndarray | None:
        """All workers' counts ``[N]`` on rank 0 (None elsewhere)."""
        return self._gather_rows(np.ascontiguousarray(counts, dtype=np.int32), 1)

    def _gather_rows(self, mine: np.ndarray, row_size: int) -> np.ndarray | None:
        """Rank 0 receives every rank's rows (``row_size`` values per worker), in worker order."""
        from mpi4py import MPI

        if self.comm.rank != 0:
            self._wait([self.comm.Igatherv(mine, None, root=0)])
            return None
        orders = self._hosting_orders()
        sizes = np.array([len(order) * row_size for order in orders])
        stacked = np.empty((self.cfg.num_workers, *mine.shape[1:]), mine.dtype)
        displacements = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        datatype = {np.dtype(np.float32): MPI.FLOAT, np.dtype(np.int32): MPI.INT}[mine.dtype]
        self._wait([self.comm.Igatherv(mine, [stacked, sizes, displacements, datatype], root=0)])
        full = np.empty_like(stacked)
        full[np.concatenate(orders)] = stacked  # ranks store their rows in hosting order
        return full

    def share_average(self, average: np.ndarray | None) -> np.ndarray:
        """Rank 0's ``xbar`` on every rank."""
        buffer = average if self.comm.rank == 0 else np.empty(self.trainer.params.shape[1], np.float32)
        buffer = np.ascontiguousarray(buffer, dtype=np.float32)
        self._wait([self.comm.Ibcast(buffer, root=0)])
        return buffer

    def my_chunks(self, chunks: np.ndarray) -> np.ndarray:
        """This rank's contiguous share of the evaluation's ``chunks``."""
        return np.array_split(chunks, self.comm.size)[self.comm.rank]

    def gather_chunk_sums(self, chunks: np.ndarray, sums: np.ndarray) -> np.ndarray | None:
        """Every chunk's sums on rank 0 (zero for chunks nobody summed).  Each entry is non-zero on one
        rank only, so the MPI sum of the ranks' arrays is exact (``x + 0 = x``) in whatever order MPI adds
        them."""
        from mpi4py import MPI

        mine = np.zeros((self.trainer.num_chunks, 2))
        mine[chunks] = sums
        total = np.empty_like(mine) if self.comm.rank == 0 else None
        self._wait([self.comm.Ireduce(mine, total, op=MPI.SUM, root=0)])
        return total

    def share_flag(self, flag: bool) -> bool:
        """Rank 0's ``flag`` on every rank."""
        buffer = np.array([1 if flag and self.comm.rank == 0 else 0], np.int32)
        self._wait([self.comm.Ibcast(buffer, root=0)])
        return bool(buffer[0])
