"""The parent side of ``runner=mpi``: launch an MPI world per job (or per batch of jobs), watch it, never
leave orphans.

``run.py`` calls :func:`launch_job` for each Hydra job; the figure pipeline calls :func:`launch_jobs` for
its wall-clock jobs, which then share one world (and one start-up of the ranks).  Each job's resolved
config goes to ``<job dir>/.mpi/job.json``; the world runs ``<runner.launcher> python -m
dybw.mpi_rank <job dir> ...`` (default ``mpiexec -n {ranks}``) in its own process group, its output
(rank 0's progress bar) is forwarded, and the ranks' heartbeats are watched job by job, logging rank 0's log records
(``.mpi/log.jsonl``) as they come.  A rank that raises (its ``.error`` file), dies (its pid vanishes) or
hangs (no heartbeat for ``runner.timeout_s``) fails the job with that rank named; the whole process
group is then killed, and the jobs after it are reported as not run.  Whatever rank 0 measured before
stays in the job directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import Diverged, DybwError, interruption
from ..results import Summary, atomic_write_json, timeline_from_checkpoint
from .health import HOST, LogReader, mpi_dir, read_errors, read_heartbeats
from .shm import remove_stale_segments

POLL_SECONDS = 0.1
EXIT_SECONDS = 30.0  # how long ranks whose jobs are all over may take to exit before they are killed


class RankFailure(DybwError):
    """A rank of an MPI job raised, died or hung."""


def resolve_ranks(cfg) -> int:
    """``runner.ranks`` (0 = min(N, cores)); the wall clock runs one worker per rank."""
    from ..tf_setup import usable_cores

    return ranks_for(cfg.runner.clock, cfg.runner.ranks, cfg.num_workers, usable_cores())


def ranks_for(clock: str, ranks: int, num_workers: int, cores: int) -> int:
    """The ranks of a job given ``runner.clock``, ``runner.ranks`` (0 = auto), N and the cores it may use."""
    if clock == "wall":
        return num_workers
    if ranks > 0:
        return ranks
    return max(1, min(num_workers, cores))


def warn_if_oversubscribed(cfg) -> bool:
    """One warning line when the job's ranks x TensorFlow threads exceed the cores this process may use."""
    import logging

    from ..tf_setup import usable_cores

    ranks, threads, cores = resolve_ranks(cfg), cfg.runner.threads, usable_cores()
    if ranks * threads <= cores:
        return False
    logging.getLogger("dybw").warning(
        "runner=mpi: %d ranks x %d TensorFlow thread(s) = %d > %d usable cores: ranks share cores%s",
        ranks,
        threads,
        ranks * threads,
        cores,
        " (the wall clock then measures the sharing too: scale the delays up with straggler.time_scale)"
        if cfg.runner.clock == "wall"
        else "",
    )
    return True


def find_launcher(program: str) -> str | None:
    """The launcher's executable: first beside this Python (where ``pip install mpich`` puts ``mpiexec``,
    matching the MPI mpi4py uses, even in an environment that is not activated), then on PATH."""
    if "/" not in program:
        beside = Path(sys.executable).parent / program
        if beside.is_file() and os.access(beside, os.X_OK):
            return str(beside)
    return shutil.which(program)


# What every rank runs (by name: the rank's entry point loads the job's config, which this package must not import).
RANK_MODULE = "dybw.mpi_rank"


def launch_command(cfg, *job_dirs: Path) -> list[str]:
    ranks = resolve_ranks(cfg)
    launcher = [part.format(ranks=ranks) for part in cfg.runner.launcher]
    program = find_launcher(launcher[0])
    if program is None:
        raise DybwError(
            f"runner.launcher={cfg.runner.launcher!r} is invalid: {launcher[0]!r} is not on PATH "
            f"(pip install mpich provides mpiexec; runner=local needs no MPI)"
        )
    return [program, *launcher[1:], sys.executable, "-m", RANK_MODULE, *map(str, job_dirs)]


# Lines the launcher restates in its one-line error: a failing rank's own message and MPICH's abort notice.
RESTATED_PREFIXES = (b"dybw rank ", b"Abort(")


