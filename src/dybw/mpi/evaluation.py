"""The average model's evaluation shared by the ranks (both MPI engines).

Rank 0 gathers the parameters and averages them; every rank receives ``xbar`` and sums the losses and
right predictions over its share of the evaluation chunks (``engine.BatchedTrainer.chunk_sums``); rank 0
adds the shares up in chunk order.  The chunk sums are the local backend's bits, so the metrics are too,
and an evaluation -- most of a default run's time -- costs about ``1/R`` of the work on each rank.
"""

from __future__ import annotations

import numpy as np


class SharedEvaluation:
    """Mixin for an engine with ``comm`` and ``trainer``; ``_wait(requests)`` completes MPI requests."""

    def _wait(self, requests) -> None:
        from mpi4py import MPI

        MPI.Request.Waitall(requests)

    def share_average(self, average: np.ndarray | None) -> np.ndarray:
        """Rank 0's ``xbar`` on every rank."""
        buffer = average if self.comm.rank == 0 else np.empty(self.trainer.params.shape[1], np.float32)
        buffer = np.ascontiguousarray(buffer, dtype=np.float32)
        self._wait([self.comm.Ibcast(buffer, root=0)])
        return buffer

    def evaluation_chunks(self) -> np.ndarray:
        """This rank's contiguous share of the chunks."""
        return np.array_split(np.arange(self.trainer.num_chunks), self.comm.size)[self.comm.rank]

    def gather_chunk_sums(self, chunks: np.ndarray, sums: np.ndarray) -> np.ndarray | None:
        """Every chunk's sums on rank 0.  Each entry is non-zero on one rank only, so the MPI sum of the
        ranks' arrays is exact (``x + 0 = x``) in whatever order MPI adds them."""
        from mpi4py import MPI

        mine = np.zeros((self.trainer.num_chunks, 2))
        mine[chunks] = sums
        total = np.empty_like(mine) if self.comm.rank == 0 else None
        self._wait([self.comm.Ireduce(mine, total, op=MPI.SUM, root=0)])
        return total
