"""model=keras: a user's factory trains, runs to the same bits on runner=local and runner=mpi, resumes exactly;
bad factories are one line before any work; raw-pixel inputs and their augmentation."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dybw.config import validate
from dybw.errors import ConfigError
from helpers import TINY, compose, run_cli, run_config

TESTS = Path(__file__).resolve().parent
# The factory lives in tests/keras_factories.py, imported by name in every process -- as a user's would be.
USER_MODEL = ["model=keras", "model.factory=keras_factories:small_net", "+model.kwargs.width=8"]
SMALL = TINY + USER_MODEL + ["num_workers=6", "topology=complete", "straggler=shifted_exp", "algo.eta0=0.5"]


@pytest.fixture
def factories_importable(monkeypatch):
    """MPI ranks are new processes: they find tests/keras_factories.py through PYTHONPATH, as a user's module."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))


def metrics(job_dir):
    return pd.read_csv(job_dir / "metrics.csv").drop(columns="wall_seconds")


def test_a_users_keras_model_trains_and_runs_to_the_same_bits_on_mpi(tmp_path, factories_importable):
    common = SMALL + ["iterations=30", "eval_every=10"]
    local = run_config(common, tmp_path / "local")
    mpi = run_config(common + ["runner=mpi", "runner.ranks=2"], tmp_path / "mpi")
    assert local["status"] == mpi["status"] == "completed"
    rows = metrics(tmp_path / "local")
    assert rows["test_accuracy"].iloc[-1] > rows["test_accuracy"].iloc[0] + 0.3  # it learns (chance: 0.25)
    assert rows["train_loss"].iloc[-1] < 0.5 * rows["train_loss"].iloc[0]
    pd.testing.assert_frame_equal(rows, metrics(tmp_path / "mpi"), check_exact=True)
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "local/timeline.parquet"), pd.read_parquet(tmp_path / "mpi/timeline.parquet")
    )


def test_a_cut_off_keras_job_resumes_from_its_checkpoint_with_the_uninterrupted_numbers(tmp_path, factories_importable):
    """Rank 1 dies after iteration 24; the checkpoint of iteration 20 continues the job to the whole run's files."""
    common = SMALL + ["iterations=40", "eval_every=10"]
    mpi = ["runner=mpi", "runner.ranks=2"]
    run_config(common, tmp_path / "whole")
    with pytest.raises(Exception, match="rank 1"):
        run_config(common + mpi + ["runner.fault=exit", "runner.fault_iteration=25"], tmp_path / "cut")
    with np.load(tmp_path / "cut" / "checkpoint.npz") as checkpoint:
        assert int(checkpoint["iteration"]) == 20
    resumed = run_config(common + mpi + ["resume=true"], tmp_path / "cut")
    assert resumed["status"] == "completed" and resumed["iterations"] == 40
    pd.testing.assert_frame_equal(metrics(tmp_path / "cut"), metrics(tmp_path / "whole"), check_exact=True)
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "cut/timeline.parquet"), pd.read_parquet(tmp_path / "whole/timeline.parquet")
    )


def test_the_initial_model_is_the_keras_initialisation_seeded_by_model_seed():
    from dybw.models import build_network

    cfg, _ = compose(SMALL)
    network = build_network(cfg.model, (20,), 4)
    first, again, other = network.initial_params(0), network.initial_params(0), network.initial_params(1)
    np.testing.assert_array_equal(first, again)
    assert first.dtype == np.float32 and first.shape == (network.num_params,) and not np.array_equal(first, other)
    # 20*8 + 8 (dense) + 8 + 8 (layer norm: scale, offset) + 8*4 + 4: the trainable weights, in Keras' order
    assert network.num_params == 20 * 8 + 8 + 16 + 8 * 4 + 4
    np.testing.assert_array_equal(first[168:176], np.ones(8, np.float32))  # LayerNorm's gamma starts at 1
    # ... and the network computes what the Keras model computes with those weights
    tf = __import__("tensorflow")
    x = np.random.default_rng(0).normal(size=(5, 20)).astype(np.float32)
    model = network.model
    model.set_weights([w.numpy() for w in network.weights(tf, tf.constant(first))])
    np.testing.assert_allclose(network.logits(tf, first[None], x[None])[0].numpy(), model(x).numpy(), rtol=1e-5)


