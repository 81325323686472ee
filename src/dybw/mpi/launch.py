"""The parent side of ``runner=mpi``: launch one MPI world per job, watch it, never leave orphans.

``run.py`` calls :func:`launch_job` for each Hydra job.  It writes ``<job dir>/.mpi/job.json`` (the
resolved config), runs ``<runner.launcher> python -m dybw.mpi <job dir>`` (default
``mpiexec -n {ranks}``) in its own process group, forwards its output (rank 0's progress bar), and
watches the ranks' heartbeats.  A rank that raises (its ``.error`` file), dies (its pid vanishes) or
hangs (no heartbeat for ``runner.timeout_s``) fails the job with that rank named; the whole process
group is then killed.  Whatever rank 0 measured before stays in the job directory.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..errors import DybwError
from ..results import atomic_write_json
from .health import HOST, mpi_dir, read_errors, read_heartbeats

POLL_SECONDS = 0.1


class RankFailure(DybwError):
    """A rank of an MPI job raised, died or hung."""


def resolve_ranks(cfg) -> int:
    """``runner.ranks`` (0 = min(N, cores)); the wall clock runs one worker per rank."""
    if cfg.runner.clock == "wall":
        return cfg.num_workers
    if cfg.runner.ranks > 0:
        return cfg.runner.ranks
    return max(1, min(cfg.num_workers, os.cpu_count() or 1))


def launch_command(cfg, job_dir: Path) -> list[str]:
    ranks = resolve_ranks(cfg)
    launcher = [part.format(ranks=ranks) for part in cfg.runner.launcher]
    if launcher and shutil.which(launcher[0]) is None:
        raise DybwError(f"runner.launcher={cfg.runner.launcher!r} is invalid: {launcher[0]!r} is not on PATH "
                        f"(pip install mpich provides mpiexec)")
    return [*launcher, sys.executable, "-m", "dybw.mpi", str(job_dir)]


class _Forwarder(threading.Thread):
    """Copies the world's stderr to ours (progress bars) and keeps its tail for error messages."""

    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream = stream
        self.tail = b""

    def run(self):
        for chunk in iter(lambda: self.stream.read1(4096), b""):
            sys.stderr.buffer.write(chunk)
            sys.stderr.buffer.flush()
            self.tail = (self.tail + chunk)[-8192:]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_group(process: subprocess.Popen) -> None:
    """SIGTERM then SIGKILL the launcher's whole process group (mpiexec, proxies and ranks)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=3)
        except subprocess.TimeoutExpired:
            continue


def _kill_ranks(job_dir: Path) -> None:
    """Ranks that a launcher started in another process group (same host only)."""
    for beat in read_heartbeats(job_dir).values():
        if _alive(beat["pid"]):
            try:
                os.kill(beat["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass


def watch(process: subprocess.Popen, job_dir: Path, ranks: int, timeout_s: float) -> str | None:
    """Wait for the world to end; returns None on success, else one line naming the failed rank."""
    started = time.time()
    pids: dict[int, int] = {}
    failure = None
    while process.poll() is None:
        time.sleep(POLL_SECONDS)
        errors = read_errors(job_dir)
        if errors:
            rank = min(errors)
            failure = f"rank {rank} failed: {errors[rank]}"
            break
        beats = read_heartbeats(job_dir)
        for rank, beat in beats.items():
            pids.setdefault(rank, beat["pid"])
            if beat["host"] == HOST and not beat.get("finished") and not _alive(beat["pid"]) \
                    and process.poll() is None:
                failure = f"rank {rank} (pid {beat['pid']}) died during iteration {beat['iteration'] + 1}"
                break
        if failure:
            break
        now = time.time()
        stale = {r: now - beats[r]["time"] if r in beats else now - started
                 for r in range(ranks) if not beats.get(r, {}).get("finished")}
        if not stale:
            continue
        rank, silence = max(stale.items(), key=lambda item: item[1])
        if silence > timeout_s:
            where = f"at iteration {beats[rank]['iteration']}" if rank in beats else "before starting"
            failure = (f"rank {rank} sent no heartbeat for {silence:.0f} s ({where}); "
                       f"stopped after runner.timeout_s={timeout_s:g}")
            break
    if failure is None and process.returncode != 0:
        errors = read_errors(job_dir)
        failure = (f"rank {min(errors)} failed: {errors[min(errors)]}" if errors
                   else f"the MPI launcher exited with code {process.returncode}")
    return failure


def launch_job(cfg, job_dir: Path, plain: dict, digest: str) -> dict:
    """Run one job as an MPI world; returns the summary rank 0 wrote (or a 'failed' one)."""
    from ..job import failed_summary

    job_dir = Path(job_dir)
    folder = mpi_dir(job_dir)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    atomic_write_json(folder / "job.json", {"config": plain, "digest": digest})
    (job_dir / "summary.json").unlink(missing_ok=True)
    command = launch_command(cfg, job_dir)
    ranks = resolve_ranks(cfg)
    started = time.perf_counter()
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    forwarder = _Forwarder(process.stderr)
    forwarder.start()
    failure = None
    try:
        failure = watch(process, job_dir, ranks, cfg.runner.timeout_s)
    except KeyboardInterrupt:
        failure = "interrupted by the user (SIGINT)"
        raise
    finally:
        _kill_group(process)
        _kill_ranks(job_dir)
        forwarder.join(timeout=2)
        if failure:
            summary = _read(job_dir)
            if summary is None or summary.get("status") == "completed":
                status = "interrupted" if failure.startswith("interrupted") else "failed"
                failed_summary(cfg, job_dir, status, failure, digest, time.perf_counter() - started)
    summary = _read(job_dir)
    if summary is not None and summary.get("status") == "diverged":
        from ..engine import Diverged

        raise Diverged(summary.get("message", "diverged"))
    if failure or summary is None:
        raise RankFailure(failure or "rank 0 wrote no summary.json")
    return summary


def _read(job_dir: Path) -> dict | None:
    try:
        return json.loads((Path(job_dir) / "summary.json").read_text())
    except (OSError, ValueError):
        return None
