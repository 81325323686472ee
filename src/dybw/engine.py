"""The iteration engine: every worker's k-th step belongs to iteration k, the virtual clock times it.

:class:`Engine` is what every engine shares (the evaluations); :class:`IterationEngine` is the lock-step
and free engine of the stop policies, :class:`dybw.event_engine.EventEngine` the asynchronous one.

Per iteration k (ATC; CTA swaps the two lines)::

    Y = X - eta(k) * G(X)        every hosted worker's minibatch gradient step (trainer.StackedTrainer)
    X = W(k) @ Y                 mixing: per row, its neighbours' rows in ascending order (one fused loop)

The timing (virtual clock, used sets, W(k)) and the minibatch indices never depend on the model, so they
are prepared a chunk of iterations at a time with numpy (:class:`Schedule`), and the TF side only runs
the numeric steps.  :class:`IterationEngine` runs a job in one process; the MPI engines
(:mod:`dybw.mpi`) subclass it and replace how a step reaches the other ranks.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import numpy as np

from .algorithms import build_algorithm
from .augment import AugmentSampler
from .clock import TimingChunk, VirtualClock
from .errors import Diverged
from .evaluation import FULL, PROBE, evaluation_kind, needs_train_loss, reaches_target
from .mixing import gathered_weights, mixing_matrices, mixing_sources
from .sampling import BatchSampler
from .stragglers import DelaySampler
from .tf_setup import use_threads
from .trainer import StackedTrainer, release_trainer, stacked_trainer


def delays_and_clock(cfg, graph) -> tuple[DelaySampler, VirtualClock]:
    """The delay streams and the virtual clock of a config: what a training job and a clock-only job share."""
    links = graph.directed_links()
    straggler = cfg.straggler
    delays = DelaySampler(
        straggler.compute, straggler.link, links, cfg.num_workers, cfg.seed, straggler.control, straggler.time_scale
    )
    policy = build_algorithm(cfg.algo, graph.degrees)
    clock = VirtualClock(
        cfg.num_workers,
        links,
        policy,
        cfg.protocol.sync,
        cfg.algo.update,
        agreement=cfg.protocol.agreement,
        control=delays.control,
    )
    return delays, clock


@dataclass
class ScheduleChunk:
    timing: TimingChunk
    weights: np.ndarray  # float32 [T, N, N]: W(k)
    batches: np.ndarray  # int32 [T, N, B]
    learning_rates: np.ndarray  # float32 [T]
    augment: np.ndarray | None = None  # int32 [T, N, B, 3]: crop draws (dataset.augment), else None

    def minibatches(self, tf) -> list:
        """Per iteration, the minibatch as the trainer takes it: indices ``[N, B]``, or with the crop draws
        ``(indices, draws)`` -- converted once per chunk and unstacked (indexing a tensor per iteration
        costs ~90 us a slice)."""
        indices = tf.unstack(tf.constant(self.batches))
        if self.augment is None:
            return indices
        return list(zip(indices, tf.unstack(tf.constant(self.augment))))


class Schedule:
    """Everything about iterations k0..k0+T-1 that does not depend on the model."""

    def __init__(self, cfg, graph, shards, workers=None):
        self.cfg = cfg
        self.degrees = graph.degrees
        self.delays, self.clock = delays_and_clock(cfg, graph)
        # Only the batches of the workers this process hosts (all of them for the local backend).
        self.batches = BatchSampler(shards, cfg.dataset.batch_size, cfg.seed, workers)
        workers = range(len(shards)) if workers is None else workers
        augmented = cfg.dataset.augment != "none"
        self.augment = AugmentSampler(cfg.seed, workers, cfg.dataset.batch_size) if augmented else None
        self.next_iteration = 0

    def learning_rate(self, k: np.ndarray) -> np.ndarray:
        """``eta(k) = eta0 * delta^k``."""
        return (self.cfg.algo.eta0 * self.cfg.algo.delta ** np.asarray(k, dtype=np.float64)).astype(np.float32)

    def next_chunk(self, count: int) -> ScheduleChunk:
        k0 = self.next_iteration
        timing = self.clock.advance(self.delays.compute(k0, count), self.delays.link(k0, count))
        weights = mixing_matrices(timing.used_matrix(), self.cfg.algo.mixing, self.degrees)
        batches = self.batches.take(k0, count)
        augment = self.augment.take(k0, count) if self.augment is not None else None
        self.next_iteration += count
        return ScheduleChunk(timing, weights, batches, self.learning_rate(np.arange(k0, k0 + count)), augment)


class Timeline:
    """Per worker, per iteration times and used counts, and per directed link whether it was used, filled
    chunk by chunk.  ``extra`` holds columns a backend adds (the wall clock's measurements)."""

    def __init__(self, iterations: int, num_workers: int, degrees: np.ndarray, links: np.ndarray | None = None):
        self.degrees = degrees
        self.columns = {
            name: np.full((iterations, num_workers), np.nan) for name in ("start", "ready", "stop", "finish")
        }
        self.columns["used"] = np.zeros((iterations, num_workers), dtype=np.int32)
        self.columns["backups"] = np.zeros((iterations, num_workers), dtype=np.int32)
        self.extra: dict[str, np.ndarray] = {}
        self.links = np.zeros((0, 2), dtype=np.int64) if links is None else np.asarray(links, dtype=np.int64)
        # used_links[k, l]: link l's sender is in its receiver's S_j(k) (the used set itself, not only its size)
        self.link_columns = {"used": np.zeros((iterations, len(self.links)), dtype=bool)}
        self.end = np.full(iterations, np.nan)
        self.done = 0  # iterations recorded

    def record(self, timing: TimingChunk, count: int) -> None:
        """Record the first ``count`` iterations of ``timing`` (fewer when a run stops early)."""
        rows = slice(timing.first, timing.first + count)
        for name in ("start", "ready", "stop", "finish"):
            self.columns[name][rows] = getattr(timing, name)[:count]
        used = timing.used_count[:count]
        self.columns["used"][rows] = used
        self.columns["backups"][rows] = self.degrees[None, :] - used
        if len(self.links):
            self.link_columns["used"][rows] = timing.used[:count]
        self.end[rows] = timing.end[:count]
        self.done = timing.first + count

    def truncated(self) -> dict:
        return {name: values[: self.done] for name, values in self.columns.items()}

    def write(self, writer) -> None:
        """``timeline.parquet`` (with the extra columns) and ``links.parquet`` of the iterations done."""
        writer.write_timeline({**self.truncated(), **{name: v[: self.done] for name, v in self.extra.items()}})
        if len(self.links):
            writer.write_links(self.links, {name: v[: self.done] for name, v in self.link_columns.items()})

    def mean_duration(self) -> float:
        """``E(K-1) / K`` over the iterations done so far."""
        return float(self.end[self.done - 1] / self.done) if self.done else float("nan")

    def mean_backups(self) -> float:
        return float(self.columns["backups"][: self.done].mean()) if self.done else float("nan")

    def iteration_backups(self, first: int, last: int) -> np.ndarray:
        """``[last - first, N]``: the backup counts of iterations ``first .. last-1`` (what a tracker logs)."""
        return self.columns["backups"][first:last]


@dataclass
class RunOutcome:
    status: str
    message: str = ""


@dataclass
class EvaluationCost:
    """Where a run's evaluation time went (``summary.json``): wall seconds in the scheduled evaluations,
    and in resolving the time to target (replayed steps and their probes)."""

    evaluation_seconds: float = 0.0
    target_probe_seconds: float = 0.0
    target_replayed_iterations: int = 0


def measured_so_far(started: float, cost: EvaluationCost) -> dict:
    """The wall seconds since ``started`` and the evaluation ``cost``, as checkpoint entries.

    A resumed run adds to them (:func:`resumed_measurements`), so its ``wall_seconds`` and costs count
    the work its results contain, as an uninterrupted run's do, instead of restarting at zero."""
    return {"measured_wall_seconds": time.perf_counter() - started} | {
        f"measured_{name}": value for name, value in asdict(cost).items()
    }


def resumed_measurements(state) -> tuple[float, EvaluationCost]:
    """The wall seconds and evaluation cost a checkpoint ``state`` recorded (zero for a checkpoint
    written before they were)."""
    cost = EvaluationCost(
        **{
            name: type(zero)(state[key])  # numpy scalars from the .npz back to the field's int or float
            for name, zero in asdict(EvaluationCost()).items()
            if (key := f"measured_{name}") in state
        }
    )
    return float(state.get("measured_wall_seconds", 0.0)), cost


class Engine:
    """What every engine shares: its trainer (:attr:`trainer`) and timeline (:attr:`timeline`), and the
    evaluation of the average model.

    An engine runs one job: ``run(on_evaluation, on_progress, on_checkpoint, resume_from)``.  Its
    timeline has ``done`` (iterations, or iterations' worth of local steps, recorded), ``end[k]`` (the
    time iteration k ended), ``mean_duration()``, ``mean_backups()``, ``iteration_backups(first, last)``,
    ``truncated()`` (the columns :meth:`dybw.results.ResultsWriter.write_timeline` writes) and
    ``write(writer)`` (its results files).

    A distributed backend replaces how an evaluation is shared: the parameters and counts gathered
    (:meth:`gather_params`, :meth:`gather_counts`), the average model sent out (:meth:`share_average`),
    the samples split (:meth:`my_chunks`) and their sums gathered (:meth:`gather_chunk_sums`), and the
    evaluating process's decisions made known (:meth:`share_flag`).
    """

    checkpointed = True  # writes a checkpoint after each evaluation (a resumed run equals an uninterrupted one)
    trainer: StackedTrainer
    cost: EvaluationCost  # where the evaluation time went (summary.json)

    def run(self, on_evaluation, on_progress=None, on_checkpoint=None, resume_from=None) -> RunOutcome:
        raise NotImplementedError

    def release(self) -> None:
        """The job is over: its trainer's compiled programs may serve this process's next job."""
        release_trainer(self.trainer)

    def gather_params(self):
        """Every worker's parameters ``[N, P]`` where evaluations happen (None on other processes)."""
        return self.trainer.params

    def gather_counts(self, counts: np.ndarray) -> np.ndarray | None:
        """Every worker's count ``[N]`` from the hosted workers' ``counts`` where evaluations happen."""
        return counts

    def share_average(self, average: np.ndarray | None) -> np.ndarray:
        """The average model, from where the parameters are gathered to every process."""
        return average

    def my_chunks(self, chunks: np.ndarray) -> np.ndarray:
        """The part of the evaluation ``chunks`` this process sums (here: all)."""
        return chunks

    def gather_chunk_sums(self, chunks: np.ndarray, sums: np.ndarray) -> np.ndarray | None:
        """Every chunk's sums ``[num_chunks, 2]`` (zero for chunks nobody summed) from this process's
        ``chunks`` and their ``sums``, where evaluations happen (None elsewhere)."""
        total = np.zeros((self.trainer.num_chunks, 2))
        total[chunks] = sums
        return total

    def share_flag(self, flag: bool) -> bool:
        """The evaluating process's ``flag`` on every process."""
        return bool(flag)

    def _evaluate(self, kind: str = FULL) -> dict | None:
        """Evaluation metrics of ``kind`` (:mod:`dybw.evaluation`; None on processes that do not evaluate).

        A full evaluation has every process count its own workers' correct test predictions (the local
        models' accuracy).  Every kind averages the parameters where they are gathered, and every process
        sums the average model's losses and hits over its share (``my_chunks``) of the chunks the kind
        needs (the test set's; the training set's too for a full one); the gathering process adds them up.
        """
        full = kind == FULL
        # Every worker's own model on the test set: N passes over it, at full evaluations unless eval_local=false.
        correct = self.gather_counts(self.trainer.correct_counts()) if full and self.cfg.eval_local else None
        params = self.gather_params()
        average = consensus = finite = None
        if params is not None:
            if kind != PROBE:
                self.evaluated_params = params  # what the checkpoint after this evaluation saves
            average, consensus, finite = self.trainer.average_model(self.trainer.tf.constant(params))
        average = self.share_average(average)
        train = needs_train_loss(self.cfg, kind)
        chunks = self.my_chunks(self.trainer.evaluation_chunks(train))
        sums = self.gather_chunk_sums(chunks, self.trainer.chunk_sums(average, chunks))
        if params is None:
            return None
        row = self.trainer.metrics_from_chunks(sums, train)
        row.update(consensus_distance=consensus, finite=finite, evaluation=kind)
        if full:
            row["local_test_accuracy"] = (
                int(correct.sum()) / (len(correct) * self.trainer.num_test) if correct is not None else float("nan")
            )
        if not finite:
            rows = np.asarray(params)
            row["first_non_finite_worker"] = int(np.flatnonzero(~np.isfinite(rows).all(axis=1))[0])
        return row

    # ---------------------------------------------------------------------------------------------
    def _evaluation_row(self, iteration: int, time_now: float, lr: float, started: float) -> dict | None:
        """The scheduled evaluation at ``iteration`` (:func:`dybw.evaluation.evaluation_kind`) as a row."""
        began = time.perf_counter()
        row = self._evaluate(evaluation_kind(self.cfg, iteration))
        self.cost.evaluation_seconds += time.perf_counter() - began
        if row is None:
            return None
        if not row.pop("finite"):
            raise Diverged(
                f"diverged at iteration {iteration - 1}: worker {row['first_non_finite_worker']}'s "
                f"parameters are not finite (lower algo.eta0={self.cfg.algo.eta0})"
            )
        row.update(
            iteration=iteration,
            time=time_now,
            lr=lr,
            wall_seconds=time.perf_counter() - started,
            mean_iteration_duration=self.timeline.mean_duration(),
            mean_backups=self.timeline.mean_backups(),
        )
        return row


class IterationEngine(Engine):
    """Runs one job: schedule chunks, TF steps, evaluations, timeline; reports via callbacks.

    The MPI backends subclass it and replace where the mixing reads its rows (:meth:`_source_positions`),
    how a step is taken (:meth:`_step`), how divergence is agreed on (:meth:`_first_non_finite`), how
    an evaluation is shared (:class:`Engine`), and what replaying the target's interval means to them
    (:meth:`_replaying`).
    """

    def __init__(self, cfg, graph, dataset, network, workers=None):
        self.cfg = cfg
        self.workers = np.arange(cfg.num_workers) if workers is None else np.asarray(workers)
        self.schedule = Schedule(cfg, graph, dataset.shards, self.workers)
        self.sources = mixing_sources(graph.adjacency)[self.workers]  # [M, S] global worker ids
        use_threads(cfg.runner.threads)
        self.trainer = stacked_trainer(
            network,
            dataset,
            cfg.algo.update,
            cfg.model.weight_decay,
            network.initial_params(cfg.model_seed),
            len(self.workers),
            self._source_positions(),
        )
        self.timeline = Timeline(cfg.iterations, cfg.num_workers, graph.degrees, graph.directed_links())
        self.cost = EvaluationCost()
        self.target_reached = False  # a scheduled evaluation reached the target (no more probing)

    # -- the parts a distributed backend replaces -------------------------------------------------
    def _source_positions(self) -> np.ndarray:
        """Where each hosted row's mixing sources are in the trainer's buffers (here: every row of ``Y``)."""
        return self.sources

    def _step(self, batches, lr, weights, chunk: ScheduleChunk, t: int) -> np.ndarray:
        """One iteration of the hosted workers; returns their local losses."""
        return self.trainer.step(batches, lr, weights)

    def _first_non_finite(self, losses: np.ndarray) -> int | None:
        """The first worker (global id) whose loss is NaN/inf, or None."""
        bad = self.workers[~np.isfinite(losses)]
        return int(bad.min()) if len(bad) else None

    @contextmanager
    def _replaying(self, iteration: int):
        """Inside, the steps re-run iterations ``iteration + 1, ...`` (the MPI engine numbers its messages by
        iteration); afterwards the run goes on where it was."""
        yield

    def _reached(self, row: dict | None) -> bool:
        """Whether the evaluating process's ``row`` reaches the target, on every process."""
        cfg = self.cfg
        return self.share_flag(row is not None and reaches_target(row, cfg.target_accuracy, cfg.target_loss))

    def _probe_row(self, iteration: int, started: float) -> dict | None:
        """A probe: the light evaluation of the parameters after ``iteration`` iterations (recorded ones)."""
        row = self._evaluate(PROBE)
        if row is None:
            return None
        row.pop("finite")  # replayed iterations were finite the first time, and are the same bits
        done = self.timeline.end[:iteration]
        row.update(
            iteration=iteration,
            time=float(done[-1]),
            lr=float(self.schedule.learning_rate(iteration - 1)),
            wall_seconds=time.perf_counter() - started,
            mean_iteration_duration=float(done[-1] / iteration),
            mean_backups=float(self.timeline.columns["backups"][:iteration].mean()),
        )
        return row

    def _probe_interval(self, params, steps: list, first: int, started: float) -> list[dict]:
        """Replay ``steps`` (the step inputs of iterations ``first .. first+len-1``) from ``params``, the
        parameters after ``first`` iterations, and probe after each until one reaches the target.

        The minibatches, learning rates and mixing weights are the ones the run used, so the replayed
        parameters are the run's bits (the resume test relies on the same determinism).  The run's own
        parameters are put back afterwards.
        """
        began = time.perf_counter()
        current, rows = self.trainer.params, []
        self.trainer.params = params
        try:
            with self._replaying(first):
                for done, inputs in enumerate(steps, start=first + 1):
                    self._step(*inputs)
                    self.cost.target_replayed_iterations += 1
                    row = self._probe_row(done, started)
                    if row is not None:
                        rows.append(row)
                    if self._reached(row):
                        break
        finally:
            self.trainer.params = current
            self.cost.target_probe_seconds += time.perf_counter() - began
        return rows

    def checkpoint(self, chunk: ScheduleChunk, t: int) -> dict:
        """Everything needed to continue after iteration ``chunk.first + t`` exactly as if never stopped.

        The random streams are position-addressed (delays and batches skip to iteration k), so the
        parameters, the clock's state and the timeline so far are the whole state.  Called where
        evaluations happen, right after one: the parameters are all N rows gathered for it.
        """
        done = chunk.timing.first + t + 1
        state = {f"timeline_{name}": values[:done] for name, values in self.timeline.columns.items()}
        state["links_used"] = self.timeline.link_columns["used"][:done]
        state.update({f"clock_{key}": value for key, value in self.schedule.clock.state_after(chunk.timing, t).items()})
        state.update(iteration=done, params=np.asarray(self.evaluated_params), timeline_end=self.timeline.end[:done])
        state.update(target_reached=self.target_reached)
        return state

    def restore(self, state) -> int:
        """Continue from a :meth:`checkpoint`; returns the number of iterations already done."""
        done = int(state["iteration"])
        self.trainer.params = self.trainer.tf.constant(np.asarray(state["params"], dtype=np.float32)[self.workers])
        self.schedule.clock.restore(
            {key[len("clock_") :]: value for key, value in state.items() if key.startswith("clock_")}
        )
        self.schedule.next_iteration = done
        for name, values in self.timeline.columns.items():
            values[:done] = state[f"timeline_{name}"]
        self.timeline.end[:done] = state["timeline_end"]
        if "links_used" in state:  # a checkpoint from before the used links were recorded leaves them unknown
            self.timeline.link_columns["used"][:done] = state["links_used"]
        self.timeline.done = done
        self.target_reached = bool(state["target_reached"])
        return done

    def run(self, on_evaluation, on_progress=None, on_checkpoint=None, resume_from=None) -> RunOutcome:
        """Train for ``cfg.iterations``; ``on_evaluation(row)`` after each evaluation (and at k=0), preceded
        by the probe rows of the interval in which the target is first reached (``evaluation.probe_target``).

        ``on_checkpoint(state)`` follows each evaluation; ``resume_from`` is such a state to continue from.
        """
        cfg = self.cfg
        tf = self.trainer.tf
        started = time.perf_counter()
        self.cost, self.target_reached = EvaluationCost(), False

        def evaluate(iteration, time_now, lr, since=(), since_params=None):
            """The evaluation at ``iteration``; ``since``: the step inputs of the iterations after the last
            evaluation, whose parameters were ``since_params``."""
            row = self._evaluation_row(iteration, time_now, lr, started)
            if cfg.evaluation.probe_target and not self.target_reached and self._reached(row):
                self.target_reached = True
                # Iterations k_p+1 .. k_e-1 (k_e = iteration is scored already), from the parameters at k_p.
                if len(since) > 1:
                    for probe in self._probe_interval(since_params, since[:-1], iteration - len(since), started):
                        on_evaluation(probe)
            if row is not None:
                on_evaluation(row)

        if resume_from is not None:
            k = self.restore(resume_from)
            spent, self.cost = resumed_measurements(resume_from)
            started -= spent
        else:
            evaluate(0, 0.0, float(self.schedule.learning_rate(0)))
            k = 0
        since, since_params = [], self.trainer.params  # step inputs since the last evaluation, and its parameters
        while k < cfg.iterations:
            chunk = self.schedule.next_chunk(min(cfg.runner.chunk, cfg.iterations - k))
            # One conversion per chunk, unstacked once: indexing a tensor per iteration costs ~90 us a slice.
            weights = tf.unstack(tf.constant(gathered_weights(chunk.weights, self.sources, self.workers)))
            batches = chunk.minibatches(tf)
            for t in range(len(chunk.timing)):
                inputs = (batches[t], chunk.learning_rates[t], weights[t], chunk, t)
                try:
                    losses = self._step(*inputs)
                except BaseException:
                    self.timeline.record(chunk.timing, t)
                    raise
                bad = self._first_non_finite(losses)
                if bad is not None:
                    self.timeline.record(chunk.timing, t + 1)
                    raise Diverged(
                        f"diverged at iteration {k}: worker {bad}'s loss is not finite "
                        f"(lower algo.eta0={cfg.algo.eta0})"
                    )
                k += 1
                if cfg.evaluation.probe_target and not self.target_reached:
                    since.append(inputs)  # what a replay of this interval needs
                if evaluation_kind(cfg, k) is not None:
                    self.timeline.record(chunk.timing, t + 1)
                    evaluate(k, float(chunk.timing.end[t]), float(chunk.learning_rates[t]), since, since_params)
                    if on_checkpoint is not None:
                        on_checkpoint(self.checkpoint(chunk, t) | measured_so_far(started, self.cost))
                    since, since_params = [], self.trainer.params
                if on_progress is not None:
                    on_progress(k, float(chunk.timing.end[t]))
            self.timeline.record(chunk.timing, len(chunk.timing))
        return RunOutcome("completed")
