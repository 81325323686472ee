"""The local step one worker at a time (the engine's ``tf.map_fn`` in XLA) against one batched program.

    python bench/bench_step_layout.py            # MNIST- and CIFAR-sized steps (~1 min)

Why the engine loops: a batched XLA step tiles its reductions by the number of workers it spans, so a
worker's rounding depends on how many workers share its process, and runner=mpi (N/R workers per rank)
could not equal runner=local.  This measures, for N = 16 workers and one TF thread (runner.threads=1):

- time per step of each layout, interleaved (A B B A ...), medians, ratio = looped / batched;
- whether each layout's rows for the first M workers, computed with only those M workers, equal its
  rows computed with all 16 (M = 8, 5, 1): the property runner=mpi needs.

Inputs are random (the step's cost does not depend on the values).  Output: a markdown table.
"""

from __future__ import annotations

import dybw  # noqa: F401 - first: numpy then loads the CPU kernels dybw pins (src/dybw/numerics.py)

# isort: split
import sys
import time

import numpy as np

from dybw.models import StackedNetwork
from dybw.tf_setup import import_tensorflow, use_threads

use_threads(1)
tf = import_tensorflow()

CASES = [
    ("logreg, MNIST PCA-50", 50, [], 1024),
    ("mlp [128], MNIST PCA-50", 50, [128], 1024),
    ("mlp [128], CIFAR-10 PCA-100", 100, [128], 1024),
]
N, LR, REPS, SUBSETS = 16, np.float32(0.1), 7, (8, 5, 1)


def programs(network: StackedNetwork):
    def loss(params, x, y):  # [M, P], [M, B, D], [M, B] -> [M]
        logits = network.logits(tf, params, x)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits), axis=1)

    def batched(params, x, y):
        with tf.GradientTape() as tape:
            tape.watch(params)
            total = tf.reduce_sum(loss(params, x, y))
        return params - LR * tape.gradient(total, params)

    def looped(params, x, y):
        def worker(args):
            row, xs, ys = args
            with tf.GradientTape() as tape:
                tape.watch(row)
                value = loss(row[None], xs[None], ys[None])[0]
            return row - LR * tape.gradient(value, row)

        return tf.map_fn(worker, (params, x, y), fn_output_signature=tf.float32)

    return {"batched": tf.function(batched, jit_compile=True), "looped": tf.function(looped, jit_compile=True)}


def seconds_per_step(step, args, repeats: int) -> float:
    started = time.perf_counter()
    for _ in range(repeats):
        step(*args).numpy()
    return (time.perf_counter() - started) / repeats


def main() -> int:
    rng = np.random.default_rng(0)
    print(
        "| model | batch | batched ms | looped ms | looped / batched | rows equal with fewer workers: "
        "batched | looped |"
    )
    print("|---|--:|--:|--:|--:|---|---|")
    for name, dim, hidden, batch in CASES:
        network = StackedNetwork(dim, hidden, 10)
        params = tf.constant(rng.normal(0, 0.1, (N, network.num_params)).astype(np.float32))
        x = tf.constant(rng.normal(size=(N, batch, dim)).astype(np.float32))
        y = tf.constant(rng.integers(0, 10, (N, batch)).astype(np.int32))
        steps = programs(network)
        same = {}
        for layout, step in steps.items():
            full = step(params, x, y).numpy()
            same[layout] = all(np.array_equal(step(params[:m], x[:m], y[:m]).numpy(), full[:m]) for m in SUBSETS)
            seconds_per_step(step, (params, x, y), 3)  # warm-up after the subset compilations
        probe = seconds_per_step(steps["batched"], (params, x, y), 3)
        repeats = max(3, int(0.5 / probe))
        times = {layout: [] for layout in steps}
        for rep in range(REPS):
            for layout in steps if rep % 2 == 0 else list(steps)[::-1]:
                times[layout].append(seconds_per_step(steps[layout], (params, x, y), repeats))
        ratio = float(np.median(np.array(times["looped"]) / np.array(times["batched"])))
        ms = {layout: 1e3 * float(np.median(values)) for layout, values in times.items()}
        print(
            f"| {name} | {batch} | {ms['batched']:.2f} | {ms['looped']:.2f} | {ratio:.2f} | "
            f"{'yes' if same['batched'] else 'no'} | {'yes' if same['looped'] else 'no'} |",
            flush=True,
        )
    print(
        f"\nN = {N} workers, runner.threads = 1, medians of {REPS} interleaved repetitions; "
        f"'rows equal': the first M rows computed alone, M in {SUBSETS}, are the bits computed with all {N}."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
