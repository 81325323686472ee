"""``runner=mpi runner.clock=wall``: one worker per rank, delays really slept, every time measured.

Worker j, iteration k (ATC)::

    start    = now
    y        = x - eta g                        (TF)  then sleep until start + C_j(k)   -> ready
    for i in N_j: send y to i at ready + D_ji(k)       (the sender holds the message: right across hosts)
    listen until the stop policy says stop (algorithms.StopPolicy): eligible once p_j = waits[j]
    messages are here (or ``timeout`` seconds after ready);
        a local rule stops there;
        a threshold rule (cb_dybw) in lock-step enters a non-blocking barrier (MPI_Ibarrier) when eligible
        and keeps receiving until it completes (= theta, the last worker becoming eligible)
    x        = sum_{i in S_j ∪ {j}} W_ji y_i                                           -> stop = finish
    lock-step: a non-blocking barrier ends the iteration for everyone (E(k)), unless the threshold's
    barrier already did (ATC: nothing follows theta); free: go on.

Messages are flat float32 buffers ``[P + 1]`` whose last entry is the iteration (exact below 2^24); a
message from an older iteration is dropped, a newer one is kept until needed.  Receives are always
posted (one per neighbour, any tag), so no message is ever left unmatched and nothing relies on
``MPI_Cancel``: at the end every rank sends a DONE marker and drains until it has every neighbour's.
Times are ``MPI.Wtime()`` after a common barrier, minus the pauses for evaluation.
"""

from __future__ import annotations

import heapq
import time

import numpy as np

from ..engine import IterationEngine
from ..errors import Diverged
from ..evaluation import evaluation_kind
from ..mixing import mixing_matrices
from .evaluation import SharedEvaluation

DATA_TAG, DONE_TAG = 0, 1
POLL_SECONDS = 0.0002


