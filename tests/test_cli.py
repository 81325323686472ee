"""Bad input through the real command line: one line on stderr, a non-zero exit, nothing started.

Each case is a ``python run.py ...`` subprocess; a validation failure exits before TensorFlow is
imported (well under a second), so these stay cheap.  The good multirun at the end trains two tiny jobs.
"""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from dybw.cli import expand_sweep
from helpers import CONF, TINY, compose, run_cli

BAD_INPUT = {
    "unknown group option": (["algo=cb_foo"], ["algo", "'cb_foo'", "cb_dybw, cb_full, cb_static"]),
    "empty group option": (["algo="], ["algo", "''", "cb_dybw, cb_full, cb_static"]),
    "too few workers": (["num_workers=1"], ["num_workers=1", ">= 2"]),
    "not an integer": (["num_workers=abc"], ["num_workers", "'abc'", "integer"]),
    "b no worker can honour": (
        ["algo=cb_static", "topology=ring", "algo.b=2"],
        ["algo.b=2", "allowed range 0..1", "degrees 2..2"],
    ),
    "edge probability 0": (["topology.p=0"], ["topology.p=0", "(0, 1]"]),
    "edge probability above 1": (["topology.p=1.5"], ["topology.p=1.5", "(0, 1]"]),
    "negative delay scale": (["straggler.link.scale=-1"], ["straggler.link.scale=-1", ">= 0"]),
    "batch above a shard": (
        ["dataset=mnist", "dataset.batch_size=5000"],
        ["dataset.batch_size=5000", "at most", "3750 samples", "16 workers"],
    ),
    "pca above the input size": (["dataset.pca_dim=1000"], ["dataset.pca_dim=1000", "[0, 784]"]),
    "disconnected graph": (
        ["topology=custom", "num_workers=4", "topology.edges=[[0,1],[2,3]]"],
        ["topology.edges=[[0, 1], [2, 3]]", "disconnected", "{0, 1} and {2, 3}"],
    ),
    "unknown top-level key": (["foo=1"], ["foo=1", "unknown key", "num_workers", "iterations", "algo"]),
    "unknown nested key": (["algo.eta=0.5"], ["algo.eta=0.5", "unknown key", "eta0", "min_neighbors"]),
    "key the chosen option does not set": (
        ["algo=cb_full", "algo.b=2"],
        ["algo.b=2", "(algo=cb_full) does not use 'b'", "algo=cb_static does: e.g. algo=cb_static algo.b=2"],
    ),
    "misspelt top-level key": (["iteration=50"], ["iteration=50", "unknown key; did you mean iterations?"]),
    "misspelt nested key": (["protocol.sinc=free"], ["unknown key; did you mean protocol.sync?"]),
    "whiten without pca": (["dataset=synthetic", "dataset.whiten=true"], ["dataset.whiten=True", "pca_dim"]),
    "removed group": (["~algo"], ["algo=None", "required", "algo=<name>"]),
    "no full evaluation": (["evaluation.full_every_evals=0"], ["evaluation.full_every_evals=0", ">= 1"]),
    "probe_target not a bool": (
        ["evaluation.probe_target=often"],
        ["evaluation.probe_target='often'", "true or false"],
    ),
    "unknown hydra key": (["hydra.foo=1"], ["hydra.foo=1", "not a key"]),
    "unknown hydra group option": (["hydra/launcher=nope"], ["hydra/launcher", "'nope'", "basic"]),
    "multirun with one bad job": (["-m", "algo.eta0=0.1,-1"], ["algo.eta0=-1", "> 0"]),
    "multirun by hydra.mode with one bad job": (["hydra.mode=MULTIRUN", "algo.eta0=0.1,-1"], ["algo.eta0=-1", "> 0"]),
    "multirun sweep the basic sweeper cannot list": (["-m", "seed=interval(0,1)"], ["seed", "interval(0,1)"]),
    "slurm jobs without a task count": (
        ["-m", "algo=cb_dybw,cb_full", "hydra/launcher=submitit_slurm"],
        ["runner.ranks=0", "submitit_slurm", "Slurm task count"],
    ),
    "slurm ranks that do not split over the nodes": (
        ["-m", "seed=0,1", "hydra/launcher=submitit_slurm", "hydra.launcher.nodes=2", "runner.ranks=3"],
        ["runner.ranks=3", "hydra.launcher.nodes=2"],
    ),
    "slurm time limit with no room for its signal": (
        ["-m", "seed=0,1", "hydra/launcher=submitit_slurm", "runner.ranks=2", "hydra.launcher.timeout_min=1"],
        ["hydra.launcher.timeout_min=1", "up to 60 s before", "2 minutes or more"],
    ),
    "slurm signal as the job starts": (
        [
            "-m",
            "seed=0,1",
            "hydra/launcher=submitit_slurm",
            "runner.ranks=2",
            "hydra.launcher.timeout_min=2",
            "hydra.launcher.signal_delay_s=90",
        ],
        ["hydra.launcher.signal_delay_s=90", "with timeout_min=2 use less than 60"],
    ),
    "unknown launcher key": (["-m", "seed=0,1", "hydra/launcher=joblib", "hydra.launcher.jobs=2"], ["jobs", "n_jobs"]),
    "a key for a launcher that takes none": (
        ["-m", "seed=0,1", "hydra.launcher.n_jobs=2"],
        ["hydra.launcher.n_jobs=2", "not a key of the chosen hydra/launcher", "takes no settings"],
    ),
}


