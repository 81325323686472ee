"""``hydra/launcher=submitit_slurm`` against a real Slurm (``tests/cluster/slurm.sh``, started by the
``slurm`` fixture if it is not running): every way Slurm can end a job is reported, one line per job, with
the status ``summary.json`` holds; an interrupted job keeps what it measured and continues with the bits
of an uninterrupted run; a requeued job finishes by itself.

Each job here is a small synthetic task on 2 MPI ranks (the node's 2 CPUs), or 1, running for minutes,
long enough for Slurm to act on it mid-run: a slow node (``runner.fault=slow``: every rank sleeps 20 ms,
or 200 ms, after each iteration) stretches a few thousand iterations, or a few hundred, over minutes on
little CPU, so the tests beside these ones keep the machine.  A loaded machine still slows a job: an
iteration of 21 ms took 33 ms while CI's other tests ran, and starting a job took 25-65 s instead of 10.
docs/cluster.md describes the same behaviour for users.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import REPO, run_config  # noqa: E402

pytestmark = pytest.mark.cluster

SCRIPT = Path(__file__).with_name("slurm.sh")
JOB = ["dataset=synthetic", "model=logreg", "logger=none", "num_workers=4", "progress=false"]


def slow_mpi(pause_s: float, ranks: int = 2) -> list[str]:
    """``ranks`` ranks, each sleeping ``pause_s`` after every iteration (the slow node)."""
    return ["runner=mpi", f"runner.ranks={ranks}", "runner.fault=slow", f"runner.fault_pause_s={pause_s}"]


MPI = slow_mpi(0.02)  # ~21 ms an iteration on an idle machine
SLURM = ["hydra/launcher=submitit_slurm"]
# What the summary and the metrics hold that depends on the machine, not on the computation.
MEASURED = ("wall_seconds", "evaluation_seconds", "target_probe_seconds", "message")


def _answers() -> bool:
    if not shutil.which("sinfo"):
        return False
    done = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    return done.returncode == 0 and any(s.startswith(("idle", "mixed", "alloc")) for s in done.stdout.split())


@pytest.fixture(scope="session")
def slurm():
    """A Slurm that answers: the one running (what .ci/run starts), else one started by the script for
    this session and stopped after it.  A machine where it cannot start fails these tests, loudly."""
    started = False
    if not _answers():
        done = subprocess.run(["bash", str(SCRIPT), "up"], capture_output=True, text=True, timeout=900)
        if done.returncode != 0 or not _answers():
            pytest.fail(f"no Slurm here and `{SCRIPT} up` could not start one:\n{done.stdout}{done.stderr}")
        started = True
    yield
    if started:
        subprocess.run(["bash", str(SCRIPT), "down"], capture_output=True, timeout=120)


def start(args: list[str], cwd: Path) -> subprocess.Popen:
    """``python run.py ARGS`` in the background (it waits for its Slurm jobs)."""
    return subprocess.Popen(
        [sys.executable, str(REPO / "run.py"), *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(process: subprocess.Popen, timeout: float, root: Path) -> tuple[int, str]:
    """run.py's exit code and output; past ``timeout``, a failure showing the end of the output and of
    every job's run.log under ``root`` (what each Slurm attempt did)."""
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        logs = log_tails(root, "**/run.log", 40)
        pytest.fail(f"run.py did not end within {timeout:.0f} s:\n{output[-3000:]}{logs}")
    return process.returncode, output


def log_tails(root: Path, pattern: str, lines: int) -> str:
    """The last ``lines`` of every log matching ``pattern`` under ``root``/results, each under its name."""
    return "".join(
        f"\n--- {str(log.relative_to(root))[-90:]}\n" + "\n".join(log.read_text().splitlines()[-lines:])
        for log in sorted((root / "results").glob(pattern))
    )


def task_logs(root: Path) -> str:
    """The end of every Slurm task's error log under ``root`` (srun says there which task died, and how)."""
    return log_tails(root, "**/.submitit/*/*_log.err", 15)


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(0.5)


