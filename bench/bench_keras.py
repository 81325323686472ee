"""The engine's step for a Keras model against a bare stacked Keras step of the same workers, side by side.

    python bench/bench_keras.py                 # lenet5 on raw MNIST, N = 16 (experiment=cnn_mnist), ~20 minutes idle
    python bench/bench_keras.py --quick         # 3 repetitions of 128 iterations each (6 minutes idle)
    python bench/bench_keras.py --override model=cnn --override experiment=cnn_cifar10   # another model

Setup: ``experiment=cnn_mnist`` (LeNet-5 on raw 28x28x1 MNIST, its batch per worker, cb-DyBW, ``paper``
stragglers, N = 16 on the default Erdős–Rényi graph), ``runner=local`` with its one TF thread; configs are
composed as run.py composes them.  In one process, after a warm-up (tracing and compilation excluded):

(E)  engine: ``IterationEngine.run`` for K iterations with ``eval_every = K``; the time inside its two
     evaluations (k = 0 and K) is measured and subtracted, so E is everything the engine does per
     iteration: delays, virtual clock, mixing weights, minibatches, conversions, the local steps of the 16
     workers (``StackedTrainer``: one row at a time, unflattened for Keras' ``stateless_call``), the mixing
     and the bookkeeping.
(K)  bare stacked Keras step, written here from Keras alone: one ``tf.Variable`` ``[N, *shape]`` per
     weight of the model (the workers stacked on the first axis), and one ``tf.function`` that, for each
     worker in turn (a Python loop, unrolled in the graph), gathers its minibatch, runs
     ``model.stateless_call`` on its slices of the variables, takes the gradient and the SGD step, then
     mixes every variable with ``W`` (``tensordot``, the dense ``N x N`` product) and assigns it.  It runs as
     a TensorFlow graph like the engine's Keras step (``--bare-jit`` compiles it with XLA instead), through a
     chunk of real minibatch indices and mixing matrices converted beforehand.

E and K alternate (E K, then K E, ...) so drift hits both; values are medians over repetitions and the
ratio is the median of the ratios of measurements taken back to back (wall clock; process CPU time too).
Results: a markdown table on stdout and JSON in ``results/bench/keras.json``.
"""

from __future__ import annotations

import dybw  # noqa: F401 - first: numpy then loads the CPU kernels dybw pins (src/dybw/numerics.py)

# isort: split
import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from common import REPO, compose, environment, fmt, med  # bench/common.py; sets DYBW_DATA_DIR
from dybw.tf_setup import import_tensorflow, use_threads  # noqa: E402  (before any other TF import)

tf = import_tensorflow()

from dybw.data import load_dataset  # noqa: E402
from dybw.engine import IterationEngine, Schedule, Timeline  # noqa: E402
from dybw.mixing import gathered_weights  # noqa: E402
from dybw.models import build_network  # noqa: E402

GOAL = 1.3


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="3 repetitions of 2 chunks each")
    p.add_argument("--reps", type=int, default=None, help="repetitions of E and K (default 7; --quick: 3)")
    p.add_argument("--chunks", type=int, default=None, help="K = this many runner chunks (default 4; --quick: 2)")
    p.add_argument("--bare-jit", action="store_true", help="compile the bare step with XLA")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="extra Hydra override")
    p.add_argument("--out", type=Path, default=REPO / "results" / "bench" / "keras.json")
    args = p.parse_args(argv)
    args.reps = max(3, args.reps or (3 if args.quick else 7))
    args.chunks = args.chunks or (2 if args.quick else 4)
    return args


def now() -> np.ndarray:
    """(wall, process CPU) seconds."""
    return np.array([time.perf_counter(), time.process_time()])


class BareStackedKeras:
    """N copies of a Keras model as stacked variables, stepped and mixed by one ``tf.function``."""

    def __init__(self, model, initial_weights: list[np.ndarray], num_workers: int, data, jit: bool):
        self.model, self.num_workers = model, num_workers
        self.stacked = [tf.Variable(np.repeat(w[None], num_workers, axis=0)) for w in initial_weights]
        self.initial = [v.numpy() for v in self.stacked]
        self.x, self.y = tf.Variable(data.x_train, trainable=False), tf.Variable(data.y_train, trainable=False)
        self.step = tf.function(self._step, jit_compile=jit)

    def reset(self) -> None:
        for variable, value in zip(self.stacked, self.initial):
            variable.assign(value)

    def _step(self, indices, lr, mixing):
        """``Y_j = X_j - lr grad f_j(X_j)`` for every worker j, then ``X = W Y`` for every weight."""
        adapted, losses = [[] for _ in self.stacked], []
        for j in range(self.num_workers):
            weights = [v[j] for v in self.stacked]
            x, y = tf.gather(self.x, indices[j]), tf.gather(self.y, indices[j])
            with tf.GradientTape() as tape:
                tape.watch(weights)
                logits, _ = self.model.stateless_call(weights, [], x)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            for out, w, g in zip(adapted, weights, tape.gradient(loss, weights)):
                out.append(w - lr * g)
            losses.append(loss)
        for variable, rows in zip(self.stacked, adapted):
            variable.assign(tf.tensordot(mixing, tf.stack(rows), axes=1))
        return tf.stack(losses)