class _Forwarder(threading.Thread):
    """Copies the world's output to our stderr (progress bars) and keeps its tail for error messages.

    Whole lines the launcher restates (:data:`RESTATED_PREFIXES`) are left out, so a failing rank
    reaches the user as the launcher's one line; anything else, a partial progress line included, is
    passed on as soon as it arrives."""

    def __init__(self, stream, out=None):
        super().__init__(daemon=True)
        self.stream, self.out = stream, out or sys.stderr.buffer
        self.tail = b""
        self._line = b""  # the start of a line that may turn out to be a restated one

    def run(self):
        for chunk in iter(lambda: self.stream.read1(4096), b""):
            self.tail = (self.tail + chunk)[-8192:]
            self.out.write(self.filter(chunk))
            self.out.flush()
        self.out.write(self._line)
        self.out.flush()

    def filter(self, chunk: bytes) -> bytes:
        *lines, rest = (self._line + chunk).split(b"\n")
        kept = b"".join(line + b"\n" for line in lines if not line.startswith(RESTATED_PREFIXES))
        could_be_restated = any(rest.startswith(p) or p.startswith(rest) for p in RESTATED_PREFIXES)
        self._line = rest if rest and could_be_restated else b""
        return kept if self._line or not rest else kept + rest


class _DeathWatch(threading.Thread):
    """Records the order in which this host's ranks exit, through pidfds (woken by the kernel at once).

    MPICH kills every other rank right after one dies and then reports one of them, not always the
    first; the rank that exited first is the one to name.
    """

    def __init__(self, job_dir: Path, ranks: int):
        super().__init__(daemon=True)
        self.job_dir, self.ranks = job_dir, ranks
        self.order: list[int] = []  # ranks in the order they exited
        self.finished = threading.Event()

    def run(self):
        poller, rank_of = select.poll(), {}
        while not self.finished.is_set():
            if len(rank_of) < self.ranks:
                for rank, beat in read_heartbeats(self.job_dir).items():
                    if beat["host"] == HOST and rank not in rank_of.values():
                        try:
                            fd = os.pidfd_open(beat["pid"])
                        except (OSError, AttributeError):
                            rank_of[-1 - rank] = rank  # gone already or no pidfd: not watched
                            continue
                        rank_of[fd] = rank
                        poller.register(fd, select.POLLIN)
            for fd, _ in poller.poll(50):
                self.order.append(rank_of[fd])
                poller.unregister(fd)
                os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (MPICH's proxies and ranks run in sessions of their own, so killing
    the launcher's process group is not enough)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = [], [pid]
    while frontier:
        below = children.get(frontier.pop(), [])
        found.extend(below)
        frontier.extend(below)
    return found


def _kill_world(process: subprocess.Popen, job_dir: Path) -> None:
    """SIGKILL the launcher, everything it started and every rank that reported a pid on this host."""
    victims = _descendants(process.pid)
    victims += [b["pid"] for b in read_heartbeats(job_dir).values() if b["host"] == HOST]
    for pid in [process.pid, *victims]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)


def _silent_rank(beats: dict, ranks: int, started: float, timeout_s: float, startup_timeout_s: float) -> str | None:
    """The rank silent for too long, if any.

    Each rank's heartbeat says what it is doing.  Importing TensorFlow, loading data and compiling
    (``starting``), or one evaluation (``evaluating``: a single TensorFlow call over the rank's share of
    the data), take minutes on a loaded machine and cannot beat meanwhile: ``startup_timeout_s`` applies.
    An iteration beats at its end, and a rank blocked on a peer keeps beating (:meth:`Heartbeat.waiting`),
    so while ``iterating`` the silent rank is the stuck one: ``timeout_s`` applies.
    """
    now = time.time()
    for rank in range(ranks):
        beat = beats.get(rank)
        if beat is not None and beat.get("finished"):
            continue
        phase = beat.get("phase", "starting") if beat is not None else "starting"
        limit = timeout_s if phase == "iterating" else max(timeout_s, startup_timeout_s)
        silence = now - (beat["time"] if beat is not None else started)
        if silence > limit:
            where = f"while {phase}" + (
                f", last at iteration {beat['iteration']}" if beat and beat["iteration"] >= 0 else ""
            )
            name = "runner.timeout_s" if phase == "iterating" else "runner.startup_timeout_s"
            return f"rank {rank} sent no heartbeat for {silence:.0f} s ({where}); stopped after {name}={limit:g}"
    return None


