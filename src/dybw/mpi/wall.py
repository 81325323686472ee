"""``runner=mpi runner.clock=wall``: one worker per rank, delays really slept, every time measured.

Worker j, iteration k (ATC; docs/protocol.md has the virtual clock this realises)::

    start    = now;  an adaptive policy chooses p_j from what this rank has seen itself
    y        = x - eta g                        (TF)  then sleep until start + C_j(k)   -> ready
    for i in N_j: send y to i at ready + D_ji(k)       (the sender holds the message: right across hosts)
    listen until the stop policy says stop (algorithms.StopPolicy): eligible once p_j messages of
    iteration k are here (or ``timeout`` seconds after ready);
        a local rule stops there;
        a threshold rule (cb_dybw) in lock-step enters the agreement (phase "threshold") when eligible
        and keeps receiving until it learns that every rank is eligible (theta)        -> stop
    x        = sum_{i in S_j ∪ {j}} W_ji y_i                                           -> finish
    lock-step: enter the agreement (phase "end") at finish; iteration k+1 starts when this rank learns
    that every rank has finished -- unless theta's agreement ended it (ATC: nothing follows theta).

CTA sends ``x`` at the start, combines at the stop, then takes the local step: ``finish = stop + C``.
The agreement is ``protocol.agreement`` made of point-to-point control messages held for their
``straggler.control`` delays in the same outbox as the data (:mod:`dybw.mpi.agreements`); ``instant``
is a barrier with no delay (shared memory on one host, else MPI's own non-blocking barrier).  Every
delay comes from the streams the virtual clock draws.

Messages are flat float32 buffers ``[P + 1]`` whose last entry is the iteration (exact below 2^24); the
inbox keeps the iterations not yet combined and drops everything else (:mod:`dybw.mpi.mailbox`).
A rank never blocks in MPI: between polls it sleeps until the next thing it must do (a held message's
due time, the end of its compute, its deadline) or until a sender rings its doorbell (ranks on one host;
otherwise, or with ``runner.wake=poll``, for ``runner.poll_s`` at most), so 16 ranks can share 2 cores.
Times are one monotonic clock (common to the ranks of one host) from a common origin, minus the
pauses for evaluation.  Besides the timeline, a rank records the arrival of every neighbour message
(``links.parquet``: ``used``, ``arrival``) and, per iteration, its inbox's peak size, the process CPU it
used, its number of polls, the machine's load average and its start lag (extra columns of
``timeline.parquet``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import time

import numpy as np

from ..algorithms.cb_adaptive import choose_waits
from ..engine import IterationEngine
from ..errors import Diverged
from ..evaluation import evaluation_kind
from ..mixing import mixing_matrices
from .agreements import WALL_AGREEMENTS
from .evaluation import SharedEvaluation
from .mailbox import Channel, Doorbell, Inbox, Outbox

TIMES = ("start", "ready", "stop", "finish")
# The extra timeline columns: the inbox's peak size (messages; newest iteration held minus the current one),
# the process CPU time and polls of the iteration, the machine's 1-minute load average at its end, and the
# start lag: how long after the iteration's start (the moment the previous one ended) this rank began it.
MEASURED = ("inbox_messages", "inbox_ahead", "cpu_seconds", "polls", "load_average", "start_lag")
# With doorbells, the longest a waiting rank sleeps unrung: a lost ring (a full socket) costs this at most.
UNRUNG_SLEEP_S = 0.02


def _fine_timer_slack() -> None:
    """Ask Linux to wake sleeping threads within 1 us of the time asked (default slack: 50 us)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(29, 1000, 0, 0, 0)  # PR_SET_TIMERSLACK, nanoseconds
    except (OSError, AttributeError):
        pass