@pytest.mark.parametrize(
    ("factory", "says"),
    [
        ("keras_factories", "must be 'package.module:function'"),
        ("no_such_module_here:net", "module 'no_such_module_here' cannot be imported (ModuleNotFoundError"),
        ("keras_factories:missing", "module 'keras_factories' has no function 'missing'"),
        ("keras_factories:not_a_model", "must return a keras.Model; it returned builtins.list"),
        ("keras_factories:wrong_output", "the model must output logits (B, 4); for B=2 it outputs (2, 5)"),
        (
            "keras_factories:with_batchnorm",
            "layer 'batch_normalization' (BatchNormalization) keeps non-trainable state (moving_mean, "
            "moving_variance), which dybw does not mix between workers: use GroupNormalization or LayerNormalization",
        ),
    ],
)
def test_a_bad_factory_is_one_line_naming_model_factory(factory, says):
    cfg, _ = compose(TINY + ["model=keras", f"model.factory={factory}"])
    with pytest.raises(ConfigError) as error:
        validate(cfg)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"model.factory='{factory}' is invalid: ") and says in message


def test_the_cli_refuses_a_model_with_batchnorm_in_one_line_before_any_job_starts(tmp_path):
    env_path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    os.environ["PYTHONPATH"], saved = env_path, os.environ.get("PYTHONPATH")
    try:
        done = run_cli(TINY + ["model=keras", "model.factory=keras_factories:with_batchnorm"], cwd=tmp_path)
    finally:
        os.environ["PYTHONPATH"] = saved or ""
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1, done.stderr[-1500:]
    assert lines[0].startswith("error: model.factory='keras_factories:with_batchnorm' is invalid: layer")
    assert "GroupNormalization" in lines[0] and not (tmp_path / "results").exists()


def test_a_builtin_cnn_on_pca_features_names_the_preset_that_trains_it():
    for model, preset in (("lenet5", "cnn_mnist"), ("cnn", "cnn_cifar10")):
        cfg, _ = compose(TINY + [f"model={model}"])
        with pytest.raises(ConfigError, match=rf"{model} takes images .* use the preset experiment={preset}, "):
            validate(cfg)
        cfg, _ = compose([f"experiment={preset}"])  # and the preset it names is valid as it stands
        validate(cfg)


def test_builtin_factories_build_for_their_datasets():
    from dybw.models import build_network

    for preset, shape, params in (("lenet5", (28, 28, 1), 61706), ("cnn", (32, 32, 3), 113962)):
        cfg, _ = compose(TINY + [f"model={preset}"])
        network = build_network(cfg.model, shape, 10)
        assert network.num_params == params and not network.jit_compile
        assert network.initial_params(0).shape == (params,)


# --------------------------------------------------------------------------------------------------
# Raw pixels and augmentation


def test_raw_mnist_is_standardised_28x28x1_images(data_dir):
    from dybw.data import load_dataset, load_raw

    cfg, _ = compose(["dataset=mnist", "dataset.features=raw", "num_workers=4"])
    data = load_dataset(cfg.dataset, 4, 0, data_dir=data_dir)
    assert data.x_train.shape == (60000, 28, 28, 1) and data.x_test.shape == (10000, 28, 28, 1)
    assert data.input_shape == (28, 28, 1) and data.x_train.dtype == np.float32
    assert abs(float(data.x_train.mean())) < 1e-4 and abs(float(data.x_train.std()) - 1) < 1e-4
    raw = load_raw("mnist", data_dir)[0]  # [n, 784] uint8, row-major 28x28
    scale = (raw[123].astype(np.float64) - raw.mean()) / raw.std()
    np.testing.assert_allclose(data.x_train[123, :, :, 0].ravel(), scale, atol=1e-5)


def test_raw_cifar10_is_channels_last_and_standardised_per_channel(data_dir):
    from dybw.data import load_dataset, load_raw

    cfg, _ = compose(["dataset=cifar10", "dataset.features=raw", "num_workers=4"])
    data = load_dataset(cfg.dataset, 4, 0, data_dir=data_dir)
    assert data.x_train.shape == (50000, 32, 32, 3) and data.x_test.shape == (10000, 32, 32, 3)
    np.testing.assert_allclose(data.x_train.mean(axis=(0, 1, 2)), 0, atol=1e-4)
    np.testing.assert_allclose(data.x_train.std(axis=(0, 1, 2), dtype=np.float64), 1, atol=1e-4)
    raw = load_raw("cifar10", data_dir)[2]  # test images [n, 3072]: 1024 red, 1024 green, 1024 blue values
    planes = raw.reshape(-1, 3, 32, 32)  # channel-major in the files; channels last in the dataset
    train = load_raw("cifar10", data_dir)[0].reshape(-1, 3, 32, 32).astype(np.float64)
    mean, std = train.mean(axis=(0, 2, 3)), train.std(axis=(0, 2, 3))
    for image, row, column in ((0, 5, 7), (17, 31, 0), (9999, 12, 30)):
        expected = (planes[image, :, row, column] - mean) / std
        np.testing.assert_allclose(data.x_test[image, row, column, :], expected, atol=1e-4)


