"""Sweeps on Slurm (``hydra/launcher=submitit_slurm``, and ``submitit_local``, which mimics it): what a
job's tasks do when Slurm stops them, and what each way a Slurm job ends means for the dybw job.
``docs/cluster.md`` says the same for users.

**In the job** (:class:`Task`).  ``srun`` starts the job's tasks; they form its MPI world, and task 0
is rank 0, the only one that writes results, logs the job's outcome and talks to W&B.  Slurm stops a job
by signalling every task: SIGTERM for ``scancel``, a time limit, a requeue, a preemption (SIGKILL
follows after the cluster's ``KillWait``, 30 s by default); SIGUSR2 ``signal_delay_s`` before the time
limit.  submitit, which runs the tasks, would ignore SIGTERM; instead:

- **SIGTERM**: rank 0 raises :class:`SlurmStop` where it is, so its run ends as after Ctrl-C: the
  timeline and a summary ``interrupted`` are written at once (every evaluation is in ``metrics.csv``
  already), then rank 0 aborts the MPI world.  The other ranks go on exchanging until rank 0 has
  written the summary, so it never waits for a rank that left; then they leave (a watchdog thread of
  theirs, ``PEER_GRACE_S`` at most).  When rank 0 is inside one long call (a CNN's evaluation, a
  compilation) and cannot act for ``GRACE_S`` seconds, its watchdog writes the summary from the files
  instead and ends the world.
- **SIGUSR2**: with requeues left (``hydra.launcher.max_num_timeout``), rank 0 has submitit requeue the
  job -- with ``resume=true`` added, so that it continues from its last checkpoint -- and stops as on
  SIGTERM.  Without, it is ignored and the job runs until its time limit.  Once the job has returned it
  is ignored too: a task winding down must not die of it (Slurm would say FAILED for a completed job).
- An interrupted task leaves without a result for submitit: Slurm's state says how the job ended.

**In run.py** (:func:`wait_for_jobs`, :func:`job_end`).  The sweep waits for every job and reports each as
it ends, whatever happened to it; a job without a result gets its status from Slurm's state
(:data:`SLURM_ENDS`), which ``summary.json`` is made to agree with.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import Terminated

log = logging.getLogger("dybw.slurm")

GRACE_S = 5.0  # how long rank 0's main thread has to act on SIGTERM before the watchdog does it
PEER_GRACE_S = GRACE_S + 5.0  # how long the other ranks keep rank 0 company after SIGTERM
EXIT_CODE = 128 + signal.SIGTERM
POLL_S = 5.0  # how often run.py asks Slurm (sacct) about the jobs that have not ended

# How each way a job can end without a result maps to its status, and why, in words a user can act on.
# Slurm's job states (sacct), then submitit's local executor's.
SLURM_ENDS = {
    "CANCELLED": ("interrupted", "cancelled (scancel)"),
    "TIMEOUT": ("interrupted", "stopped at its time limit (hydra.launcher.timeout_min)"),
    "PREEMPTED": ("interrupted", "preempted by a job of higher priority"),
    "DEADLINE": ("interrupted", "stopped at its deadline"),
    "NODE_FAIL": ("failed", "its node failed (NODE_FAIL)"),
    "OUT_OF_MEMORY": ("failed", "out of memory (OUT_OF_MEMORY): raise hydra.launcher.mem_gb"),
    "BOOT_FAIL": ("failed", "its node failed to boot (BOOT_FAIL)"),
    "FAILED": ("failed", "a task of its Slurm job failed (FAILED)"),
    "INTERRUPTED": ("interrupted", "stopped by a signal"),  # submitit_local: the process was signalled
}


class SlurmStop(Terminated):
    """Slurm stopped the job (``scancel``, its time limit, a requeue, a preemption): a run ends as after
    SIGTERM, measured results flushed, status ``interrupted``."""


@dataclass
class JobFiles:
    """What is needed to write a job's summary without its run: its directory, config and config hash."""

    job_dir: Path
    cfg: object
    digest: str

    @classmethod
    def of(cls, sweep_config) -> JobFiles:
        """From a job's config as the launcher composes it (Hydra's own node included)."""
        from omegaconf import OmegaConf, open_dict

        from .config import load
        from .results import config_hash

        hydra = sweep_config.hydra
        job_dir = Path(str(hydra.sweep.dir)) / str(hydra.sweep.subdir)
        task = sweep_config.copy()
        with open_dict(task):
            del task["hydra"]  # what the job itself sees (Hydra's run_job removes it the same way)
        plain = OmegaConf.to_container(task, resolve=True)
        return cls(job_dir, load(plain), config_hash(plain))

    def summary(self) -> dict | None:
        """The job's ``summary.json`` if it is one of this config's."""
        from .results import read_summary

        summary = read_summary(self.job_dir)
        return summary if summary and summary.get("config_hash") == self.digest else None

    def stamp(self) -> int | None:
        try:
            return (self.job_dir / "summary.json").stat().st_mtime_ns
        except OSError:
            return None

    def write_from_files(self, status: str, message: str, wall: float) -> dict:
        """A summary from what is on disk: ``metrics.csv`` (every evaluation) and the timeline up to the last
        checkpoint -- for a job whose run could not write its own."""
        from .results import Summary, timeline_from_checkpoint

        timeline_from_checkpoint(self.job_dir, self.digest)
        return Summary.from_metrics_file(self.cfg, self.job_dir, status, message, self.digest, wall).write(self.job_dir)