class WallClockEngine(SharedEvaluation, IterationEngine):
    checkpointed = False  # a measurement: not resumable (config validation rejects resume)

    def __init__(self, comm, cfg, graph, dataset, network, on_iteration=None, on_wait=None):
        if comm.size != cfg.num_workers:
            raise ValueError(
                f"the wall clock runs one worker per rank: {cfg.num_workers} workers need "
                f"{cfg.num_workers} ranks, not {comm.size}"
            )
        self.comm, self.me = comm, comm.rank
        super().__init__(cfg, graph, dataset, network, workers=[comm.rank])
        self.graph = graph
        self.on_iteration = on_iteration
        self.on_wait = on_wait
        self.neighbors = [int(i) for i in graph.neighbors[self.me]]
        self.degree = len(self.neighbors)
        self.policy = self.schedule.clock.policy
        self.waits = int(self.policy.waits[self.me])
        self.num_params = network.num_params
        self._buffers = {i: np.empty(self.num_params + 1, np.float32) for i in self.neighbors}
        self._receives = {}
        self._outbox: list = []  # heap of (due, sequence, dst, payload)
        self._sending: list = []  # (request, payload) until complete
        self._inbox: dict[int, dict[int, np.ndarray]] = {}
        self._done_from: set[int] = set()
        self._sequence = 0
        self._origin = 0.0
        self._current = 0

    # -- clock ----------------------------------------------------------------------------------
    def now(self) -> float:
        from mpi4py import MPI

        return MPI.Wtime() - self._origin

    def _sleep_until(self, moment: float) -> None:
        while self.now() < moment:
            self._service()
            time.sleep(POLL_SECONDS)

    # -- messages -------------------------------------------------------------------------------
    def _post(self, neighbor: int) -> None:
        from mpi4py import MPI

        self._receives[neighbor] = self.comm.Irecv(self._buffers[neighbor], source=neighbor, tag=MPI.ANY_TAG)

    def _send_later(self, due: float, dst: int, payload: np.ndarray) -> None:
        self._sequence += 1
        heapq.heappush(self._outbox, (due, self._sequence, dst, payload))

    def _service(self) -> None:
        """Send what is due, complete sends, take every arrived message (drop stale ones, keep early ones)."""
        from mpi4py import MPI

        moment = self.now()
        while self._outbox and self._outbox[0][0] <= moment:
            _, _, dst, payload = heapq.heappop(self._outbox)
            self._sending.append((self.comm.Isend(payload, dest=dst, tag=DATA_TAG), payload))
        if self._sending:
            self._sending = [(r, p) for r, p in self._sending if not r.Test()]
        if self.on_wait is not None:
            self.on_wait()
        status = MPI.Status()
        for neighbor, request in list(self._receives.items()):
            if request is None or not request.Test(status):
                continue
            if status.Get_tag() == DONE_TAG:
                self._done_from.add(neighbor)
                self._receives[neighbor] = None
                continue
            iteration = int(self._buffers[neighbor][-1])
            if iteration >= self._current:
                self._inbox.setdefault(iteration, {})[neighbor] = self._buffers[neighbor][:-1].copy()
            self._post(neighbor)

    def _wait_barrier(self) -> None:
        """A barrier that keeps servicing messages while it waits (so nobody starves a neighbour)."""
        request = self.comm.Ibarrier()
        while not request.Test():
            self._service()
            time.sleep(POLL_SECONDS)

    # -- one iteration --------------------------------------------------------------------------
    def _listen(self, k: int, deadline: float) -> dict[int, np.ndarray]:
        """Receive iteration k's messages until the policy's stop: ``waits`` of them here or ``deadline``
        passed (eligible), then, for a threshold rule in lock-step, until every worker is eligible."""
        threshold = self.policy.threshold and self.cfg.protocol.sync == "lockstep"
        barrier = None
        while True:
            self._service()
            eligible = len(self._inbox.get(k, {})) >= self.waits or self.now() >= deadline
            if threshold:
                if barrier is None and eligible:
                    barrier = self.comm.Ibarrier()  # eligible: r_j reached
                if barrier is not None and barrier.Test():
                    break  # theta: every worker is eligible
            elif eligible:
                break
            time.sleep(POLL_SECONDS)
        return self._inbox.pop(k, {})

    def _combine(self, own: np.ndarray, received: dict[int, np.ndarray]) -> np.ndarray:
        used = np.zeros((1, self.cfg.num_workers, self.cfg.num_workers), dtype=bool)
        used[0, self.me, list(received)] = True
        row = mixing_matrices(used, self.cfg.algo.mixing, self.graph.degrees)[0, self.me]
        mixed = row[self.me] * own
        for neighbor, vector in received.items():
            mixed = mixed + row[neighbor] * vector
        return mixed.astype(np.float32)

    def run(self, on_evaluation, on_progress=None, on_checkpoint=None, resume_from=None):
        # Wall-clock runs are measurements: they are not checkpointed (config validation rejects resume).
        from mpi4py import MPI

        cfg, tf = self.cfg, self.trainer.tf
        iterations = cfg.iterations
        compute = self.schedule.delays.compute(0, iterations)[:, self.me]
        links = self.schedule.delays.links
        outgoing = np.flatnonzero(links[:, 0] == self.me)
        link_delays = self.schedule.delays.link(0, iterations)[:, outgoing]
        destinations = links[outgoing, 1]
        batches = self.schedule.batches.take(0, iterations)[:, 0]  # [K, B]
        draws = self.schedule.augment.take(0, iterations)[:, 0] if self.schedule.augment is not None else None

        def minibatch(k):  # this worker's minibatch as the trainer takes it (with its crop draws, if any)
            indices = tf.constant(batches[k][None])
            return indices if draws is None else (indices, tf.constant(draws[k][None]))

        lrs = self.schedule.learning_rate(np.arange(iterations))
        # Lock-step ends every iteration with a barrier (E(k)), unless the threshold's barrier ended it:
        # under ATC nothing follows theta; under CTA the local step does.
        end_barrier = cfg.protocol.sync == "lockstep" and not (self.policy.threshold and cfg.algo.update == "atc")
        record = np.full((iterations, 6), np.nan)  # start, ready, stop, finish, used, end
        x = self.trainer.params.numpy()[0]
        first_bad = None
        started = time.perf_counter()
        # Compile the local step before the clock starts: XLA's first call takes seconds, not C_j(k).
        self.trainer.adapt(tf.constant(x[None]), minibatch(0), lrs[0])
        for neighbor in self.neighbors:
            self._post(neighbor)
        self.comm.Barrier()
        self._origin = MPI.Wtime()
        self._evaluate_and_report(0, 0.0, float(lrs[0]), record, 0, on_evaluation, started, first_bad)
        for k in range(iterations):
            self._current = k
            start = self.now()
            if cfg.algo.update == "atc":
                adapted, losses = self.trainer.adapt(tf.constant(x[None]), minibatch(k), lrs[k])
                own, loss = adapted.numpy()[0], float(losses.numpy()[0])
                self._sleep_until(start + compute[k])
                ready = self.now()
            else:
                own, ready = x, start
            payload = np.append(own, np.float32(k)).astype(np.float32)
            for dst, delay in zip(destinations, link_delays[k]):
                self._send_later(ready + delay, int(dst), payload)
            received = self._listen(k, ready + self.policy.timeout)
            stop = self.now()
            x = self._combine(own, received)
            finish = stop
            if cfg.algo.update == "cta":
                adapted, losses = self.trainer.adapt(tf.constant(x[None]), minibatch(k), lrs[k])
                x, loss = adapted.numpy()[0], float(losses.numpy()[0])
                self._sleep_until(stop + compute[k])
                finish = self.now()
            if not np.isfinite(loss) and first_bad is None:
                first_bad = k
            if end_barrier:
                self._wait_barrier()
            record[k] = (start, ready, stop, finish, len(received), self.now())
            self.trainer.params = tf.constant(x[None])
            if self.on_iteration is not None:
                self.on_iteration(k + 1)
            if evaluation_kind(cfg, k + 1) is not None:  # no probes: a measured run cannot be replayed
                self._evaluate_and_report(k + 1, None, float(lrs[k]), record, k + 1, on_evaluation, started, first_bad)
            if on_progress is not None and self.me == 0:
                on_progress(k + 1, float(record[k, 5]))
        self._shutdown()

    def _evaluate_and_report(self, iteration, time_now, lr, record, done, on_evaluation, started, first_bad):
        """Pause the clock, agree on divergence, gather the timeline and the parameters, evaluate on rank 0."""
        from mpi4py import MPI

        self._wait_barrier()
        paused = MPI.Wtime()
        bad = np.array(
            [iteration * self.cfg.num_workers if first_bad is None else first_bad * self.cfg.num_workers + self.me],
            dtype=np.int64,
        )
        self.comm.Allreduce(MPI.IN_PLACE, bad, op=MPI.MIN)
        self._gather_timeline(record, done)
        if bad[0] < iteration * self.cfg.num_workers:
            k_bad, worker = divmod(int(bad[0]), self.cfg.num_workers)
            raise Diverged(
                f"diverged at iteration {k_bad}: worker {worker}'s loss is not finite "
                f"(lower algo.eta0={self.cfg.algo.eta0})"
            )
        if iteration > 0 and time_now is None:
            time_now = float(self.timeline.end[done - 1]) if self.me == 0 else 0.0
        row = self._evaluation_row(iteration, time_now or 0.0, lr, started)
        if row is not None:
            on_evaluation(row)
        self.comm.Barrier()
        self._origin += MPI.Wtime() - paused

    def _gather_timeline(self, record: np.ndarray, done: int) -> None:
        """Rank 0 collects every worker's measured rows ``[done, 6]`` into the timeline."""
        if done == 0:
            return
        mine = np.ascontiguousarray(record[:done])
        gathered = np.empty((self.comm.size, done, 6)) if self.me == 0 else None
        self.comm.Gather(mine, gathered, root=0)
        if self.me == 0:
            columns = self.timeline.columns
            for index, name in enumerate(("start", "ready", "stop", "finish")):
                columns[name][:done] = gathered[:, :, index].T
            columns["used"][:done] = gathered[:, :, 4].T.astype(np.int32)
            columns["backups"][:done] = self.graph.degrees[None, :] - columns["used"][:done]
            self.timeline.end[:done] = gathered[:, :, 5].max(axis=0)
            self.timeline.done = done

    def _hosting_orders(self) -> list[np.ndarray]:
        return [np.array([rank]) for rank in range(self.comm.size)]  # one worker per rank

    def _shutdown(self) -> None:
        """Deliver every held message, tell the neighbours we are done, drain until they are too."""
        while self._outbox or self._sending:
            self._service()
            time.sleep(POLL_SECONDS)
        self._current = 1 << 30  # everything still arriving is stale
        markers = [self.comm.Isend(np.empty(0, np.float32), dest=i, tag=DONE_TAG) for i in self.neighbors]
        while len(self._done_from) < self.degree:
            self._service()
            time.sleep(POLL_SECONDS)
        from mpi4py import MPI

        MPI.Request.Waitall(markers)
        self.comm.Barrier()
