"""``dybw.compare_clocks`` on hand-made timelines: what each of its duration numbers responds to."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dybw.compare_clocks import compare, main

pytestmark = pytest.mark.unit  # no TensorFlow, MPI or subprocess: make test-fast

WORKERS, ITERATIONS = 2, 20


def _job(job_dir, durations: np.ndarray):
    """A lock-step run whose iteration k lasts ``durations[k]`` for both workers, each using the other."""
    job_dir.mkdir()
    finish = np.cumsum(durations)
    timeline = pd.DataFrame(
        {
            "iteration": np.repeat(np.arange(ITERATIONS), WORKERS),
            "worker": np.tile(np.arange(WORKERS), ITERATIONS),
            "finish": np.repeat(finish, WORKERS),
            "backups": 0,
        }
    )
    links = pd.DataFrame(
        {
            "iteration": np.repeat(np.arange(ITERATIONS), WORKERS),
            "src": np.tile([1, 0], ITERATIONS),
            "dst": np.tile([0, 1], ITERATIONS),
            "used": True,
        }
    )
    timeline.to_parquet(job_dir / "timeline.parquet")
    links.to_parquet(job_dir / "links.parquet")
    return job_dir


@pytest.fixture
def virtual(tmp_path):
    return _job(tmp_path / "virtual", np.linspace(0.2, 0.4, ITERATIONS))


def test_one_stall_moves_the_mean_and_not_the_median(tmp_path, virtual):
    durations = np.linspace(0.2, 0.4, ITERATIONS)
    durations[7] += 0.6  # the machine stopped for 0.6 s once
    result = compare(_job(tmp_path / "wall", durations), virtual)
    assert result["ratio"] == pytest.approx(durations.sum() / (durations.sum() - 0.6))  # 1.1: +0.6 s over 6 s
    assert result["median_ratio"] == pytest.approx(1.0, rel=0.04)  # the stalled iteration passes one other
    assert result["same_used_set"] == 1.0


def test_a_systematic_delay_moves_both(tmp_path, virtual):
    result = compare(_job(tmp_path / "wall", np.linspace(0.2, 0.4, ITERATIONS) * 1.2), virtual)
    assert result["ratio"] == pytest.approx(1.2)
    assert result["median_ratio"] == pytest.approx(1.2)


def test_the_command_prints_both_ratios(tmp_path, virtual, capsys):
    assert main([str(_job(tmp_path / "wall", np.linspace(0.2, 0.4, ITERATIONS))), str(virtual)]) == 0
    out = capsys.readouterr().out
    assert "wall/virtual 1.000" in out and "median iteration: 1.000" in out
