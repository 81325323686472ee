"""The results contract: what a job writes into its directory, atomically (docs/runs.md: what a run writes).

``metrics.csv`` (one row per evaluation), ``timeline.parquet`` (one row per worker per iteration, or per
local step for an asynchronous algorithm), ``links.parquet`` (one row per directed link per iteration: who
used whom), ``topology.json`` and ``summary.json``.  Every file is written to a temporary name in the same
directory and renamed into place, so a reader (or a killed job) never sees half a file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

METRICS_COLUMNS = (
    "iteration",
    "time",
    "lr",
    "train_loss",
    "test_loss",
    "test_accuracy",
    "local_test_accuracy",
    "consensus_distance",
    "mean_iteration_duration",
    "mean_backups",
    "wall_seconds",
    "evaluation",
)
TIMELINE_COLUMNS = ("iteration", "worker", "start", "ready", "stop", "finish", "used", "backups")
STATUSES = ("completed", "failed", "diverged", "interrupted")


def _atomic_write(path: Path, write) -> None:
    """Run ``write(tmp_path)`` then rename the temporary file onto ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o644)  # mkstemp makes files private; results are meant to be read by others
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    def write(tmp):
        with open(tmp, "w") as handle:
            handle.write(text)

    _atomic_write(path, write)


def _jsonable(value):
    """JSON has no NaN/inf: write them as null so every reader parses the file."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def atomic_write_json(path: Path, data: dict) -> None:
    atomic_write_text(path, json.dumps(_jsonable(data), indent=2, sort_keys=False) + "\n")


# How a job is executed, not what it computes: runner=local and runner=mpi (virtual clock) give the same
# bits for any ranks and chunk, so a job completed or checkpointed by one runner is the other's too.  Of
# the runner's keys only runner.clock and runner.threads change the numbers (runners.NUMERIC_RUNNER_KEYS).
NUMERIC_RUNNER_KEYS = ("clock", "threads")


def config_hash(resolved_config: dict) -> str:
    """Short hash of the resolved config minus what does not change results (progress, force, logger, which
    runner and how it launches, the plugins' names -- what they register is named by the config)."""
    ignored = {"progress", "force", "logger", "resume", "data_dir", "plugins"}  # data files are MD5-verified
    relevant = {k: v for k, v in resolved_config.items() if k not in ignored}
    if isinstance(relevant.get("runner"), dict):
        relevant["runner"] = {k: v for k, v in relevant["runner"].items() if k in NUMERIC_RUNNER_KEYS}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True, default=str).encode()).hexdigest()[:16]


MAX_DIRNAME = 120  # well below the 255-byte file-name limit, with room for Hydra's own suffixes


def job_dirname(overrides: str) -> str:
    """A job's directory name from Hydra's sorted ``key=value,...`` overrides.

    Empty (a plain ``python run.py``) gives ``default``, so the job never writes into the sweep dir; a
    name too long for the file system keeps its readable start and ends with a hash of the whole.
    """
    if not overrides:
        return "default"
    if len(overrides) <= MAX_DIRNAME:
        return overrides
    digest = hashlib.sha256(overrides.encode()).hexdigest()[:12]
    return f"{overrides[: MAX_DIRNAME - 13]}~{digest}"


def first_reaching(rows: list[dict], target_accuracy: float, target_loss: float | None):
    """``(time, iteration, resolution)`` of the first row (``metrics.csv``, in iteration order) that reaches the
    target (:func:`dybw.evaluation.reaches_target`); ``(None, None, None)`` if none does.

    ``resolution`` is the number of iterations between that row and the row before it: the first iteration
    reaching the target lies in ``(iteration - resolution, iteration]``, so 1 is exact (also at iteration 0)
    -- the same, unless the target was reached and lost between two earlier rows, which no row saw.
    """
    from .evaluation import reaches_target

    previous = None
    for row in rows:
        if reaches_target(row, target_accuracy, target_loss):
            resolution = 1 if previous is None else int(row["iteration"]) - int(previous["iteration"])
            return row["time"], row["iteration"], resolution
        previous = row
    return None, None, None


# summary.json's keys this machine's speed sets (wall seconds): they differ between two runs of one config,
# where every other key is the same.
MEASURED_SUMMARY_KEYS = ("wall_seconds", "evaluation_seconds", "target_probe_seconds")