def job_dir(root: Path, algo: str) -> Path:
    (found,) = (root / "results" / "adhoc").glob(f"algo={algo},*")
    return found


def evaluations(directory: Path) -> int:
    try:
        return len(pd.read_csv(directory / "metrics.csv"))
    except (OSError, ValueError):
        return 0


def summary(directory: Path) -> dict:
    return json.loads((directory / "summary.json").read_text())


def slurm_job(root: Path, index: int) -> str:
    """The Slurm id of the sweep's job ``index`` (submitit names its folder after it: ``<array>_<index>``
    for a job array, ``<id>`` for a single job)."""
    folders = [p.name for p in (root / "results" / "adhoc" / ".submitit").iterdir() if p.is_dir()]
    arrays = [name for name in folders if name.endswith(f"_{index}")]
    return arrays[0] if arrays else folders[0]


def accounting(job: str) -> list[str]:
    """Every state Slurm recorded for the job, its requeued attempts included, oldest first, once the last
    is final (run.py may report a job whose result is written while Slurm still winds it down)."""

    def states():
        done = subprocess.run(
            ["sacct", "-n", "-X", "-D", "-P", "-j", job, "-o", "State"], capture_output=True, text=True, check=True
        )
        return [line.split()[0] for line in done.stdout.split() if line]

    wait_until(lambda: states() and states()[-1] not in ("RUNNING", "COMPLETING", "PENDING"), 120, f"job {job}'s end")
    return states()


def lines(output: str, word: str) -> list[str]:
    return [line for line in output.splitlines() if f": {word}" in line and "algo=" in line]


def assert_same_run(ours: Path, reference: Path) -> None:
    """The bits of an uninterrupted run: every evaluation, the whole timeline, the summary's numbers."""
    pd.testing.assert_frame_equal(
        pd.read_csv(ours / "metrics.csv").drop(columns="wall_seconds"),
        pd.read_csv(reference / "metrics.csv").drop(columns="wall_seconds"),
        check_exact=True,
    )
    pd.testing.assert_frame_equal(
        pd.read_parquet(ours / "timeline.parquet"), pd.read_parquet(reference / "timeline.parquet")
    )
    numbers = {k: v for k, v in summary(ours).items() if k not in MEASURED}
    assert numbers == {k: v for k, v in summary(reference).items() if k not in MEASURED}


def test_a_cancelled_job_is_reported_interrupted_with_what_it_measured_and_resumes_exactly(slurm, tmp_path):
    size = ["iterations=1200", "eval_every=100"]
    sweep = ["-m", "algo=cb_dybw,cb_full", *JOB, *size, *MPI, *SLURM]
    process = start(sweep, tmp_path)
    results = tmp_path / "results" / "adhoc"
    wait_until(
        lambda: any(results.glob("algo=cb_dybw,*")) and evaluations(job_dir(tmp_path, "cb_dybw")) >= 3,
        240,
        "cb_dybw's third evaluation",
    )
    cut = job_dir(tmp_path, "cb_dybw")
    cancelled_at = time.time()
    subprocess.run(["scancel", slurm_job(tmp_path, 0)], check=True)
    code, output = finish(process, 300, tmp_path)

    # One line per job, whatever ended it; the sweep fails because one job did not complete.
    assert code == 1, output[-4000:]
    (interrupted,), (completed,) = lines(output, "interrupted"), lines(output, "completed")
    assert interrupted.split("]")[-1].strip().startswith(cut.name) and "cancelled (scancel)" in interrupted
    assert "cb_full" in completed
    assert summary(cut)["status"] == "interrupted" and summary(cut)["message"] == "cancelled (scancel)"
    finished = job_dir(tmp_path, "cb_full")
    assert summary(finished)["status"] == "completed"
    # One job, one voice: rank 0's run.log has each line once; rank 1 logs nothing of the job's.
    log = (finished / "run.log").read_text().splitlines()
    assert len(log) == len(set(log)) and sum("completed, test accuracy" in line for line in log) == 1
    rank_1 = (tmp_path / "results" / "adhoc" / ".submitit" / slurm_job(tmp_path, 1)).glob("*_1_log.*")
    assert not any("test accuracy" in path.read_text() for path in rank_1)
    # Flushed at the signal, not at Slurm's SIGKILL 30 s later: the timeline holds every iteration done, up
    # to the last evaluation at least (a timeline's ``iteration`` counts from 0, an evaluation's iterations
    # done: a signal right after the evaluation at 200 leaves rows 0..199; a loaded machine met this).
    flushed = (cut / "timeline.parquet").stat().st_mtime - cancelled_at
    assert flushed < 3, f"the interrupted job's timeline was written {flushed:.1f} s after scancel"
    measured = pd.read_csv(cut / "metrics.csv")
    assert len(measured) >= 3
    assert pd.read_parquet(cut / "timeline.parquet")["iteration"].max() + 1 >= measured["iteration"].max()
    assert summary(cut)["iterations"] >= measured["iteration"].max()
    assert "stopped by Slurm (SIGTERM" in (cut / "run.log").read_text()

    # The same command with resume=true: the cut job continues from its checkpoint, the finished one is
    # skipped, and the result is the uninterrupted run's to the bit.
    code, output = finish(start([*sweep, "resume=true"], tmp_path), 300, tmp_path)
    assert code == 0, output[-4000:]
    assert len(lines(output, "completed")) == 2
    log = (cut / "run.log").read_text()
    assert f"resuming after iteration {measured['iteration'].max()}" in log
    assert "already completed" in (job_dir(tmp_path, "cb_full") / "run.log").read_text()
    reference = tmp_path / "uninterrupted"
    run_config(["algo=cb_dybw", *JOB, *size, "runner=local"], reference)
    assert_same_run(cut, reference)


