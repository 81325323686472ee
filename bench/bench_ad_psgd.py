"""AD-PSGD's job against cb-DyBW's, end to end, side by side: the wall time of ``python run.py`` on
``runner=local`` for the same preset.

    python bench/bench_ad_psgd.py                 # N = 16, 500 iterations, paper MNIST; 2 pairs (~4 jobs)
    python bench/bench_ad_psgd.py --quick         # 100 iterations, 1 pair
    python bench/bench_ad_psgd.py --iterations 500 --reps 3 --override model=logreg

Each job is ``python run.py experiment=paper_mnist algo=<algo> runner=local logger=none progress=false
iterations=K force=true`` in a fresh directory: N = 16 workers (the default), the paper's stragglers, MNIST
PCA-50, the default mlp [128], batch 1024.  For ad_psgd, K iterations are K N = 16 K local steps.  The two
algorithms alternate (cb-DyBW, AD-PSGD, then AD-PSGD, cb-DyBW, ...) so drift hits both, and the ratio is
the median over pairs of the ratio of two jobs run back to back.

Reported per job: ``process`` (the whole command: Python and TensorFlow start, data, XLA compilation,
training, evaluations, files) and ``job`` (the job's own ``wall_seconds`` in summary.json: from the
tracker's start to the end, data loading and compilation included), the final accuracy and virtual
time to target (information: the same delays and minibatches for both, common random numbers), and
the highest 1-minute load average seen.  The goal: AD-PSGD's process time <= 3x cb-DyBW's.
Results: a markdown table on stdout and JSON in ``results/bench/ad_psgd.json``.
"""

from __future__ import annotations

import dybw  # noqa: F401 - first: numpy then loads the CPU kernels dybw pins (src/dybw/numerics.py)

# isort: split
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from common import REPO, environment, fmt, med  # bench/common.py; sets DYBW_DATA_DIR

ALGOS = ("cb_dybw", "ad_psgd")
GOAL = 3.0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=500)
    p.add_argument("--reps", type=int, default=2, help="pairs of jobs (one cb_dybw and one ad_psgd each)")
    p.add_argument("--quick", action="store_true", help="100 iterations, 1 pair")
    p.add_argument("--override", action="append", default=[], help="a Hydra override for both jobs (repeatable)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.iterations, args.reps = 100, 1
    if args.out is None:
        args.out = REPO / "results" / "bench" / ("ad_psgd_quick.json" if args.quick else "ad_psgd.json")
    return args


class LoadWatch:
    """The highest 1-minute load average seen while it runs (sampled every second)."""

    def __init__(self):
        self.highest, self._stop = os.getloadavg()[0], threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        while not self._stop.wait(1.0):
            self.highest = max(self.highest, os.getloadavg()[0])

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def run_job(algo: str, args, root: Path, tag: str) -> dict:
    job_dir = root / f"{algo}-{tag}"
    command = [
        sys.executable,
        str(REPO / "run.py"),
        "experiment=paper_mnist",
        f"algo={algo}",
        "runner=local",
        "logger=none",
        "progress=false",
        f"iterations={args.iterations}",
        "force=true",
        *args.override,
        f"hydra.run.dir={job_dir}",
    ]
    with LoadWatch() as load:
        started = time.perf_counter()
        done = subprocess.run(command, cwd=root, capture_output=True, text=True)
        seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(command)} failed:\n{done.stderr[-3000:]}")
    summary = json.loads((job_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["iterations"] == args.iterations, summary
    return {
        "algo": algo,
        "process_seconds": seconds,
        "job_seconds": summary["wall_seconds"],
        "final_test_accuracy": summary["final_test_accuracy"],
        "time_to_target": summary["time_to_target"],
        "mean_iteration_duration": summary["mean_iteration_duration"],
        "load": load.highest,
        "command": shlex.join(command[1:-1]),
    }


def main(argv=None):
    args = parse_args(argv)
    print(f"dybw: {environment()['dybw']}; {args.iterations} iterations, {args.reps} pair(s); load {os.getloadavg()}")
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-ad-psgd-") as tmp:
        for rep in range(args.reps):
            order = ALGOS if rep % 2 == 0 else ALGOS[::-1]
            pair = {}
            for algo in order:
                pair[algo] = run_job(algo, args, Path(tmp), str(rep))
                r = pair[algo]
                print(
                    f"  pair {rep}: {algo:8s} process {r['process_seconds']:.1f} s, job {r['job_seconds']:.1f} s, "
                    f"load <= {r['load']:.1f}",
                    flush=True,
                )
            runs.append(pair)

    def column(algo, key):
        return [pair[algo][key] for pair in runs]

    ratios = [pair["ad_psgd"]["process_seconds"] / pair["cb_dybw"]["process_seconds"] for pair in runs]
    job_ratios = [pair["ad_psgd"]["job_seconds"] / pair["cb_dybw"]["job_seconds"] for pair in runs]
    print()
    print("| algo | process (s) | job (s) | final test accuracy | virtual time to 95 % (s) | mean iteration (s) |")
    print("|---|---|---|---|---|---|")
    for algo in ALGOS:
        target = column(algo, "time_to_target")
        print(
            f"| {algo} | {fmt(med(column(algo, 'process_seconds')), 1)} | {fmt(med(column(algo, 'job_seconds')), 1)} "
            f"| {fmt(med(column(algo, 'final_test_accuracy')), 4)} "
            f"| {fmt(med(target), 2) if None not in target else '—'} "
            f"| {fmt(med(column(algo, 'mean_iteration_duration')), 4)} |"
        )
    load = max(max(column(a, "load")) for a in ALGOS)
    print(
        f"\nAD-PSGD / cb-DyBW: process {fmt(med(ratios))}x (pairs: {', '.join(fmt(r) for r in ratios)}), "
        f"job {fmt(med(job_ratios))}x; goal <= {GOAL:g}x: {'met' if med(ratios) <= GOAL else 'MISSED'}; "
        f"highest load {load:.1f} on {os.cpu_count()} cores"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "iterations": args.iterations,
        "reps": args.reps,
        "overrides": args.override,
        "runs": runs,
        "ratio_process": float(np.median(ratios)),
        "ratio_job": float(np.median(job_ratios)),
        "goal": GOAL,
        "environment": environment(command=shlex.join([sys.executable, *sys.argv])),
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"JSON: {args.out}")


if __name__ == "__main__":
    main()
