"""The wall clock against the virtual clock, policy by policy: real delays slept on 4 MPI ranks, measured.

Every case's wall-clock job runs in one MPI world, one job after another, as a multirun runs them (the ranks
start and import TensorFlow once, instead of once per case); each test then checks its own job.  The virtual
runs are this process's (runner=local: the same bits as MPI's virtual clock, tests/mpi/test_mpi_runner.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import SLOW_DELAYS, TINY, run_config, run_in_shared_worlds  # noqa: E402

CASES = {
    "cb_full": ["algo=cb_full"],
    "cb_static": ["algo=cb_static"],
    "cb_dybw": ["algo=cb_dybw"],
    # no doorbells: every arrival found by polling, MPI's own barrier
    "cb_dybw,poll": ["algo=cb_dybw", "runner.wake=poll"],
    "cb_dybw,cta,allreduce": ["algo=cb_dybw", "algo.update=cta", "protocol.agreement=allreduce"],
    "cb_static,cta,free": ["algo=cb_static", "algo.update=cta", "protocol.sync=free"],
    # news crosses the ring in two hops
    "cb_adaptive,flood,ring": ["algo=cb_adaptive", "protocol.agreement=flood", "topology=ring"],
    "cb_timeout,0.1,cta": ["algo=cb_timeout", "algo.timeout=0.1", "algo.update=cta"],
    "isolated,free": ["algo=isolated", "protocol.sync=free"],
}
# Lock-step CTA cb-DyBW over more iterations, for its end-of-iteration barrier (the wall clock polls every 1 ms).
CTA_LOCKSTEP = "cb_dybw,cta,lockstep"
ITERATIONS = {**dict.fromkeys(CASES, 20), CTA_LOCKSTEP: 30}
OVERRIDES = {**CASES, CTA_LOCKSTEP: ["algo=cb_dybw", "algo.update=cta"]}


def _job(name: str) -> tuple[list[str], list[str]]:
    """(the job's overrides on the virtual clock, the wall run's own runner keys)."""
    overrides = OVERRIDES[name]
    runner = [o for o in overrides if o.startswith("runner.")]
    common = TINY + SLOW_DELAYS + ["num_workers=4", "topology=complete", f"iterations={ITERATIONS[name]}"]
    return common + [f"eval_every={ITERATIONS[name]}", *(o for o in overrides if o not in runner)], runner


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    """Per case: ``compare()`` of its wall-clock and virtual runs, and their directories."""
    from dybw.compare_clocks import compare

    root = tmp_path_factory.mktemp("wall_clock_policies")
    wall_jobs = {}
    for name in OVERRIDES:
        virtual, runner = _job(name)
        assert run_config(virtual, root / name / "virtual")["status"] == "completed"
        wall_jobs[root / name / "wall"] = virtual + ["runner=mpi", "runner.clock=wall", *runner]
    results = run_in_shared_worlds(wall_jobs)
    runs = {}
    for name in OVERRIDES:
        wall = results[root / name / "wall"]
        ok = isinstance(wall, dict) and wall["status"] == "completed"
        runs[name] = {
            "wall_result": wall,
            "dir": root / name,
            "comparison": compare(root / name / "wall", root / name / "virtual") if ok else None,
        }
    return runs


def _checked(run: dict) -> dict:
    assert run["comparison"] is not None, f"the wall-clock job did not complete: {run['wall_result']}"
    return run["comparison"]


def _barrier_held(job_dir, tolerance: float) -> np.ndarray:
    """Per iteration k >= 1: the earliest start of k minus the latest finish of k-1 (>= 0 in lock-step)."""
    timeline = pd.read_parquet(job_dir / "timeline.parquet")
    starts = timeline.groupby("iteration")["start"].min().to_numpy()
    finishes = timeline.groupby("iteration")["finish"].max().to_numpy()
    return starts[1:] - finishes[:-1] + tolerance


def _assert_durations_match(result: dict) -> None:
    """The typical iteration within 10 % of the virtual clock's, in the median: a missing barrier or a message
    sent late shifts every iteration, whereas a stall of a shared machine adds its length / 20 to the mean of
    20 iterations (a CI machine once added 0.62 s in all, a mean ratio of 1.106, where this machine measures
    1.01) -- so the mean gets a wider band, and it cannot be faster."""
    assert 0.9 <= result["median_ratio"] <= 1.1, result["durations"]
    assert 0.9 <= result["ratio"] <= 1.25, result["durations"]


@pytest.mark.parametrize("name", list(CASES))
def test_wall_clock_durations_and_used_sets_match_the_virtual_clock(runs, name):
    """4 ranks, every policy, both update orders, both syncs and every agreement among the cases: the measured
    median iteration within 10 % of the virtual clock's, and mostly the same used sets."""
    result = _checked(runs[name])
    wall_dir = runs[name]["dir"] / "wall"
    overrides = CASES[name]
    _assert_durations_match(result)
    assert result["same_used_set"] >= 0.75, result["same_used_set_per_worker"]
    timeline = pd.read_parquet(wall_dir / "timeline.parquet")
    assert len(timeline) == 20 * 4
    links = pd.read_parquet(wall_dir / "links.parquet")
    assert (links.groupby(["iteration", "dst"])["used"].sum().to_numpy() == timeline["used"].to_numpy()).all()
    if "algo=isolated" in overrides:
        assert (timeline["used"] == 0).all() and links["arrival"].isna().all()  # nothing is ever sent
    if "protocol.sync=free" not in overrides and "algo.update=cta" in overrides:
        assert (_barrier_held(wall_dir, 1e-9) >= 0).all()


def test_cta_dybw_in_lockstep_starts_each_iteration_after_every_worker_finished(runs):
    """Under CTA the local step follows theta, so lock-step needs its end-of-iteration barrier: every worker's
    start of k+1 is at or after every worker's finish of k (up to the poll interval)."""
    result = _checked(runs[CTA_LOCKSTEP])
    assert (_barrier_held(runs[CTA_LOCKSTEP]["dir"] / "wall", 0.001) >= 0).all()
    _assert_durations_match(result)
