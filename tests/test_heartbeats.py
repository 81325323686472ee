"""Heartbeats and the launcher's rule for a silent rank (``dybw.mpi.health``, ``dybw.mpi.launch``): each
phase of a rank gets its own allowance, so a long evaluation is not taken for a hang."""

from __future__ import annotations

import json
import time

import pytest

from dybw.mpi.health import Heartbeat, read_heartbeats
from dybw.mpi.launch import _silent_rank

pytestmark = pytest.mark.unit  # no TensorFlow, MPI or subprocess: make test-fast

TIMEOUT, STARTUP = 120.0, 600.0


def _beat(phase: str, iteration: int, silent_for: float) -> dict:
    return {"pid": 1, "host": "h", "phase": phase, "iteration": iteration, "time": time.time() - silent_for}


def test_a_rank_evaluating_longer_than_the_timeout_while_another_iterates_is_not_stopped():
    """What once failed a CIFAR-10 job on a loaded machine: rank 0 spent 150 s in the first evaluation,
    rank 1 reached iteration 1, and rank 0's silence was measured against runner.timeout_s."""
    beats = {0: _beat("evaluating", 0, 165), 1: _beat("iterating", 1, 0)}
    assert _silent_rank(beats, 2, time.time() - 300, TIMEOUT, STARTUP) is None


def test_a_rank_silent_while_iterating_is_stopped_after_the_timeout_and_named():
    beats = {0: _beat("iterating", 7, 130), 1: _beat("iterating", 7, 0)}
    message = _silent_rank(beats, 2, time.time() - 300, TIMEOUT, STARTUP)
    assert message == (
        "rank 0 sent no heartbeat for 130 s (while iterating, last at iteration 7); stopped after runner.timeout_s=120"
    )


def test_starting_and_evaluating_are_allowed_the_startup_timeout_and_no_more():
    for phase, iteration in (("starting", -1), ("evaluating", 400)):
        beats = {0: _beat("iterating", 1, 0), 1: _beat(phase, iteration, 610)}
        message = _silent_rank(beats, 2, time.time() - 900, TIMEOUT, STARTUP)
        assert message is not None and message.startswith(f"rank 1 sent no heartbeat for 610 s (while {phase}")
        assert message.endswith("stopped after runner.startup_timeout_s=600")


def test_a_rank_that_never_beat_is_starting():
    message = _silent_rank({0: _beat("iterating", 1, 0)}, 2, time.time() - 700, TIMEOUT, STARTUP)
    assert message is not None and "rank 1" in message and "(while starting)" in message


def test_the_heartbeat_writes_its_phase_at_once_when_it_changes(tmp_path):
    heartbeat = Heartbeat(tmp_path, 3, interval=3600.0)  # no beat is due by time within this test
    assert read_heartbeats(tmp_path)[3]["phase"] == "starting"
    with heartbeat.evaluating():
        assert read_heartbeats(tmp_path)[3]["phase"] == "evaluating"
    assert read_heartbeats(tmp_path)[3]["phase"] == "starting"  # the phase before the evaluation
    heartbeat.beat(1, phase="iterating")
    with heartbeat.evaluating():
        pass
    assert (read_heartbeats(tmp_path)[3]["phase"], read_heartbeats(tmp_path)[3]["iteration"]) == ("iterating", 1)
    heartbeat.beat(2, phase="iterating")  # same phase, interval not passed: not rewritten
    heartbeat.waiting()
    on_disk = json.loads((tmp_path / ".mpi" / "rank-3.json").read_text())
    assert (on_disk["phase"], on_disk["iteration"]) == ("iterating", 1)
