"""W&B tracking (docs/tracking.md): real wandb in offline mode, read back from its run files.

No test needs a network: every run is offline (``logger.mode=offline``, or ``auto`` without credentials).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

import helpers
from dybw import report, tracking
from dybw.config import WandbLoggerConfig, validate
from dybw.errors import ConfigError
from dybw.results import METRICS_COLUMNS, config_hash

EVALUATION_KEYS = {
    "iteration",
    "time",
    "train_loss",
    "test_loss",
    "test_accuracy",
    "local_test_accuracy",
    "consensus_distance",
    "lr",
}


@pytest.fixture(autouse=True)
def no_credentials(tmp_path, monkeypatch):
    """No W&B credentials, no W&B environment: HOME is a fresh directory (no ~/.netrc)."""
    for name in list(os.environ):
        if name.startswith("WANDB_") or name == "NETRC":
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))


def _wandb_core_children() -> list[str]:
    """wandb-core service processes started by this process (they name their parent with --pid)."""
    listing = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in listing.splitlines() if "wandb-core" in line and f"--pid {os.getpid()}" in line]


def _run_files(job_dir: Path) -> list[Path]:
    return sorted(job_dir.glob("wandb/offline-run-*/run-*.wandb"))


# --------------------------------------------------------------------------------------------------
# An offline multirun through the real CLI


@pytest.fixture(scope="module")
def multirun(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("multirun")
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith("WANDB_"):
                patch.delenv(name)
        patch.setenv("HOME", str(cwd))
        done = helpers.run_cli(
            ["-m", "algo=cb_dybw,cb_full", *helpers.TINY, "target_accuracy=0.75"]
            + ["logger=wandb", "logger.mode=offline"],
            cwd=cwd,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    return cwd, done


def test_offline_multirun_leaves_one_wandb_run_per_job(multirun):
    cwd, done = multirun
    job_dirs = sorted(p.parent for p in (cwd / "results" / "adhoc").glob("*/summary.json"))
    assert len(job_dirs) == 2
    assert "wandb:" not in done.stdout + done.stderr  # W&B's console chatter is off
    algorithms = set()
    for job_dir in job_dirs:
        summary = json.loads((job_dir / "summary.json").read_text())
        assert summary["status"] == "completed"
        files = _run_files(job_dir)
        assert len(files) == 1, files
        run = tracking.read_run_file(files[0])
        algo = summary["algo"]
        algorithms.add(algo)
        # grouped and named so that a multirun reads as one experiment
        assert (run.project, run.group, run.job_type) == ("dybw", "adhoc", algo)
        assert run.name.startswith(f"{algo}-synthetic-N4-s0")
        assert "logger" not in run.name.split(" ", 1)[-1]
        # the resolved config
        assert run.config["algo"]["name"] == algo
        assert run.config["num_workers"] == 4 and run.config["iterations"] == 6
        assert run.config["dataset"]["name"] == "synthetic"
        assert run.config["logger"]["mode"] == "offline"
        # iteration is the step metric of everything, time an alternative x-axis
        assert {"name": "iteration", "glob_name": "", "step_metric": ""} in run.metrics
        assert {"name": "time", "glob_name": "", "step_metric": "iteration"} in run.metrics
        assert {"name": "", "glob_name": "*", "step_metric": "iteration"} in run.metrics
        # per evaluation: a metrics.csv row, with the columns its evaluation computes (3 is a light one)
        evaluations = [row for row in run.history if "test_accuracy" in row]
        assert [row["iteration"] for row in evaluations] == [0, 3, 6]
        for row in evaluations:
            full_only = {"train_loss", "local_test_accuracy"} if row["iteration"] == 3 else set()
            assert set(row) >= EVALUATION_KEYS - full_only
        assert "train_loss" not in evaluations[1] and "local_test_accuracy" not in evaluations[1]  # not NaN: absent
        assert evaluations[-1]["test_accuracy"] == pytest.approx(summary["final_test_accuracy"])
        # the probes that resolved the time to target (iterations 4 and 5; 0.75 is first reached at 5), apart
        probes = [row for row in run.history if "probe/test_accuracy" in row]
        assert [row["iteration"] for row in probes] == [4, 5] and summary["iterations_to_target"] == 5
        assert probes[0]["probe/test_accuracy"] < 0.75 <= probes[1]["probe/test_accuracy"]
        assert not any("probe/train_loss" in row for row in probes)
        # per iteration: T(k) = E(k) - E(k-1) and the backup counts
        iterations = [row for row in run.history if "iteration_duration" in row]
        assert [row["iteration"] for row in iterations] == [1, 2, 3, 4, 5, 6]
        for row in iterations:
            assert set(tracking.ITERATION_KEYS) <= set(row)
            assert row["backups_min"] <= row["backups_mean"] <= row["backups_max"]
        assert sum(row["iteration_duration"] for row in iterations) == pytest.approx(summary["total_time"])
        assert iterations[-1]["time"] == pytest.approx(summary["total_time"])
        mean_backups = sum(row["backups_mean"] for row in iterations) / len(iterations)
        assert mean_backups == pytest.approx(summary["mean_backups"])
        if algo == "cb_full":
            assert all(row["backups_max"] == 0 for row in iterations)
        # summary.json in the run's summary, and a clean exit
        for key in ("status", "algo", "iterations", "total_time", "final_test_accuracy", "config_hash"):
            assert run.summary[key] == summary[key]
        assert run.exit_code == 0
    assert algorithms == {"cb_dybw", "cb_full"}


def test_report_offline_prints_the_layout_and_how_to_sync(multirun, capsys):
    cwd, _ = multirun
    assert report.main(["--results", str(cwd / "results"), "--mode", "auto"]) == 0  # latest experiment: adhoc
    out = capsys.readouterr().out
    assert "W&B is offline (no W&B credentials)" in out
    assert "test_accuracy vs time" in out and "backups_mean" in out
    assert out.count("(offline, not synced)") == 2
    assert f"wandb sync {cwd / 'results' / 'adhoc'}/*/wandb/offline-run-*" in out


def test_report_picks_the_training_experiment_run_last_not_a_figure_or_clock_directory(tmp_path, capsys):
    """After ``make figures-quick`` the newest directories under results/ are clock-only jobs and the
    figures themselves; the report is about the training experiment that ran last."""
    from dybw.figures.clock_only import run_clock_job

    results = tmp_path / "results"
    for name in ("older", "adhoc"):
        helpers.run_config(helpers.TINY + [f"experiment_name={name}"], results / name / "job")
    os.utime(results / "older" / "job" / "summary.json", (1, 1))
    cfg, plain = helpers.compose(helpers.TINY + ["experiment_name=quick_ratio"])
    run_clock_job(cfg, validate(cfg), results / "quick_ratio" / "job", config_hash(plain))
    (results / "quick_figures").mkdir()
    (results / "quick_figures" / "figures.json").write_text("{}")
    assert report.latest_experiment(results) == "adhoc"
    assert report.main(["--results", str(results), "--mode", "offline"]) == 0
    assert "runs of group 'adhoc'" in capsys.readouterr().out

    # Without a training experiment: say which experiments there are.
    for name in ("older", "adhoc"):
        shutil.rmtree(results / name)
    assert report.main(["--results", str(results), "--mode", "offline"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "no training experiment" in error
    assert "quick_figures (figures)" in error and "quick_ratio (clock-only)" in error
    assert report.main(["--results", str(results), "--experiment", "nope"]) == 2
    assert "--experiment nope: no such experiment" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# Modes


def test_auto_mode_is_online_only_with_credentials(tmp_path, monkeypatch):
    assert tracking.requested_mode("auto") == "offline"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert tracking.requested_mode("auto") == "disabled"
    monkeypatch.delenv("WANDB_MODE")
    netrc = Path(os.environ["HOME"]) / ".netrc"
    netrc.write_text("machine api.wandb.ai\n  login user\n  password " + "x" * 40 + "\n")
    netrc.chmod(0o600)
    assert tracking.requested_mode("auto") == "online"
    netrc.unlink()
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert tracking.requested_mode("auto") == "online"
    # online without a reachable host falls back to offline (never waits on a network)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # discard port: refused at once
    assert tracking.effective_mode("online") == ("offline", "127.0.0.1:9 is unreachable")
    for mode in ("offline", "disabled"):
        assert tracking.requested_mode(mode) == mode


def test_logger_none_and_disabled_track_nothing(tmp_path):
    for overrides in (["logger=none"], ["logger=wandb", "logger.mode=disabled"]):
        cfg, plain = helpers.compose([*helpers.TINY, *overrides])
        assert isinstance(tracking.make_tracker(cfg, tmp_path, plain), tracking.NullTracker)
    assert not (tmp_path / "wandb").exists()
    with pytest.raises(ConfigError, match="logger.mode"):
        helpers.compose([*helpers.TINY, "logger=wandb", "logger.mode=sometimes"])


def test_auto_without_credentials_runs_offline_beside_the_results(tmp_path):
    job_dir = tmp_path / "job"
    summary = helpers.run_config([*helpers.TINY, "logger=wandb", "logger.mode=auto", "logger.tags=[t1,t2]"], job_dir)
    assert summary["status"] == "completed"
    (run_file,) = _run_files(job_dir)
    run = tracking.read_run_file(run_file)
    assert run.tags == ["t1", "t2"] and run.summary["status"] == "completed"
    assert not _wandb_core_children()  # finish stopped W&B's service process


@pytest.mark.parametrize("runner", [["runner=local"], ["runner=mpi", "runner.ranks=2"]], ids=["local", "mpi"])
def test_one_log_line_says_where_the_offline_run_went_under_every_runner(tmp_path, runner):
    """Under runner=mpi rank 0 runs in a world of its own: its log line reaches run.py's log all the same."""
    args = [o for o in helpers.TINY if not o.startswith("runner=")] + runner + ["logger=wandb", "logger.mode=auto"]
    done = helpers.run_cli(args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "wandb sync" in line]
    assert len(lines) == 1, lines
    run_dir = tmp_path / lines[0].split("wandb sync ", 1)[1].strip()
    (job_dir,) = (tmp_path / "results" / "adhoc").iterdir()
    assert run_dir.parent == job_dir / "wandb" and run_dir.name.startswith("offline-run-")
    assert len(list(run_dir.glob("run-*.wandb"))) == 1
    assert lines[0].split("] - ", 1)[1] in (job_dir / "run.log").read_text()  # the job's own log has it too


