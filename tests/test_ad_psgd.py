"""AD-PSGD on the event engine: the hand-worked event order, pairwise averaging, determinism, resume, config."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import zero_gradient_model  # noqa: F401 - registers model=zero_gradient before any config is composed
from dybw.config import validate
from dybw.data import load_dataset
from dybw.errors import ConfigError
from dybw.event_engine import EventEngine, EventSchedule
from dybw.models import build_network
from dybw.results import read_checkpoint, write_checkpoint
from dybw.sampling import WorkerBatches
from dybw.tf_setup import import_tensorflow
from dybw.trainer import StackedTrainer
from helpers import TINY, compose, run_cli, run_config

AD_PSGD = TINY + ["algo=ad_psgd"]


def build(overrides, engine_class=EventEngine):
    """(cfg, dataset, engine) of ``AD_PSGD + overrides``, validated as run.py does."""
    cfg, _ = compose(AD_PSGD + overrides)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the note on the options ad_psgd ignores (tested below)
        graph = validate(cfg)
    dataset = load_dataset(cfg.dataset, cfg.num_workers, cfg.data_seed, data_dir=cfg.data_dir)
    network = build_network(cfg.model, dataset.input_dim, dataset.num_classes)
    return cfg, dataset, engine_class(cfg, graph, dataset, network)


def run(engine, **kwargs) -> list[dict]:
    rows = []
    engine.run(rows.append, **kwargs)
    return [{k: v for k, v in row.items() if k != "wall_seconds"} for row in rows]


# --------------------------------------------------------------------------------------------------
# The hand-worked example

# Two workers (one link), constant delays: C_0 = 0.5, C_1 = 3 x 0.5 = 1.5; D_01 = 0.25, D_10 = 2 x 0.25
# = 0.5 (worker 1's outgoing link is slow).  Every time is a binary fraction, so the floats are exact.
HAND = [
    "num_workers=2",
    "topology=complete",
    "straggler=none",
    "straggler.compute.shift=0.5",
    "straggler.compute.persistent_ids=[1]",
    "straggler.compute.persistent_factor=3",
    "straggler.link.shift=0.25",
    "straggler.link.persistent_ids=[1]",
    "straggler.link.persistent_factor=2",
    "iterations=3",
    "eval_every=1",
    "algo.eta0=0.5",
    "algo.delta=0.8",
]


def test_two_workers_with_constant_delays_follow_the_hand_worked_event_order():
    """Worker i's step: ready = start + C_i, average = ready + D_ij, stop = average + D_ji (= next start).

    worker 0 (C = 0.5, there 0.25, back 0.5):  k=0: 0 -> 0.5 -> 0.75 -> 1.25   k=1: 1.25 -> 1.75 -> 2.0 -> 2.5
                                              k=2: 2.5 -> 3.0 -> 3.25 -> 3.75  k=3: 3.75 -> 4.25 -> 4.5 -> 5.0
    worker 1 (C = 1.5, there 0.5, back 0.25):  k=0: 0 -> 1.5 -> 2.0 -> 2.25    k=1: 2.25 -> 3.75 -> 4.25 -> 4.5

    Events in (time, worker) order ("finish" applies the step's gradient, then reads for the next step):

        e0  0     w0 read 0             e7  2.5   w0 finish 1 (3rd step done)
        e1  0     w1 read 0             e8  3.25  w0 average 2
        e2  0.75  w0 average 0          e9  3.75  w0 finish 2 (4th: iteration 2 ends)
        e3  1.25  w0 finish 0 (1st)     e10 4.25  w1 average 1
        e4  2.0   w0 average 1  } tie:  e11 4.5   w0 average 3  } tie: w0's averaging comes first, so
        e5  2.0   w1 average 0  } w0    e12 4.5   w1 finish 1   } w1's gradient lands on the average
        e6  2.25  w1 finish 0 (2nd: iteration 1 ends)            e13 5.0  w0 finish 3 (6th: iteration 3)

    3 iterations = 6 finished steps; the evaluations are at 0, 2.25, 3.75 and 5.0 seconds.
    """
    tf = import_tensorflow()

    class Recording(EventEngine):
        def _run_chunk(self, chunk):
            self.events = (
                getattr(self, "events", [])
                + [(int(k), int(w), int(s)) for k, w, s in zip(chunk.kinds, chunk.workers, chunk.steps)][: chunk.count]
            )
            super()._run_chunk(chunk)

    cfg, dataset, engine = build(HAND, Recording)
    rows = run(engine)
    read, average = StackedTrainer.STEP, StackedTrainer.AVERAGE
    assert engine.events == [
        (read, 0, 0),
        (read, 1, 0),
        (average, 0, 0),
        (read, 0, 1),
        (average, 0, 1),
        (average, 1, 0),
        (read, 1, 1),
        (read, 0, 2),
        (average, 0, 2),
        (read, 0, 3),
        (average, 1, 1),
        (average, 0, 3),
        (read, 1, 2),
        (read, 0, 4),
    ]
    assert [row["iteration"] for row in rows] == [0, 1, 2, 3]
    assert [row["time"] for row in rows] == [0.0, 2.25, 3.75, 5.0]
    assert rows[-1]["mean_iteration_duration"] == 5.0 / 3
    assert [row["lr"] for row in rows] == [0.5, np.float32(0.5), np.float32(0.5 * 0.8**2), np.float32(0.5 * 0.8**3)]

    timeline = pd.DataFrame(engine.timeline.truncated())
    expected = pd.DataFrame(
        [  # iteration (the worker's step), worker, start, ready, average, stop
            (0, 0, 0.0, 0.5, 0.75, 1.25),
            (0, 1, 0.0, 1.5, 2.0, 2.25),
            (1, 0, 1.25, 1.75, 2.0, 2.5),
            (2, 0, 2.5, 3.0, 3.25, 3.75),
            (1, 1, 2.25, 3.75, 4.25, 4.5),
            (3, 0, 3.75, 4.25, 4.5, 5.0),
        ],
        columns=["iteration", "worker", "start", "ready", "average", "stop"],
    )
    for column in expected:
        assert timeline[column].tolist() == expected[column].tolist(), column
    assert timeline["finish"].tolist() == timeline["stop"].tolist()
    assert timeline["partner"].tolist() == [1, 0, 1, 1, 0, 1]
    assert (timeline["used"] == 1).all() and (timeline["backups"] == 0).all()  # d_i = 1

    # The same events written out by hand, one TF call per gradient: the engine's parameters match, and
    # they would not if w1's finish at 4.5 came before w0's averaging.
    def by_hand(tie_broken_by_worker_id: bool) -> np.ndarray:
        trainer = engine.trainer
        batches = [WorkerBatches(dataset.shards[i], cfg.dataset.batch_size, cfg.seed, i) for i in range(2)]
        x = [trainer.network.initial_params(cfg.model_seed) for _ in range(2)]
        g = [None, None]

        def read(i):
            indices = tf.constant(batches[i].take(1)[0].astype(np.int32))
            g[i] = trainer._gradient(tf.constant(x[i]), indices)[0].numpy()

        def finish(i, k):
            x[i] = x[i] - np.float32(0.5 * 0.8**k) * g[i]
            read(i)

        def averaging():
            x[0] = x[1] = (x[0] + x[1]) * np.float32(0.5)

        read(0), read(1), averaging(), finish(0, 0), averaging(), averaging(), finish(1, 0), finish(0, 1)
        averaging(), finish(0, 2), averaging()
        if tie_broken_by_worker_id:
            averaging(), finish(1, 1)
        else:
            finish(1, 1), averaging()
        finish(0, 3)
        return np.stack(x)

    params = np.asarray(engine.trainer.params)
    np.testing.assert_allclose(params, by_hand(True), rtol=1e-5, atol=1e-6)
    assert np.abs(params - by_hand(False)).max() > 100 * np.abs(params - by_hand(True)).max()


# --------------------------------------------------------------------------------------------------
# Pairwise averaging with a zero gradient

ZERO_GRADIENT = [
    "plugins=[zero_gradient_model]",
    "model=zero_gradient",
    "num_workers=8",
    "topology=ring",
    "straggler=paper",
    "iterations=40",
    "eval_every=5",
]


def test_zero_gradient_keeps_the_average_model_and_reaches_consensus():
    """With ``grad f = 0`` only the averaging moves the models: ``x_i, x_j <- (x_i + x_j) / 2`` keeps
    ``sum_i x_i`` exactly in exact arithmetic and shrinks ``sum_i ||x_i - xbar||^2`` by
    ``||x_i - x_j||^2 / 2``.  In float32 each averaging rounds ``x_i + x_j`` once (halving is exact):
    the pair's sum moves by at most ``u |x_i + x_j|`` (``u = 2^-24``), and since averaging never expands
    the largest entry ``M``, after ``A`` averagings ``|X_32 - X_exact| <= A u M`` entrywise and the average
    moves by at most ``2 A u M / N``.  The exact reference is the same averagings replayed in float64."""
    tf = import_tensorflow()

    class Recording(EventEngine):
        averagings: list = []

        def _run_chunk(self, chunk):
            kinds, workers, partners = (a[: chunk.count] for a in (chunk.kinds, chunk.workers, chunk.partners))
            pairs = np.stack([workers, partners], axis=1)[kinds == StackedTrainer.AVERAGE]
            self.averagings = self.averagings + [tuple(p) for p in pairs]
            super()._run_chunk(chunk)

    cfg, _, engine = build(ZERO_GRADIENT, Recording)
    # Distinct starting models (x(0) plus a different offset per worker), so there is something to average.
    start = np.asarray(engine.trainer.params) + np.random.default_rng(0).normal(
        0, 1, engine.trainer.params.shape
    ).astype(np.float32)
    engine.trainer.params = tf.constant(start)
    rows = run(engine)
    final = np.asarray(engine.trainer.params, dtype=np.float64)

    exact = start.astype(np.float64)
    for i, j in engine.averagings:
        exact[i] = exact[j] = (exact[i] + exact[j]) / 2
    count, largest, u = len(engine.averagings), np.abs(start).max(), 2.0**-24
    assert count >= cfg.iterations * cfg.num_workers  # one averaging per finished step, and those in flight
    np.testing.assert_allclose(exact.mean(axis=0), start.astype(np.float64).mean(axis=0), rtol=0, atol=1e-12)
    assert np.abs(final - exact).max() <= count * u * largest
    assert np.abs(final.mean(axis=0) - start.astype(np.float64).mean(axis=0)).max() <= 2 * count * u * largest / 8

    consensus = [row["consensus_distance"] for row in rows]
    initial = np.mean(np.sum((start - start.mean(axis=0)) ** 2, axis=1))
    assert consensus[0] == pytest.approx(initial, rel=1e-5)
    floor = 1e-9 * consensus[0]  # float32 rounding, once the models agree
    assert all(later <= earlier * (1 + 1e-6) + floor for earlier, later in zip(consensus, consensus[1:]))
    assert consensus[-1] < 1e-6 * consensus[0]
    # The average model's loss and accuracy do not move either (the same model up to rounding).
    assert rows[-1]["test_accuracy"] == pytest.approx(rows[0]["test_accuracy"], abs=1.5 / 128)


# --------------------------------------------------------------------------------------------------
# Determinism, chunking, resume


def frames(job_dir):
    metrics = pd.read_csv(job_dir / "metrics.csv").drop(columns="wall_seconds")
    return metrics, pd.read_parquet(job_dir / "timeline.parquet")


def test_two_runs_and_any_chunking_give_the_same_bits(tmp_path):
    """The order of events never depends on the model, and each event is the same XLA computation however
    many share a call (``runner.chunk`` sets the call's capacity)."""
    overrides = AD_PSGD + ["iterations=12", "eval_every=4", "model=mlp", "model.hidden=[16]", "straggler=pareto"]
    runs = [
        overrides + extra
        for extra in (["runner.chunk=64"], ["runner.chunk=64"], ["runner.chunk=1"], ["runner.chunk=3"])
    ]
    results = []
    for i, run_overrides in enumerate(runs):
        summary = run_config(run_overrides, tmp_path / str(i))
        assert summary["status"] == "completed", summary["message"]
        assert summary["iterations"] == 12
        results.append(frames(tmp_path / str(i)))
    for metrics, timeline in results[1:]:
        pd.testing.assert_frame_equal(metrics, results[0][0], check_exact=True)
        pd.testing.assert_frame_equal(timeline, results[0][1], check_exact=True)
    metrics, timeline = results[0]
    assert len(timeline) == 12 * 4  # K N finished steps, one row each
    assert metrics["iteration"].tolist() == [0, 4, 8, 12]
    assert metrics["time"].iloc[-1] == timeline["finish"].max()
    assert np.allclose(
        metrics["mean_iteration_duration"].iloc[1:], metrics["time"].iloc[1:] / metrics["iteration"].iloc[1:]
    )


def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path):
    """The checkpoint (parameters, gradients in flight, every worker's step in flight, timeline) goes through
    checkpoint.npz; the run resumed from the second evaluation ends with the same bits."""
    overrides = ["iterations=10", "eval_every=2", "model=mlp", "model.hidden=[16]", "straggler=pareto"]
    _, _, whole = build(overrides)
    states = []
    rows = run(whole, on_checkpoint=states.append)
    write_checkpoint(tmp_path, states[1], "digest")
    state = read_checkpoint(tmp_path, "digest")
    assert int(state["iteration"]) == 4

    _, _, resumed = build(overrides)
    rest = run(resumed, resume_from=state)
    assert rest == rows[3:]
    assert np.array_equal(np.asarray(resumed.trainer.params), np.asarray(whole.trainer.params))
    for name, values in whole.timeline.truncated().items():
        assert np.array_equal(resumed.timeline.truncated()[name], values), name


