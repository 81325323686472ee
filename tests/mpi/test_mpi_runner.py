"""The MPI runner when a rank fails or hangs, when a job resumes, and in worlds started by hand (real mpiexec)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

from dybw.mpi.health import read_heartbeats

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from helpers import SLOW_DELAYS, TINY, run_cli, run_config, run_in_shared_worlds  # noqa: E402

SMALL = TINY + [
    "num_workers=8",
    "iterations=12",
    "eval_every=4",
    "straggler=shifted_exp",
    "model=mlp",
    "model.hidden=[16]",
    "topology=erdos_renyi",
    "topology.p=0.5",
]


def metrics(job_dir):
    return pd.read_csv(job_dir / "metrics.csv").drop(columns="wall_seconds")


def test_a_long_wall_clock_run_holds_only_the_current_and_next_iterations_messages(tmp_path):
    """2000 lock-step iterations with late messages (cb-Static leaves its slowest neighbour's for later, and
    under CTA it often arrives while the worker computes): the inbox never holds an iteration other than the
    current one and the next, i.e. at most 2 d_j messages, and late messages do arrive (and are dropped)."""
    fast = ["straggler=shifted_exp", "straggler.time_scale=0.1", "algo=cb_static", "algo.update=cta"]
    overrides = TINY + fast + ["num_workers=4", "topology=complete", "iterations=2000", "eval_every=1000"]
    summary = run_config(overrides + ["runner=mpi", "runner.clock=wall"], tmp_path / "wall")
    assert summary["status"] == "completed"
    timeline = pd.read_parquet(tmp_path / "wall/timeline.parquet")
    assert len(timeline) == 2000 * 4
    assert timeline["inbox_ahead"].max() <= 1
    assert timeline["inbox_messages"].max() <= 2 * 3
    links = pd.read_parquet(tmp_path / "wall/links.parquet").merge(
        timeline[["iteration", "worker", "stop"]], left_on=["iteration", "dst"], right_on=["iteration", "worker"]
    )
    late = links[~links["used"] & (links["arrival"] > links["stop"])]
    assert len(late) > 100  # the drop path is exercised


def _batch(tmp_path, jobs: dict[str, list[str]]) -> list:
    """Run the named wall-clock jobs (4 ranks) in one MPI world; returns what each yielded, in order."""
    common = TINY + SLOW_DELAYS + ["num_workers=4", "topology=complete", "runner=mpi", "runner.clock=wall"]
    named = {tmp_path / name: common + overrides for name, overrides in jobs.items()}
    results = run_in_shared_worlds(named)
    return [results[job_dir] for job_dir in named]


def test_wall_clock_jobs_in_one_world_each_write_their_own_results(tmp_path):
    """Two jobs, one world (the ranks start once: the same pids ran both), each with its own complete
    results; a job that diverges is recorded as such and the next one still runs."""
    from dybw.errors import Diverged

    results = _batch(
        tmp_path,
        {
            "first": ["algo=cb_dybw", "iterations=12", "eval_every=12"],
            "diverges": [
                "algo=cb_full",
                "iterations=12",
                "eval_every=4",
                "algo.eta0=1e30",
                "model=mlp",
                "model.hidden=[16]",
            ],
            "third": ["algo=cb_static", "algo.update=cta", "iterations=8", "eval_every=8"],
        },
    )
    assert isinstance(results[1], Diverged)
    for name, result, iterations in (("first", results[0], 12), ("third", results[2], 8)):
        assert result["status"] == "completed", result
        assert len(pd.read_parquet(tmp_path / name / "timeline.parquet")) == iterations * 4
        assert list(pd.read_csv(tmp_path / name / "metrics.csv")["iteration"]) == [0, iterations]
    pids = [{beat["pid"] for beat in read_heartbeats(tmp_path / name).values()} for name in ("first", "third")]
    assert len(pids[0]) == 4 and pids[0] == pids[1]
    assert _no_rank_left(tmp_path / "first")  # the world was started for the first job


def test_a_failed_rank_in_a_shared_world_fails_its_job_and_the_jobs_after_it(tmp_path):
    from dybw.mpi.launch import RankFailure

    fault = ["runner.fault=raise", "runner.fault_rank=2", "runner.fault_iteration=3"]
    results = _batch(
        tmp_path,
        {
            "ok": ["iterations=6", "eval_every=6"],
            "faulty": ["iterations=6", "eval_every=2", *fault],
            "after": ["iterations=6", "eval_every=6"],
        },
    )
    assert results[0]["status"] == "completed"
    assert isinstance(results[1], RankFailure) and "rank 2" in str(results[1]) and "injected fault" in str(results[1])
    assert pd.read_json(tmp_path / "faulty" / "summary.json", typ="series")["status"] == "failed"
    assert isinstance(results[2], RankFailure) and "not run" in str(results[2])
    assert not (tmp_path / "after" / "summary.json").exists()
    assert _no_rank_left(tmp_path / "ok")


def _no_rank_left(job_dir) -> bool:
    out = subprocess.run(["pgrep", "-f", f"dybw.mpi_rank {job_dir}"], capture_output=True, text=True)
    return out.stdout.strip() == ""


@pytest.mark.parametrize("clock", [["runner.ranks=2"], ["runner.clock=wall", "num_workers=2", "runner.ranks=2"]])
def test_a_rank_that_raises_fails_the_job_naming_it_and_keeps_what_was_measured(tmp_path, clock):
    done = run_cli(
        SMALL
        + ["runner=mpi", "runner.fault=raise", "runner.fault_rank=1", "runner.fault_iteration=6", "iterations=40"]
        + clock,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()  # the launcher's one line, not the rank's and MPICH's too
    assert len(lines) == 1 and "rank 1" in lines[0] and "injected fault" in lines[0], done.stderr[-1500:]
    job_dir = next((tmp_path / "results" / "adhoc").iterdir())
    summary = pd.read_json(job_dir / "summary.json", typ="series")
    assert summary["status"] == "failed" and "rank 1" in summary["message"]
    # what was measured is kept: the evaluations and the timeline up to the last one (iteration 4)
    assert list(pd.read_csv(job_dir / "metrics.csv")["iteration"]) == [0, 4]
    timeline = pd.read_parquet(job_dir / "timeline.parquet")
    workers = 2 if "num_workers=2" in clock else 8
    assert len(timeline) == 4 * workers and list(timeline["iteration"].unique()) == [0, 1, 2, 3]
    assert _no_rank_left(job_dir)


def test_a_hung_rank_fails_the_job_within_the_timeout(tmp_path):
    started = time.time()
    done = run_cli(
        SMALL
        + [
            "runner=mpi",
            "runner.ranks=2",
            "runner.fault=hang",
            "runner.fault_rank=1",
            "runner.fault_iteration=3",
            "runner.timeout_s=8",
            "iterations=40",
        ],
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode != 0 and "rank 1 sent no heartbeat" in done.stderr
    assert "(while iterating, last at iteration" in done.stderr and "runner.timeout_s=8" in done.stderr
    assert time.time() - started < 120
    assert _no_rank_left(next((tmp_path / "results" / "adhoc").iterdir()))


def test_a_rank_killed_with_sigkill_is_named_and_nothing_is_left(tmp_path):
    command = [
        sys.executable,
        str(__import__("helpers").REPO / "run.py"),
        *SMALL,
        "runner=mpi",
        "runner.ranks=2",
        "iterations=100000",
        "eval_every=1000",
        "runner.timeout_s=30",
    ]
    process = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    job_dir = None
    deadline = time.time() + 120
    while time.time() < deadline:
        dirs = list((tmp_path / "results" / "adhoc").glob("*")) if (tmp_path / "results").exists() else []
        beats = read_heartbeats(dirs[0]) if dirs else {}
        if 1 in beats and beats[1]["iteration"] >= 5:
            job_dir = dirs[0]
            os.kill(beats[1]["pid"], signal.SIGKILL)
            break
        time.sleep(0.2)
    assert job_dir is not None, "rank 1 never started iterating"
    killed = time.time()
    _, stderr = process.communicate(timeout=120)
    assert process.returncode != 0
    assert time.time() - killed < 30
    assert "rank 1" in stderr, stderr[-1500:]
    assert _no_rank_left(job_dir)
    summary = pd.read_json(job_dir / "summary.json", typ="series")
    assert summary["status"] == "failed"


@pytest.fixture(scope="module")
def cut_off_job(tmp_path_factory):
    """A 2-rank job whose rank 1 died after iteration 24 (its checkpoint: iteration 20), and the same job
    run whole on the local backend (the same bits as MPI: test_virtual_clock_ranks.py).  Made once; each
    test resumes a copy."""
    root = tmp_path_factory.mktemp("cut_off")
    common = SMALL + ["iterations=40", "eval_every=10"]
    run_config(common + ["runner=local"], root / "whole")
    with pytest.raises(Exception, match="rank 1"):
        run_config(
            common + ["runner=mpi", "runner.ranks=2", "runner.fault=exit", "runner.fault_iteration=25"], root / "cut"
        )
    return common, root / "whole", root / "cut"


@pytest.mark.parametrize("resume_runner", [["runner=mpi", "runner.ranks=2"], ["runner=local"]])
def test_a_cut_off_mpi_job_resumes_from_its_checkpoint_with_the_uninterrupted_numbers(
    tmp_path, cut_off_job, resume_runner
):
    """Rank 1 dies after iteration 24; the checkpoint of iteration 20 continues the job -- on MPI, or on
    the local backend, since both compute the same bits -- to the uninterrupted run's files."""
    common, whole, cut_off = cut_off_job
    cut = shutil.copytree(cut_off, tmp_path / "cut")
    with np.load(cut / "checkpoint.npz") as checkpoint:
        assert int(checkpoint["iteration"]) == 20
    before = pd.read_csv(cut / "metrics.csv")
    resumed = run_config(common + resume_runner + ["resume=true"], cut)
    assert resumed["status"] == "completed" and resumed["iterations"] == 40
    after = pd.read_csv(cut / "metrics.csv")
    # resumed, not rerun: the rows up to the checkpoint are the cut run's own, wall times included
    assert after[after["iteration"] <= 20].equals(before[before["iteration"] <= 20])
    pd.testing.assert_frame_equal(metrics(cut), metrics(whole), check_exact=True)
    pd.testing.assert_frame_equal(
        pd.read_parquet(cut / "timeline.parquet"), pd.read_parquet(whole / "timeline.parquet")
    )
    assert not (cut / "checkpoint.npz").exists()


