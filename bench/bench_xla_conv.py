"""Why Keras models run their local step as a TensorFlow graph: XLA's CPU convolutions against TF's kernels.

    python bench/bench_xla_conv.py            # lenet5 (MNIST) and cnn (CIFAR-10), 2 workers x 16 images

For each built-in CNN, in one process: the same ``StackedTrainer.adapt`` (the workers' local steps: forward,
gradient, SGD step, one worker at a time) built once with ``model.jit_compile=false`` (TF graph, the default)
and once with ``true`` (one XLA program), called alternately on the same rows and minibatches after a
warm-up.  Reported: milliseconds per image, wall and process CPU time (medians), and the ratio XLA / graph
of measurements taken back to back.  Results on stdout and in ``results/bench/xla_conv.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from common import REPO, compose, environment, med  # bench/common.py; sets DYBW_DATA_DIR
from dybw.tf_setup import import_tensorflow, use_threads  # noqa: E402

tf = import_tensorflow()

from dybw.data import load_dataset  # noqa: E402
from dybw.models import build_network  # noqa: E402
from dybw.trainer import StackedTrainer  # noqa: E402

CASES = {"lenet5": ["experiment=cnn_mnist"], "cnn": ["experiment=cnn_cifar10"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "results" / "bench" / "xla_conv.json"))
    args = parser.parse_args(argv)
    results = []
    for name, overrides in CASES.items():
        common = [*overrides, "runner=local", "logger=none", f"num_workers={args.workers}"]
        cfg, _ = compose([*common, f"dataset.batch_size={args.batch}"])
        use_threads(cfg.runner.threads)
        data = load_dataset(cfg.dataset, cfg.num_workers, cfg.data_seed)
        trainers = {}
        for jit in (False, True):
            cfg_jit, _ = compose([*common, f"dataset.batch_size={args.batch}", f"model.jit_compile={str(jit).lower()}"])
            network = build_network(cfg_jit.model, data.input_shape, data.num_classes)
            sources = np.tile(np.arange(args.workers)[None], (args.workers, 1))
            initial = network.initial_params(0)
            trainers[jit] = StackedTrainer(network, data, "atc", 0.0, initial, args.workers, sources)
        rows = trainers[False].params
        indices = tf.constant(np.stack([s[: args.batch] for s in data.shards]).astype(np.int32))
        images = args.workers * args.batch
        for trainer in trainers.values():  # warm-up: tracing and compilation
            trainer.adapt(rows, indices, np.float32(0.1))[1].numpy()
        times = {False: [], True: []}
        loads = [os.getloadavg()[0]]
        for rep in range(args.reps):
            for jit in (False, True) if rep % 2 == 0 else (True, False):
                wall, cpu = time.perf_counter(), time.process_time()
                trainers[jit].adapt(rows, indices, np.float32(0.1))[1].numpy()
                times[jit].append((time.perf_counter() - wall, time.process_time() - cpu))
            loads.append(os.getloadavg()[0])
        graph, xla = np.asarray(times[False]) / images * 1e3, np.asarray(times[True]) / images * 1e3
        result = {
            "model": name,
            "workers": args.workers,
            "batch": args.batch,
            "graph_ms_per_image": med(graph[:, 0]),
            "xla_ms_per_image": med(xla[:, 0]),
            "graph_cpu_ms_per_image": med(graph[:, 1]),
            "xla_cpu_ms_per_image": med(xla[:, 1]),
            "ratio_wall": med(xla[:, 0] / graph[:, 0]),
            "ratio_cpu": med(xla[:, 1] / graph[:, 1]),
            "loadavg_1min": loads,
        }
        results.append(result)
        print(
            f"{name}: TF graph {result['graph_cpu_ms_per_image']:.2f} ms/image (CPU), XLA "
            f"{result['xla_cpu_ms_per_image']:.2f} ms/image: XLA / graph = {result['ratio_cpu']:.1f}x CPU, "
            f"{result['ratio_wall']:.1f}x wall (load {min(loads):.1f}-{max(loads):.1f})",
            flush=True,
        )
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"results": results, "environment": environment()}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