# --------------------------------------------------------------------------------------------------
# W&B trouble never fails a run


def test_wandb_error_mid_run_is_one_warning_and_the_job_completes(tmp_path, monkeypatch, caplog):
    import wandb

    original, calls = wandb.Run.log, []

    def flaky_log(self, data, *args, **kwargs):
        calls.append(data)
        if len(calls) == 3:
            raise RuntimeError("W&B broke\nmid-run")
        return original(self, data, *args, **kwargs)

    monkeypatch.setattr(wandb.Run, "log", flaky_log)
    caplog.set_level(logging.WARNING)
    job_dir = tmp_path / "job"
    summary = helpers.run_config([*helpers.TINY, "logger=wandb", "logger.mode=offline"], job_dir)
    assert summary["status"] == "completed"
    assert json.loads((job_dir / "summary.json").read_text())["status"] == "completed"
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "W&B" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "\n" not in warnings[0].getMessage() and "RuntimeError: W&B broke mid-run" in warnings[0].getMessage()
    assert len(calls) == 3  # a no-op after the error
    assert not _wandb_core_children()


def test_wandb_init_failure_is_one_warning(tmp_path, monkeypatch, caplog):
    import wandb

    def broken_init(*args, **kwargs):
        raise OSError("no space left on device")

    monkeypatch.setattr(wandb, "init", broken_init)
    caplog.set_level(logging.WARNING)
    cfg, plain = helpers.compose([*helpers.TINY, "logger=wandb", "logger.mode=offline"])
    tracker = tracking.make_tracker(cfg, tmp_path, plain)
    tracker.log_evaluation({"iteration": 0, "time": 0.0, "test_accuracy": 0.5})
    tracker.log_iterations(0, [0.1, 0.3], [[0, 1], [1, 1]])
    tracker.finish({"status": "completed"})
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(messages) == 1 and "wandb.init failed (OSError: no space left on device)" in messages[0]
    assert tracker.dead


