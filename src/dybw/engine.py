"""The iteration engine: every worker's k-th step belongs to iteration k, the virtual clock times it.

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
from dataclasses import dataclass

import numpy as np

from .algorithms import build_algorithm
from .clock import TimingChunk, VirtualClock
from .errors import Diverged
from .mixing import gathered_weights, mixing_matrices, mixing_sources
from .models import StackedNetwork
from .sampling import BatchSampler
from .stragglers import DelaySampler
from .tf_setup import use_threads
from .trainer import StackedTrainer


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


class Schedule:
    """Everything about iterations k0..k0+T-1 that does not depend on the model."""

    def __init__(self, cfg, graph, shards, workers=None):
        self.cfg = cfg
        self.degrees = graph.degrees
        self.delays, self.clock = delays_and_clock(cfg, graph)
        # Only the batches of the workers this process hosts (all of them for the local backend).
        self.batches = BatchSampler(shards, cfg.dataset.batch_size, cfg.seed, workers)
        self.next_iteration = 0

    def learning_rate(self, k: np.ndarray) -> np.ndarray:
        """``eta(k) = eta0 * delta^k``."""
        return (self.cfg.algo.eta0 * self.cfg.algo.delta ** np.asarray(k, dtype=np.float64)).astype(np.float32)

    def next_chunk(self, count: int) -> ScheduleChunk:
        k0 = self.next_iteration
        timing = self.clock.advance(self.delays.compute(k0, count), self.delays.link(k0, count))
        weights = mixing_matrices(timing.used_matrix(), self.cfg.algo.mixing, self.degrees)
        batches = self.batches.take(k0, count)
        self.next_iteration += count
        return ScheduleChunk(timing, weights, batches, self.learning_rate(np.arange(k0, k0 + count)))


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


@dataclass
class RunOutcome:
    status: str
    message: str = ""


class IterationEngine:
    """Runs one job: schedule chunks, TF steps, evaluations, timeline; reports via callbacks.

    The MPI backends subclass it and replace where the mixing reads its rows (:meth:`_source_positions`),
    how a step is taken (:meth:`_step`), how divergence is agreed on (:meth:`_first_non_finite`), and
    how an evaluation is shared: the parameters and counts gathered (:meth:`gather_params`,
    :meth:`gather_counts`), the average model sent out (:meth:`share_average`), the samples split
    (:meth:`evaluation_chunks`) and their sums gathered (:meth:`gather_chunk_sums`).
    """

    checkpointed = True  # writes a checkpoint after each evaluation (a resumed run equals an uninterrupted one)

    def __init__(self, cfg, graph, dataset, network: StackedNetwork, workers=None):
        self.cfg = cfg
        self.workers = np.arange(cfg.num_workers) if workers is None else np.asarray(workers)
        self.schedule = Schedule(cfg, graph, dataset.shards, self.workers)
        self.sources = mixing_sources(graph.adjacency)[self.workers]  # [M, S] global worker ids
        use_threads(cfg.runner.threads)
        self.trainer = StackedTrainer(
            network,
            dataset,
            cfg.algo.update,
            cfg.model.weight_decay,
            network.initial_params(cfg.model_seed),
            len(self.workers),
            self._source_positions(),
        )
        self.timeline = Timeline(cfg.iterations, cfg.num_workers, graph.degrees, graph.directed_links())

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

    def gather_params(self):
        """Every worker's parameters ``[N, P]`` where evaluations happen (None on other processes)."""
        return self.trainer.params

    def gather_counts(self, counts: np.ndarray) -> np.ndarray | None:
        """Every worker's count ``[N]`` from the hosted workers' ``counts`` where evaluations happen."""
        return counts

    def share_average(self, average: np.ndarray | None) -> np.ndarray:
        """The average model, from where the parameters are gathered to every process."""
        return average

    def evaluation_chunks(self) -> np.ndarray:
        """The chunks of the evaluation samples this process sums (here: all)."""
        return np.arange(self.trainer.num_chunks)

    def gather_chunk_sums(self, chunks: np.ndarray, sums: np.ndarray) -> np.ndarray | None:
        """Every chunk's sums ``[num_chunks, 2]`` where evaluations happen (None elsewhere)."""
        return sums

    def _evaluate(self) -> dict | None:
        """Evaluation metrics (None on processes that do not evaluate).

        Every process counts its own workers' correct test predictions (the local models' accuracy) and
        sums the average model's losses and hits over its share of the samples (``evaluation_chunks``);
        the process that gathers the parameters averages them and adds the shares up.
        """
        correct = self.gather_counts(self.trainer.correct_counts())
        params = self.gather_params()
        average = consensus = finite = None
        if params is not None:
            self.evaluated_params = params  # what the checkpoint after this evaluation saves
            average, consensus, finite = self.trainer.average_model(self.trainer.tf.constant(params))
        average = self.share_average(average)
        chunks = self.evaluation_chunks()
        sums = self.gather_chunk_sums(chunks, self.trainer.chunk_sums(average, chunks))
        if params is None:
            return None
        row = self.trainer.metrics_from_chunks(sums)
        row.update(
            consensus_distance=consensus,
            finite=finite,
            local_test_accuracy=int(correct.sum()) / (len(correct) * self.trainer.num_test),
        )
        if not finite:
            rows = np.asarray(params)
            row["first_non_finite_worker"] = int(np.flatnonzero(~np.isfinite(rows).all(axis=1))[0])
        return row

    # ---------------------------------------------------------------------------------------------
    def _evaluation_row(self, iteration: int, time_now: float, lr: float, started: float) -> dict | None:
        row = self._evaluate()
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
        return done

    def run(self, on_evaluation, on_progress=None, on_checkpoint=None, resume_from=None) -> RunOutcome:
        """Train for ``cfg.iterations``; ``on_evaluation(row)`` after each evaluation (and at k=0).

        ``on_checkpoint(state)`` follows each evaluation; ``resume_from`` is such a state to continue from.
        """
        cfg = self.cfg
        tf = self.trainer.tf
        started = time.perf_counter()

        def evaluate(iteration, time_now, lr):
            row = self._evaluation_row(iteration, time_now, lr, started)
            if row is not None:
                on_evaluation(row)

        if resume_from is not None:
            k = self.restore(resume_from)
        else:
            evaluate(0, 0.0, float(self.schedule.learning_rate(0)))
            k = 0
        while k < cfg.iterations:
            chunk = self.schedule.next_chunk(min(cfg.runner.chunk, cfg.iterations - k))
            # One conversion per chunk, unstacked once: indexing a tensor per iteration costs ~90 us a slice.
            weights = tf.unstack(tf.constant(gathered_weights(chunk.weights, self.sources, self.workers)))
            batches = tf.unstack(tf.constant(chunk.batches))
            for t in range(len(chunk.timing)):
                try:
                    losses = self._step(batches[t], chunk.learning_rates[t], weights[t], chunk, t)
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
                if k % cfg.eval_every == 0 or k == cfg.iterations:
                    self.timeline.record(chunk.timing, t + 1)
                    evaluate(k, float(chunk.timing.end[t]), float(chunk.learning_rates[t]))
                    if on_checkpoint is not None:
                        on_checkpoint(self.checkpoint(chunk, t))
                if on_progress is not None:
                    on_progress(k, float(chunk.timing.end[t]))
            self.timeline.record(chunk.timing, len(chunk.timing))
        return RunOutcome("completed")
