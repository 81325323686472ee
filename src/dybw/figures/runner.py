"""Run the jobs the specs need: reuse completed ones, train or simulate the missing ones.

Training goes through the local runner (``runner=local``: the numbers of ``runner=mpi`` too, and TensorFlow
is imported once per process), in ``--jobs`` processes at once, except on a clock it lacks
(``runner.clock=wall``: launched on MPI ranks by the config's runner, one job at a time, alone, consecutive
ones sharing one MPI world); clock-only jobs through :func:`dybw.figures.clock_only.run_clock_job`, in this
process.
A job whose ``summary.json`` says ``completed`` with the same config hash is never rerun; one stopped
part-way continues from its last checkpoint.
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
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cfg = load(resumable(job))
            graph = validate(cfg)
            _write_hydra_files(job, job_dir)
            if job.kind == "clock":
                from .clock_only import run_clock_job

                summary = run_clock_job(cfg, graph, job_dir, job.digest)
            else:
                from ..runners import RUNNERS, run_job

                # In this process (one TF start-up for the whole sweep), i.e. the local runner, whatever
                # runner the config names: runner=mpi computes the same bits, and the hash ignores it.  A clock
                # the local runner lacks (the wall clock: real MPI ranks, real time) runs on the config's runner.
                local = cfg.runner.clock in RUNNERS["local"].clocks
                summary = run_job(cfg, graph, job_dir, job.plain, job.digest, runner="local" if local else None)
        return summary, _clamp_notes(caught)
    except KeyboardInterrupt:
        raise
    except DybwError as error:
        return None, f"error: {error}"
    except Exception as error:  # noqa: BLE001 - a failed job is reported, the others still run
        return None, f"error: {type(error).__name__}: {error}"


def resumable(job: Job) -> dict:
    """The job's config, set to continue from its checkpoint when an earlier sweep was stopped mid-job.

    A checkpoint only counts for the config hash it was written under, and a resumed run gives the bits of
    an uninterrupted one, so a sweep stopped by Ctrl-C or a lost session loses at most one evaluation
    interval per running job.  Wall-clock jobs are measurements and are never checkpointed."""
    if job.kind != "train" or is_wall_clock(job):
        return job.plain
    return {**job.plain, "resume": True}


def _clamp_notes(caught) -> str:
    """What validation clamped (e.g. ``b`` above a worker's degree), from the warnings it raised."""
    return "; ".join(sorted({str(w.message) for w in caught if "clamped" in str(w.message)}))


def is_wall_clock(job: Job) -> bool:
    """A job that measures real time on MPI ranks: it must have the machine to itself."""
    return job.kind == "train" and (job.plain.get("runner") or {}).get("clock") == "wall"


def _quiet_worker() -> None:
    """A pool worker leaves Ctrl-C to the parent, which stops the sweep and reports what finished."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _timed_run(job: Job, results: Path) -> tuple[dict | None, str, float]:
    t0 = time.perf_counter()
    summary, note = run_one(job, results)
    return summary, note, time.perf_counter() - t0


class _Progress:
    """One line per finished job, numbered per spec, whichever process ran it."""

    def __init__(self, todo: dict[str, list[Job]], totals: dict[str, int], stream):
        self.stream = stream
        self.started = time.perf_counter()
        self.counts = {
            name: {"total": totals[name], "reused": totals[name] - len(jobs), "ran": 0, "failed": 0}
            for name, jobs in todo.items()
        }
        for name, jobs in todo.items():
            print(
                f"[{name}] {totals[name]} jobs: {totals[name] - len(jobs)} already completed, {len(jobs)} to run",
                file=stream,
                flush=True,
            )

    def done(self, job: Job, summary: dict | None, note: str, seconds: float) -> None:
        counts = self.counts[job.spec]
        ok = summary is not None and summary.get("status") == "completed"
        counts["ran" if ok else "failed"] += 1
        if ok:
            acc = summary.get("final_test_accuracy")
            result = (
                f"acc {acc:.3f}, " if acc is not None else ""
            ) + f"T {1000 * summary['mean_iteration_duration']:.1f} ms"
        else:
            result = (summary or {}).get("status", "failed") + (f" ({note})" if note else "")
            note = ""
        finished = counts["reused"] + counts["ran"] + counts["failed"]
        print(
            f"[{job.spec}] {finished}/{counts['total']} {job.kind:5s} {job.experiment}/{job.dirname}: {result} "
            f"({seconds:.1f} s; elapsed {time.perf_counter() - self.started:.0f} s)" + (f" [{note}]" if note else ""),
            file=self.stream,
            flush=True,
        )


def run_jobs(jobs: list[Job], results: Path, workers: int = 1, stream=sys.stdout) -> dict[str, dict]:
    """Run the jobs not completed yet, one progress line each; returns per spec its counts.

    Clock-only jobs run here first (milliseconds each).  Training jobs on the virtual clock run in
    ``workers`` processes at once: each job runs on ``runner.threads`` threads (1 by default), so one
    process leaves the other cores idle, and a job's numbers do not depend on the process that computes
    them.  Wall-clock jobs run last, one at a time and alone, since they measure real time.
    """
    totals: dict[str, int] = {}
    todo: dict[str, list[Job]] = {}
    for job in jobs:
        totals[job.spec] = totals.get(job.spec, 0) + 1
        todo.setdefault(job.spec, [])
        if not completed(job, results):
            todo[job.spec].append(job)
    progress = _Progress(todo, totals, stream)
    pending = [job for spec_jobs in todo.values() for job in spec_jobs]
    clock = [job for job in pending if job.kind == "clock"]
    wall = [job for job in pending if is_wall_clock(job)]
    virtual = [job for job in pending if job.kind != "clock" and not is_wall_clock(job)]

    for job in clock:
        progress.done(job, *_timed_run(job, results))
    if workers > 1 and len(virtual) > 1:
        _run_in_pool(virtual, results, min(workers, len(virtual)), progress)
    else:
        for job in virtual:
            progress.done(job, *_timed_run(job, results))
    _run_wall_clock(wall, results, progress)
    return progress.counts


def _run_wall_clock(jobs: list[Job], results: Path, progress: _Progress) -> None:
    """Wall-clock jobs one at a time, in order; consecutive ones that can share an MPI world share one, so
    its ranks start once (importing TensorFlow in 16 ranks on 2 cores takes about 50 s)."""
    from ..config import load, validate
    from ..runners import RUNNERS

    batch: list[tuple[Job, object, str]] = []

    def flush():
        if batch:
            _run_batch(batch, results, progress)
            batch.clear()

    for job in jobs:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                cfg = load(job.plain)
                validate(cfg)
        except DybwError as error:
            flush()
            progress.done(job, None, f"error: {error}", 0.0)
            continue
        runner = RUNNERS[cfg.runner.name]
        if not hasattr(runner, "run_batch"):
            flush()
            progress.done(job, *_timed_run(job, results))
            continue
        if batch and runner.batch_key(cfg) != runner.batch_key(batch[0][1]):
            flush()
        batch.append((job, cfg, _clamp_notes(caught)))
    flush()


def _run_batch(batch: list[tuple[Job, object, str]], results: Path, progress: _Progress) -> None:
    """Jobs of one :meth:`~dybw.runners.mpi.MpiRunner.batch_key` in one MPI world, a progress line each."""
    from ..runners import RUNNERS

    runner = RUNNERS[batch[0][1].runner.name]
    items = []
    for job, cfg, _ in batch:
        job_dir = job.job_dir(results)
        _write_hydra_files(job, job_dir)
        items.append((cfg, job_dir, job.plain, job.digest))
    finished = 0
    try:
        for (job, _, note), (result, seconds) in zip(batch, runner.run_batch(items)):
            finished += 1
            if isinstance(result, BaseException):
                progress.done(job, None, f"error: {result}", seconds)
            else:
                progress.done(job, result, note, seconds)
    except DybwError as error:  # before the world started (e.g. a dataset file missing): every job fails
        for job, _, _ in batch[finished:]:
            progress.done(job, None, f"error: {error}", 0.0)


def _run_in_pool(jobs: list[Job], results: Path, workers: int, progress: _Progress) -> None:
    """``jobs`` on ``workers`` fresh processes (spawned: TensorFlow must not be forked), in the given order."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_quiet_worker)
    try:
        running = {pool.submit(_timed_run, job, results): job for job in jobs}
        while running:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                job = running.pop(future)
                try:
                    progress.done(job, *future.result())
                except Exception as error:  # noqa: BLE001 - a worker that died fails its job, not the sweep
                    progress.done(job, None, f"error: {type(error).__name__}: {error}", 0.0)
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        for process in list(getattr(pool, "_processes", {}).values()):
            process.terminate()
        raise
    pool.shutdown()