@dataclass
class Summary:
    """``summary.json``: how a job ended and its headline numbers (one schema for every writer)."""

    status: str  # one of STATUSES
    message: str
    algo: str
    dataset: str | None
    num_workers: int
    iterations: int  # iterations done
    total_time: float  # E(K-1): virtual (or measured) seconds
    mean_iteration_duration: float | None  # E(K-1) / K
    final_train_loss: float | None
    final_test_accuracy: float | None
    best_test_accuracy: float | None
    target_accuracy: float | None
    time_to_target: float | None
    iterations_to_target: int | None
    mean_backups: float | None
    wall_seconds: float
    seed: int
    experiment: str
    config_hash: str
    # How iterations_to_target was resolved (results.first_reaching): 1 = to the iteration.
    target_resolution: int | None = None
    target_probes: int | None = None  # probe rows in metrics.csv
    # What evaluating cost (wall seconds, engine.EvaluationCost): the scheduled evaluations, and resolving
    # the time to target (the replayed iterations, how many, and their probes).
    evaluation_seconds: float | None = None
    target_probe_seconds: float | None = None
    target_replayed_iterations: int | None = None
    mode: str = "train"  # train | clock (a clock-only job: no model, the training fields are null)
    mean_used: float | None = None  # clock-only jobs: mean |S_j(k)|

    @classmethod
    def from_rows(cls, cfg, status: str, message: str, rows: list[dict], timeline, wall: float, digest: str, cost=None):
        """From the evaluation rows (``metrics.csv``), the engine's timeline and evaluation cost
        (``engine.EvaluationCost``; None when there is none)."""
        scheduled = [r for r in rows if r.get("evaluation") != "probe"]
        last = scheduled[-1] if scheduled else {}
        # The last training loss measured: a completed run's last evaluation is full; one cut off may end light.
        losses = [r["train_loss"] for r in scheduled if not math.isnan(r.get("train_loss", math.nan))]
        finite = [r["test_accuracy"] for r in scheduled if math.isfinite(r["test_accuracy"])]
        time_to_target, iterations_to_target, resolution = first_reaching(rows, cfg.target_accuracy, cfg.target_loss)
        done = timeline.done if timeline is not None else 0
        costs = dataclasses.asdict(cost) if cost is not None else {}
        return cls(
            status=status,
            message=message,
            algo=cfg.algo.name,
            dataset=cfg.dataset.name,
            num_workers=cfg.num_workers,
            iterations=done,
            total_time=float(timeline.end[done - 1]) if done else 0.0,
            mean_iteration_duration=timeline.mean_duration() if timeline is not None else None,
            final_train_loss=losses[-1] if losses else last.get("train_loss"),
            final_test_accuracy=last.get("test_accuracy"),
            best_test_accuracy=max(finite) if finite else None,
            target_accuracy=cfg.target_accuracy,
            time_to_target=time_to_target,
            iterations_to_target=iterations_to_target,
            mean_backups=timeline.mean_backups() if timeline is not None else None,
            wall_seconds=wall,
            seed=cfg.seed,
            experiment=cfg.experiment_name,
            config_hash=digest,
            target_resolution=resolution,
            target_probes=sum(r.get("evaluation") == "probe" for r in rows),
            **costs,
        )

    @classmethod
    def from_metrics_file(cls, cfg, job_dir: Path, status: str, message: str, digest: str, wall: float):
        """A job that ended badly outside its engine (a dead MPI rank, missing data): from ``metrics.csv``."""
        import pandas as pd

        try:
            rows = pd.read_csv(Path(job_dir) / "metrics.csv").to_dict("records")
        except (OSError, ValueError):
            rows = []
        summary = cls.from_rows(cfg, status, message, rows, None, wall, digest)
        if rows:
            last = rows[-1]
            summary.iterations = int(last["iteration"])
            summary.total_time = last["time"]
            summary.mean_iteration_duration = last["mean_iteration_duration"]
            summary.mean_backups = last["mean_backups"]
        return summary

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        if self.mode == "train":
            del data["mode"], data["mean_used"]
        return data

    def write(self, job_dir: Path) -> dict:
        data = self.to_dict()
        atomic_write_json(Path(job_dir) / "summary.json", data)
        return data


def read_summary(job_dir: Path) -> dict | None:
    """The job's ``summary.json`` or None when absent or unreadable."""
    try:
        return json.loads((Path(job_dir) / "summary.json").read_text())
    except (OSError, ValueError):
        return None


CHECKPOINT = "checkpoint.npz"


def write_checkpoint(job_dir: Path, state: dict, digest: str) -> None:
    """``checkpoint.npz``: the engine's state after an evaluation, tagged with the config hash."""

    def write(tmp):
        with open(tmp, "wb") as handle:
            np.savez(handle, config_hash=np.array(digest), **state)

    _atomic_write(Path(job_dir) / CHECKPOINT, write)


def completed_before(job_dir: Path, digest: str) -> dict | None:
    """The summary of a completed run of the same config in ``job_dir``, if there is one."""
    previous = read_summary(job_dir)
    if previous and previous.get("status") == "completed" and previous.get("config_hash") == digest:
        return previous
    return None


def read_checkpoint(job_dir: Path, digest: str) -> dict | None:
    """The checkpoint of a run of the same config in ``job_dir``, or None."""
    try:
        with np.load(Path(job_dir) / CHECKPOINT) as data:
            if str(data["config_hash"]) != digest:
                return None
            return {key: data[key] for key in data.files if key != "config_hash"}
    except (OSError, ValueError, KeyError):
        return None


