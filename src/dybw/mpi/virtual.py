"""``runner=mpi runner.clock=virtual``: ranks host groups of workers, the virtual clock decides.

Every rank computes the (cheap, deterministic) clock of all workers, so each knows the rows ``W(k)[mine]``
of its workers.  Per iteration, ATC::

    Y_mine  = X_mine - eta G(X_mine)            one batched TF step for the hosted workers
    Y_known = exchange(Y_mine)                  neighbour rows from peer ranks (Isend/Irecv, float32)
    X_mine  = W[mine, known] @ Y_known

(CTA exchanges and mixes ``X`` first, then adapts.)  The common random numbers make the delays,
minibatches and initial model those of the local backend, so the results agree up to float summation
order.  Rank 0 gathers the parameters for evaluations and writes every result file.
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
        self.exchange = NeighbourExchange(comm, self.plan, network.num_params, on_wait)
        self.on_iteration = on_iteration  # heartbeat and fault injection (mpi/__main__.py)
        self._counts = np.array([len(g) * network.num_params for g in self.groups])
        self._iteration = 0

    def _mix(self, rows: np.ndarray, weights: np.ndarray):
        """``X_mine = W[mine, :] @ Y`` with the rows this rank does not know set to zero (their weights are
        zero): the same TF product over all N columns as the local backend, so the same float sums."""
        known = self.exchange.exchange(rows, self._iteration)
        full = np.zeros((self.cfg.num_workers, known.shape[1]), np.float32)
        full[self.plan.columns] = known
        tf = self.trainer.tf
        return tf.matmul(tf.constant(weights[self.plan.mine]), tf.constant(full))

    def _step(self, batches, lr, weights, chunk, t):
        tf = self.trainer.tf
        w = chunk.weights[t]
        if self.cfg.algo.update == "atc":
            adapted, losses = self.trainer.adapt(self.trainer.params, batches, lr)
            self.trainer.params = self._mix(adapted.numpy(), w)
        else:
            mixed = self._mix(self.trainer.params.numpy(), w)
            self.trainer.params, losses = self.trainer.adapt(mixed, batches, lr)
        self._iteration += 1
        if self.on_iteration is not None:
            self.on_iteration(self._iteration)
        return losses.numpy()

    def _first_non_finite(self, losses):
        from mpi4py import MPI

        local = super()._first_non_finite(losses)
        first = np.array([self.cfg.num_workers if local is None else local], dtype=np.int64)
        wait_all([self.comm.Iallreduce(MPI.IN_PLACE, first, op=MPI.MIN)], self.exchange.beat)
        return None if first[0] == self.cfg.num_workers else int(first[0])

    def gather_params(self) -> np.ndarray | None:
        """All workers' parameters ``[N, P]`` on rank 0 (None elsewhere)."""
        mine = np.ascontiguousarray(self.trainer.params.numpy(), dtype=np.float32)
        if self.comm.rank == 0:
            full = np.empty((self.cfg.num_workers, mine.shape[1]), np.float32)
            displacements = np.concatenate([[0], np.cumsum(self._counts)[:-1]])
            request = self.comm.Igatherv(mine, [full, self._counts, displacements, _float32()], root=0)
            wait_all([request], self.exchange.beat)
            return full
        wait_all([self.comm.Igatherv(mine, None, root=0)], self.exchange.beat)
        return None



def _float32():
    from mpi4py import MPI

    return MPI.FLOAT
