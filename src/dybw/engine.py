"""The local backend: all N workers in one process, in one TF program, on the virtual clock.

Per iteration k (ATC; CTA swaps the two lines)::

    Y = X - eta(k) * G(X)        one XLA program for every worker's minibatch gradient step
    X = W(k) @ Y                 mixing: per row, its neighbours' rows in ascending order (one fused loop)

The timing (virtual clock, used sets, W(k)) and the minibatch indices never depend on the model, so they
are prepared a chunk of iterations at a time with numpy (:class:`Schedule`), and the TF side only runs
the numeric steps (:class:`BatchedTrainer`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .errors import DybwError
from .mixing import gathered_weights, mixing_matrices, mixing_sources
from .models import StackedNetwork
from .policies import make_policy
from .protocol import Protocol, TimingChunk
from .sampling import BatchSampler
from .stragglers import DelaySampler
from .tf_setup import import_tensorflow, use_threads

# Samples per piece of the average model's evaluation: processes share the pieces, and each piece is
# summed by the same program wherever it runs.  Divides MNIST's and CIFAR-10's 60k/50k/10k exactly.
EVALUATION_CHUNK = 2500


class Diverged(DybwError):
    """A loss or a parameter became NaN or infinite."""


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
        links = graph.directed_links()
        self.degrees = graph.degrees
        self.delays = DelaySampler(cfg.straggler.compute, cfg.straggler.link, links, cfg.num_workers, cfg.seed)
        self.protocol = Protocol(
            cfg.num_workers, links, make_policy(cfg.algo, graph.degrees), cfg.protocol.sync, cfg.algo.update
        )
        # Only the batches of the workers this process hosts (all of them for the local backend).
        self.batches = BatchSampler(shards, cfg.dataset.batch_size, cfg.seed, workers)
        self.next_iteration = 0

    def learning_rate(self, k: np.ndarray) -> np.ndarray:
        """``eta(k) = eta0 * delta^k``."""
        return (self.cfg.algo.eta0 * self.cfg.algo.delta ** np.asarray(k, dtype=np.float64)).astype(np.float32)

    def next_chunk(self, count: int) -> ScheduleChunk:
        k0 = self.next_iteration
        timing = self.protocol.advance(self.delays.compute(k0, count), self.delays.link(k0, count))
        weights = mixing_matrices(timing.used, self.cfg.algo.mixing, self.degrees)
        batches = self.batches.take(k0, count)
        self.next_iteration += count
        return ScheduleChunk(timing, weights, batches, self.learning_rate(np.arange(k0, k0 + count)))


class BatchedTrainer:
    """TF side: the stacked parameters ``X`` ``[N, P]`` and the compiled step and evaluation."""

    def __init__(
        self,
        network: StackedNetwork,
        dataset,
        update: str,
        weight_decay: float,
        initial: np.ndarray,
        num_workers: int,
        sources: np.ndarray,
    ):
        tf = self.tf = import_tensorflow()
        self.network = network
        self.weight_decay = float(weight_decay)
        # [M, S]: where row j's mixing sources are -- rows of Y, then rows received from other processes.
        self.sources = tf.constant(np.asarray(sources, dtype=np.int32))
        self.hosted = int(num_workers)
        # Variables, not constants: XLA would otherwise embed the whole dataset in the compiled program.
        self.x_train = tf.Variable(dataset.x_train, trainable=False)
        self.y_train = tf.Variable(dataset.y_train.astype(np.int32), trainable=False)
        self.x_test = tf.Variable(dataset.x_test, trainable=False)
        self.y_test = tf.Variable(dataset.y_test.astype(np.int32), trainable=False)
        self.params = tf.constant(np.tile(initial[None, :], (num_workers, 1)))
        step = self._adapt_then_combine if update == "atc" else self._combine_then_adapt
        self._step = tf.function(step, jit_compile=True)
        self._average = tf.function(self._average_and_consensus, jit_compile=True)
        self._chunk_sums = tf.function(self._sums_over_chunks, jit_compile=True)
        self._count_correct = tf.function(self._correct_counts, jit_compile=True)
        self.num_train, self.num_test = len(dataset.y_train), len(dataset.y_test)
        self._prepare_chunks(dataset)

    def _prepare_chunks(self, dataset) -> None:
        """The training then the test samples, each padded (mask 0) to a multiple of the chunk size."""
        size = self.chunk_size = min(EVALUATION_CHUNK, max(self.num_train, self.num_test))

        def padded(values, fill=0):
            return np.concatenate([values, np.full((-len(values) % size, *values.shape[1:]), fill, values.dtype)])

        samples = np.concatenate([padded(dataset.x_train), padded(dataset.x_test)])
        self.train_chunks = len(padded(dataset.y_train)) // size
        self.num_chunks = len(samples) // size
        self.chunk_samples = self.tf.Variable(samples, trainable=False)
        self.chunk_labels = self.tf.Variable(
            np.concatenate([padded(dataset.y_train.astype(np.int32)), padded(dataset.y_test.astype(np.int32))]),
            trainable=False,
        )
        self.chunk_mask = self.tf.Variable(
            np.concatenate([padded(np.ones(self.num_train, np.float32)), padded(np.ones(self.num_test, np.float32))]),
            trainable=False,
        )

    def _local_loss(self, params, indices):
        """``f_j(x_j; batch_j)`` of one worker: mean cross-entropy (+ weight decay) for ``[P]``, ``[B]``."""
        tf = self.tf
        x = tf.gather(self.x_train, indices)
        y = tf.gather(self.y_train, indices)
        logits = self.network.logits(tf, params[None], x[None])[0]
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        if self.weight_decay:
            loss += 0.5 * self.weight_decay * tf.reduce_sum(tf.square(params))
        return loss

    def _adapted(self, params, indices, lr):
        """The local steps ``Y = X - eta G(X)`` and the losses ``[M]`` of ``M`` workers' rows.

        One worker at a time (``tf.map_fn``, a loop inside the XLA program), not as one batched
        computation: XLA tiles a batched reduction by the number of rows it spans, so a worker's rounding
        would depend on how many workers share its process.  Looped, every worker runs the same
        fixed-shape program, and ``runner=local`` and ``runner=mpi`` (M = N/R) agree bit for bit -- at
        no cost in speed (``bench/bench_step_layout.py``: 0.74-1.03x the batched program).
        """
        tf = self.tf

        def worker(args):
            row, batch = args
            with tf.GradientTape() as tape:
                tape.watch(row)
                loss = self._local_loss(row, batch)
            return row - lr * tape.gradient(loss, row), loss

        return tf.map_fn(worker, (params, indices), fn_output_signature=(tf.float32, tf.float32))

    def _mixed(self, weights, rows, received=None):
        """``x_j = sum_s w_js y_{sources_js}``, ``s`` ascending: row j of ``W @ Y`` (``mixing.gathered_weights``).

        ``rows`` ``[M, P]`` are the hosted workers' ``Y``; ``received`` ``[Q, P]`` (MPI) the neighbours'
        rows other processes sent, addressed as rows ``M..M+Q-1``.  The slots are unrolled into one XLA
        loop fusion that reads both buffers where they are (no concatenated copy), and every row adds
        the same products in the same order whichever buffer holds them: ``runner=mpi`` mixes its rows
        to the bits ``runner=local`` gets.  A row costs ``(d_j + 1) P`` multiply-adds, not ``N P``.
        """
        tf = self.tf
        hosted = self.hosted

        def source(slot):
            index = self.sources[:, slot]
            if received is None:
                return tf.gather(rows, index)
            from_rows = tf.gather(rows, tf.minimum(index, hosted - 1))
            from_received = tf.gather(received, tf.maximum(index - hosted, 0))
            return tf.where((index < hosted)[:, None], from_rows, from_received)

        mixed = weights[:, :1] * source(0)
        for slot in range(1, self.sources.shape[1]):
            mixed = mixed + weights[:, slot : slot + 1] * source(slot)
        return mixed

    def _adapt_then_combine(self, params, indices, lr, weights):
        """ATC: ``X' = W (X - eta G(X))``."""
        adapted, losses = self._adapted(params, indices, lr)
        return self._mixed(weights, adapted), losses

    def _combine_then_adapt(self, params, indices, lr, weights):
        """CTA: ``X' = W X - eta G(W X)``."""
        return self._adapted(self._mixed(weights, params), indices, lr)

    def step(self, indices, lr, weights) -> np.ndarray:
        """One iteration for every worker; returns the local minibatch losses ``[N]``."""
        self.params, losses = self._step(self.params, indices, lr, weights)
        return losses.numpy()

    def adapt(self, params, indices, lr):
        """``(X - eta G(X), losses)`` for the hosted workers' parameters ``params`` (the MPI backends)."""
        if not hasattr(self, "_adapt"):
            self._adapt = self.tf.function(self._adapted, jit_compile=True)
        return self._adapt(params, indices, lr)

    def mix(self, weights, rows, received):
        """The hosted rows of ``W @ Y`` (:meth:`_mixed`) from the hosted ``rows`` and the ``received`` ones:
        what the local step ends (ATC) or starts (CTA) with, the same sums, compiled alone."""
        if not hasattr(self, "_mix"):
            self._mix = self.tf.function(self._mixed, jit_compile=True)
        return self._mix(weights, rows, received)

    def _average_and_consensus(self, params):
        """``xbar = mean_j x_j``, the consensus distance ``mean_j ||x_j - xbar||^2``, and whether X is finite."""
        tf = self.tf
        average = tf.reduce_mean(params, axis=0)
        consensus = tf.reduce_mean(tf.reduce_sum(tf.square(params - average[None]), axis=1))
        return average, consensus, tf.reduce_all(tf.math.is_finite(params))

    def _sums_over_chunks(self, average, chunks):
        """Per chunk ``c`` of ``chunks`` ``[n]``: the summed cross-entropy of the average model on its samples
        and how many of them it classifies right.  One chunk at a time (``tf.map_fn``), as the step loops
        over workers: a chunk's sums have the same bits whichever process, and with whichever other
        chunks, computes them."""
        tf = self.tf
        size, features = self.chunk_size, self.chunk_samples.shape[1]

        def chunk_sums(chunk):
            start = chunk * size
            x = tf.slice(self.chunk_samples, tf.stack([start, 0]), [size, features])
            y = tf.slice(self.chunk_labels, tf.reshape(start, [1]), [size])
            mask = tf.slice(self.chunk_mask, tf.reshape(start, [1]), [size])
            logits = self.network.logits(tf, average[None], x[None])[0]
            losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
            hits = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), y), tf.float32)
            return tf.reduce_sum(losses * mask), tf.reduce_sum(hits * mask)

        return tf.map_fn(chunk_sums, chunks, fn_output_signature=(tf.float32, tf.float32))

    def average_model(self, params) -> tuple[np.ndarray, float, bool]:
        """``(xbar [P], consensus distance, finite)`` of the parameters ``[N, P]``."""
        average, consensus, finite = self._average(params)
        return average.numpy(), float(consensus), bool(finite)

    def chunk_sums(self, average: np.ndarray, chunks: np.ndarray) -> np.ndarray:
        """``[len(chunks), 2]`` float64: (loss sum, right predictions) of the average model per chunk."""
        if len(chunks) == 0:
            return np.zeros((0, 2))
        losses, hits = self._chunk_sums(self.tf.constant(average), self.tf.constant(chunks, dtype=self.tf.int32))
        return np.stack([losses.numpy(), hits.numpy()], axis=1).astype(np.float64)

    def metrics_from_chunks(self, sums: np.ndarray) -> dict:
        """Losses and accuracy of the average model from every chunk's sums ``[num_chunks, 2]``, added in
        chunk order (float64): the same numbers for any split of the chunks between processes."""
        train, test = sums[: self.train_chunks], sums[self.train_chunks :]
        return {
            "train_loss": float(train[:, 0].sum() / self.num_train),
            "test_loss": float(test[:, 0].sum() / self.num_test),
            "test_accuracy": float(test[:, 1].sum() / self.num_test),
        }

    def _correct_counts(self, params):
        """Test samples each row's own model classifies right, ``[M]`` int32 -- exact counts, one worker at a
        time as in the step, so each process can count its own workers and the sum is the same bits."""
        tf = self.tf

        def worker(row):
            logits = self.network.logits(tf, row[None], self.x_test[None])[0]
            hits = tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), self.y_test)
            return tf.reduce_sum(tf.cast(hits, tf.int32))

        return tf.map_fn(worker, params, fn_output_signature=tf.int32)

    def correct_counts(self, params=None) -> np.ndarray:
        """Correct test predictions of the local models of ``params`` (default: the hosted workers)."""
        return self._count_correct(self.params if params is None else params).numpy()


