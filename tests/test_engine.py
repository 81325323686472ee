"""Algebraic invariants of the local backend and common random numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dybw.config import validate
from dybw.data import load_dataset
from dybw.engine import IterationEngine, Schedule
from dybw.mixing import gathered_weights, mixing_matrices
from dybw.models import build_network
from dybw.tf_setup import import_tensorflow
from dybw.trainer import StackedTrainer
from helpers import TINY, compose, run_config


def engine_for(overrides):
    cfg, _ = compose(TINY + overrides)
    graph = validate(cfg)
    dataset = load_dataset(cfg.dataset, cfg.num_workers, cfg.data_seed, data_dir=cfg.data_dir)
    network = build_network(cfg.model, dataset.input_shape, dataset.num_classes)
    return cfg, graph, dataset, network, IterationEngine(cfg, graph, dataset, network)


def test_complete_graph_cb_full_uniform_equals_centralised_sgd_with_batch_nb():
    """x(k+1) = mean_j (x - eta g_j) = x - eta * (gradient on the union of the N batches of B)."""
    tf = import_tensorflow()
    overrides = [
        "topology=complete",
        "algo=cb_full",
        "algo.mixing=uniform",
        "model=mlp",
        "model.hidden=[8]",
        "algo.eta0=0.5",
        "iterations=8",
    ]
    cfg, graph, dataset, network, engine = engine_for(overrides)
    engine.run(lambda row: None)
    distributed = engine.trainer.params.numpy()

    # Centralised SGD, written independently: one model, batch = the N workers' batches concatenated.
    batches = Schedule(cfg, graph, dataset.shards).batches.take(0, cfg.iterations)  # [K, N, B]
    x = tf.Variable(network.initial_params(cfg.model_seed)[None, :])
    for k in range(cfg.iterations):
        union = batches[k].reshape(-1)
        with tf.GradientTape() as tape:
            logits = network.logits(tf, x, dataset.x_train[union][None])
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=dataset.y_train[union][None].astype(np.int32), logits=logits
                )
            )
        x.assign_sub(cfg.algo.eta0 * tape.gradient(loss, x))
    for j in range(cfg.num_workers):
        np.testing.assert_allclose(distributed[j], x.numpy()[0], atol=1e-5)


@pytest.mark.parametrize("model", [["model=logreg"], ["model=mlp", "model.hidden=[16]", "model.weight_decay=0.001"]])
def test_a_workers_local_step_does_not_depend_on_how_many_workers_share_the_process(model):
    """The MPI backend steps N/R workers per rank: each row must come out bit for bit as with all N.

    Batch 1024: at this size a batched XLA step (all rows in one reduction) rounds differently for 1, 4,
    5 or 2 rows than for 8 -- the failure this guards against."""
    tf = import_tensorflow()
    cfg, graph, dataset, network, engine = engine_for(
        model + ["num_workers=8", "dataset.num_train=8192", "dataset.batch_size=1024"]
    )
    trainer = engine.trainer
    params = tf.constant(np.random.default_rng(0).normal(0, 0.1, (8, network.num_params)).astype(np.float32))
    indices = tf.constant(Schedule(cfg, graph, dataset.shards).batches.take(0, 1)[0])
    all_rows, all_losses = trainer.adapt(params, indices, np.float32(0.3))
    for rows in (slice(0, 1), slice(0, 4), slice(3, 8), slice(5, 7)):
        some_rows, some_losses = trainer.adapt(params[rows], indices[rows], np.float32(0.3))
        np.testing.assert_array_equal(some_rows.numpy(), all_rows.numpy()[rows])
        np.testing.assert_array_equal(some_losses.numpy(), all_losses.numpy()[rows])
    weights = tf.constant(gathered_weights(np.full((8, 8), 1 / 8, np.float32), engine.sources))
    fused, _ = trainer._step(params, indices, np.float32(0.3), weights)  # the local backend's one program
    np.testing.assert_array_equal(fused.numpy(), trainer.mix(weights, all_rows, None).numpy())


@pytest.mark.parametrize("topology", [["topology=erdos_renyi", "topology.p=0.4"], ["topology=ring"]])
def test_mixing_hosted_rows_from_two_buffers_gives_the_bits_of_one(topology):
    """The MPI layout -- a rank's own rows ``[M, P]`` plus the rows it received ``[Q, P]`` -- mixes each
    hosted row to exactly the bits the local backend gets from the whole ``Y`` ``[N, P]``."""
    tf = import_tensorflow()
    cfg, graph, dataset, network, engine = engine_for(topology + ["num_workers=9", "model=mlp", "model.hidden=[16]"])
    rng = np.random.default_rng(1)
    used = graph.adjacency & (rng.random((9, 9)) < 0.7)
    weights = mixing_matrices(used, "metropolis", graph.degrees)
    rows = rng.normal(0, 3, (9, network.num_params)).astype(np.float32)
    whole = engine.trainer.mix(tf.constant(gathered_weights(weights, engine.sources)), tf.constant(rows), None).numpy()
    for hosted in (np.arange(0, 3), np.arange(3, 7), np.arange(7, 9)):
        sources = engine.sources[hosted]
        received = np.array(sorted(set(sources.ravel()) - set(hosted)), dtype=np.int64)
        position = {int(w): a for a, w in enumerate(np.concatenate([hosted, received]))}
        trainer = StackedTrainer(
            network, dataset, "atc", 0.0, network.initial_params(0), len(hosted), np.vectorize(position.get)(sources)
        )
        part = trainer.mix(
            tf.constant(gathered_weights(weights, sources, hosted)),
            tf.constant(rows[hosted]),
            tf.constant(rows[received].reshape(len(received), -1)),
        )
        np.testing.assert_array_equal(part.numpy(), whole[hosted])
    # and it is W @ Y (up to the order of float additions)
    np.testing.assert_allclose(whole, weights @ rows, rtol=1e-5, atol=1e-5)


def test_evaluation_chunks_sum_to_the_same_bits_whichever_process_takes_them():
    """The MPI ranks split the average model's evaluation by chunks: each chunk's sums must not depend on
    which other chunks share the call, and together they give the whole data set's metrics."""
    tf = import_tensorflow()
    cfg, graph, dataset, network, engine = engine_for(
        ["model=mlp", "model.hidden=[16]", "dataset.num_train=6000", "dataset.num_test=1000"]
    )
    trainer = engine.trainer
    assert trainer.chunk_size == 2500 and trainer.train_chunks == 3 and trainer.num_chunks == 4  # padded
    average = np.random.default_rng(0).normal(0, 0.3, network.num_params).astype(np.float32)
    whole = trainer.chunk_sums(average, np.arange(4))
    for chunks in ([0], [1, 2], [3], [2, 3], [0, 1, 2]):
        np.testing.assert_array_equal(trainer.chunk_sums(average, np.array(chunks)), whole[chunks])
    metrics = trainer.metrics_from_chunks(whole)
    logits = network.logits(tf, average[None], dataset.x_test[None])[0].numpy()
    assert metrics["test_accuracy"] == np.mean(logits.argmax(-1) == dataset.y_test)
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=dataset.y_test.astype(np.int32), logits=logits)
    assert metrics["test_loss"] == pytest.approx(float(np.mean(losses)), rel=1e-6)