@pytest.mark.parametrize(("args", "expected"), list(BAD_INPUT.values()), ids=list(BAD_INPUT))
def test_bad_input_is_one_line_and_nothing_starts(args, expected, tmp_path):
    started = time.perf_counter()
    proc = run_cli(args, cwd=tmp_path, timeout=60)
    elapsed = time.perf_counter() - started
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0
    assert len(lines) == 1 and lines[0].strip(), proc.stderr
    assert "Traceback" not in proc.stderr and "HYDRA_FULL_ERROR" not in proc.stderr
    for text in expected:
        assert text in lines[0], f"{text!r} not in {lines[0]!r}"
    assert not (tmp_path / "results").exists()
    assert elapsed < 20, f"validation took {elapsed:.1f} s"  # ~0.5 s: nothing heavy is imported


def test_missing_data_offline_is_one_line_for_the_whole_sweep_saying_what_to_do(tmp_path):
    # No dataset files and no way to download them (a proxy on a closed port refuses every connection, so
    # this holds on a machine with a network too).
    closed = "http://127.0.0.1:9"
    cache = tmp_path / "cache"
    env = {
        **os.environ,
        "DYBW_DATA_DIR": str(tmp_path / "empty"),
        "DYBW_CACHE_DIR": str(cache),
        "http_proxy": closed,
        "https_proxy": closed,
    }
    env.pop("no_proxy", None)
    proc = run_cli(["-m", "algo=cb_dybw,cb_full", "dataset=mnist", "logger=none"], cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 2
    (line,) = [line for line in proc.stderr.splitlines() if line.strip()]  # one line for both jobs
    assert line.startswith("error: mnist: 4 file(s) missing in ") and "make data" in line and "DYBW_DATA_DIR" in line
    assert len(line) < 400 and "md5" not in line
    # The details -- each file's MD5 and each download's error -- are in the log the line names.
    log = cache / "data-error.log"
    assert f"(details: {log})" in line and "train-images-idx3-ubyte.gz (md5 f68b3c2dcbeaaa9fbdd348bbdeb94873)" in (
        log.read_text()
    )
    assert not (tmp_path / "results").exists() and not (tmp_path / "empty").exists()


def test_help_is_dybws_page_with_its_groups_and_no_internal_file(tmp_path):
    proc = run_cli(["--help"], cwd=tmp_path, timeout=60)
    assert proc.returncode == 0
    assert proc.stdout.startswith("dybw: consensus training") and "powered by Hydra" not in proc.stdout
    assert "straggler:  paper | none" in proc.stdout and "_delays" not in proc.stdout
    assert "python run.py --cfg job" in proc.stdout


def test_slurm_without_slurm_is_one_line_that_names_the_local_launcher(tmp_path):
    # A PATH with this Python's directory alone: no sbatch, whether or not this machine has a Slurm.
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}
    proc = run_cli(["-m", "seed=0,1", "hydra/launcher=submitit_slurm", "runner.ranks=2"], cwd=tmp_path, env=env)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "hydra/launcher=submitit_slurm" in line and "sbatch and srun" in line and "submitit_local" in line
    assert not (tmp_path / "results").exists()


