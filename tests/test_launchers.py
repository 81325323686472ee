"""Hydra launchers (docs/cluster.md) through the real ``run.py``: ``hydra/launcher=joblib`` runs a sweep's
jobs side by side, ``submitit_local`` one process per job (``submitit_slurm`` one Slurm job per job: its
resources are checked here, Slurm itself does not run here).  Results land where the basic launcher puts
them, finished jobs are skipped, cut-off ones resume, and a failed job fails the sweep.
"""

from __future__ import annotations

import json
import logging
import os

import pandas as pd
import pytest
from omegaconf import OmegaConf

from dybw.figures.specs import Composer
from dybw.results import MEASURED_SUMMARY_KEYS
from helpers import CONF, TINY, compose, run_cli, run_config

LAUNCHERS = ["joblib", "submitit_local"]
# The tests/mpi SMALL job, 40 iterations with an evaluation (and checkpoint) every 10; each key once, as
# the job's directory name lists them.
COMMON = list(
    {
        o.split("=", 1)[0]: o
        for o in TINY
        + [
            "num_workers=8",
            "iterations=40",
            "eval_every=10",
            "straggler=shifted_exp",
            "model=mlp",
            "model.hidden=[16]",
            "topology=erdos_renyi",
            "topology.p=0.5",
        ]
        if not o.startswith("runner=")
    }.values()
)
SWEEP = ["-m", "algo=cb_dybw,cb_full", *COMMON, "runner=local"]
JOB_FILES = ("summary.json", "metrics.csv", "timeline.parquet", "topology.json", "run.log", ".hydra/overrides.yaml")


def metrics(job_dir):
    return pd.read_csv(job_dir / "metrics.csv").drop(columns="wall_seconds")


def summary(job_dir):
    return json.loads((job_dir / "summary.json").read_text())


