"""``runner=mpi runner.clock=virtual``: ranks host groups of workers, the virtual clock decides.

Every rank computes the (cheap, deterministic) clock of all workers, so each knows ``W(k)``.  Per
iteration, ATC::

    Y_mine = X_mine - eta G(X_mine)        the hosted workers' local steps (TF, one worker at a time)
    Y      = exchange(Y_mine)              [N, P]: own rows, neighbours' rows from peer ranks, zeros
    X_mine = (W @ Y)[mine]                 the local backend's mixing product, same shapes

(CTA exchanges and mixes ``X`` first, then adapts.)  The common random numbers make the delays,
minibatches and initial model those of the local backend; the local steps and the product are the same
XLA programs on the same shapes, so the results are the local backend's bit for bit.  Rank 0 gathers
the parameters for evaluations and writes every result file.
"""

from __future__ import annotations

import numpy as np

from ..engine import LocalEngine
from .exchange import ExchangePlan, NeighbourExchange, wait_all, worker_groups


class MpiVirtualEngine(LocalEngine):
    def __init__(self, comm, cfg, graph, dataset, network, on_iteration=None, on_wait=None):
        self.comm = comm
        self.groups = worker_groups(cfg.num_workers, comm.size)
        self.plan = ExchangePlan.build(graph.adjacency, self.groups, comm.rank)
        super().__init__(cfg, graph, dataset, network, workers=self.plan.mine)
        self.exchange = NeighbourExchange(comm, self.plan, cfg.num_workers, network.num_params, on_wait)
        self.on_iteration = on_iteration  # heartbeat and fault injection (mpi/__main__.py)
        self._iteration = 0

    def _mix(self, rows, weights):
        """``X_mine = (W @ Y)[mine]``: the local backend's product, same shapes, same XLA program, so the
        same float sums; ``Y`` is the exchange's block, read by TF in place (DLPack, no copy)."""
        tf = self.trainer.tf
        block = self.exchange.exchange(np.from_dlpack(rows), self._iteration)
        mixed = self.trainer.mix(weights, tf.experimental.dlpack.from_dlpack(block.__dlpack__()))
        return mixed[self.exchange.mine]

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
        """Rank 0 receives every rank's rows (groups in order, ``row_size`` values per worker)."""
        from mpi4py import MPI

        if self.comm.rank != 0:
            wait_all([self.comm.Igatherv(mine, None, root=0)], self.exchange.beat)
            return None
        sizes = np.array([len(g) * row_size for g in self.groups])
        full = np.empty((self.cfg.num_workers, *mine.shape[1:]), mine.dtype)
        displacements = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        datatype = {np.dtype(np.float32): MPI.FLOAT, np.dtype(np.int32): MPI.INT}[mine.dtype]
        wait_all([self.comm.Igatherv(mine, [full, sizes, displacements, datatype], root=0)], self.exchange.beat)
        return full