def test_expand_sweep_matches_the_basic_sweeper():
    jobs = expand_sweep(
        ["algo=glob(cb_*,exclude=[cb_adaptive,cb_timeout])", "seed=1,2", "iterations=3", "seed=range(5,7)"], CONF
    )
    # as in Hydra's basic sweeper: a later override of a key replaces the earlier one; product in order
    assert jobs == [
        [f"algo={a}", f"seed={s}", "iterations=3"] for a in ("cb_dybw", "cb_full", "cb_static") for s in (5, 6)
    ]


def _summaries(root):
    return {path.parent.name: path for path in sorted((root / "results" / "adhoc").glob("*/summary.json"))}


def test_good_multirun_runs_each_job_once_then_skips_until_forced(tmp_path):
    args = ["-m", "algo=cb_dybw,cb_full", *TINY]
    first = run_cli(args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    summaries = _summaries(tmp_path)
    assert len(summaries) == 2
    algos = set()
    for path in summaries.values():
        summary = json.loads(path.read_text())
        assert summary["status"] == "completed"
        algos.add(summary["algo"])
        for name in ("metrics.csv", "timeline.parquet", "topology.json"):
            assert (path.parent / name).is_file()
    assert algos == {"cb_dybw", "cb_full"}
    # Hydra's "Launching 2 jobs locally" is told what the jobs are (dybw's subclass of its basic launcher).
    assert "Launching 2 jobs one after another, each in this process (runner=local)" in first.stdout
    assert "jobs locally" not in first.stdout
    # Each job's last line says where its results are; the multirun ends with its jobs side by side.
    for path in summaries.values():
        where = f"; results in {path.parent.relative_to(tmp_path)}"
        (line,) = [line for line in first.stdout.splitlines() if where in line]
        assert ": completed, test accuracy " in line and ("test accuracy at" in line or "not reached" in line)
    table = first.stdout.split("2 jobs, all with ", 1)[1].splitlines()
    assert table[1].split() == ["job", "status", "accuracy", "mean", "iteration", "to", "target"]
    assert [row.split()[:2] for row in table[2:4]] == [["algo=cb_dybw", "completed"], ["algo=cb_full", "completed"]]
    dybw, full = (json.loads(p.read_text())["mean_iteration_duration"] for p in sorted(summaries.values()))
    assert table[4] == f"cb_dybw's mean iteration is {100 * (1 - dybw / full):.1f} % shorter than cb_full's"
    stamps = {
        name: (path.stat().st_mtime_ns, json.loads(path.read_text())["wall_seconds"])
        for name, path in summaries.items()
    }

    again = run_cli(args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert (again.stdout + again.stderr).count("already completed") == 2
    assert {
        name: (path.stat().st_mtime_ns, json.loads(path.read_text())["wall_seconds"])
        for name, path in _summaries(tmp_path).items()
    } == stamps

    forced = run_cli([*args, "force=true"], cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert "already completed" not in forced.stdout + forced.stderr
    rerun = _summaries(tmp_path)
    assert rerun.keys() == stamps.keys()  # force does not change the job directories
    for name, path in rerun.items():
        assert path.stat().st_mtime_ns > stamps[name][0]
        assert json.loads(path.read_text())["status"] == "completed"


@pytest.mark.unit
def test_a_sweep_one_job_after_another_says_where_each_job_runs(monkeypatch):
    """Under runner=mpi each job starts MPI ranks of its own (on other hosts, if runner.launcher says so):
    the sweep's first line names them instead of Hydra's "jobs locally"."""
    from omegaconf import OmegaConf

    from dybw.launchers import OURS, sequence_line, target_override

    monkeypatch.setenv("DYBW_CORES", "2")

    def jobs(*overrides):
        return [OmegaConf.create(compose(["num_workers=4", *o])[1]) for o in overrides]

    mpi = jobs(["algo=cb_dybw"], ["algo=cb_full"])
    assert (
        sequence_line(mpi)
        == "Launching 2 jobs one after another, each on MPI ranks of its own (runner=mpi: mpiexec -n 2)"
    )
    srun = jobs(["runner.launcher=[srun,-n,'{ranks}']", "runner.ranks=4"])
    assert sequence_line(srun) == "Launching 1 job on MPI ranks of its own (runner=mpi: srun -n 4)"
    mixed = jobs(["runner=local"], ["runner=mpi"])
    assert sequence_line(mixed) == "Launching 2 jobs one after another (runner=local or mpi, per job)"
    basic = {"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}
    assert target_override(basic) == [f"hydra.launcher._target_={OURS[basic['_target_']]}"]
