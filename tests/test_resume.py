"""Interruptions: a killed job resumes from its checkpoint and ends with the uninterrupted numbers."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd

from helpers import REPO, TINY, run_cli

# A flooded agreement: the clock carries each worker's start offset from one iteration to the next, which
# the checkpoint must hold too.
LONG = TINY + [
    "iterations=3000",
    "eval_every=50",
    "straggler=pareto",
    "algo=cb_dybw",
    "model=mlp",
    "model.hidden=[16]",
    "protocol.agreement=flood",
]


def job_dir_of(root):
    return next((root / "results" / "adhoc").iterdir())


def _interruptible() -> None:
    """SIGINT as a terminal delivers it: a shell that starts the test suite in the background makes its
    children ignore SIGINT, and Python then never raises KeyboardInterrupt (the job would just go on)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(root):
    return subprocess.Popen(
        [sys.executable, str(REPO / "run.py"), *LONG],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_interruptible,
    )


def wait_for_checkpoint(root, after_iteration: int, timeout: float = 240):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with np.load(job_dir_of(root) / "checkpoint.npz") as data:
                if int(data["iteration"]) >= after_iteration:
                    return int(data["iteration"])
        except (OSError, StopIteration, ValueError, KeyError):
            pass
        time.sleep(0.1)
    raise AssertionError("no checkpoint appeared")


def frames(job_dir):
    metrics = pd.read_csv(job_dir / "metrics.csv").drop(columns="wall_seconds")
    return metrics, pd.read_parquet(job_dir / "timeline.parquet")


def test_killed_job_resumes_and_matches_the_uninterrupted_run(tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    whole.mkdir(), cut.mkdir()
    assert run_cli(LONG, cwd=whole, timeout=600).returncode == 0

    process = start(cut)
    wait_for_checkpoint(cut, 500)
    process.kill()  # SIGKILL: no chance to flush anything beyond the last checkpoint
    process.wait()
    with np.load(job_dir_of(cut) / "checkpoint.npz") as data:
        cut_at, spent = int(data["iteration"]), float(data["measured_wall_seconds"])
        evaluation_spent = float(data["measured_evaluation_seconds"])
    resumed = run_cli(LONG + ["resume=true"], cwd=cut, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]

    summary = json.loads((job_dir_of(cut) / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["iterations"] == 3000
    for mine, theirs in zip(frames(job_dir_of(cut)), frames(job_dir_of(whole))):
        pd.testing.assert_frame_equal(mine, theirs, check_exact=True)
    assert not (job_dir_of(cut) / "checkpoint.npz").exists()

    # The measured times go on from the checkpoint's instead of restarting at zero.
    wall = pd.read_csv(job_dir_of(cut) / "metrics.csv").set_index("iteration")["wall_seconds"]
    assert wall.is_monotonic_increasing and wall.loc[cut_at + 50] > spent
    assert summary["wall_seconds"] > wall.iloc[-1] and summary["evaluation_seconds"] > evaluation_spent


def test_sigint_and_sigterm_flush_and_mark_interrupted(tmp_path):
    for sig in (signal.SIGINT, signal.SIGTERM):
        root = tmp_path / sig.name
        root.mkdir()
        process = start(root)
        wait_for_checkpoint(root, 100)
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 128 + sig.value  # the shell's convention: 130 for SIGINT, 143 for SIGTERM
        assert (
            "Traceback" not in stderr
            and f"interrupted by {'SIGTERM' if sig == signal.SIGTERM else 'the user (SIGINT)'}" in stderr
        )
        job_dir = job_dir_of(root)
        summary = json.loads((job_dir / "summary.json").read_text())
        assert summary["status"] == "interrupted" and sig.name in summary["message"]
        metrics = pd.read_csv(job_dir / "metrics.csv")
        timeline = pd.read_parquet(job_dir / "timeline.parquet")
        assert metrics["iteration"].max() >= 100 and timeline["iteration"].max() + 1 >= metrics["iteration"].max()
        assert not list(job_dir.glob(".*.tmp*")) and not list(job_dir.glob(".metrics.csv.*"))


def test_divergence_is_reported_with_iteration_and_worker(tmp_path):
    done = run_cli(TINY + ["algo.eta0=1e30", "model=mlp", "model.hidden=[16]"], cwd=tmp_path, timeout=300)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "diverged at iteration" in lines[0] and "worker" in lines[0], done.stderr[-1500:]
    assert "Traceback" not in done.stderr
    summary = json.loads((job_dir_of(tmp_path) / "summary.json").read_text())
    assert summary["status"] == "diverged" and "iteration" in summary["message"]
