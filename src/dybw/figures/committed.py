"""Compact results committed beside the figures: what the figures and ``REPRODUCTION.md`` read of every
training job, so both can be rebuilt without training (``python -m dybw.figures --from-committed``).

A training job keeps what only training gives: ``summary.json`` and ``metrics.csv``.  Its clock is not
kept when it can be computed again: the virtual clock never depends on the model (docs/protocol.md), so
the ``timeline.parquet`` and ``links.parquet`` of a virtual-clock job on the iteration engine are the clock
simulated from its config (:func:`.clock_only.simulate`, the very code a training job times itself with), and
its ``topology.json`` is its graph, built from the config.  What cannot be computed is kept: a wall-clock
job's timeline and ``links.parquet`` are measurements (kept with the config its ranks ran and each rank's
host, which the replay of a shaped-links run reads), and an event-engine job (AD-PSGD) has a timeline of its
own.  Clock-only jobs keep nothing: they are simulated again (seconds for all of them).

The folder mirrors ``results/``: ``<experiment>/<job>/<file>``, the files byte for byte as the job wrote
them.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

from ..results import ResultsWriter, read_summary
from .specs import Job

KEPT = ("summary.json", "metrics.csv")
# A measured clock's files, and what its replay reads: the config its ranks ran and each rank's host.
MEASURED = ("timeline.parquet", "links.parquet", ".mpi/job.json", ".mpi/rank-*.json")
EXPERIMENT_FILES = ("links.txt",)  # beside an experiment's jobs: the shaped links `make real-network` ran on


def clock_is_recomputable(job: Job) -> bool:
    """Whether a training job's timeline is its virtual clock, which :func:`rebuild` simulates again."""
    from ..algorithms import ALGORITHMS

    return job.plain["runner"]["clock"] == "virtual" and ALGORITHMS[job.plain["algo"]["name"]].engine == "iteration"


def kept_files(job: Job) -> tuple[str, ...]:
    return KEPT if clock_is_recomputable(job) else KEPT + MEASURED


def export(jobs: list[Job], results: Path, folder: Path) -> int:
    """Copy what :data:`KEPT` (and, for measured clocks, :data:`MEASURED`) of every training job in ``jobs``
    with a completed run of exactly its config into ``folder``, and its experiment's :data:`EXPERIMENT_FILES`;
    returns how many jobs were copied.  A job's
    earlier copy is replaced whole; the copies of jobs not in ``jobs`` are left as they are."""
    copied = 0
    for job in jobs:
        source = job.job_dir(results)
        summary = read_summary(source)
        if job.kind != "train" or not summary or summary.get("status") != "completed":
            continue
        if summary.get("config_hash") != job.digest:
            continue
        target = job.job_dir(folder)
        if target.resolve() == source.resolve():
            continue
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        _copy_kept(job, source, target)
        _copy_experiment_files(source.parent, target.parent)
        copied += 1
    return copied


def _copy_kept(job: Job, source: Path, target: Path) -> None:
    for pattern in kept_files(job):
        for path in sorted(source.glob(pattern)):
            (target / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target / path.relative_to(source))


def _copy_experiment_files(source: Path, target: Path) -> None:
    for name in EXPERIMENT_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, target / name)


def restore(jobs: list[Job], folder: Path, results: Path) -> int:
    """Rebuild, under ``results``, the directory of every training job of ``jobs`` that ``folder`` holds: its
    kept files copied, its topology and (when :func:`clock_is_recomputable`) its timeline computed again from
    its config.  Returns how many jobs were rebuilt."""
    rebuilt = 0
    for job in jobs:
        source = job.job_dir(folder)
        if job.kind != "train" or not (source / "summary.json").is_file():
            continue
        target = job.job_dir(results)
        target.mkdir(parents=True, exist_ok=True)
        _copy_kept(job, source, target)
        _copy_experiment_files(source.parent, target.parent)
        rebuild(job, target)
        rebuilt += 1
    return rebuilt


def rebuild(job: Job, job_dir: Path) -> None:
    """Write ``topology.json`` and, for a virtual-clock job, ``timeline.parquet`` and ``links.parquet`` into
    ``job_dir`` from the job's config alone: the files its training run wrote, to the byte (a test holds this)."""
    from ..config import load, validate
    from .clock_only import simulate

    with warnings.catch_warnings():  # a clamped algo.b was reported when the job ran
        warnings.simplefilter("ignore")
        cfg = load(job.plain)
        graph = validate(cfg)
    writer = ResultsWriter(job_dir)
    writer.write_topology(graph.to_json())
    if clock_is_recomputable(job):
        timeline, _ = simulate(cfg, graph, per_link=True)
        timeline.write(writer)