def _reported_rank(output: str, beats: dict) -> int | None:
    """The rank the MPI launcher blames: MPICH prints ``PID <pid> RUNNING AT <host>`` for a bad
    termination, Open MPI ``rank <r> with PID <pid>``."""
    by_pid = {b["pid"]: r for r, b in beats.items()}
    for match in re.finditer(r"rank (\d+) with PID", output):
        return int(match.group(1))
    for match in re.finditer(r"PID (\d+) RUNNING AT", output):
        if int(match.group(1)) in by_pid:
            return by_pid[int(match.group(1))]
    return None


def _dead_rank(process: subprocess.Popen, beats: dict, output, exits: list[int]) -> str | None:
    """One line naming the rank that died first, when a rank on this host has vanished."""
    dead = [r for r, b in beats.items() if b["host"] == HOST and not b.get("finished") and not _alive(b["pid"])]
    if not dead:
        return None
    first = next((r for r in exits if r in beats and not beats[r].get("finished")), None)
    if first is not None:
        beat = beats[first]
        return f"rank {first} (pid {beat['pid']}) died (last heartbeat at iteration {beat['iteration']})"
    try:  # the launcher reports who terminated badly; give it a moment to say so
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    time.sleep(0.2)
    rank = _reported_rank(output(), beats)
    if rank is None:
        rank = min(dead, key=lambda r: beats[r]["time"])  # the others kept beating while waiting for it
    beat = beats[rank]
    return f"rank {rank} (pid {beat['pid']}) died (last heartbeat at iteration {beat['iteration']})"


def watch(
    process: subprocess.Popen,
    job_dir: Path,
    ranks: int,
    timeout_s: float,
    startup_timeout_s: float,
    output=lambda: "",
    on_poll=lambda: None,
    job_ended=lambda: False,
) -> str | None:
    """Wait for the world to end, or for ``job_ended()`` (the job in ``job_dir`` is over while the world
    goes on with the next one), calling ``on_poll()`` at every poll; returns None on success, else one
    line naming the failed rank."""
    started = time.time()
    exits = _DeathWatch(job_dir, ranks)
    exits.start()
    try:
        return _watch(
            process, job_dir, ranks, timeout_s, startup_timeout_s, output, started, exits.order, on_poll, job_ended
        )
    finally:
        exits.finished.set()


def _watch(
    process, job_dir, ranks, timeout_s, startup_timeout_s, output, started, exits, on_poll, job_ended
) -> str | None:
    failure = None
    while process.poll() is None:
        if job_ended():
            return None
        time.sleep(POLL_SECONDS)
        on_poll()
        errors = read_errors(job_dir)
        if errors:
            rank = min(errors)
            failure = f"rank {rank} failed: {errors[rank]}"
            break
        beats = read_heartbeats(job_dir)
        failure = _dead_rank(process, beats, output, exits) or _silent_rank(
            beats, ranks, started, timeout_s, startup_timeout_s
        )
        if failure:
            break
    # A world's exit code is its worst job's (a diverged one: 3): it fails this job only if it did not end.
    if failure is None and process.returncode != 0 and not job_ended():
        errors = read_errors(job_dir)
        beats = read_heartbeats(job_dir)
        rank = _reported_rank(output(), beats)
        failure = (
            f"rank {min(errors)} failed: {errors[min(errors)]}"
            if errors
            else f"rank {rank} (pid {beats[rank]['pid']}) terminated badly"
            if rank is not None
            else f"the MPI launcher exited with code {process.returncode}"
        )
    return failure


def launch_job(cfg, job_dir: Path, plain: dict, digest: str) -> dict:
    """Run one job as an MPI world; returns the summary rank 0 wrote (or raises what failed it)."""
    ((result, _),) = launch_jobs([(cfg, Path(job_dir), plain, digest)])
    if isinstance(result, BaseException):
        raise result
    return result


