"""The results contract (DESIGN.md §6): what a job writes into its directory, atomically.

``metrics.csv`` (one row per evaluation), ``timeline.parquet`` (one row per worker per iteration),
``topology.json`` and ``summary.json``.  Every file is written to a temporary name in the same
directory and renamed into place, so a reader (or a killed job) never sees half a file.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
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
# bits for any ranks and chunk, so a job completed or checkpointed by one backend is the other's too.
# runner.clock and runner.threads do change the numbers and stay in the hash.
EXECUTION_ONLY_RUNNER_KEYS = {
    "name",
    "ranks",
    "chunk",
    "launcher",
    "timeout_s",
    "startup_timeout_s",
    "fault",
    "fault_rank",
    "fault_iteration",
}


def config_hash(resolved_config: dict) -> str:
    """Short hash of the resolved config minus keys that do not change results (progress, force, runner=...)."""
    ignored = {"progress", "force", "logger", "resume", "data_dir"}  # data files are MD5-verified anyway
    relevant = {k: v for k, v in resolved_config.items() if k not in ignored}
    if isinstance(relevant.get("runner"), dict):
        relevant["runner"] = {k: v for k, v in relevant["runner"].items() if k not in EXECUTION_ONLY_RUNNER_KEYS}
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


def read_checkpoint(job_dir: Path, digest: str) -> dict | None:
    """The checkpoint of a run of the same config in ``job_dir``, or None."""
    try:
        with np.load(Path(job_dir) / CHECKPOINT) as data:
            if str(data["config_hash"]) != digest:
                return None
            return {key: data[key] for key in data.files if key != "config_hash"}
    except (OSError, ValueError, KeyError):
        return None


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
        self.metrics_rows.append({c: row.get(c, float("nan")) for c in METRICS_COLUMNS})
        lines = [",".join(METRICS_COLUMNS)]
        for r in self.metrics_rows:
            lines.append(",".join(_csv_value(r[c]) for c in METRICS_COLUMNS))
        atomic_write_text(self.job_dir / "metrics.csv", "\n".join(lines) + "\n")

    def write_timeline(self, columns: dict[str, np.ndarray]) -> None:
        """``columns`` maps each of TIMELINE_COLUMNS except iteration/worker to a ``[K, N]`` array."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        iterations, workers = columns["start"].shape
        table = {
            "iteration": np.repeat(np.arange(iterations, dtype=np.int64), workers),
            "worker": np.tile(np.arange(workers, dtype=np.int32), iterations),
        }
        for name in TIMELINE_COLUMNS[2:]:
            table[name] = np.ascontiguousarray(columns[name]).reshape(-1)
        _atomic_write(self.job_dir / "timeline.parquet", lambda tmp: pq.write_table(pa.table(table), tmp))

    def write_summary(self, summary: dict) -> None:
        atomic_write_json(self.job_dir / "summary.json", summary)


def _csv_value(value) -> str:
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    value = float(value)
    return repr(value) if math.isfinite(value) else ("nan" if math.isnan(value) else str(value))
