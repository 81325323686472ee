"""The README's main command on the real datasets, through the real CLI: the numbers the README prints
are read from the README itself and must be what the runs give, to the printed digits (the reference CPU
kernels make them the same on every x86-64 machine with AVX2 and FMA: docs/figures.md)."""

from __future__ import annotations

import json
import re

import pytest

from helpers import REPO, run_cli

pytestmark = pytest.mark.slow
README = (REPO / "README.md").read_text()


def summary(root, job):
    return json.loads((root / "results" / "adhoc" / job / "summary.json").read_text())


def readme_row(label: str) -> list[str]:
    """The cells of the README's main table for the job labelled ``label`` (cb-DyBW, cb-Full)."""
    lines = README.splitlines()
    (header,) = [i for i, line in enumerate(lines) if line.startswith("| job | status | final test accuracy |")]
    table = lines[header + 2 : header + 4]
    (row,) = [line for line in table if line.startswith(f"| {label} |")]
    return [cell.strip() for cell in row.strip("|").split("|")]


def as_printed(job: dict) -> list[str]:
    """A summary's cells as the README's table prints them (all but the machine's wall time)."""
    return [
        job["status"],
        f"{job['final_test_accuracy']:.4f}",
        f"{job['mean_iteration_duration']:.4f} s",
        f"{job['time_to_target']:.1f} s (iteration {job['iterations_to_target']})",
    ]


def test_readme_multirun_on_mnist_gives_the_readmes_table_to_its_digits(tmp_path):
    done = run_cli(["-m", "algo=cb_dybw,cb_full", "dataset=mnist", "progress=false"], cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    dybw, full = summary(tmp_path, "algo=cb_dybw,dataset=mnist"), summary(tmp_path, "algo=cb_full,dataset=mnist")
    for label, job in (("cb-DyBW", dybw), ("cb-Full", full)):
        assert as_printed(job) == readme_row(label)[1:5], label
    assert dybw["mean_backups"] > 0 and full["mean_backups"] == 0
    # The cut the README states for this command, from the same two jobs.
    cut = 100 * (1 - dybw["mean_iteration_duration"] / full["mean_iteration_duration"])
    assert f"cb-DyBW's iterations are {cut:.1f} % shorter" in README


def test_cifar10_reaches_the_readmes_accuracy(tmp_path):
    done = run_cli(["dataset=cifar10", "progress=false"], cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    job = summary(tmp_path, "dataset=cifar10")
    (printed,) = re.findall(r"`python run.py dataset=cifar10`\s+reaches (\d\.\d\d) test accuracy", README)
    assert job["status"] == "completed" and f"{job['final_test_accuracy']:.2f}" == printed