class Task:
    """One task of a submitit job, as a context around the job's run: its rank, and what it does when
    Slurm stops it (the module's docstring).  ``with Task(files, rank, tasks): ...run the job...``"""

    def __init__(self, files: JobFiles, rank: int, tasks: int):
        self.files, self.rank, self.tasks = files, rank, tasks
        self.started = time.time()
        self.stamp_before = files.stamp()
        self.owner = threading.Lock()  # rank 0: held by whoever ends the job, the main thread or the watchdog
        self.stopping = False  # rank 0's main thread is ending the job
        self.over = False  # the job returned: a signal changes nothing any more

    def __enter__(self) -> Task:
        from .mpi.shm import remove_stale_segments

        # Before MPI starts: a requeued job's world would attach to its first attempt's segment.
        removed = remove_stale_segments()
        if removed:
            log.info("removed shared memory that killed MPI worlds left: %s", ", ".join(removed))
        # submitit's SIGUSR2 handler checkpoints the job (our launcher's checkpoint(): resume=true) and
        # requeues it; it is called from ours.
        self._requeue = signal.getsignal(signal.SIGUSR2)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGUSR2, self._on_time_limit)
        read, write = os.pipe()
        os.set_blocking(write, False)
        # The C-level handler writes each signal's number here at once, even while the main thread is inside
        # a long call (a TensorFlow step, an MPI wait) and cannot run the Python handler.
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        threading.Thread(target=self._watchdog, args=(read,), daemon=True, name="dybw-slurm-watchdog").start()
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        if not isinstance(error, KeyboardInterrupt):
            self.over = True  # returned, or failed in the ordinary way: submitit records it
            # The time limit's SIGUSR2 may still come while the task winds down (TensorFlow and MPI take a
            # second or more to tear down).  Python's shutdown resets a signal handled by a Python function
            # to the default action, which kills the task -- Slurm then says FAILED for a completed job --
            # but it keeps an ignored signal ignored.
            signal.signal(signal.SIGUSR2, signal.SIG_IGN)
            return False
        if self.rank == 0:
            self._ensure_summary(error)
        self._leave()
        return False  # not reached

    # -- rank 0's main thread (Python signal handlers) --

    def _on_sigterm(self, signum, frame) -> None:
        if self.rank == 0:
            self._stop("stopped by Slurm (SIGTERM: scancel, its time limit, a requeue or a preemption)")
        # The other ranks go on, as rank 0 may be waiting for their messages (their watchdog ends them).

    def _on_time_limit(self, signum, frame) -> None:
        from submitit.core.utils import UncompletedJobError

        if self.rank != 0 or self.over or self.stopping or not callable(self._requeue):
            return
        try:
            self._requeue(signum, frame)  # checkpoint, `scontrol requeue`, then sys.exit
        except SystemExit:
            self._stop("requeued by Slurm before its time limit; it continues from its last checkpoint")
        except UncompletedJobError as reason:  # no requeue left: run until the limit
            log.warning("time limit in hydra.launcher.signal_delay_s; not requeued: %s", reason)

    def _stop(self, message: str) -> None:
        if self.over or self.stopping:
            return
        if not self.owner.acquire(blocking=False):
            threading.Event().wait()  # the watchdog is ending the job: wait for it
        self.stopping = True
        log.warning("%s: writing what was measured", message)
        raise SlurmStop(message)

    # -- every rank's watchdog thread --

    def _watchdog(self, read: int) -> None:
        while signal.SIGTERM not in os.read(read, 64):
            pass
        if self.rank != 0:
            # Leave once rank 0 has written the summary (it is done with its peers then), or after
            # PEER_GRACE_S: a step Slurm is already ending ignores rank 0's MPI_Abort.
            deadline = time.monotonic() + PEER_GRACE_S
            while self.files.stamp() == self.stamp_before and time.monotonic() < deadline:
                time.sleep(0.1)
            if not self.over:
                self._leave()
            return
        time.sleep(GRACE_S)
        if self.over or not self.owner.acquire(blocking=False):
            return  # the main thread acted on the signal
        log.warning("SIGTERM: the run did not stop within %g s (inside one long call); writing its files", GRACE_S)
        self._ensure_summary(SlurmStop("stopped by Slurm (SIGTERM) inside a long computation"))
        self._leave()

    # -- leaving --

    def _ensure_summary(self, error: KeyboardInterrupt) -> None:
        """Rank 0: the summary of an interrupted job, unless its run wrote one (or it completed before)."""
        from .errors import interruption

        files = self.files
        if files.stamp() != self.stamp_before or not files.job_dir.is_dir():
            return  # the run wrote its summary (or never reached its directory)
        previous = files.summary()
        if previous is not None and previous.get("status") == "completed":
            return
        files.write_from_files("interrupted", interruption(error), time.time() - self.started)

    def _leave(self) -> None:
        """End this task without a result for submitit (Slurm's state says how the job ended), and the
        MPI world with it."""
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        if self.tasks > 1 and "mpi4py.MPI" in sys.modules:
            from mpi4py import MPI

            if MPI.Is_initialized() and not MPI.Is_finalized():
                MPI.COMM_WORLD.Abort(EXIT_CODE)
        os._exit(EXIT_CODE)