def test_a_job_at_its_time_limit_is_requeued_and_finishes_with_the_bits_of_an_uninterrupted_run(slurm, tmp_path):
    # Slurm signals SIGUSR2 between 20 and 80 s after the start (a minute's resolution).  The job sleeps
    # 100 s on the slow node (500 iterations, 200 ms after each), so at least one attempt is cut.  Sleeping
    # rather than computing keeps the job's length nearly the same on a loaded machine: with 5 000
    # iterations of 20 ms, the tests beside this one stretched each iteration to 33 ms and each attempt's
    # start to 25-65 s of its 80, and eleven attempts did not finish the job.  An attempt resumes from the
    # last evaluation (a checkpoint every 20 iterations, so little is redone), and enough requeues are
    # allowed for attempts cut after only 20 s.
    size = ["iterations=500", "eval_every=20"]
    limits = ["hydra.launcher.timeout_min=2", "hydra.launcher.signal_delay_s=40", "hydra.launcher.max_num_timeout=10"]
    process = start(["-m", "algo=cb_dybw", *JOB, *size, *slow_mpi(0.2), *SLURM, *limits], tmp_path)
    reference = tmp_path / "uninterrupted"
    run_config(["algo=cb_dybw", *JOB, *size, "runner=local"], reference)  # meanwhile
    code, output = finish(process, 900, tmp_path)

    assert code == 0, output[-4000:]
    (completed,) = lines(output, "completed")
    ours = job_dir(tmp_path, "cb_dybw")
    states = accounting(slurm_job(tmp_path, 0))
    assert states[0] == "REQUEUED" and states[-1] == "COMPLETED", f"{states}{task_logs(tmp_path)}"
    assert "resuming after iteration" in (ours / "run.log").read_text()
    assert_same_run(ours, reference)