def test_the_schedule_state_is_every_workers_step_in_flight():
    cfg, dataset, engine = build(["straggler=pareto", "iterations=5"])
    schedule = engine.schedule
    schedule.next_chunk(1000, 9)
    assert schedule.completed == 9
    again = EventSchedule(cfg, engine_graph(cfg), dataset.shards, engine.algorithm)
    again.restore(schedule.state())
    ahead = schedule.next_chunk(1000, 20)
    resumed = again.next_chunk(1000, 20)
    for name in ("kinds", "workers", "partners", "steps", "lrs", "batches"):
        assert np.array_equal(getattr(ahead, name), getattr(resumed, name)), name
    for name, values in ahead.rows.items():
        assert np.array_equal(resumed.rows[name], values), name


def engine_graph(cfg):
    from dybw.topology import build_graph

    return build_graph(cfg.topology, cfg.num_workers)


# --------------------------------------------------------------------------------------------------
# Config


def test_runner_mpi_is_refused_in_one_line_naming_the_reason():
    cfg, _ = compose(AD_PSGD + ["runner=mpi"])
    with pytest.raises(ConfigError) as error:
        validate(cfg)
    message = str(error.value)
    assert error.value.field == "runner" and "\n" not in message
    assert "algo=ad_psgd runs on the event engine" in message and "no common iterations" in message
    assert message.endswith("use runner=local")


