"""The progress bar's ETA: start-up (data, TensorFlow, compiling the step, ranks arriving) is not a rate.

A fake clock drives tqdm (its module-level ``time``), so the test measures what the bar would show, not
how fast this machine is.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import tqdm.std

from dybw.job import _Progress

pytestmark = pytest.mark.unit  # no TensorFlow, MPI or subprocess: make test-fast

TOTAL = 500
WARM_UP_S = 60.0  # the first iteration: the evaluation at k=0 and compiling the step
ITERATION_S = 0.1  # every later iteration


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(tqdm.std, "time", fake)
    return fake


def _progress(clock: str = "virtual"):
    cfg = SimpleNamespace(
        iterations=TOTAL,
        algo=SimpleNamespace(name="cb_dybw"),
        dataset=SimpleNamespace(name="mnist"),
        runner=SimpleNamespace(clock=clock),
    )
    return _Progress(cfg, enabled=True)


def _eta(bar) -> float | None:
    info = bar.format_dict
    return None if not info["rate"] else (info["total"] - info["n"]) / info["rate"]


@pytest.mark.parametrize("done", [0, 250])  # a fresh job, and one resumed from a checkpoint at 250
def test_the_first_eta_counts_ordinary_iterations_only(clock, done):
    progress = _progress()
    progress.start(done)
    clock.now += WARM_UP_S
    progress.advance(done + 1, 0.0)
    bar = progress.bar
    assert bar.n == done + 1 and _eta(bar) is None  # no rate yet: "?" rather than hours
    assert "?" in str(bar)
    k = done + 1
    while clock.now < 1000.0 + WARM_UP_S + 3.0:  # the first few prints (mininterval 0.5 s)
        clock.now += ITERATION_S
        k += 1
        progress.advance(k, 0.0)
    expected = (TOTAL - k) * ITERATION_S
    assert _eta(bar) == pytest.approx(expected, rel=0.05)  # counting the warm-up gives about 20x this
    assert bar.n == k and bar.format_dict["elapsed"] == pytest.approx((k - done - 1) * ITERATION_S)
    progress.close()


@pytest.mark.parametrize(("runner_clock", "label"), [("virtual", "virtual 1.25 s"), ("wall", "measured 1.25 s")])
def test_the_bar_names_whose_seconds_it_shows(clock, runner_clock, label):
    progress = _progress(runner_clock)
    progress.start(0)
    progress.advance(1, 1.25)
    assert f"{label}, acc nan" in str(progress.bar)
    progress.close()


def test_disabled_progress_draws_nothing(clock):
    progress = _Progress(SimpleNamespace(iterations=TOTAL), enabled=False)
    progress.start(0)
    progress.advance(1, 0.0)
    assert progress.bar is None