def test_a_time_limit_shorter_than_the_job_interrupts_it_with_what_it_measured(slurm, tmp_path):
    # No requeue: the SIGUSR2 before the limit is logged and ignored; at the limit (120 to 180 s after the
    # start) Slurm's SIGTERM interrupts the job.  One task, the world's only rank (an `mpiexec` started inside
    # the task died of the SIGUSR2), as a `runner=local` job is one task with the same signal handling; it
    # sleeps on the slow node: 5 000 iterations of 200 ms are past the limit however fast the machine, at a
    # few CPU-seconds where a computing job took the 150 of its limit.
    size = ["iterations=5000", "eval_every=100"]
    limits = ["hydra.launcher.timeout_min=2", "hydra.launcher.signal_delay_s=40"]
    process = start(["-m", "algo=cb_dybw", *JOB, *size, *slow_mpi(0.2, ranks=1), *SLURM, *limits], tmp_path)
    code, output = finish(process, 600, tmp_path)

    assert code == 1, output[-4000:]
    (interrupted,) = lines(output, "interrupted")
    assert "stopped at its time limit (hydra.launcher.timeout_min)" in interrupted
    ours = job_dir(tmp_path, "cb_dybw")
    assert accounting(slurm_job(tmp_path, 0)) == ["TIMEOUT"], task_logs(tmp_path)
    assert summary(ours)["status"] == "interrupted" and evaluations(ours) >= 2
    log = (ours / "run.log").read_text()
    assert "not requeued" in log and "stopped by Slurm (SIGTERM" in log
    # The summary counts every iteration of the timeline, which reaches the last evaluation at least (equal
    # when SIGTERM lands during an evaluation: the job stops right after it; a loaded machine met this).
    ended = pd.read_parquet(ours / "timeline.parquet")["iteration"].max()
    assert summary(ours)["iterations"] == ended + 1 >= pd.read_csv(ours / "metrics.csv")["iteration"].max()


def test_a_killed_rank_fails_its_job_naming_the_task(slurm, tmp_path):
    process = start(["-m", "algo=cb_dybw", *JOB, "iterations=2000", "eval_every=100", *MPI, *SLURM], tmp_path)
    results = tmp_path / "results" / "adhoc"
    wait_until(
        lambda: any(results.glob("algo=cb_dybw,*")) and evaluations(job_dir(tmp_path, "cb_dybw")) >= 2,
        240,
        "the second evaluation",
    )
    ours = job_dir(tmp_path, "cb_dybw")
    rank_1 = json.loads((ours / ".mpi" / "rank-1.json").read_text())["pid"]
    os.kill(rank_1, signal.SIGKILL)
    code, output = finish(process, 300, tmp_path)

    assert code == 1, output[-4000:]
    (error,) = [line for line in output.splitlines() if line.startswith("error: ")]
    assert (
        error.startswith(f"error: {ours.name}: a task of its Slurm job failed (FAILED)") and "task 1: Killed" in error
    )
    assert accounting(slurm_job(tmp_path, 0)) == ["FAILED"], task_logs(tmp_path)
    assert summary(ours)["status"] == "failed" and "task 1: Killed" in summary(ours)["message"]
    assert evaluations(ours) >= 2  # what was measured before stays


def test_a_job_whose_node_fails_is_requeued_by_slurm_and_continues_from_its_checkpoint(slurm, tmp_path):
    size = ["iterations=1200", "eval_every=100"]
    process = start(["-m", "algo=cb_dybw", *JOB, *size, *MPI, *SLURM], tmp_path)
    results = tmp_path / "results" / "adhoc"
    wait_until(
        lambda: any(results.glob("algo=cb_dybw,*")) and evaluations(job_dir(tmp_path, "cb_dybw")) >= 3,
        240,
        "the third evaluation",
    )
    (node,) = subprocess.run(["sinfo", "-h", "-o", "%N"], capture_output=True, text=True, check=True).stdout.split()
    try:
        # What slurmctld does when a node stops answering, at once.
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=dybw-test"], check=True)
        code, output = finish(process, 300, tmp_path)
    finally:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], capture_output=True)

    assert code == 0, output[-4000:]
    (completed,) = lines(output, "completed")
    ours = job_dir(tmp_path, "cb_dybw")
    assert accounting(slurm_job(tmp_path, 0)) == ["NODE_FAIL", "COMPLETED"], task_logs(tmp_path)
    assert "resuming after iteration" in (ours / "run.log").read_text()
    reference = tmp_path / "uninterrupted"
    run_config(["algo=cb_dybw", *JOB, *size, "runner=local"], reference)
    assert_same_run(ours, reference)