def timeline_from_checkpoint(job_dir: Path, digest: str) -> None:
    """Write ``timeline.parquet`` from the last checkpoint when the job died before writing a newer one.

    Under ``runner=mpi`` a killed or aborting rank takes rank 0 down before it can write its timeline;
    the checkpoint rank 0 wrote at the last evaluation holds the timeline up to the iteration
    ``metrics.csv`` ends at, so what was measured is kept."""
    job_dir = Path(job_dir)
    checkpoint, timeline = job_dir / CHECKPOINT, job_dir / "timeline.parquet"
    if not checkpoint.exists() or (timeline.exists() and timeline.stat().st_mtime >= checkpoint.stat().st_mtime):
        return
    state = read_checkpoint(job_dir, digest)
    if state is not None:
        columns = {key[len("timeline_") :]: value for key, value in state.items() if key.startswith("timeline_")}
        columns.pop("end", None)
        ResultsWriter(job_dir).write_timeline(columns)


class ResultsWriter:
    """Writes one job's result files into ``job_dir``."""

    def __init__(self, job_dir: Path):
        self.job_dir = Path(job_dir)
        self.job_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_rows: list[dict] = []

    def restore_metrics(self, up_to_iteration: int) -> None:
        """Keep the rows of ``metrics.csv`` up to a checkpoint's iteration (a resumed run appends after)."""
        import pandas as pd

        frame = pd.read_csv(self.job_dir / "metrics.csv")
        self.metrics_rows = frame[frame["iteration"] <= up_to_iteration].to_dict("records")

    def write_topology(self, graph_json: dict) -> None:
        atomic_write_json(self.job_dir / "topology.json", graph_json)

    def add_metrics(self, row: dict) -> None:
        """Append an evaluation row and rewrite ``metrics.csv`` (small: one row per evaluation)."""
        self.metrics_rows.append({c: row.get(c, float("nan")) for c in METRICS_COLUMNS})  # NaN: not computed
        lines = [",".join(METRICS_COLUMNS)]
        for r in self.metrics_rows:
            lines.append(",".join(_csv_value(r[c]) for c in METRICS_COLUMNS))
        atomic_write_text(self.job_dir / "metrics.csv", "\n".join(lines) + "\n")

    def write_timeline(self, columns: dict[str, np.ndarray]) -> None:
        """``timeline.parquet`` from one of two layouts:

        - iterations: each of TIMELINE_COLUMNS except iteration/worker a ``[K, N]`` array (row (k, j)); any
          other ``[K, N]`` column (a backend's own measurements) follows them;
        - steps: every column a 1-D array, one entry per row, ``iteration`` and ``worker`` included (the
          event engine: a worker's own step index, workers with different step counts); columns beyond
          TIMELINE_COLUMNS (e.g. ``partner``, ``average``) follow them.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        if np.ndim(columns["start"]) == 1:
            table = {name: np.asarray(columns[name]) for name in TIMELINE_COLUMNS}
            table.update({name: np.asarray(values) for name, values in columns.items() if name not in table})
        else:
            iterations, workers = columns["start"].shape
            table = {
                "iteration": np.repeat(np.arange(iterations, dtype=np.int64), workers),
                "worker": np.tile(np.arange(workers, dtype=np.int32), iterations),
            }
            # any other [K, N] column (a backend's own measurements) follows them
            extra = (n for n, v in columns.items() if n not in TIMELINE_COLUMNS and np.ndim(v) == 2)
            for name in [*TIMELINE_COLUMNS[2:], *extra]:
                table[name] = np.ascontiguousarray(columns[name]).reshape(-1)
        _atomic_write(self.job_dir / "timeline.parquet", lambda tmp: pq.write_table(pa.table(table), tmp))

    def write_links(self, links: np.ndarray, columns: dict[str, np.ndarray]) -> None:
        """``links.parquet``: one row per iteration and directed link ``src -> dst``; ``columns`` are
        ``[K, L]`` arrays, ``used`` (``src`` is in ``dst``'s used set that iteration) first."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        iterations = len(columns["used"])
        count = len(links)
        table = {
            "iteration": np.repeat(np.arange(iterations, dtype=np.int64), count),
            "src": np.tile(links[:, 0].astype(np.int32), iterations),
            "dst": np.tile(links[:, 1].astype(np.int32), iterations),
        }
        for name, values in columns.items():
            table[name] = np.ascontiguousarray(values).reshape(-1)
        _atomic_write(self.job_dir / "links.parquet", lambda tmp: pq.write_table(pa.table(table), tmp))

    def write_summary(self, summary: dict) -> None:
        atomic_write_json(self.job_dir / "summary.json", summary)


def _csv_value(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    value = float(value)
    return repr(value) if math.isfinite(value) else ("nan" if math.isnan(value) else str(value))