def test_augmentation_requires_raw_images():
    cfg, _ = compose(["dataset=cifar10", "dataset.augment=crop_flip", "logger=none"])
    with pytest.raises(ConfigError, match="dataset.augment='crop_flip' is invalid: crops and flips images"):
        validate(cfg)


def test_crop_draws_depend_on_seed_and_worker_only_and_resume_in_place():
    from dybw.augment import PAD, AugmentSampler

    all_workers = AugmentSampler(3, range(6), 5).take(0, 8)  # [T, M, B, 3]
    assert all_workers.shape == (8, 6, 5, 3) and all_workers.dtype == np.int32
    assert all_workers[..., :2].min() == 0 and all_workers[..., :2].max() == 2 * PAD
    assert set(np.unique(all_workers[..., 2])) == {0, 1}
    some = AugmentSampler(3, [4, 1], 5)  # another process hosting workers 4 and 1
    np.testing.assert_array_equal(some.take(0, 3), all_workers[:3][:, [4, 1]])
    np.testing.assert_array_equal(some.take(5, 3), all_workers[5:8][:, [4, 1]])  # skipped ahead, as on resume
    assert not np.array_equal(AugmentSampler(4, range(6), 5).take(0, 8), all_workers)


def test_crop_and_flip_against_numpy():
    from dybw.augment import PAD, crop_and_flip
    from dybw.tf_setup import import_tensorflow

    tf = import_tensorflow()
    rng = np.random.default_rng(0)
    images = rng.normal(size=(4, 6, 5, 3)).astype(np.float32)
    draws = np.array([[0, 0, 0], [8, 8, 1], [3, 5, 0], [4, 4, 1]], np.int32)
    out = crop_and_flip(tf, tf.constant(images), tf.constant(draws)).numpy()
    padded = np.pad(images, [(0, 0), (PAD, PAD), (PAD, PAD), (0, 0)])
    for i, (dy, dx, flip) in enumerate(draws):
        window = padded[i, dy : dy + 6, dx : dx + 5]
        np.testing.assert_array_equal(out[i], window[:, ::-1] if flip else window)
    np.testing.assert_array_equal(out[3], images[3][:, ::-1])  # centred crop, mirrored


def test_every_algorithm_sees_the_same_crops():
    from dybw.data import load_dataset
    from dybw.engine import Schedule

    def crops(algo):
        cfg, _ = compose(TINY + ["dataset.features=raw", f"algo={algo}", "straggler=shifted_exp", "num_workers=4"])
        cfg.dataset.augment = "crop_flip"  # the schedule does not look at the images: synthetic data will do
        graph = validate_graph(cfg)
        dataset = load_dataset(cfg.dataset, cfg.num_workers, cfg.data_seed)
        return Schedule(cfg, graph, dataset.shards).next_chunk(6).augment

    np.testing.assert_array_equal(crops("cb_dybw"), crops("cb_full"))


def validate_graph(cfg):
    from dybw.topology import build_graph

    return build_graph(cfg.topology, cfg.num_workers)


def test_an_augmented_cnn_runs_to_the_same_bits_on_mpi(tmp_path, factories_importable):
    """Crops drawn per worker and applied inside the step: the MPI ranks draw and crop what runner=local does."""
    common = [
        "dataset=mnist",
        "dataset.features=raw",
        "dataset.augment=crop_flip",
        "dataset.batch_size=8",
        "model=keras",
        "model.factory=keras_factories:tiny_convnet",
        "num_workers=4",
        "iterations=4",
        "eval_every=4",
        "eval_local=false",
        "logger=none",
        "progress=false",
        "runner=local",
    ]
    run_config(common, tmp_path / "local")
    run_config(common + ["runner=mpi", "runner.ranks=2"], tmp_path / "mpi")
    pd.testing.assert_frame_equal(metrics(tmp_path / "local"), metrics(tmp_path / "mpi"), check_exact=True)
    plain = run_config([c for c in common if c != "dataset.augment=crop_flip"], tmp_path / "plain")
    assert plain["final_train_loss"] != pd.read_json(tmp_path / "local/summary.json", typ="series")["final_train_loss"]
