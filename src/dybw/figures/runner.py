"""Run a spec's jobs in this process: reuse completed ones, train or simulate the missing ones.

Training goes through the local runner (``runner=local``: the numbers of ``runner=mpi`` too, and TensorFlow
is imported once for the whole sweep), except on a clock it lacks (``runner.clock=wall``: launched on MPI
ranks by the config's runner); clock-only jobs through :func:`dybw.figures.clock_only.run_clock_job`.
A job whose ``summary.json`` says ``completed`` with the same config hash is never rerun.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import yaml

from ..errors import DybwError
from ..results import atomic_write_text
from .specs import Job


def completed(job: Job, results: Path) -> dict | None:
    """The summary of a completed run of exactly this job's config, if there is one."""
    from ..results import completed_before

    return completed_before(job.job_dir(results), job.digest)


def _write_hydra_files(job: Job, job_dir: Path) -> None:
    """What Hydra writes into a job's ``.hydra/`` (the composed config and the overrides), for browsing."""
    hydra_dir = job_dir / ".hydra"
    hydra_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(hydra_dir / "config.yaml", yaml.safe_dump(job.plain, sort_keys=False))
    atomic_write_text(hydra_dir / "overrides.yaml", yaml.safe_dump(list(job.overrides), sort_keys=False))


def run_one(job: Job, results: Path) -> tuple[dict | None, str]:
    """Run ``job`` into its directory; returns ``(summary, note)`` (summary None when it failed)."""
    from ..config import load, validate

    job_dir = job.job_dir(results)
    note = ""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cfg = load(job.plain)
            graph = validate(cfg)
            _write_hydra_files(job, job_dir)
            if job.kind == "clock":
                from .clock_only import run_clock_job

                summary = run_clock_job(cfg, graph, job_dir, job.digest)
            else:
                from ..runners import RUNNERS

                # In this process (one TF start-up for the whole sweep), i.e. the local runner, whatever
                # runner the config names: runner=mpi computes the same bits, and the hash ignores it.  A clock
                # the local runner lacks (the wall clock: real MPI ranks, real time) runs on the config's runner.
                local = RUNNERS["local"]
                runner = local if cfg.runner.clock in local.clocks else RUNNERS[cfg.runner.name]
                summary = runner.run(cfg, graph, job_dir, job.plain, job.digest)
        notes = sorted({str(w.message) for w in caught if "clamped" in str(w.message)})
        note = "; ".join(notes)
        return summary, note
    except KeyboardInterrupt:
        raise
    except DybwError as error:
        return None, f"error: {error}"
    except Exception as error:  # noqa: BLE001 - a failed job is reported, the others still run
        return None, f"error: {type(error).__name__}: {error}"


def run_jobs(name: str, jobs: list[Job], results: Path, stream=sys.stdout) -> dict:
    """Run the missing jobs of a spec, printing one progress line per job; returns counts."""
    started = time.perf_counter()
    counts = {"total": len(jobs), "reused": 0, "ran": 0, "failed": 0}
    todo = []
    for job in jobs:
        if completed(job, results):
            counts["reused"] += 1
        else:
            todo.append(job)
    print(
        f"[{name}] {len(jobs)} jobs: {counts['reused']} already completed, {len(todo)} to run", file=stream, flush=True
    )
    for i, job in enumerate(todo, 1):
        t0 = time.perf_counter()
        summary, note = run_one(job, results)
        ok = summary is not None and summary.get("status") == "completed"
        counts["ran" if ok else "failed"] += 1
        what = f"{job.experiment}/{job.dirname}"
        if ok:
            acc = summary.get("final_test_accuracy")
            result = (
                f"acc {acc:.3f}, " if acc is not None else ""
            ) + f"T {1000 * summary['mean_iteration_duration']:.1f} ms"
        else:
            result = (summary or {}).get("status", "failed") + (f" ({note})" if note else "")
            note = ""
        print(
            f"[{name}] {counts['reused'] + i}/{len(jobs)} {job.kind:5s} {what}: {result} "
            f"({time.perf_counter() - t0:.1f} s; elapsed {time.perf_counter() - started:.0f} s)"
            + (f" [{note}]" if note else ""),
            file=stream,
            flush=True,
        )
    counts["seconds"] = time.perf_counter() - started
    return counts
