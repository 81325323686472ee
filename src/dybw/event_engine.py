"""The event engine: asynchronous algorithms, whose workers never share an iteration (``engine = "event"``).

Worker i's k-th local step (:class:`dybw.algorithms.AdPsgd` gives its times and its partner ``j``) is
three events, each at one instant of virtual time::

    read      at start_i(k):    g_i <- grad f_i(x_i; batch_i(k))        (the model i reads)
    average   at average_i(k):  x_i, x_j <- (x_i + x_j) / 2             (atomic)
    finish    at stop_i(k):     x_i <- x_i - eta(k) g_i, then the read of step k+1 (start_i(k+1) = stop_i(k))

Every worker has exactly one pending event, so the queue holds N entries keyed ``(time, worker)``: events
are processed in virtual-time order, ties broken by worker id (a worker's own events follow each other
in the order above).  The times, partners and minibatches never depend on the model, so
:class:`EventSchedule` computes the order of events with numpy and a heap, a chunk at a time, and
:meth:`dybw.trainer.StackedTrainer.run_events` applies a chunk's events in that order in one XLA
program, one event after the other, on the stacked parameters ``X [N, P]`` and the gradients in flight
``G [N, P]`` (a step's read is computed at once and kept in ``G`` until its finish).

Progress is counted in local steps: ``K`` iterations are ``K N`` finished steps; "iteration" ``k`` is
``k N`` steps (whoever took them), and evaluations happen every ``eval_every N`` steps, right after the
step that completes them, on the model as it is at that instant (averagings of steps still in flight
included).  Common random numbers: worker i's step k takes ``C_i(k)`` (position k of
``(seed, "compute", i)``), its links ``D_ij(k)`` and ``D_ji(k)`` (position k of the link streams), its
partner from ``(seed, "gossip", i)`` and its minibatch from ``(seed, "batch", i)``, both at position k.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

import numpy as np

from .algorithms import build_algorithm
from .engine import Engine, EvaluationCost, RunOutcome, measured_so_far, resumed_measurements
from .errors import Diverged
from .rng import UniformStream
from .sampling import WorkerBatches
from .stragglers import DelaySampler
from .tf_setup import use_threads
from .trainer import StackedTrainer, stacked_trainer

# What a worker's pending event is.
START, AVERAGING, FINISHING = 0, 1, 2

# The timeline's columns (one row per finished local step), in the order they are written.
ROW_COLUMNS = {
    "iteration": np.int64,  # the worker's own step index k
    "worker": np.int32,
    "start": np.float64,
    "ready": np.float64,  # start + C_i(k): the gradient is ready
    "stop": np.float64,  # the end of its averaging: the average is back
    "finish": np.float64,  # = stop: the gradient is applied at once
    "used": np.int32,  # 1: one neighbour averaged with
    "backups": np.int32,  # d_i - 1: the neighbours not used
    "partner": np.int32,  # j
    "average": np.float64,  # the instant of the (atomic) averaging
}


@dataclass
class EventChunk:
    """Events ``0..count-1`` in processing order (the arrays have the engine's fixed capacity) and the
    steps that finished among them (``rows``; ``row_events[r]`` is the event that finished row r)."""

    kinds: np.ndarray  # int32 [E]: StackedTrainer.AVERAGE | StackedTrainer.STEP
    workers: np.ndarray  # int32 [E]
    partners: np.ndarray  # int32 [E]: j of an averaging
    steps: np.ndarray  # int64 [E]: the step an averaging belongs to, or the step a STEP event starts (reads)
    lrs: np.ndarray  # float32 [E]: eta(k) of the step a STEP event finishes (0 for the first read)
    batches: np.ndarray  # int32 [E, B]: the minibatch a STEP event reads
    count: int
    rows: dict  # ROW_COLUMNS -> [R]
    row_events: np.ndarray  # int64 [R]


class EventSchedule:
    """Every worker's steps -- times, partners, minibatches -- and the order of their events: everything
    that does not depend on the model.  Its state is each worker's step in flight (:meth:`state`)."""

    def __init__(self, cfg, graph, shards, algorithm):
        self.cfg, self.algorithm = cfg, algorithm
        n = self.num_workers = cfg.num_workers
        links = graph.directed_links()
        self.link_index = {(int(i), int(j)): index for index, (i, j) in enumerate(links)}
        straggler = cfg.straggler
        self.delays = DelaySampler(
            straggler.compute, straggler.link, links, n, cfg.seed, straggler.control, straggler.time_scale
        )
        self.neighbours = [np.flatnonzero(graph.adjacency[i]) for i in range(n)]
        self.degrees = np.asarray(graph.degrees)
        self.gossip = [UniformStream(cfg.seed, "gossip", i) for i in range(n)]
        self.batches = [WorkerBatches(shards[i], cfg.dataset.batch_size, cfg.seed, i) for i in range(n)]
        self.batch_size = cfg.dataset.batch_size
        self.block = cfg.runner.chunk  # step positions whose delays are drawn at once
        self._blocks: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # Each worker's step in flight and its pending event.
        self.step = np.zeros(n, np.int64)
        self.phase = np.full(n, START, np.int8)
        self.start, self.ready, self.average, self.stop = (np.zeros(n) for _ in range(4))
        self.partner = np.zeros(n, np.int64)
        self.completed = 0  # steps finished, all workers together
        self.queue = [(0.0, i) for i in range(n)]

    def learning_rate(self, k: int) -> np.float32:
        """``eta(k) = eta0 * delta^k`` of a worker's k-th step (float32, as the iteration engine's)."""
        return np.float32(self.cfg.algo.eta0 * self.cfg.algo.delta ** np.float64(k))

    def _delays(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Compute ``[N]`` and link ``[L]`` delays at position k; drawn a block of positions at a time, in
        increasing order (a block is first needed after every earlier one)."""
        block = k // self.block
        if block not in self._blocks:
            first = block * self.block
            self._blocks[block] = (self.delays.compute(first, self.block), self.delays.link(first, self.block))
        compute, link = self._blocks[block]
        return compute[k - block * self.block], link[k - block * self.block]

    def _begin(self, i: int, k: int, start: float) -> np.ndarray:
        """Set up worker i's step k from ``start``; returns the minibatch it reads."""
        compute, link = self._delays(k)
        j = self.algorithm.partner(self.neighbours[i], float(self.gossip[i].take(1)[0, 0]))
        there, back = link[self.link_index[(i, j)]], link[self.link_index[(j, i)]]
        self.ready[i], self.average[i], self.stop[i] = self.algorithm.step_times(
            start, float(compute[i]), float(there), float(back)
        )
        self.step[i], self.start[i], self.partner[i] = k, start, j
        return self.batches[i].take(1)[0]

    def next_chunk(self, capacity: int, until: int) -> EventChunk:
        """The next events in order, until ``until`` steps have finished in all (the chunk ends with the
        event that finishes the last of them) or ``capacity`` events."""
        kinds = np.zeros(capacity, np.int32)
        workers, partners = np.zeros(capacity, np.int32), np.zeros(capacity, np.int32)
        steps = np.zeros(capacity, np.int64)
        lrs = np.zeros(capacity, np.float32)
        batches = np.zeros((capacity, self.batch_size), np.int32)
        rows = {name: [] for name in ROW_COLUMNS}
        row_events = []
        e = 0
        while e < capacity and self.completed < until:
            _, i = heapq.heappop(self.queue)
            workers[e] = i
            steps[e] = self.step[i]
            if self.phase[i] == AVERAGING:
                kinds[e], partners[e] = StackedTrainer.AVERAGE, self.partner[i]
                self.phase[i] = FINISHING
                heapq.heappush(self.queue, (float(self.stop[i]), i))
            else:
                kinds[e] = StackedTrainer.STEP
                if self.phase[i] == START:  # the first read: nothing to apply yet (lr 0, G_i = 0)
                    batches[e] = self._begin(i, 0, 0.0)
                else:
                    k = int(self.step[i])
                    for name, value in (
                        ("iteration", k),
                        ("worker", i),
                        ("start", self.start[i]),
                        ("ready", self.ready[i]),
                        ("stop", self.stop[i]),
                        ("finish", self.stop[i]),
                        ("used", 1),
                        ("backups", self.degrees[i] - 1),
                        ("partner", self.partner[i]),
                        ("average", self.average[i]),
                    ):
                        rows[name].append(value)
                    row_events.append(e)
                    self.completed += 1
                    lrs[e], steps[e] = self.learning_rate(k), k + 1
                    batches[e] = self._begin(i, k + 1, float(self.stop[i]))
                self.phase[i] = AVERAGING
                heapq.heappush(self.queue, (float(self.average[i]), i))
            e += 1
        self._drop_blocks()
        rows = {name: np.asarray(values, dtype=ROW_COLUMNS[name]) for name, values in rows.items()}
        return EventChunk(kinds, workers, partners, steps, lrs, batches, e, rows, np.asarray(row_events, np.int64))

    def _drop_blocks(self) -> None:
        first_needed = int(self.step.min()) // self.block
        for block in [b for b in self._blocks if b < first_needed]:
            del self._blocks[block]

    # -- checkpoint ------------------------------------------------------------------------------
    STATE = ("step", "phase", "start", "ready", "average", "stop", "partner")

    def state(self) -> dict:
        """Every worker's step in flight and the number of finished steps: with the position-addressed
        streams, the whole state (the queue holds each worker's pending event, rebuilt from it)."""
        return {**{name: getattr(self, name).copy() for name in self.STATE}, "completed": self.completed}

    def restore(self, state: dict) -> None:
        for name in self.STATE:
            getattr(self, name)[:] = state[name]
        self.completed = int(state["completed"])
        pending = np.where(self.phase == AVERAGING, self.average, self.stop)
        self.queue = [(0.0 if self.phase[i] == START else float(pending[i]), i) for i in range(self.num_workers)]
        heapq.heapify(self.queue)
        for i in range(self.num_workers):
            if self.phase[i] != START:  # step k's partner and minibatch are drawn: go on at k + 1
                self.gossip[i].skip_to(int(self.step[i]) + 1)
                self.batches[i].skip_to(int(self.step[i]) + 1)
        for block in range(int(self.step.min()) // self.block, int(self.step.max()) // self.block + 1):
            self._delays(block * self.block)  # in increasing order, as an uninterrupted run draws them


class EventTimeline:
    """One row per finished local step (:data:`ROW_COLUMNS`), in the order the steps finished.

    ``done`` counts iterations' worth of steps (``steps // N``) and ``end[k]`` is when the ``(k+1) N``-th
    step finished, so ``mean_duration() = end[done-1] / done`` is virtual time per N steps."""

    def __init__(self, iterations: int, num_workers: int):
        self.num_workers = num_workers
        total = iterations * num_workers
        self.columns = {name: np.zeros(total, dtype) for name, dtype in ROW_COLUMNS.items()}
        self.end = np.full(iterations, np.nan)
        self.count = 0  # steps recorded

    @property
    def done(self) -> int:
        return self.count // self.num_workers

    def record(self, rows: dict, count: int) -> None:
        """Append the first ``count`` rows of a chunk (fewer when a run stops inside it)."""
        span = slice(self.count, self.count + count)
        for name, values in self.columns.items():
            values[span] = rows[name][:count]
        finished = np.arange(self.count + 1, self.count + count + 1)
        ends = finished % self.num_workers == 0
        self.end[finished[ends] // self.num_workers - 1] = rows["finish"][:count][ends]
        self.count += count

    def truncated(self) -> dict:
        return {name: values[: self.count] for name, values in self.columns.items()}

    def write(self, writer) -> None:
        """``timeline.parquet``, one row per finished step (no ``links.parquet``: a step uses one partner)."""
        writer.write_timeline(self.truncated())

    def mean_duration(self) -> float:
        """Virtual time per N finished steps, ``end[done-1] / done``."""
        return float(self.end[self.done - 1] / self.done) if self.done else float("nan")

    def mean_backups(self) -> float:
        """The mean of ``d_i - 1`` over the finished steps."""
        return float(self.columns["backups"][: self.count].mean()) if self.count else float("nan")

    def iteration_backups(self, first: int, last: int) -> np.ndarray:
        """``[last - first, N]``: the backups of the N steps that finished in each of iterations first..last-1."""
        n = self.num_workers
        return self.columns["backups"][first * n : last * n].reshape(-1, n)

    def state(self) -> dict:
        return {**{f"timeline_{name}": values[: self.count] for name, values in self.columns.items()}}

    def restore(self, state: dict) -> None:
        self.count = 0
        rows = {name: np.asarray(state[f"timeline_{name}"]) for name in self.columns}
        self.record(rows, len(rows["worker"]))


class EventEngine(Engine):
    """Runs one job of an asynchronous algorithm: event chunks, their TF program, evaluations, timeline.

    Deterministic: the order of events is fixed by virtual time and worker ids, and each event is the same
    computation however the events are chunked (``runner.chunk`` only sets how many run per call).  A
    checkpoint after each evaluation holds the parameters, the gradients in flight, every worker's step
    in flight and the timeline, so a resumed run equals an uninterrupted one bit for bit.
    """

    def __init__(self, cfg, graph, dataset, network):
        self.cfg = cfg
        self.algorithm = build_algorithm(cfg.algo, graph.degrees)
        self.schedule = EventSchedule(cfg, graph, dataset.shards, self.algorithm)
        use_threads(cfg.runner.threads)
        initial = network.initial_params(cfg.model_seed)
        self.trainer = stacked_trainer(network, dataset, None, cfg.model.weight_decay, initial, cfg.num_workers, None)
        tf = self.trainer.tf
        self.gradients = tf.zeros([cfg.num_workers, network.num_params], tf.float32)  # G: each step's gradient
        self.timeline = EventTimeline(cfg.iterations, cfg.num_workers)
        self.cost = EvaluationCost()
        # Events per call of the TF program: about runner.chunk iterations' worth (a read and an averaging
        # per step).  A fixed size, so the program is compiled once.
        self.capacity = 2 * cfg.num_workers * cfg.runner.chunk

    def _run_chunk(self, chunk: EventChunk) -> None:
        """Apply a chunk's events; record its finished steps (up to a non-finite loss, then raise)."""
        self.gradients, losses = self.trainer.run_events(
            self.gradients,
            chunk.kinds,
            chunk.workers,
            chunk.partners,
            chunk.lrs,
            chunk.batches,
            chunk.count,
        )
        steps = chunk.kinds[: chunk.count] == StackedTrainer.STEP
        bad = np.flatnonzero(steps & ~np.isfinite(losses))
        if len(bad):
            e = int(bad[0])
            self.timeline.record(chunk.rows, int(np.searchsorted(chunk.row_events, e, side="right")))
            raise Diverged(
                f"diverged at iteration {self.timeline.done}: worker {int(chunk.workers[e])}'s loss is not finite "
                f"at the start of its step {int(chunk.steps[e])} (lower algo.eta0={self.cfg.algo.eta0})"
            )
        self.timeline.record(chunk.rows, len(chunk.row_events))

    def checkpoint(self) -> dict:
        """Everything needed to go on after the evaluation just made exactly as if never stopped."""
        state = {f"schedule_{key}": value for key, value in self.schedule.state().items()}
        state.update(self.timeline.state())
        state.update(
            iteration=self.timeline.done,
            params=np.asarray(self.evaluated_params),
            gradients=self.gradients.numpy(),
            timeline_end=self.timeline.end[: self.timeline.done],
        )
        return state

    def restore(self, state) -> int:
        """Continue from a :meth:`checkpoint`; returns the iterations' worth of steps already done."""
        tf = self.trainer.tf
        self.trainer.params = tf.constant(np.asarray(state["params"], dtype=np.float32))
        self.gradients = tf.constant(np.asarray(state["gradients"], dtype=np.float32))
        self.schedule.restore(
            {key[len("schedule_") :]: value for key, value in state.items() if key.startswith("schedule_")}
        )
        self.timeline.restore(state)
        return self.timeline.done

    def run(self, on_evaluation, on_progress=None, on_checkpoint=None, resume_from=None) -> RunOutcome:
        """Train for ``cfg.iterations * N`` local steps; ``on_evaluation(row)`` every ``eval_every * N``
        steps (and at 0 and at the end), ``on_checkpoint(state)`` after each, ``resume_from`` a state."""
        cfg, n = self.cfg, self.cfg.num_workers
        total, every = cfg.iterations * n, cfg.eval_every * n
        started = time.perf_counter()

        def evaluate(iteration, time_now, lr):
            row = self._evaluation_row(iteration, time_now, lr, started)
            if row is not None:
                on_evaluation(row)

        if resume_from is not None:
            self.restore(resume_from)
            spent, self.cost = resumed_measurements(resume_from)
            started -= spent
        else:
            evaluate(0, 0.0, float(self.schedule.learning_rate(0)))
        schedule = self.schedule
        while schedule.completed < total:
            target = min(total, (schedule.completed // every + 1) * every)
            chunk = schedule.next_chunk(self.capacity, target)
            self._run_chunk(chunk)
            last = self.timeline.count - 1
            now = float(self.timeline.columns["finish"][last]) if last >= 0 else 0.0
            if schedule.completed == target:
                k = int(self.timeline.columns["iteration"][last])
                evaluate(target // n, now, float(schedule.learning_rate(k)))
                if on_checkpoint is not None:
                    on_checkpoint(self.checkpoint() | measured_so_far(started, self.cost))
            if on_progress is not None:
                on_progress(schedule.completed // n, now)
        return RunOutcome("completed")