def test_cb_static_with_no_backups_gives_cb_full_results(tmp_path):
    full = run_config(TINY + ["algo=cb_full"], tmp_path / "full")
    static = run_config(TINY + ["algo=cb_static", "algo.b=0"], tmp_path / "static")
    assert full["status"] == static["status"] == "completed"
    pd.testing.assert_frame_equal(
        pd.read_csv(tmp_path / "full/metrics.csv").drop(columns="wall_seconds"),
        pd.read_csv(tmp_path / "static/metrics.csv").drop(columns="wall_seconds"),
    )
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "full/timeline.parquet"), pd.read_parquet(tmp_path / "static/timeline.parquet")
    )


def test_same_config_and_seed_twice_gives_identical_metrics(tmp_path):
    for name in ("a", "b"):
        run_config(TINY + ["straggler=pareto", "iterations=12"], tmp_path / name)
    first = pd.read_csv(tmp_path / "a/metrics.csv").drop(columns="wall_seconds")
    second = pd.read_csv(tmp_path / "b/metrics.csv").drop(columns="wall_seconds")
    pd.testing.assert_frame_equal(first, second, check_exact=True)


@pytest.mark.parametrize("other", [["algo=cb_full"], ["algo=cb_static", "algo.b=1"], ["algo.update=cta"]])
def test_different_algorithm_same_seed_sees_the_same_delays_and_minibatches(other):
    base = ["straggler=shifted_exp", "num_workers=6", "topology=erdos_renyi", "topology.p=0.6"]

    def schedule(overrides):
        cfg, _ = compose(TINY + base + overrides)
        graph = validate(cfg)
        dataset = load_dataset(cfg.dataset, cfg.num_workers, cfg.data_seed, data_dir=cfg.data_dir)
        return Schedule(cfg, graph, dataset.shards)

    draws = [
        (s.delays.compute(0, 20), s.delays.link(0, 20), s.batches.take(0, 20))
        for s in (schedule(["algo=cb_dybw"]), schedule(other))
    ]
    for mine, theirs in zip(*draws):
        np.testing.assert_array_equal(mine, theirs)
    # ...and the recorded ready - start of ATC is exactly the drawn compute time
    chunk = schedule(["algo=cb_dybw"]).next_chunk(5)
    np.testing.assert_allclose(chunk.timing.ready - chunk.timing.start, draws[0][0][:5])