def test_the_options_it_ignores_are_named_once():
    cfg, _ = compose(AD_PSGD + ["protocol.sync=free", "algo.mixing=metropolis"])
    with pytest.warns(UserWarning) as caught:
        validate(cfg)
    notes = [str(w.message) for w in caught if "ignores" in str(w.message)]
    assert notes == [
        "algo=ad_psgd ignores protocol.sync=free, protocol.agreement=instant, algo.update=atc, "
        "algo.mixing=metropolis: asynchronous gossip has no iterations, barrier or agreement, and averages "
        "pairs with weights 1/2"
    ]


def test_the_command_line_names_the_ignored_options_once(tmp_path):
    """run.py validates every job before any starts and again when it runs: the note appears once."""
    result = run_cli(AD_PSGD + ["iterations=2", "eval_every=1", "protocol.agreement=flood"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    notes = [line for line in result.stderr.splitlines() if "algo=ad_psgd ignores" in line]
    assert len(notes) == 1 and "protocol.agreement=flood" in notes[0]


def test_an_ignored_option_does_not_change_the_numbers(tmp_path):
    base = AD_PSGD + ["iterations=4", "eval_every=2"]
    results = []
    for i, extra in enumerate(([], ["protocol.sync=free", "algo.update=cta", "algo.mixing=metropolis"])):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert run_config(base + extra, tmp_path / str(i))["status"] == "completed"
        results.append(frames(tmp_path / str(i)))
    for mine, theirs in zip(*results):
        pd.testing.assert_frame_equal(mine, theirs, check_exact=True)