# --------------------------------------------------------------------------------------------------
# Figures and tables for `make figures`


def _png(path: Path) -> Path:
    """A 2x2 grey PNG, written by hand."""

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + b"\x80\x80" for _ in range(2))
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
    return path


def test_figure_run_attaches_pngs_and_tables(tmp_path):
    import pandas as pd

    logger = WandbLoggerConfig(name="wandb", mode="offline", project="dybw", entity=None, tags=[], dir=None)
    tracker = tracking.make_figure_tracker(logger, "exp1", tmp_path)
    tracker.log_figures([_png(tmp_path / "convergence.png"), tmp_path / "missing.png"])
    tracker.log_table("reproduction", pd.DataFrame({"algo": ["cb_dybw", "cb_full"], "speedup": [1.8, 1.0]}))
    tracker.finish()
    assert not tracker.dead
    (run_file,) = sorted(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
    run = tracking.read_run_file(run_file)
    assert (run.group, run.job_type, run.name) == ("exp1", "figures", "exp1-figures")
    logged = {key: value for row in run.history for key, value in row.items()}
    assert logged["figures/convergence"]["_type"] == "image-file"
    assert logged["tables/reproduction"]["_type"] == "table-file"
    assert "figures/missing" not in logged


# --------------------------------------------------------------------------------------------------
# The report's layout, built and checked without a network


def test_report_layout_shows_convergence_durations_and_backups():
    layout = report.report_layout("paper_mnist", project="dybw", entity="someone")
    assert layout["group"] == "paper_mnist" and layout["project"] == "dybw"
    lines = {(y, p["x"]) for s in layout["sections"] for p in s["panels"] if p["kind"] == "line" for y in p["y"]}
    for metric in ("test_accuracy", "train_loss"):
        assert {(metric, "iteration"), (metric, "time")} <= lines
    assert ("iteration_duration", "iteration") in lines and ("backups_mean", "iteration") in lines
    logged = set(tracking.ITERATION_KEYS) | set(METRICS_COLUMNS)
    assert {y for y, _ in lines} <= logged and {x for _, x in lines} <= {"iteration", "time"}
    bars = {y for s in layout["sections"] for p in s["panels"] if p["kind"] == "bar" for y in p["y"]}
    assert bars <= {"final_test_accuracy", "time_to_target", "mean_iteration_duration", "best_test_accuracy"}
    json.dumps(layout)  # plain data


def test_report_layout_becomes_a_wandb_report():
    wr = pytest.importorskip("wandb_workspaces.reports.v2")
    layout = report.report_layout("paper_mnist", entity="someone")
    built = report.to_report(layout)  # not saved: that needs W&B online
    assert isinstance(built, wr.Report) and built.title == "dybw: paper_mnist" and built.entity == "someone"
    grids = [b for b in built.blocks if isinstance(b, wr.PanelGrid)]
    assert len(grids) == len(layout["sections"])
    for grid, section in zip(grids, layout["sections"]):
        assert [p.title for p in grid.panels] == [p["title"] for p in section["panels"]]
        (runset,) = grid.runsets
        assert runset.project == "dybw" and runset.name == "paper_mnist"
    lines = [p for g in grids for p in g.panels if isinstance(p, wr.LinePlot)]
    assert {(p.x, tuple(p.y)) for p in lines} >= {
        ("iteration", ("test_accuracy",)),
        ("time", ("test_accuracy",)),
        ("time", ("train_loss",)),
        ("iteration", ("iteration_duration",)),
    }


def test_run_names_are_readable(tmp_path):
    cfg, _ = helpers.compose(["algo=cb_static", "dataset=mnist", "num_workers=8", "seed=3"])
    job = tmp_path / "algo=cb_static,algo.b=2,logger.mode=offline,model.hidden=[64,64],num_workers=8,seed=3"
    assert tracking.run_name(cfg, job) == "cb_static-mnist-N8-s3 algo.b=2,model.hidden=[64,64]"
    assert tracking.run_name(cfg, tmp_path / "default") == "cb_static-mnist-N8-s3"
    cut = tmp_path / "algo.b=2,eval_every=4,iterations=1~0123456789ab"  # a name results.job_dirname shortened
    assert tracking.run_name(cfg, cut) == "cb_static-mnist-N8-s3 algo.b=2,eval_every=4"
    (job / ".hydra").mkdir(parents=True)  # Hydra's record of the overrides wins over the directory name
    (job / ".hydra" / "overrides.yaml").write_text(
        "- algo=cb_static\n- topology=ring\n- logger=wandb\n- progress=false\n- topology=torus\n"
    )
    assert tracking.run_name(cfg, job) == "cb_static-mnist-N8-s3 topology=torus"
    assert len(tracking.run_name(cfg, tmp_path / ("x=" + "y" * 300))) == 128