def _all_finished(job_dir: Path, ranks: int) -> bool:
    """Every rank's heartbeat in ``job_dir`` says its part of the job is over (rank 0's after its results)."""
    beats = read_heartbeats(job_dir)
    return len(beats) == ranks and all(beat.get("finished") for beat in beats.values())


def launch_jobs(jobs: list[tuple]) -> Iterator[tuple[dict | BaseException, float]]:
    """Run ``jobs`` -- ``(cfg, job_dir, plain, digest)`` each, all with the same ranks, launcher and
    TensorFlow threads -- one after the other in one MPI world; yields, job by job as each ends, the
    summary rank 0 wrote (or the exception that failed the job: :class:`Diverged`, :class:`RankFailure`)
    and the job's seconds.  After a failed rank the world is gone: the jobs after it fail without running.
    Ctrl-C kills the world and is raised."""
    first = jobs[0][0]
    for _, job_dir, plain, digest in jobs:
        folder = mpi_dir(job_dir)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        # parent: the ranks watch this process and exit if it dies (even by SIGKILL), so none is orphaned
        atomic_write_json(
            folder / "job.json", {"config": plain, "digest": digest, "parent": {"pid": os.getpid(), "host": HOST}}
        )
        (job_dir / "summary.json").unlink(missing_ok=True)
    command = launch_command(first, *(job_dir for _, job_dir, _, _ in jobs))
    remove_stale_segments()  # what worlds killed before left in /dev/shm (dybw.mpi.shm)
    ranks = resolve_ranks(first)
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    forwarder = _Forwarder(process.stdout)
    forwarder.start()
    failed_at = current = None
    try:
        for cfg, job_dir, _, digest in jobs:
            started = time.perf_counter()
            if failed_at is not None:
                yield RankFailure(f"not run: the MPI world ended at the job in {failed_at}"), 0.0
                continue
            current = job_dir
            failure = _watch_job(process, forwarder, cfg, job_dir, ranks, digest, started)
            if failure:
                failed_at = job_dir
            yield _result(job_dir, failure), time.perf_counter() - started
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=EXIT_SECONDS)  # every job is over: the ranks only finalise MPI
    finally:
        if process.poll() is None:
            _kill_world(process, current or jobs[0][1])
        forwarder.join(timeout=2)


def _watch_job(process, forwarder, cfg, job_dir: Path, ranks: int, digest: str, started: float) -> str | None:
    """Watch the world while it runs the job in ``job_dir``; None when the job ended, else why it failed
    (the world is then killed, and a summary written if rank 0 left none)."""
    logs = LogReader(job_dir)
    failure = None
    try:
        failure = watch(
            process,
            job_dir,
            ranks,
            cfg.runner.timeout_s,
            cfg.runner.startup_timeout_s,
            lambda: forwarder.tail.decode(errors="replace"),
            on_poll=logs.relay,
            job_ended=lambda: _all_finished(job_dir, ranks),
        )
    except KeyboardInterrupt as error:
        failure = interruption(error)
        raise
    finally:
        if failure:
            _kill_world(process, job_dir)
        logs.relay()  # what rank 0 logged last (the W&B run's path comes at the very end)
        if failure:
            summary = _read(job_dir)
            if summary is None or summary.get("status") == "completed":
                status = "interrupted" if failure.startswith("interrupted") else "failed"
                # Rank 0 died before writing its timeline: the checkpoint of its last evaluation holds it.
                timeline_from_checkpoint(job_dir, digest)
                wall = time.perf_counter() - started
                Summary.from_metrics_file(cfg, job_dir, status, failure, digest, wall).write(job_dir)
    return failure


def _result(job_dir: Path, failure: str | None) -> dict | BaseException:
    """The job's summary, or the exception that says why it has none to give."""
    summary = _read(job_dir)
    if summary is not None and summary.get("status") == "diverged":
        return Diverged(summary.get("message", "diverged"))
    if failure or summary is None:
        return RankFailure(failure or "rank 0 wrote no summary.json")
    return summary


def _read(job_dir: Path) -> dict | None:
    try:
        return json.loads((Path(job_dir) / "summary.json").read_text())
    except (OSError, ValueError):
        return None
