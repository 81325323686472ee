"""``runner=mpi runner.clock=virtual``: ranks host groups of workers, the virtual clock decides.

Every rank computes the (cheap, deterministic) clock of all workers, so each knows ``W(k)``.  Per
iteration, ATC::

    Y_mine = X_mine - eta G(X_mine)        the hosted workers' local steps (TF, one worker at a time)
    Y_recv = exchange(Y_mine)              [Q, P]: the peer ranks' rows that neighbour a hosted worker
    X_mine = (W @ Y)[mine]                 row by row, from Y_mine and Y_recv where they lie

(CTA exchanges and mixes ``X`` first, then adapts.)  The common random numbers make the delays,
minibatches and initial model those of the local backend; the local steps are the same XLA program per
worker, and each row's mixing adds the same products in the same order (``StackedTrainer._mixed``),
so the results are the local backend's bit for bit.  Rank 0 gathers the parameters for evaluations and
writes every result file.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from ..engine import IterationEngine
from .evaluation import SharedEvaluation
from .exchange import ExchangePlan, NeighbourExchange, wait_all, worker_groups


class MpiVirtualEngine(SharedEvaluation, IterationEngine):
    def __init__(self, comm, cfg, graph, dataset, network, on_iteration=None, on_wait=None, on_evaluate=None):
        self.comm = comm
        self.on_evaluate = on_evaluate
        self.plan = ExchangePlan.build(graph.adjacency, worker_groups(cfg.num_workers, comm.size), comm.rank)
        super().__init__(cfg, graph, dataset, network, workers=self.plan.mine)
        self.exchange = NeighbourExchange(comm, self.plan, network.num_params, on_wait)
        self.on_iteration = on_iteration  # heartbeat and fault injection (mpi/__main__.py)
        self._iteration = 0

    def _wait(self, requests) -> None:
        wait_all(requests, self.exchange.beat)  # beating the heartbeat while a peer is busy

    def _hosting_orders(self) -> list[np.ndarray]:
        return self.plan.orders

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

    @contextmanager
    def _replaying(self, iteration: int):
        """Replayed steps exchange under their own iteration's number, as every rank replays them."""
        current, self._iteration = self._iteration, iteration
        try:
            yield
        finally:
            self._iteration = current

    def restore(self, state) -> int:
        self._iteration = super().restore(state)  # message tags and heartbeats go on from there
        return self._iteration

    def _first_non_finite(self, losses):
        from mpi4py import MPI

        local = super()._first_non_finite(losses)
        first = np.array([self.cfg.num_workers if local is None else local], dtype=np.int64)
        self._wait([self.comm.Iallreduce(MPI.IN_PLACE, first, op=MPI.MIN)])
        return None if first[0] == self.cfg.num_workers else int(first[0])
