"""Files of the ranks in ``<job dir>/.mpi/``: heartbeats and errors (how the parent names a failed rank)
and rank 0's log records (what the parent logs for it)."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from ..results import atomic_write_text

HOST = socket.gethostname()


def mpi_dir(job_dir: Path) -> Path:
    return Path(job_dir) / ".mpi"


class Heartbeat:
    """Rank r rewrites ``rank-r.json`` (pid, host, iteration, phase, time) at most every ``interval``
    seconds, and at once when its phase (``starting``, ``evaluating``, ``iterating``: the launcher allows
    each its own silence) changes."""

    def __init__(self, job_dir: Path, rank: int, interval: float = 1.0):
        self.path = mpi_dir(job_dir) / f"rank-{rank}.json"
        self.rank = rank
        self.interval = interval
        self._last = 0.0
        self.iteration = -1
        self.phase = "starting"
        self.beat(-1, force=True)

    def beat(self, iteration: int, force: bool = False, finished: bool = False, phase: str | None = None) -> None:
        self.iteration = iteration
        if phase is not None and phase != self.phase:
            self.phase, force = phase, True
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
                        "phase": self.phase,
                        "time": now,
                        "finished": finished,
                    }
                ),
            )

    def waiting(self) -> None:
        """Alive, blocked on a peer: keeps beating so that only a truly stuck rank falls silent."""
        self.beat(self.iteration)

    @contextmanager
    def evaluating(self):
        """Around an evaluation: one call into TensorFlow over the rank's share of the data (a minute and
        more for a CNN on a loaded machine), with no chance to beat until it returns.  The phase before it
        comes back after it, so a rank stuck in the next iteration is judged as one iterating."""
        before = self.phase
        self.beat(self.iteration, phase="evaluating")
        try:
            yield
        finally:
            self.beat(self.iteration, phase=before)


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


LOG_FILE = "log.jsonl"


class LogRelay(logging.Handler):
    """Rank 0's ``dybw`` log records, one JSON line each in ``.mpi/log.jsonl``.

    A rank has no Hydra logging of its own: without this its info lines (where the W&B offline run went,
    "resuming after iteration k") would go nowhere.  The launching ``run.py`` reads the file while it
    watches the world and logs each record as its own (:class:`LogReader`): console and ``run.log``,
    as under ``runner=local``.  A file, not the forwarded output stream, so that a record never lands
    in the middle of a progress bar's line.
    """

    def __init__(self, job_dir: Path):
        super().__init__(logging.INFO)
        self.path = mpi_dir(job_dir) / LOG_FILE

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = json.dumps({"name": record.name, "level": record.levelno, "message": self.format(record)})
            with open(self.path, "a", encoding="utf-8") as file:
                file.write(line + "\n")
        except Exception:  # noqa: BLE001 - logging never fails the job
            self.handleError(record)

    @classmethod
    def install(cls, job_dir: Path) -> LogRelay:
        """Send the ``dybw`` loggers' records (INFO and up) of this process to the relay file only."""
        handler = cls(job_dir)
        logger = logging.getLogger("dybw")
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        return handler

    def uninstall(self) -> None:
        """Stop relaying (the next job of the world relays into its own directory)."""
        logging.getLogger("dybw").removeHandler(self)


class LogReader:
    """The parent side of :class:`LogRelay`: logs every complete record not yet logged."""

    def __init__(self, job_dir: Path):
        self.path = mpi_dir(job_dir) / LOG_FILE
        self.offset = 0

    def relay(self) -> None:
        try:
            with open(self.path, "rb") as file:
                file.seek(self.offset)
                data = file.read()
        except OSError:
            return
        complete = data[: data.rfind(b"\n") + 1]  # a line being written is taken next time
        self.offset += len(complete)
        for line in complete.splitlines():
            try:
                record = json.loads(line)
                logging.getLogger(record["name"]).log(int(record["level"]), "%s", record["message"])
            except (ValueError, KeyError, TypeError):
                continue
