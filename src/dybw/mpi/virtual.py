"""``runner=mpi runner.clock=virtual``: ranks host groups of workers, the virtual clock decides.

Every rank computes the (cheap, deterministic) clock of all workers, so each knows ``W(k)``.  Per
iteration, ATC::

    Y_mine = X_mine - eta G(X_mine)        the hosted workers' local steps (TF, one worker at a time)
    Y_recv = exchange(Y_mine)              [Q, P]: the peer ranks' rows that neighbour a hosted worker
    X_mine = (W @ Y)[mine]                 row by row, from Y_mine and Y_recv where they lie

(CTA exchanges and mixes ``X`` first, then adapts.)  The common random numbers make the delays,
minibatches and initial model those of the local backend; the local steps are the same XLA program per
worker, and each row's mixing adds the same products in the same order (``BatchedTrainer._mixed``),
so the results are the local backend's bit for bit.  Rank 0 gathers the parameters for evaluations and
writes every result file.
"""

from __future__ import annotations

import numpy as np

from ..engine import LocalEngine
from .evaluation import SharedEvaluation
from .exchange import ExchangePlan, NeighbourExchange, wait_all, worker_groups


class MpiVirtualEngine(SharedEvaluation, LocalEngine):
    def __init__(self, comm, cfg, graph, dataset, network, on_iteration=None, on_wait=None):
        self.comm = comm
        self.plan = ExchangePlan.build(graph.adjacency, worker_groups(cfg.num_workers, comm.size), comm.rank)
        super().__init__(cfg, graph, dataset, network, workers=self.plan.mine)
        self.exchange = NeighbourExchange(comm, self.plan, network.num_params, on_wait)
        self.on_iteration = on_iteration  # heartbeat and fault injection (mpi/__main__.py)
        self._iteration = 0

    def _wait(self, requests) -> None:
        wait_all(requests, self.exchange.beat)  # beating the heartbeat while a peer is busy

    def _source_positions(self) -> np.ndarray:
        """Mixing sources as rows of ``[Y_mine; Y_recv]``: ``plan.columns`` lists their workers in order."""
        position = np.full(self.cfg.num_workers, -1, np.int64)
        position[self.plan.columns] = np.arange(len(self.plan.columns))
        return position[self.sources]

    def _mix(self, rows, weights):
        """``X_mine = (W @ Y)[mine]``, the local backend's sums; the received rows are read by TF in
        place (DLPack, no copy) -- :meth:`trainer.mix` runs before the next exchange overwrites them."""
        tf = self.trainer.tf
        received = self.exchange.exchange(np.from_dlpack(rows), self._iteration)
        if len(received) == 0:  # one rank, or no neighbour on another rank
            return self.trainer.mix(weights, rows, None)
        return self.trainer.mix(weights, rows, tf.experimental.dlpack.from_dlpack(received.__dlpack__()))

    def _step(self, batches, lr, weights, chunk, t):
        if self.cfg.algo.update == "atc":
            adapted, losses = self.trainer.adapt(self.trainer.params, batches, lr)
            self.trainer.params = self._mix(adapted, weights)
        else:
            mixed = self._mix(self.trainer.params, weights)
            self.trainer.params, losses = self.trainer.adapt(mixed, batches, lr)
        self._iteration += 1
        if self.on_iteration is not None:
            self.on_iteration(self._iteration)
        return losses.numpy()

    def restore(self, state) -> int:
        self._iteration = super().restore(state)  # message tags and heartbeats go on from there
        return self._iteration

    def _first_non_finite(self, losses):
        from mpi4py import MPI

        local = super()._first_non_finite(losses)
        first = np.array([self.cfg.num_workers if local is None else local], dtype=np.int64)
        wait_all([self.comm.Iallreduce(MPI.IN_PLACE, first, op=MPI.MIN)], self.exchange.beat)
        return None if first[0] == self.cfg.num_workers else int(first[0])

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
            wait_all([self.comm.Igatherv(mine, None, root=0)], self.exchange.beat)
            return None
        sizes = np.array([len(order) * row_size for order in self.plan.orders])
        stacked = np.empty((self.cfg.num_workers, *mine.shape[1:]), mine.dtype)
        displacements = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        datatype = {np.dtype(np.float32): MPI.FLOAT, np.dtype(np.int32): MPI.INT}[mine.dtype]
        wait_all([self.comm.Igatherv(mine, [stacked, sizes, displacements, datatype], root=0)], self.exchange.beat)
        full = np.empty_like(stacked)
        full[np.concatenate(self.plan.orders)] = stacked  # ranks store their rows in hosting order
        return full
