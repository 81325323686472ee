"""Jobs of one process on shared compiled programs (``trainer.stacked_trainer``) against each job compiling
its own, side by side, with the same bits checked.

    python bench/bench_trainer_reuse.py                      # 8 jobs of the alternatives' spec, 3 rounds
    python bench/bench_trainer_reuse.py --spec convergence_mnist --jobs 3 --rounds 2

The jobs are the first ``--jobs`` of a figure spec (``experiments/<spec>.yaml``, as ``make figures`` composes
them), run in this one process through the figure pipeline's ``run_one`` (the local backend), each into a
fresh directory.  A round runs them all with sharing (the default) and all with every trainer built anew
(``RELEASED_TRAINERS = 0``: what every job paid before sharing existed), the two orders alternating
between rounds so drift hits both.  One job runs first, unmeasured: it loads the data and TensorFlow.
Reported: the median seconds per job either way, their ratio (median over rounds), the highest 1-minute
load average seen, and whether every results file of a job is the same bits both ways (``metrics.csv``
without its measured ``wall_seconds``, ``timeline.parquet``, ``links.parquet``).
JSON in ``results/bench/trainer_reuse.json``.
"""

from __future__ import annotations

import dybw  # noqa: F401 - first: numpy then loads the CPU kernels dybw pins (src/dybw/numerics.py)

# isort: split
import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pandas as pd

from common import REPO, environment, fmt, med  # bench/common.py; sets DYBW_DATA_DIR


def run_jobs(jobs, root: Path, shared: bool) -> list[float]:
    """Seconds of each job, run into its directory under ``root``, with or without shared trainers."""
    from dybw import trainer
    from dybw.figures.runner import run_one

    trainer._RELEASED.clear()
    trainer.RELEASED_TRAINERS = 4 if shared else 0
    seconds = []
    for job in jobs:
        started = time.perf_counter()
        summary, note = run_one(job, root)
        seconds.append(time.perf_counter() - started)
        assert summary is not None and summary["status"] == "completed", note
    return seconds


def same_bits(one: Path, other: Path) -> bool:
    for name in ("metrics.csv", "timeline.parquet", "links.parquet"):
        read = pd.read_csv if name.endswith(".csv") else pd.read_parquet
        a, b = (read(path / name).drop(columns="wall_seconds", errors="ignore") for path in (one, other))
        if not a.equals(b):
            return False
    return True


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", default="baselines", help="figure spec whose first jobs to run (default baselines)")
    p.add_argument("--jobs", type=int, default=8, help="jobs per round and way (default 8)")
    p.add_argument("--rounds", type=int, default=3, help="rounds, each both ways (default 3)")
    p.add_argument("--out", type=Path, default=REPO / "results" / "bench" / "trainer_reuse.json")
    args = p.parse_args()

    from dybw.figures import specs as spec_files

    specs = spec_files.load_specs(REPO / "experiments")
    composer = spec_files.Composer(REPO / "conf")
    jobs = [job for job in spec_files.own_jobs(specs[args.spec], composer, False) if job.kind == "train"]
    jobs = jobs[: args.jobs + 1]
    tmp = Path(tempfile.mkdtemp(prefix="bench_reuse_"))
    load = [os.getloadavg()[0]]
    try:
        run_jobs(jobs[:1], tmp / "warmup", shared=True)
        jobs = jobs[1:]
        shared, fresh, ratios = [], [], []
        for r in range(args.rounds):
            ways = (True, False) if r % 2 == 0 else (False, True)
            times = {}
            for way in ways:
                times[way] = run_jobs(jobs, tmp / f"{r}-{'shared' if way else 'fresh'}", shared=way)
                load.append(os.getloadavg()[0])
            shared += times[True]
            fresh += times[False]
            ratios.append(med(times[True]) / med(times[False]))
            print(f"round {r}: shared {med(times[True]):.2f} s/job, fresh {med(times[False]):.2f} s/job", flush=True)
        bits = all(
            same_bits(job.job_dir(tmp / f"{r}-shared"), job.job_dir(tmp / f"{r}-fresh"))
            for r in range(args.rounds)
            for job in jobs
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {
        "spec": args.spec,
        "jobs": len(jobs),
        "rounds": args.rounds,
        "shared_seconds_per_job": med(shared),
        "fresh_seconds_per_job": med(fresh),
        "ratio": med(ratios),
        "same_bits": bits,
        "max_load": max(load),
        "environment": environment(),
    }
    print()
    print("| spec | jobs x rounds | shared programs (s/job) | each job compiles (s/job) | ratio | same bits | load |")
    print("|---|--:|--:|--:|--:|---|--:|")
    print(
        f"| {args.spec} | {len(jobs)} x {args.rounds} | {fmt(result['shared_seconds_per_job'])} | "
        f"{fmt(result['fresh_seconds_per_job'])} | {fmt(result['ratio'])}x | {'yes' if bits else '**no**'} | "
        f"{max(load):.1f} |"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"JSON: {args.out}")


if __name__ == "__main__":
    main()