def _idle_barrier(comm, poll: float) -> None:
    """A barrier that sleeps ``poll`` seconds between tests: MPI's blocking one spins, taking a core from
    the ranks that are still starting up (importing TensorFlow, loading data)."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(poll)


def _doorbell(comm, wanted: bool) -> Doorbell | None:
    """A doorbell per rank, for all ranks or for none (a bell nobody rings would only delay its rank)."""
    import secrets

    from mpi4py import MPI

    token = comm.bcast(secrets.token_hex(8) if comm.rank == 0 else None, root=0)
    bell = None
    if wanted:
        try:
            bell = Doorbell(token, comm.rank)
        except OSError:  # no abstract Unix sockets (not Linux)
            bell = None
    if not comm.allreduce(int(bell is not None), op=MPI.MIN) and bell is not None:
        bell.close()
        bell = None
    return bell


class _Record:
    """One rank's measurements, ``[K, ...]``; rows are gathered to rank 0 at each evaluation."""

    def __init__(self, iterations: int, degree: int, width: int):
        self.times = np.full((iterations, len(TIMES)), np.nan)
        self.measured = np.zeros((iterations, len(MEASURED)))
        self.arrival = np.full((iterations, width), np.nan)  # when each neighbour's message arrived
        self.used = np.zeros((iterations, width), dtype=bool)
        self.degree, self.width = degree, width

    def rows(self, first: int, last: int) -> np.ndarray:
        """Rows ``first..last-1`` packed as one float64 matrix (for one Gather)."""
        return np.ascontiguousarray(
            np.concatenate(
                [self.times[first:last], self.measured[first:last], self.arrival[first:last], self.used[first:last]],
                axis=1,
            )
        )

    @staticmethod
    def unpack(packed: np.ndarray, width: int) -> tuple[np.ndarray, ...]:
        t, m = len(TIMES), len(MEASURED)
        return (
            packed[..., :t],
            packed[..., t : t + m],
            packed[..., t + m : t + m + width],
            packed[..., t + m + width :] > 0.5,
        )


