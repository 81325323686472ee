"""Read jobs' results files (docs/runs.md) into data frames, one row per job / evaluation / iteration.

Every frame carries the job's identifying values: ``spec``, ``sweep``, ``variant``, the swept keys, and
from its composed config ``algo``, ``b``, ``label`` (e.g. ``cb-Static (b=1)``), ``dataset``, ``split``,
``num_workers``, ``eta0``, ``seed``.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from ..algorithms import ALGORITHMS
from ..results import read_summary
from . import style
from .specs import Job


def algo_label(plain: dict) -> str:
    """How figures name a run: its algorithm class's label for its ``algo`` keys (e.g. ``cb-Static (b=1)``)."""
    algorithm = ALGORITHMS[plain["algo"]["name"]]
    label = algorithm.label_for(plain["algo"])
    style.remember_color(label, algorithm.color_for(plain["algo"]))
    return label


def setting_of(plain: dict) -> str:
    """How iterations end: ``lock-step, <agreement>`` or ``free`` (no barrier, no agreement)."""
    protocol = plain["protocol"]
    return "free" if protocol["sync"] == "free" else f"lock-step, {protocol['agreement']}"


def delay_mean(plain: dict, which: str = "control") -> float:
    """The mean delay (seconds) of ``straggler.<which>`` (compute, link or control) of a config."""
    from ..distributions import delay_spec

    return delay_spec(plain["straggler"][which]).mean * plain["straggler"]["time_scale"]


def identity(job: Job) -> dict:
    """The columns that identify a job in every frame."""
    plain = job.plain
    values = {
        "spec": job.spec,
        "kind": job.kind,
        "job": str(job.relative_dir),
        "algo": plain["algo"]["name"],
        "b": plain["algo"].get("b") if plain["algo"]["name"] == "cb_static" else np.nan,
        "label": algo_label(plain),
        "dataset": plain["dataset"]["name"],
        "split": plain["dataset"]["split"],
        "num_workers": plain["num_workers"],
        "eta0": plain["algo"]["eta0"],
        "graph": plain["topology"].get("seed", 0),  # which random graph (topology.seed)
        "seed": plain["seed"],
        "sync": plain["protocol"]["sync"],
        "agreement": plain["protocol"]["agreement"],
        "setting": setting_of(plain),
        "min_neighbors": plain["algo"].get("min_neighbors", np.nan),
        "control_delay": delay_mean(plain, "control"),
        "experiment": job.experiment,
    }
    values.update(job.params)  # variant, sweep and the swept keys (e.g. "algo.eta0")
    return values


def summaries(jobs: list[Job], results: Path) -> pd.DataFrame:
    """One row per job that has a ``summary.json``: identity + summary fields + ``job_dir``."""
    rows = []
    for job in jobs:
        summary = read_summary(job.job_dir(results))
        if summary is None:
            continue
        row = identity(job)
        row.update({f"s_{k}" if k in row else k: v for k, v in summary.items()})
        row["job_dir"] = str(job.job_dir(results))
        row["current"] = summary.get("config_hash") == job.digest
        rows.append(row)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    for column in (
        "mean_iteration_duration",
        "final_test_accuracy",
        "final_train_loss",
        "time_to_target",
        "iterations_to_target",
        "mean_backups",
        "total_time",
    ):
        if column in frame:
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


@lru_cache(maxsize=512)
def _read_csv(path: str, mtime: float) -> pd.DataFrame:
    return pd.read_csv(path)


@lru_cache(maxsize=256)
def _read_parquet(path: str, mtime: float) -> pd.DataFrame:
    return pd.read_parquet(path)


def _cached(reader, path: Path) -> pd.DataFrame | None:
    try:
        return reader(str(path), path.stat().st_mtime).copy()
    except (OSError, ValueError):
        return None


SCHEDULED = ("full", "light")  # metrics.csv's evaluation kinds at a job's regular cadence (dybw.evaluation)


def metrics(jobs: list[Job], results: Path, kinds: tuple[str, ...] = SCHEDULED) -> pd.DataFrame:
    """The jobs' evaluations of ``kinds`` (``metrics.csv``'s ``evaluation`` column; all full in files that
    predate it), with identity columns.  By default the scheduled ones: curves are drawn at a regular
    spacing, the same for every seed, and a probe's iterations are a job's own."""
    frames = []
    for job in jobs:
        frame = _cached(_read_csv, job.job_dir(results) / "metrics.csv")
        if frame is None or frame.empty:
            continue
        if "evaluation" not in frame:
            frame["evaluation"] = "full"
        frame = frame[frame["evaluation"].isin(kinds)].copy()
        for key, value in identity(job).items():
            frame[key] = value
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def timeline(job: Job, results: Path) -> pd.DataFrame | None:
    """The job's ``timeline.parquet`` (one row per worker per iteration)."""
    return _cached(_read_parquet, job.job_dir(results) / "timeline.parquet")


def usage(job: Job, results: Path) -> pd.DataFrame | None:
    """A clock job's ``usage.parquet`` (per directed link, the share of iterations its message was used)."""
    return _cached(_read_parquet, job.job_dir(results) / "usage.parquet")


def durations(frame: pd.DataFrame) -> np.ndarray:
    """``T(k) = E(k) - E(k-1)`` from a timeline, with ``E(k) = max_j finish_j(k)`` and ``E(-1) = 0``."""
    end = frame.groupby("iteration")["finish"].max().sort_index().to_numpy()
    return np.diff(np.concatenate([[0.0], end]))


def backups_matrix(frame: pd.DataFrame, column: str = "backups") -> np.ndarray:
    """``[K, N]`` array of a per-worker column (iteration-major)."""
    return frame.pivot(index="iteration", columns="worker", values=column).sort_index().to_numpy()


def topology(job: Job, results: Path) -> dict | None:
    try:
        return json.loads((job.job_dir(results) / "topology.json").read_text())
    except (OSError, ValueError):
        return None