class Timeline:
    """Per worker, per iteration times and used counts, filled chunk by chunk."""

    def __init__(self, iterations: int, num_workers: int, degrees: np.ndarray):
        self.degrees = degrees
        self.columns = {
            name: np.full((iterations, num_workers), np.nan) for name in ("start", "ready", "stop", "finish")
        }
        self.columns["used"] = np.zeros((iterations, num_workers), dtype=np.int32)
        self.columns["backups"] = np.zeros((iterations, num_workers), dtype=np.int32)
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
        self.end[rows] = timing.end[:count]
        self.done = timing.first + count

    def truncated(self) -> dict:
        return {name: values[: self.done] for name, values in self.columns.items()}

    def mean_duration(self) -> float:
        """``E(K-1) / K`` over the iterations done so far."""
        return float(self.end[self.done - 1] / self.done) if self.done else float("nan")

    def mean_backups(self) -> float:
        return float(self.columns["backups"][: self.done].mean()) if self.done else float("nan")


@dataclass
class RunOutcome:
    status: str
    message: str = ""


class LocalEngine:
    """Runs one job: schedule chunks, TF steps, evaluations, timeline; reports via callbacks.

    The MPI backends subclass it and replace where the mixing reads its rows (:meth:`_source_positions`),
    how a step is taken (:meth:`_step`), how divergence is agreed on (:meth:`_first_non_finite`), and
    how an evaluation is shared: the parameters and counts gathered (:meth:`gather_params`,
    :meth:`gather_counts`), the average model sent out (:meth:`share_average`), the samples split
    (:meth:`evaluation_chunks`) and their sums gathered (:meth:`gather_chunk_sums`).
    """

    def __init__(self, cfg, graph, dataset, network: StackedNetwork, workers=None):
        self.cfg = cfg
        self.workers = np.arange(cfg.num_workers) if workers is None else np.asarray(workers)
        self.schedule = Schedule(cfg, graph, dataset.shards, self.workers)
        self.sources = mixing_sources(graph.adjacency)[self.workers]  # [M, S] global worker ids
        use_threads(cfg.runner.threads)
        self.trainer = BatchedTrainer(
            network,
            dataset,
            cfg.algo.update,
            cfg.model.weight_decay,
            network.initial_params(cfg.model_seed),
            len(self.workers),
            self._source_positions(),
        )
        self.timeline = Timeline(cfg.iterations, cfg.num_workers, graph.degrees)

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
        state.update(
            {f"clock_{key}": value for key, value in self.schedule.protocol.state_after(chunk.timing, t).items()}
        )
        state.update(iteration=done, params=np.asarray(self.evaluated_params), timeline_end=self.timeline.end[:done])
        return state

    def restore(self, state) -> int:
        """Continue from a :meth:`checkpoint`; returns the number of iterations already done."""
        done = int(state["iteration"])
        self.trainer.params = self.trainer.tf.constant(np.asarray(state["params"], dtype=np.float32)[self.workers])
        self.schedule.protocol.restore({key: state[f"clock_{key}"] for key in ("next_start", "last_end", "iteration")})
        self.schedule.next_iteration = done
        for name, values in self.timeline.columns.items():
            values[:done] = state[f"timeline_{name}"]
        self.timeline.end[:done] = state["timeline_end"]
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