class WallClockEngine(SharedEvaluation, IterationEngine):
    checkpointed = False  # a measurement: not resumable (config validation rejects resume)

    def __init__(self, comm, cfg, graph, dataset, network, on_iteration=None, on_wait=None, on_evaluate=None):
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
        self.on_evaluate = on_evaluate
        self.neighbors = [int(i) for i in sorted(graph.neighbors[self.me])]
        self.slot = {neighbor: s for s, neighbor in enumerate(self.neighbors)}
        self.degree = len(self.neighbors)
        self.width = int(graph.degrees.max())
        clock = self.schedule.clock
        self.policy = clock.policy
        self.lockstep = cfg.protocol.sync == "lockstep"
        self.atc = cfg.algo.update == "atc"
        # The agreements a lock-step iteration needs (the virtual clock's phases): theta for a threshold
        # rule, and the end of the iteration unless theta ended it (ATC: nothing follows theta).
        self.threshold = self.policy.threshold and self.lockstep
        self.end_phase = self.lockstep and not (self.policy.threshold and self.atc)
        self.poll = cfg.runner.poll_s
        self.num_params = network.num_params
        _idle_barrier(comm, 0.01)  # ranks finish starting up at different times
        from mpi4py import MPI

        hosts = sorted(set(comm.allgather(MPI.Get_processor_name())))
        self._one_host = len(hosts) == 1
        self.bell = _doorbell(comm, self._one_host and cfg.runner.wake == "bell")
        if self.me == 0:
            # Which of the two paths runs: what a multi-host test checks (docs/cluster.md).
            logging.getLogger("dybw").info(
                "wall clock: %d ranks on %d host%s (%s); waking by %s; the instant agreement by %s; %s",
                comm.size,
                len(hosts),
                "" if self._one_host else "s",
                ", ".join(hosts),
                "doorbells" if self.bell is not None else f"polling every {self.poll:g} s",
                "a shared-memory file" if self.bell is not None else "MPI's barrier",
                "one clock" if self._one_host else "each host's clock from the moment a barrier completes",
            )
        self.outbox = Outbox(self.bell)
        self.inbox = Inbox()
        self.data = Channel(comm, self.neighbors, lambda: np.empty(self.num_params + 1, np.float32))
        self.control_comm = comm.Dup()  # control messages never meet data messages
        phases = [p for p, needed in (("threshold", self.threshold), ("end", self.end_phase)) if needed]
        delays = {p: self.schedule.delays.control(0, cfg.iterations, p, clock.agreement.pairs) for p in phases}
        self.agreement = WALL_AGREEMENTS[cfg.protocol.agreement](
            rank=self.me,
            size=comm.size,
            agreement=clock.agreement,
            links=graph.directed_links(),
            delays=delays,
            send=lambda due, peer, message: self.outbox.put(due, self.control_comm, peer, message),
            comm=self.control_comm,
            bell=self.bell,
        )
        size = self.agreement.message_size()
        self.control = Channel(self.control_comm, self.agreement.peers, lambda: np.empty(size, np.uint64))
        self.record = _Record(cfg.iterations, self.degree, self.width)
        self.iteration = 0
        self._gathered = 0  # timeline rows already gathered to rank 0
        self._origin = 0.0
        self._frozen: float | None = None  # the clock's reading while an evaluation pauses it
        self._resumed = 0.0  # the reading the clock resumed from after the last evaluation
        _fine_timer_slack()

    # -- clock ----------------------------------------------------------------------------------
    def now(self) -> float:
        if self._frozen is not None:
            return self._frozen
        return time.monotonic() - self._origin

    def _pause(self, until: float = float("inf"), mpi: bool = False) -> None:
        """Sleep until the next thing this rank must do (``until``, a held message's due time) or until a
        peer rings: it sent us a message, or the barrier is complete.  Progress that rings no bell -- MPI's
        own collectives (``mpi``), MPI's barrier, ranks on several hosts -- is only seen by polling, so
        then ``runner.poll_s`` caps the sleep."""
        now = self.now()
        polling = mpi or self.bell is None
        wake = min(until, self.outbox.next_due, now + (self.poll if polling else UNRUNG_SLEEP_S))
        if wake <= now:
            return
        if self.bell is None:
            time.sleep(wake - now)
        else:
            self.bell.wait(wake - now)

    def _service(self) -> float:
        """One poll: send what is due, take every arrived message; returns the time of the poll."""
        now = self.now()
        if self.bell is not None:
            for note in self.bell.notes():
                self.agreement.heard(note)
        self.outbox.flush(now)
        k = self.iteration
        for sender, buffer in self.data.arrived():
            iteration = int(buffer[-1])
            if 0 <= iteration < len(self.record.arrival):
                self.record.arrival[iteration, self.slot[sender]] = now
            self.inbox.put(iteration, sender, buffer)
        for sender, message in self.control.arrived():
            self.agreement.receive(sender, message, now)
        self.outbox.flush(now)  # what the agreement forwards with no delay leaves at once
        measured = self.record.measured[k]
        measured[0] = max(measured[0], self.inbox.messages)
        measured[1] = max(measured[1], self.inbox.newest - k)
        measured[3] += 1
        if self.on_wait is not None:
            self.on_wait()
        return now

    def _wait_until(self, moment: float) -> float:
        while (now := self._service()) < moment:
            self._pause(moment)
        return now

    def _learn(self, k: int, phase: str) -> float:
        """Keep polling until this rank learns ``(k, phase)``'s agreement; returns when it did."""
        while True:
            learned = self.agreement.learned(k, phase, self._service())
            if learned is not None:
                return learned
            self._pause()

    def _complete(self, requests) -> None:
        """Complete MPI requests by polling (MPI's blocking waits spin and would take a shared core)."""
        from mpi4py import MPI

        while not MPI.Request.Testall(requests):
            self._service()
            self._pause(mpi=True)

    _wait = _complete  # the shared evaluation's collectives wait the same way

    def _barrier(self) -> None:
        self._complete([self.comm.Ibarrier()])

    def _start_clock(self) -> None:
        """Every rank reads time from one origin: rank 0's, when the ranks share a host (one monotonic
        clock); otherwise each its own, taken when the common barrier completes."""
        self._barrier()
        origin = np.array([time.monotonic()])
        if self._one_host:
            self._complete([self.comm.Ibcast(origin, root=0)])
        self._origin = float(origin[0])

    # -- one iteration --------------------------------------------------------------------------
    def _waits(self, k: int, now: float) -> int:
        """``p_j``: the policy's, or an adaptive policy's choice from this rank's own last iterations
        (their starts, ready and tail times, and every neighbour message's arrival, late ones included;
        one not here yet counts as arriving now) -- :func:`dybw.algorithms.cb_adaptive.choose_waits`."""
        if not getattr(self.policy, "adaptive", False):
            return int(self.policy.waits[self.me])
        first = max(0, k - self.policy.window)
        if first == k:
            return self.degree  # no history yet: every neighbour
        start, ready, stop, finish = self.record.times[first:k].T
        arrival = self.record.arrival[first:k, : self.degree]
        seen = np.minimum(np.where(np.isnan(arrival), np.inf, arrival), now)
        offsets = (seen - start[:, None])[:, None, :]
        choice = choose_waits(
            (ready - start)[:, None], (finish - stop)[:, None], offsets, np.array([self.degree]), self.policy.noise
        )
        return int(choice[0])

    def _listen(self, k: int, waits: int, deadline: float) -> float:
        """Receive iteration k's messages until the policy's stop: ``waits`` of them here or ``deadline``
        passed (eligible), then, for a threshold rule in lock-step, until this rank learns theta."""
        eligible = None
        while True:
            now = self._service()
            if eligible is None and (self.inbox.count(k) >= waits or now >= deadline):
                eligible = now
                if self.threshold:
                    self.agreement.enter(k, "threshold", eligible)
            if eligible is not None:
                if not self.threshold:
                    return eligible
                learned = self.agreement.learned(k, "threshold", now)
                if learned is not None:
                    return learned
            self._pause(deadline if eligible is None else float("inf"))

    def _combine(self, own: np.ndarray, received: dict[int, np.ndarray]) -> np.ndarray:
        used = np.zeros((1, self.cfg.num_workers, self.cfg.num_workers), dtype=bool)
        used[0, self.me, list(received)] = True
        row = mixing_matrices(used, self.cfg.algo.mixing, self.graph.degrees)[0, self.me]
        mixed = row[self.me] * own
        for neighbor in sorted(received):
            mixed = mixed + row[neighbor] * received[neighbor][:-1]
        return mixed.astype(np.float32)

    def run(self, on_evaluation, on_progress=None, on_checkpoint=None, resume_from=None):
        # Wall-clock runs are measurements: they are not checkpointed (config validation rejects resume).
        cfg, tf = self.cfg, self.trainer.tf
        iterations = cfg.iterations
        compute = self.schedule.delays.compute(0, iterations)[:, self.me]
        links = self.schedule.delays.links
        outgoing = np.flatnonzero(links[:, 0] == self.me)
        link_delays = self.schedule.delays.link(0, iterations)[:, outgoing]
        destinations = [int(d) for d in links[outgoing, 1]]
        lrs = self.schedule.learning_rate(np.arange(iterations))
        # Converted once and unstacked: a conversion or a numpy argument per call costs the step ~1 ms of CPU,
        # and 16 ranks start their steps together.
        batches = tf.unstack(tf.constant(self.schedule.batches.take(0, iterations)[:, :1]))  # K x [1, B]
        if self.schedule.augment is not None:  # a minibatch is then its indices and its crop draws [1, B, 3]
            draws = tf.unstack(tf.constant(self.schedule.augment.take(0, iterations)[:, :1]))
            batches = list(zip(batches, draws))
        rates = tf.unstack(tf.constant(lrs))
        times, measured = self.record.times, self.record.measured
        x = self.trainer.params.numpy()[0]
        loss = 0.0
        first_bad = None
        started = time.perf_counter()
        # Compile the local step before the clock starts: XLA's first call takes seconds, not C_j(k).
        self.trainer.adapt(tf.constant(x[None]), batches[0], rates[0])
        self.data.post()
        self.control.post()
        self._start_clock()
        self._evaluate_and_report(0, float(lrs[0]), on_evaluation, started, first_bad)
        start = self._resumed  # every rank's iteration 0 starts when the clock resumes
        for k in range(iterations):
            self.iteration = k
            measured[k, 5] = self.now() - start
            cpu = time.process_time()
            waits = self._waits(k, start)
            if self.atc:
                adapted, losses = self.trainer.adapt(tf.constant(x[None]), batches[k], rates[k])
                own, loss = adapted.numpy()[0], float(losses.numpy()[0])
                ready = self._wait_until(start + compute[k])
            else:
                own, ready = x, start
            if self.policy.sends:
                payload = np.append(own, np.float32(k)).astype(np.float32)
                for destination, delay in zip(destinations, link_delays[k]):
                    self.outbox.put(ready + delay, self.comm, destination, payload)
            stop = self._listen(k, waits, ready + self.policy.timeout)
            received = self.inbox.take(k)
            x = self._combine(own, received)
            finish = stop
            if not self.atc:
                adapted, losses = self.trainer.adapt(tf.constant(x[None]), batches[k], rates[k])
                x, loss = adapted.numpy()[0], float(losses.numpy()[0])
                finish = self._wait_until(stop + compute[k])
            # Iteration k + 1 starts when this rank learns that k is over (lock-step), else at its finish;
            # what the rank does in between (bookkeeping, an evaluation) is counted in that iteration.
            next_start = finish
            if self.end_phase:
                self.agreement.enter(k, "end", finish)
                next_start = self._learn(k, "end")
            self.agreement.forget(k)
            times[k] = (start, ready, stop, finish)
            self.record.used[k, [self.slot[i] for i in received]] = True
            measured[k, 2] = time.process_time() - cpu
            measured[k, 4] = os.getloadavg()[0]
            if not np.isfinite(loss) and first_bad is None:
                first_bad = k
            if self.on_iteration is not None:
                self.on_iteration(k + 1)
            if evaluation_kind(cfg, k + 1) is not None:  # no probes: a measured run cannot be replayed
                self.trainer.params = tf.constant(x[None])
                self._evaluate_and_report(k + 1, float(lrs[k]), on_evaluation, started, first_bad)
            if on_progress is not None and self.me == 0:
                on_progress(k + 1, float(times[k, 3]))
            start = max(next_start, self._resumed)
        self._shutdown()

    # -- evaluations ------------------------------------------------------------------------------
    def _evaluate_and_report(self, iteration, lr, on_evaluation, started, first_bad):
        """Pause the clock, agree on divergence, gather the timeline and the parameters, evaluate on rank 0.

        An evaluation is a barrier whose time is not counted: the clock stops at the moment the last rank
        got there and resumes from that reading for everyone."""
        from mpi4py import MPI

        arrived = np.array([self.now()])
        self._barrier()
        latest = np.empty(1)
        self._complete([self.comm.Iallreduce(arrived, latest, op=MPI.MAX)])
        self._frozen = float(latest[0])
        num_workers = self.cfg.num_workers
        bad = np.array(
            [iteration * num_workers if first_bad is None else first_bad * num_workers + self.me], dtype=np.int64
        )
        agreed = np.empty_like(bad)
        self._complete([self.comm.Iallreduce(bad, agreed, op=MPI.MIN)])
        self._gather_timeline(iteration)
        if agreed[0] < iteration * num_workers:
            k_bad, worker = divmod(int(agreed[0]), num_workers)
            raise Diverged(
                f"diverged at iteration {k_bad}: worker {worker}'s loss is not finite "
                f"(lower algo.eta0={self.cfg.algo.eta0})"
            )
        time_now = float(self.timeline.end[iteration - 1]) if iteration > 0 and self.me == 0 else 0.0
        row = self._evaluation_row(iteration, time_now, lr, started)
        if row is not None:
            on_evaluation(row)
        self._barrier()
        resumed = np.array([time.monotonic()])
        if self._one_host:
            self._complete([self.comm.Ibcast(resumed, root=0)])
        self._origin = float(resumed[0]) - self._frozen
        self._resumed, self._frozen = self._frozen, None

    def _gather_timeline(self, done: int) -> None:
        """Rank 0 collects every worker's new rows (times, used set, arrivals, measurements) into the
        timeline: ``E(k)`` is the latest finish so far (the virtual clock's ``max_j finish_j``)."""
        first = self._gathered
        if done <= first:
            return
        mine = self.record.rows(first, done)
        gathered = np.empty((self.comm.size, *mine.shape)) if self.me == 0 else None
        self._complete([self.comm.Igather(mine, gathered, root=0)])
        self._gathered = done
        if self.me != 0:
            return
        times, measured, arrival, used = _Record.unpack(gathered, self.width)  # [R, T, ...]
        timeline, rows = self.timeline, slice(first, done)
        for index, name in enumerate(TIMES):
            timeline.columns[name][rows] = times[:, :, index].T
        timeline.columns["used"][rows] = used.sum(axis=2).T
        timeline.columns["backups"][rows] = self.graph.degrees[None, :] - timeline.columns["used"][rows]
        if not timeline.extra:
            shape = timeline.columns["start"].shape
            timeline.extra = {name: np.zeros(shape) for name in MEASURED}
            timeline.link_columns["arrival"] = np.full(timeline.link_columns["used"].shape, np.nan)
        for index, name in enumerate(MEASURED):
            timeline.extra[name][rows] = measured[:, :, index].T
        link_of = {(int(i), int(j)): index for index, (i, j) in enumerate(timeline.links)}
        for rank in range(self.comm.size):
            neighbors = sorted(int(i) for i in self.graph.neighbors[rank])
            columns = [link_of[(i, rank)] for i in neighbors]
            timeline.link_columns["used"][rows, columns] = used[rank, :, : len(neighbors)]
            timeline.link_columns["arrival"][rows, columns] = arrival[rank, :, : len(neighbors)]
        latest = np.nanmax(timeline.columns["finish"][rows], axis=1)
        before = timeline.end[first - 1] if first > 0 else -np.inf
        timeline.end[rows] = np.maximum.accumulate(np.maximum(latest, before))
        timeline.done = done

    def _hosting_orders(self) -> list[np.ndarray]:
        return [np.array([rank]) for rank in range(self.comm.size)]  # one worker per rank

    def _shutdown(self) -> None:
        """Deliver every held message, tell the peers we are done, drain until they are too."""
        while not self.outbox.empty():
            self._service()
            self._pause()
        markers = self.data.send_done() + self.control.send_done()
        if self.bell is not None:
            for peer in sorted(set(self.data.peers) | set(self.control.peers)):
                self.bell.ring(peer)
        while not (self.data.all_done() and self.control.all_done()):
            self._service()
            self._pause()
        self._complete(markers)
        self._barrier()
        self.control_comm.Free()

    def release(self) -> None:
        super().release()
        if self.bell is not None:  # also after a job that failed: the next job of this world rings its own
            self.bell.close()