def job_dirs(root):
    return sorted(p for p in (root / "results" / "adhoc").iterdir() if p.is_dir() and not p.name.startswith("."))


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_launcher_keeps_the_layout_resumes_cut_off_jobs_and_skips_finished_ones(tmp_path, launcher):
    composer = Composer(CONF)
    names = {algo: composer.dirname([f"algo={algo}", *COMMON, "runner=local"]) for algo in ("cb_dybw", "cb_full")}
    cut = tmp_path / "results" / "adhoc" / names["cb_dybw"]
    # A job cut off at iteration 25 (a rank died, as Slurm's time limit would end it); checkpoint at 20.
    with pytest.raises(Exception, match="rank 1"):
        run_config(
            ["algo=cb_dybw", *COMMON, "runner=mpi", "runner.ranks=2", "runner.fault=exit", "runner.fault_iteration=25"],
            cut,
        )
    before = pd.read_csv(cut / "metrics.csv")
    run_config(["algo=cb_dybw", *COMMON, "runner=local"], tmp_path / "whole")

    first = run_cli([*SWEEP, f"hydra/launcher={launcher}", "resume=true"], cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert [p.name for p in job_dirs(tmp_path)] == sorted(names.values())  # where the basic launcher puts them
    assert (tmp_path / "results" / "adhoc" / "multirun.yaml").is_file()
    for job_dir in job_dirs(tmp_path):
        assert all((job_dir / name).is_file() for name in JOB_FILES), job_dir
        assert summary(job_dir)["status"] == "completed" and summary(job_dir)["iterations"] == 40
    assert "resuming after iteration 20" in (cut / "run.log").read_text()
    after = pd.read_csv(cut / "metrics.csv")
    assert after[after["iteration"] <= 20].equals(before[before["iteration"] <= 20])  # resumed, not rerun
    pd.testing.assert_frame_equal(metrics(cut), metrics(tmp_path / "whole"), check_exact=True)

    stamps = {p.name: (p / "summary.json").stat().st_mtime_ns for p in job_dirs(tmp_path)}
    again = run_cli([*SWEEP, f"hydra/launcher={launcher}"], cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {p.name: (p / "summary.json").stat().st_mtime_ns for p in job_dirs(tmp_path)} == stamps
    assert all("already completed" in (p / "run.log").read_text() for p in job_dirs(tmp_path))


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_failed_job_fails_the_sweep_with_its_one_line(tmp_path, launcher):
    done = run_cli(
        ["-m", "algo.eta0=0.1,1e30", *TINY, "model=mlp", "model.hidden=[16]", f"hydra/launcher={launcher}"], tmp_path
    )
    assert done.returncode == 1, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "diverged at iteration" in errors[0], done.stderr[-3000:]
    assert "completed, test accuracy" in done.stdout + done.stderr  # the other job's line, wherever it ran


@pytest.mark.slow
def test_joblib_runs_the_readme_sweep_in_parallel_with_the_numbers_of_a_sequential_sweep(tmp_path):
    """``python run.py -m algo=cb_dybw,cb_full dataset=mnist hydra/launcher=joblib``, shortened: both jobs
    run at once (on 2 cores one rank each) and give the basic launcher's numbers (there two ranks each)."""
    from dybw.tf_setup import usable_cores

    cores = usable_cores()
    if cores < 2:
        pytest.skip("jobs run side by side only with 2 cores or more")
    ranks = min(16, cores // 2)
    sizes = ["iterations=30", "eval_every=10", "progress=false", "logger=none"]
    command = ["-m", "algo=cb_dybw,cb_full", "dataset=mnist", *sizes]
    (tmp_path / "basic").mkdir(), (tmp_path / "joblib").mkdir()
    sequential = run_cli(command, cwd=tmp_path / "basic", timeout=900)
    assert sequential.returncode == 0, sequential.stderr[-3000:]
    parallel = run_cli([*command, "hydra/launcher=joblib"], cwd=tmp_path / "joblib", timeout=900)
    assert parallel.returncode == 0, parallel.stderr[-3000:]
    output = parallel.stdout + parallel.stderr
    rank_s = f"{ranks} rank" + ("s" if ranks > 1 else "")
    assert (
        f"hydra/launcher=joblib: 2 jobs at a time x {rank_s} x 1 thread = {2 * ranks} cores busy of {cores}" in output
    )
    basic, joblib = job_dirs(tmp_path / "basic"), job_dirs(tmp_path / "joblib")
    assert (
        [p.name for p in basic]
        == [p.name for p in joblib]
        == [
            "algo=cb_dybw,dataset=mnist,eval_every=10,iterations=30",
            "algo=cb_full,dataset=mnist,eval_every=10,iterations=30",
        ]
    )
    for ours, theirs in zip(joblib, basic):
        pd.testing.assert_frame_equal(metrics(ours), metrics(theirs), check_exact=True)
        pd.testing.assert_frame_equal(
            pd.read_parquet(ours / "timeline.parquet"), pd.read_parquet(theirs / "timeline.parquet")
        )
        assert {k: v for k, v in summary(ours).items() if k not in MEASURED_SUMMARY_KEYS} == {
            k: v for k, v in summary(theirs).items() if k not in MEASURED_SUMMARY_KEYS
        }

    def span(job_dir):  # Hydra writes .hydra/ as the job starts; summary.json is the job's last file
        return (job_dir / ".hydra" / "config.yaml").stat().st_mtime, (job_dir / "summary.json").stat().st_mtime

    (start_a, end_a), (start_b, end_b) = span(joblib[0]), span(joblib[1])
    assert max(start_a, start_b) < min(end_a, end_b), "the two jobs did not overlap"
    (start_a, end_a), (start_b, end_b) = sorted(map(span, basic))
    assert end_a <= start_b  # the basic launcher, one after the other: what the check tells apart


# --------------------------------------------------------------------------------------------------
# Slurm: what each job asks for (Slurm does not run here)


def _slurm_launcher(**settings):
    from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf

    from hydra_plugins.dybw_launchers.submitit_launcher import SlurmLauncher

    params = OmegaConf.to_container(OmegaConf.structured(SlurmQueueConf))
    params.pop("_target_")
    return SlurmLauncher(**{**params, **settings})


def _job(*overrides):
    return OmegaConf.create(compose([*COMMON, *overrides])[1])


def test_each_slurm_job_has_its_ranks_as_tasks_and_its_threads_as_cpus(tmp_path):
    from submitit.slurm.slurm import SlurmExecutor, _make_sbatch_string

    one_node, two_nodes = _slurm_launcher(partition="cpu"), _slurm_launcher(partition="cpu", nodes=2)
    mpi = ("runner=mpi", "runner.ranks=4", "runner.threads=2")
    assert one_node.resources(_job(*mpi)) == {"nodes": 1, "tasks_per_node": 4, "cpus_per_task": 2}
    assert two_nodes.resources(_job(*mpi)) == {"nodes": 2, "tasks_per_node": 2, "cpus_per_task": 2}
    assert one_node.resources(_job("runner=local")) == {"nodes": 1, "tasks_per_node": 1, "cpus_per_task": 1}
    wall = ("runner=mpi", "runner.clock=wall", "num_workers=4")
    assert one_node.resources(_job(*wall)) == {"nodes": 1, "tasks_per_node": 4, "cpus_per_task": 1}
    # The sbatch script submitit writes from them: srun starts the 4 ranks, 2 CPUs each.
    names = SlurmExecutor._equivalence_dict()
    resources = {names[key]: value for key, value in one_node.resources(_job(*mpi)).items()}
    script = _make_sbatch_string(
        command="python -u -m submitit.core._submit x", folder=tmp_path, partition="cpu", **resources
    )
    assert "#SBATCH --ntasks-per-node=4" in script and "#SBATCH --cpus-per-task=2" in script
    assert "#SBATCH --partition=cpu" in script and "\nsrun " in script


def test_slurm_settings_a_job_cannot_meet_are_refused_before_anything_starts():
    from dybw.errors import ConfigError
    from dybw.launchers import check_job

    launcher = {"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher", "nodes": 2}

    def job(*overrides):
        return compose([*COMMON, *overrides])[1]

    check_job(launcher, job("runner=mpi", "runner.ranks=4"))  # 2 tasks per node
    for overrides, line in [
        (["runner=mpi"], "runner.ranks=0 is invalid: under hydra/launcher=submitit_slurm"),
        (["runner=mpi", "runner.ranks=3"], "runner.ranks=3 is invalid: must split evenly over hydra.launcher.nodes=2"),
        (["runner=local"], "hydra.launcher.nodes=2 is invalid: runner=local runs one task"),
        (["runner=mpi", "runner.clock=wall", "num_workers=3"], "must divide the wall clock's 3 ranks"),
    ]:
        with pytest.raises(ConfigError) as error:
            check_job(launcher, job(*overrides))
        assert line in str(error.value), str(error.value)


def test_a_requeued_slurm_job_resumes_from_its_checkpoint():
    launcher = _slurm_launcher()
    delayed = launcher.checkpoint(["algo=cb_dybw", "seed=1"], "hydra.sweep.dir", 3, "job_id_for_3", {})
    assert delayed.function is launcher
    assert delayed.args == (["algo=cb_dybw", "seed=1", "resume=true"], "hydra.sweep.dir", 3, "job_id_for_3", {})


# --------------------------------------------------------------------------------------------------
# Sharing one machine's cores


def test_jobs_side_by_side_share_the_cores_and_oversubscription_is_one_warning(monkeypatch, caplog):
    from dybw.launchers import share_cores
    from dybw.tf_setup import usable_cores

    monkeypatch.setenv("DYBW_CORES", "4")  # this machine's cores, as far as the launcher is concerned
    jobs = [_job("runner=mpi"), _job("runner=mpi", "algo=cb_full")]
    with caplog.at_level(logging.INFO, logger="dybw.launchers"), share_cores("joblib", jobs, 2, "n"):
        assert usable_cores() == 2  # what each job's runner.ranks=0 fills
    assert os.environ["DYBW_CORES"] == "4"
    (record,) = caplog.records
    assert record.levelno == logging.INFO
    assert record.getMessage().startswith("hydra/launcher=joblib: 2 jobs at a time x 2 ranks x 1 thread = 4 cores")

    caplog.clear()
    jobs = [_job("runner=mpi", "runner.ranks=4"), _job("runner=mpi", "runner.ranks=4", "algo=cb_full")]
    with (
        caplog.at_level(logging.INFO, logger="dybw.launchers"),
        share_cores("joblib", jobs, 2, "hydra.launcher.n_jobs"),
    ):
        pass
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith(
        "hydra/launcher=joblib: 2 jobs at a time x 4 ranks x 1 thread = 8 cores busy of 4: oversubscribed; "
        "lower hydra.launcher.n_jobs or runner.ranks"
    )