# --------------------------------------------------------------------------------------------------
# run.py's side: every job's end


def wait_for_jobs(submitted: list, poll_s: float = POLL_S):
    """Yield the index of each submitit job as it ends (in that order), asking Slurm about the jobs at
    most every ``poll_s`` seconds (a result file is noticed within a second)."""
    from submitit.slurm.slurm import SlurmJob

    pending = dict(enumerate(submitted))
    asked = 0.0
    while pending:
        if time.monotonic() - asked >= poll_s:
            if any(isinstance(job, SlurmJob) for job in pending.values()):
                SlurmJob.watcher.update()  # one sacct call for every job (a local job is its own process)
            asked = time.monotonic()
        for index, job in list(pending.items()):
            if job.done() and not (isinstance(job, SlurmJob) and not _has_result(job) and _in_queue(job.job_id)):
                del pending[index]
                yield index
        if pending:
            time.sleep(1.0)


# A job in one of these is not over, whatever accounting says of its last attempt.
_QUEUED = {
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESIZING",
    "SUSPENDED",
    "SIGNALING",
    "STAGE_OUT",
}


def _in_queue(job_id: str) -> bool:
    """Whether Slurm's queue still holds the job: requeued after a node failure (accounting shows
    NODE_FAIL meanwhile), or still ending (its tasks writing what they measured)."""
    import subprocess

    try:
        listed = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return any(state in _QUEUED for state in listed.stdout.split())


def job_end(job, files: JobFiles):
    """What ``run.py`` reports for a submitit job that ended: the value its task returned (Hydra's
    ``JobReturn``), else one made from Slurm's state, with ``summary.json`` brought into agreement."""
    from hydra.core.utils import JobReturn, JobStatus

    if not (_state(job) in SLURM_ENDS and not _has_result(job)):  # else results() would wait for one
        try:
            return job.results()[0]
        except Exception:  # noqa: BLE001 - submitit raises its own error types for a job without result
            pass
    return JobReturn(status=JobStatus.COMPLETED, _return_value=_without_result(job, files))


def _state(job) -> str:
    return str(job.state).split()[0].upper()  # "CANCELLED by 0" -> CANCELLED


def _has_result(job) -> bool:
    return all(task.paths.result_pickle.exists() for task in (job._sub_jobs or [job]))


def _without_result(job, files: JobFiles) -> dict:
    state = _state(job)
    summary = files.summary()
    if summary is not None and summary.get("status") == "completed":
        return {**summary, "job_dir": str(files.job_dir)}  # it completed before Slurm stopped it
    status, reason = SLURM_ENDS.get(state, (None, f"Slurm state {state}"))
    if status is None:  # e.g. a local task that exited: its own summary says how
        status = summary.get("status") if summary is not None else "failed"
    if status == "failed":
        reason = f"{reason}{_task_error(job)}"
    if summary is not None and summary.get("status") == status and status != "interrupted":
        reason = summary.get("message") or reason  # the run's own account is the more precise one
    elif files.job_dir.is_dir():
        if summary is not None and summary.get("status") == status:
            summary = _restate(files, summary, reason)
        else:
            summary = files.write_from_files(status, reason, float((summary or {}).get("wall_seconds") or 0.0))
    else:
        reason = f"{reason} before it started"
    name = files.job_dir.name
    if status == "interrupted" and summary is not None:
        return {**summary, "job_dir": str(files.job_dir)}
    return {"status": status, "error": f"{name}: {reason}", "job_dir": str(files.job_dir)}


def _restate(files: JobFiles, summary: dict, reason: str) -> dict:
    """The run's own summary, its message saying what Slurm did (the run only saw a SIGTERM)."""
    from .results import atomic_write_json

    summary = {**summary, "message": reason}
    atomic_write_json(files.job_dir / "summary.json", summary)
    return summary


def _task_error(job) -> str:
    try:
        text = job.stderr() or ""
    except Exception:  # noqa: BLE001 - the log is a nicety; its absence is not an error
        text = ""
    error = task_error(text)
    return f": {error}" if error else ""


def task_error(log: str) -> str:
    """The last error srun or slurmstepd wrote in a job's log about a task (e.g. ``srun: error: node: task 1:
    Killed``), leaving out what followed from it: the step's cancellation, and the other tasks leaving on
    the SIGTERM that ended the step ('' if none)."""
    consequences = (f"exit code {EXIT_CODE}", "CANCELLED AT")
    errors = [
        line.strip()
        for line in log.splitlines()
        if line.startswith(("srun: error:", "slurmstepd")) and "error" in line
        if not any(consequence in line for consequence in consequences)
    ]
    return errors[-1] if errors else ""