def test_missing_dataset_files_are_one_line_before_any_rank_starts(tmp_path):
    """Checked once in run.py before any job starts, not by R ranks racing to download: the same line as
    runner=local."""
    (tmp_path / "empty").mkdir()
    done = run_cli(
        [
            "dataset=mnist",
            "logger=none",
            "progress=false",
            "runner=mpi",
            "runner.ranks=2",
            f"data_dir={tmp_path / 'empty'}",
        ],
        cwd=tmp_path,
        timeout=300,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-1500:]
    assert "mnist: 4 file(s) missing" in lines[0] and "make data" in lines[0] and not re.search(r"rank \d", lines[0])
    assert not (tmp_path / "results").exists()  # found before the job started: no job directory, no rank


def test_run_py_started_as_a_world_runs_the_job_in_it(tmp_path):
    """``mpiexec -n 2 python run.py ...`` -- as srun starts a Slurm job's tasks under
    hydra/launcher=submitit_slurm -- runs one job on those 2 ranks, with runner=local's numbers."""
    from dybw.mpi.launch import find_launcher

    job = [o for o in SMALL if o != "runner=local"] + ["runner=mpi"]
    run_config(SMALL, tmp_path / "local")
    (tmp_path / "world").mkdir()
    done = subprocess.run(
        [find_launcher("mpiexec"), "-n", "2", sys.executable, str(__import__("helpers").REPO / "run.py"), *job],
        cwd=tmp_path / "world",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (job_dir,) = (tmp_path / "world" / "results" / "adhoc").iterdir()
    assert not (job_dir / ".mpi" / "job.json").exists()  # no world of its own was launched
    pd.testing.assert_frame_equal(metrics(job_dir), metrics(tmp_path / "local"), check_exact=True)


def test_processes_started_together_that_mpi_does_not_join_are_one_line(tmp_path):
    """srun with an MPI plugin mpi4py's MPI does not speak starts N lone processes: each would run the whole
    job into the same directory.  dybw's submitit launcher says how many srun started (DYBW_WORLD_SIZE)."""
    job = [o for o in TINY if o != "runner=local"] + ["runner=mpi"]
    done = subprocess.run(
        [sys.executable, str(__import__("helpers").REPO / "run.py"), *job],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "DYBW_WORLD_SIZE": "2"},
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr[-2000:]
    assert "one of 2 started together, but MPI sees a world of 1" in lines[0] and "--mpi=pmi2" in lines[0]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("started_with", "in_that_world"),
    [
        ({}, False),  # run.py alone launches the job's world
        ({"PMI_SIZE": "1"}, False),  # `mpiexec -n 1 python run.py`: as before, a world of the job's own ranks
        ({"PMI_SIZE": "4"}, True),
        ({"OMPI_COMM_WORLD_SIZE": "2"}, True),
        ({"DYBW_WORLD_SIZE": "2"}, True),  # a Slurm job's tasks, as dybw's submitit launcher says
        ({"DYBW_WORLD_SIZE": "1"}, True),  # one task too: an mpiexec inside it died of Slurm's SIGUSR2
    ],
)
def test_a_job_runs_in_the_world_it_was_started_in_when_several_ranks_or_slurm_tasks_started_it(
    monkeypatch, started_with, in_that_world
):
    from dybw.mpi import runs_in_started_world

    for name in ("DYBW_WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in started_with.items():
        monkeypatch.setenv(name, value)
    assert runs_in_started_world() is in_that_world
