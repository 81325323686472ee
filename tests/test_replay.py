"""``dybw.replay``: a run that obeys the virtual clock's equations, replayed from what it "measured", gives
itself back -- both replays, to rounding -- and a late agreement shows only in the replay that measures it.
(tests/cluster/test_hosts.py replays a real run over shaped TCP links.)"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dybw.config import validate
from dybw.engine import Timeline, delays_and_clock
from dybw.replay import CENSORED_S, Measured, main, replay
from dybw.results import ResultsWriter
from helpers import TINY, compose

pytestmark = pytest.mark.unit  # no TensorFlow, MPI or subprocess: make test-fast

CONFIG = [*TINY, "algo=cb_dybw", "straggler=paper", "num_workers=6", "topology=erdos_renyi", "iterations=40"]


def _as_measured(job_dir, overrides, agreement_lag: float = 0.0):
    """A job directory as a wall run writes it, from the virtual clock of ``overrides``: the timeline, each
    message's arrival (none for a message that came after its receiver stopped: the wall clock never
    sees those), the config.  ``agreement_lag`` makes every worker learn theta that much late."""
    cfg, plain = compose(overrides)
    graph = validate(cfg)
    delays, clock = delays_and_clock(cfg, graph)
    compute, link = delays.compute(0, cfg.iterations), delays.link(0, cfg.iterations)
    chunk = clock.advance(compute, link)
    timeline = Timeline(cfg.iterations, cfg.num_workers, graph.degrees, links=clock.links)
    timeline.record(chunk, cfg.iterations)
    arrival = chunk.ready[:, clock.src] + link
    if agreement_lag:
        # Each iteration then starts later by the lag; ATC cb-DyBW stops (and finishes) at theta + lag.
        shift = agreement_lag * np.arange(1, cfg.iterations + 1)[:, None]
        for name in ("start", "ready", "stop", "finish"):
            timeline.columns[name] += shift - (0.0 if name in ("stop", "finish") else agreement_lag)
        arrival += shift - agreement_lag
    # The clock's own used sets (the message that sets theta arrives at theta exactly, which recomputing
    # arrival <= stop from absolute times would get wrong by rounding), and what a late stop adds.
    used = chunk.used | (arrival <= timeline.columns["stop"][:, clock.dst])
    timeline.link_columns["used"] = used
    timeline.link_columns["arrival"] = np.where(used, arrival, np.nan)
    timeline.write(ResultsWriter(job_dir))
    (job_dir / ".mpi").mkdir()
    (job_dir / ".mpi" / "job.json").write_text(json.dumps({"config": plain}))
    return timeline


def test_a_run_that_obeys_the_clock_replays_to_itself(tmp_path):
    original = _as_measured(tmp_path / "wall", CONFIG)
    results = replay(tmp_path / "wall")
    for name in ("network", "agreed"):
        assert results[name]["ratio"] == pytest.approx(1.0, abs=1e-12)
        assert results[name]["same_used_set"] == 1.0
        replayed = pd.read_parquet(tmp_path / "wall" / "replay" / name / "timeline.parquet")
        np.testing.assert_allclose(replayed["stop"], original.columns["stop"].reshape(-1), rtol=0, atol=1e-9)
    # What straggler=trace reads: the measured compute times and link delays, censored where unseen.
    link = pd.read_csv(tmp_path / "wall" / "replay" / "link.csv")
    assert list(link.columns) == ["iteration", "src", "dst", "seconds"]
    assert (link["seconds"] == CENSORED_S).sum() == (~original.link_columns["used"]).sum() > 0


def test_a_late_agreement_shows_only_in_the_replay_that_measures_it(tmp_path):
    lag = 0.004
    _as_measured(tmp_path / "wall", CONFIG, agreement_lag=lag)
    measured = Measured(tmp_path / "wall")
    cfg = compose(CONFIG)[0]
    _, clock = delays_and_clock(cfg, validate(cfg))
    np.testing.assert_allclose(measured.lags(clock)["threshold"], lag, atol=1e-9)
    results = replay(tmp_path / "wall")
    assert results["agreed"]["ratio"] == pytest.approx(1.0, abs=1e-9)
    network = results["network"]
    assert network["mean_duration"]["wall"] - network["mean_duration"]["virtual"] == pytest.approx(lag, abs=1e-9)


def test_the_command_prints_both_replays(tmp_path, capsys):
    _as_measured(tmp_path / "wall", CONFIG)
    assert main([str(tmp_path / "wall"), "--json", str(tmp_path / "replay.json")]) == 0
    out = capsys.readouterr().out
    assert "== replayed: measured delays, agreement as modelled" in out and "== replayed: and measured agreement" in out
    assert set(json.loads((tmp_path / "replay.json").read_text())) == {"network", "agreed"}
