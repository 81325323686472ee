"""The baselines beyond the paper: cb_timeout and cb_adaptive, against what they must reduce to."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dybw.algorithms import CbAdaptive, CbFull, CbTimeout
from dybw.algorithms.cb_adaptive import choose_waits
from dybw.clock import VirtualClock
from dybw.errors import ConfigError
from dybw.topology import build_graph
from helpers import TINY, compose, run_config, topology


def test_a_timeout_of_inf_is_cb_full_bit_for_bit(tmp_path):
    common = TINY + ["straggler=paper", "model=mlp", "model.hidden=[8]"]
    run_config(common + ["algo=cb_full"], tmp_path / "full")
    run_config(common + ["algo=cb_timeout", "algo.timeout=inf"], tmp_path / "timeout")
    for name in ("metrics.csv", "timeline.parquet"):
        read = pd.read_csv if name.endswith("csv") else pd.read_parquet
        full, timeout = read(tmp_path / "full" / name), read(tmp_path / "timeout" / name)
        if "wall_seconds" in full:
            full, timeout = full.drop(columns="wall_seconds"), timeout.drop(columns="wall_seconds")
        pd.testing.assert_frame_equal(full, timeout, check_exact=True)


@pytest.mark.parametrize("sync", ["lockstep", "free"])
def test_a_timeout_of_zero_uses_only_the_messages_already_there(sync):
    graph = build_graph(topology("erdos_renyi", p=0.5, seed=4), 9)
    links = graph.directed_links()
    rng = np.random.default_rng(3)
    compute, delays = rng.exponential(0.01, (20, 9)), rng.exponential(0.01, (20, len(links)))
    chunk = VirtualClock(9, links, CbTimeout(graph.degrees, 0.0), sync).advance(compute, delays)
    np.testing.assert_array_equal(chunk.stop, chunk.ready)  # nobody waits past its own update
    arrivals = chunk.ready[:, links[:, 0]] + delays
    np.testing.assert_array_equal(chunk.used, arrivals <= chunk.ready[:, links[:, 1]])
    assert 0 < chunk.used.mean() < 1  # some messages were already there, others not


def test_timeout_bad_input_is_one_line():
    for value, expected in (("-0.5", ">= 0"), ("nan", ">= 0")):
        with pytest.raises(ConfigError, match=rf"^algo\.timeout=.* is invalid: must be a number {expected}"):
            compose(TINY + ["algo=cb_timeout", f"algo.timeout={value}"])
    assert compose(TINY + ["algo=cb_timeout", "algo.timeout=inf"])[0].algo.timeout == np.inf


def test_an_unknown_adaptive_knob_is_one_line():
    with pytest.raises(
        ConfigError, match=r"^algo\.decay=0\.5 is invalid: unknown key; valid keys here: .*window, noise"
    ):
        _, plain = compose(TINY + ["algo=cb_adaptive"])
        plain["algo"]["decay"] = 0.5
        from dybw.config import load

        load(plain)
    with pytest.raises(ConfigError, match=r"^algo\.noise=1\.0 is invalid: allowed range \[0, 1\)"):
        compose(TINY + ["algo=cb_adaptive", "algo.noise=1.0"])


def test_the_adaptive_choice_worked_by_hand():
    """One worker, two neighbours, two past iterations (ATC: no compute after the decision).

    ready - start = 1 both times; neighbours' offsets (2, 5) then (3, 7).  Waiting for p neighbours:
      p = 1: mean(max(1, 2), max(1, 3)) = 2.5      p = 2: mean(5, 7) = 6
    progress with noise 0.5: p = 1: 1 - 0.5/2 = 0.75, p = 2: 1 - 0.5/3 = 0.8333
    rate: 0.75 / 2.5 = 0.3 against 0.8333 / 6 = 0.139 -> p = 1.  With offsets (2, 2.2) and (3, 3.1) waiting
    for both costs little: p = 2 has rate 0.8333 / 2.65 = 0.314 > 0.3 -> p = 2."""
    waited, tail = np.array([[1.0], [1.0]]), np.zeros((2, 1))
    slow = np.array([[[2.0, 5.0]], [[3.0, 7.0]]])
    fast = np.array([[[2.0, 2.2]], [[3.0, 3.1]]])
    assert choose_waits(waited, tail, slow, np.array([2]), 0.5).tolist() == [1]
    assert choose_waits(waited, tail, fast, np.array([2]), 0.5).tolist() == [2]
    # a worker with one neighbour can only wait for it
    assert choose_waits(waited, tail, slow[:, :, :1], np.array([1]), 0.5).tolist() == [1]


def test_adaptive_waits_for_everyone_first_then_adapts_and_beats_cb_full():
    graph = build_graph(topology("erdos_renyi", p=0.4, seed=2), 12)
    links = graph.directed_links()
    rng = np.random.default_rng(0)
    compute, delays = 0.01 + rng.exponential(0.005, (200, 12)), 0.002 + rng.exponential(0.03, (200, len(links)))
    adaptive = VirtualClock(12, links, CbAdaptive(graph.degrees, 10, 0.5)).advance(compute, delays)
    full = VirtualClock(12, links, CbFull(graph.degrees)).advance(compute, delays)
    np.testing.assert_array_equal(adaptive.used[0], full.used[0])  # no history: every neighbour
    assert adaptive.end[-1] < 0.7 * full.end[-1]
    assert adaptive.used_count[50:].mean() < graph.degrees.mean()
