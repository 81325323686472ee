"""The README's main command on the real datasets, through the real CLI (the first issue's acceptance)."""

from __future__ import annotations

import json

import pytest

from helpers import run_cli

pytestmark = pytest.mark.slow


def summary(root, job):
    return json.loads((root / "results" / "adhoc" / job / "summary.json").read_text())


def test_readme_multirun_on_mnist(tmp_path):
    done = run_cli(["-m", "algo=cb_dybw,cb_full", "dataset=mnist", "progress=false"], cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    dybw, full = summary(tmp_path, "algo=cb_dybw,dataset=mnist"), summary(tmp_path, "algo=cb_full,dataset=mnist")
    for job in (dybw, full):
        assert job["status"] == "completed"
        assert job["final_test_accuracy"] >= 0.95
    # same delays for both (common random numbers): DyBW at most half of Full's mean iteration
    assert dybw["mean_iteration_duration"] <= 0.5 * full["mean_iteration_duration"]
    assert dybw["mean_backups"] > 0 and full["mean_backups"] == 0


def test_cifar10_passes_forty_percent(tmp_path):
    done = run_cli(["dataset=cifar10", "progress=false"], cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    job = summary(tmp_path, "dataset=cifar10")
    assert job["status"] == "completed" and job["final_test_accuracy"] >= 0.40