class Case:
    def __init__(self, overrides: list[str], jit: bool):
        self.overrides = ["experiment=cnn_mnist", "runner=local", "logger=none", "progress=false", *overrides]
        self.cfg, self.graph = compose(self.overrides)
        use_threads(self.cfg.runner.threads)
        self.dataset = load_dataset(self.cfg.dataset, self.cfg.num_workers, self.cfg.data_seed)
        self.network = build_network(self.cfg.model, self.dataset.input_shape, self.dataset.num_classes)
        self.engine = IterationEngine(self.cfg, self.graph, self.dataset, self.network)
        initial = self.network.initial_params(self.cfg.model_seed)
        self.initial_rows = np.tile(initial[None], (self.cfg.num_workers, 1))
        weights = [w.numpy() for w in self.network.weights(tf, tf.constant(initial))]
        self.bare = BareStackedKeras(self.network.model, weights, self.cfg.num_workers, self.dataset, jit)
        self.evals = []
        evaluate = self.engine._evaluate

        def timed_evaluate(*args, **kwargs):
            t0 = now()
            try:
                return evaluate(*args, **kwargs)
            finally:
                self.evals.append(now() - t0)

        self.engine._evaluate = timed_evaluate
        # K's inputs: a chunk of real minibatches and dense W(k), converted beforehand.
        chunk = Schedule(self.cfg, self.graph, self.dataset.shards).next_chunk(self.cfg.runner.chunk)
        self.bare_inputs = list(
            zip(
                tf.unstack(tf.constant(chunk.batches)),
                chunk.learning_rates,
                tf.unstack(tf.constant(chunk.weights.astype(np.float32))),
            )
        )
        self.check_same_step(chunk)

    def check_same_step(self, chunk) -> None:
        """Both compute the same first iteration (up to float rounding): they are the same workers' step."""
        trainer = self.engine.trainer
        trainer.params = tf.constant(self.initial_rows)
        weights = gathered_weights(chunk.weights, self.engine.sources)
        trainer.step(tf.constant(chunk.batches[0]), chunk.learning_rates[0], tf.constant(weights[0]))
        self.bare.reset()
        self.bare.step(*self.bare_inputs[0])
        ours = trainer.params.numpy()
        theirs = np.concatenate([v.numpy().reshape(self.cfg.num_workers, -1) for v in self.bare.stacked], axis=1)
        np.testing.assert_allclose(ours, theirs, rtol=1e-3, atol=1e-4)

    def run_engine(self, iterations: int) -> np.ndarray:
        cfg = self.cfg
        cfg.iterations, cfg.eval_every = iterations, iterations
        self.engine.schedule = Schedule(cfg, self.graph, self.dataset.shards)
        self.engine.timeline = Timeline(iterations, cfg.num_workers, self.graph.degrees)
        self.engine.trainer.params = tf.constant(self.initial_rows)
        self.evals = []
        started = now()
        outcome = self.engine.run(lambda row: None)
        total = now() - started
        assert outcome.status == "completed" and len(self.evals) == 2
        return (total - sum(self.evals)) / iterations

    def run_bare(self, iterations: int) -> np.ndarray:
        self.bare.reset()
        started = now()
        for k in range(iterations):
            self.bare.step(*self.bare_inputs[k % len(self.bare_inputs)]).numpy()
        return (now() - started) / iterations


def main(argv=None) -> int:
    args = parse_args(argv)
    case = Case(args.override, args.bare_jit)
    iterations = args.chunks * case.cfg.runner.chunk
    loads = [os.getloadavg()[0]]
    warm = time.perf_counter()
    case.run_engine(case.cfg.runner.chunk)
    case.run_bare(2)
    warmup = time.perf_counter() - warm
    engine, bare = [], []
    for rep in range(args.reps):
        order = ("E", "K") if rep % 2 == 0 else ("K", "E")
        for which in order:
            (engine if which == "E" else bare).append(
                case.run_engine(iterations) if which == "E" else case.run_bare(iterations)
            )
        loads.append(os.getloadavg()[0])
        print(
            f"rep {rep + 1}/{args.reps}: engine {1e3 * engine[-1][0]:.1f} ms, bare {1e3 * bare[-1][0]:.1f} ms",
            file=sys.stderr,
        )
    engine, bare = np.asarray(engine), np.asarray(bare)
    cfg = case.cfg
    result = {
        "model": cfg.model.factory if cfg.model.name == "keras" else cfg.model.name,
        "num_workers": cfg.num_workers,
        "batch_size": cfg.dataset.batch_size,
        "num_params": case.network.num_params,
        "iterations": iterations,
        "reps": args.reps,
        "bare_jit": args.bare_jit,
        "engine_ms": 1e3 * med(engine[:, 0]),
        "bare_ms": 1e3 * med(bare[:, 0]),
        "ratio": med(engine[:, 0] / bare[:, 0]),
        "ratio_cpu": med(engine[:, 1] / bare[:, 1]),
        "engine_ms_all": (1e3 * engine[:, 0]).tolist(),
        "bare_ms_all": (1e3 * bare[:, 0]).tolist(),
        "engine_cpu_ms_all": (1e3 * engine[:, 1]).tolist(),
        "bare_cpu_ms_all": (1e3 * bare[:, 1]).tolist(),
        "warmup_seconds": warmup,
        "loadavg_1min": loads,
        "overrides": case.overrides,
        "goal": GOAL,
        "environment": environment(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(
        "| model | N | batch | P | bare stacked Keras step (ms) | engine (ms) | ratio (wall) | ratio (cpu) | load |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
        f"| {result['model']} | {cfg.num_workers} | {cfg.dataset.batch_size} | {case.network.num_params} | "
        f"{fmt(result['bare_ms'], 1)} | {fmt(result['engine_ms'], 1)} | {fmt(result['ratio'])} | "
        f"{fmt(result['ratio_cpu'])} | {min(loads):.1f}-{max(loads):.1f} |"
    )
    print(f"goal: engine <= {GOAL}x the bare step: {'met' if result['ratio'] <= GOAL else 'not met'}; {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
