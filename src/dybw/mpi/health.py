"""Heartbeat and error files of the ranks, in ``<job dir>/.mpi/`` (how the parent names a failed rank)."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from ..results import atomic_write_text

HOST = socket.gethostname()


def mpi_dir(job_dir: Path) -> Path:
    return Path(job_dir) / ".mpi"


class Heartbeat:
    """Rank r rewrites ``rank-r.json`` (pid, host, iteration, time) at most every ``interval`` seconds."""

    def __init__(self, job_dir: Path, rank: int, interval: float = 1.0):
        self.path = mpi_dir(job_dir) / f"rank-{rank}.json"
        self.rank = rank
        self.interval = interval
        self._last = 0.0
        self.iteration = -1
        self.beat(-1, force=True)

    def beat(self, iteration: int, force: bool = False, finished: bool = False) -> None:
        self.iteration = iteration
        now = time.time()
        if force or finished or now - self._last >= self.interval:
            self._last = now
            atomic_write_text(
                self.path,
                json.dumps(
                    {
                        "rank": self.rank,
                        "pid": os.getpid(),
                        "host": HOST,
                        "iteration": iteration,
                        "time": now,
                        "finished": finished,
                    }
                ),
            )

    def waiting(self) -> None:
        """Alive, blocked on a peer: keeps beating so that only a truly stuck rank falls silent."""
        self.beat(self.iteration)


def write_error(job_dir: Path, rank: int, message: str) -> None:
    atomic_write_text(mpi_dir(job_dir) / f"rank-{rank}.error", message)


def read_heartbeats(job_dir: Path) -> dict[int, dict]:
    beats = {}
    for path in mpi_dir(job_dir).glob("rank-*.json"):
        try:
            data = json.loads(path.read_text())
            beats[int(data["rank"])] = data
        except (OSError, ValueError, KeyError):
            continue
    return beats


def read_errors(job_dir: Path) -> dict[int, str]:
    errors = {}
    for path in mpi_dir(job_dir).glob("rank-*.error"):
        try:
            errors[int(path.stem.split("-")[1])] = path.read_text().strip()
        except (OSError, ValueError):
            continue
    return errors