def test_different_seed_changes_the_delays():
    delays = []
    for seed in (0, 1):
        cfg, _ = compose(TINY + ["straggler=shifted_exp", f"seed={seed}"])
        graph = validate(cfg)
        dataset = load_dataset(cfg.dataset, cfg.num_workers, cfg.data_seed, data_dir=cfg.data_dir)
        delays.append(Schedule(cfg, graph, dataset.shards).delays.compute(0, 5))
    assert not np.allclose(delays[0], delays[1])


def test_timeline_matches_the_results_contract(tmp_path):
    summary = run_config(TINY + ["straggler=shifted_exp", "algo=cb_dybw"], tmp_path)
    timeline = pd.read_parquet(tmp_path / "timeline.parquet")
    assert list(timeline.columns[:7]) == ["iteration", "worker", "start", "ready", "stop", "used", "backups"] or {
        "iteration",
        "worker",
        "start",
        "ready",
        "stop",
        "used",
        "backups",
    } <= set(timeline.columns)
    assert len(timeline) == 6 * 4
    assert (timeline["stop"] >= timeline["ready"]).all() and (timeline["ready"] >= timeline["start"]).all()
    assert (timeline["used"] >= 1).all()
    per_iteration_end = timeline.groupby("iteration")["finish"].max().to_numpy()
    assert summary["mean_iteration_duration"] == pytest.approx(per_iteration_end[-1] / 6)
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    assert metrics["iteration"].tolist() == [0, 3, 6]
    assert metrics["time"].iloc[-1] == pytest.approx(summary["total_time"])


def test_job_dirnames_stay_short_and_distinct():
    from dybw.results import MAX_DIRNAME, job_dirname

    long_a = ",".join(f"straggler.link.param{i}={i}" for i in range(20))
    long_b = long_a + ",seed=1"
    assert job_dirname("") == "default" and job_dirname("algo=cb_full") == "algo=cb_full"
    assert len(job_dirname(long_a)) <= MAX_DIRNAME and job_dirname(long_a) != job_dirname(long_b)


def test_local_test_accuracy_is_the_mean_of_each_local_models_accuracy(tmp_path):
    """The per-worker counts (summed across MPI ranks) against an independent eager evaluation."""
    tf = import_tensorflow()
    cfg, graph, dataset, network, engine = engine_for(["model=mlp", "model.hidden=[8]", "iterations=4"])
    rows = []
    engine.run(rows.append)
    params = engine.trainer.params.numpy()
    accuracies = [
        np.mean(
            np.argmax(network.logits(tf, params[j : j + 1], dataset.x_test[None]).numpy()[0], axis=-1) == dataset.y_test
        )
        for j in range(cfg.num_workers)
    ]
    assert rows[-1]["local_test_accuracy"] == pytest.approx(np.mean(accuracies), abs=1e-12)
    assert len(set(np.round(accuracies, 6))) > 1  # the local models differ: the mean is not one model's


def test_a_job_on_a_trainer_an_earlier_job_released_gives_the_bits_of_a_fresh_one(tmp_path):
    """Jobs of one process share compiled programs (trainer.stacked_trainer): the second job, run on the
    trainer the first released (other seed, other policy, other data split), equals the same job on a new
    trainer, file for file; a job with another graph gets a trainer of its own."""
    from dybw import trainer as trainer_module

    first = ["algo=cb_full", "seed=3", "topology=erdos_renyi", "topology.p=0.6", "model=mlp", "model.hidden=[8]"]
    second = ["algo=cb_dybw", "seed=5", "dataset.split=shards", *first[2:]]
    trainer_module._RELEASED.clear()
    run_config(TINY + first, tmp_path / "first")
    (shared,) = trainer_module._RELEASED.values()
    run_config(TINY + second, tmp_path / "reused")
    assert list(trainer_module._RELEASED.values()) == [shared]  # the second job ran on it and gave it back
    trainer_module._RELEASED.clear()
    run_config(TINY + second, tmp_path / "fresh")
    assert list(trainer_module._RELEASED.values()) != [shared]
    for name in ("metrics.csv", "timeline.parquet", "links.parquet"):
        read = pd.read_csv if name.endswith(".csv") else pd.read_parquet
        reused, fresh = (read(tmp_path / run / name) for run in ("reused", "fresh"))
        pd.testing.assert_frame_equal(
            reused.drop(columns="wall_seconds", errors="ignore"), fresh.drop(columns="wall_seconds", errors="ignore")
        )
    run_config(TINY + [*second, "topology.seed=1"], tmp_path / "other_graph")
    assert len(trainer_module._RELEASED) == 2
