"""Datasets for dybw: MNIST, CIFAR-10 (verified official files) and a synthetic Gaussian mixture.

``load_dataset(cfg, num_workers, data_seed)`` returns a :class:`Dataset`: preprocessed float32
features, int32 labels and one disjoint index shard per worker.  ``dataset.features`` chooses the inputs:
``pca`` (flat: normalised pixels, then optionally PCA, :mod:`.preprocess`) or ``raw`` (no PCA, images in
their natural shape ``[H, W, C]``, normalised per channel: what convolutional networks take).
Configuration problems raise ``ConfigError`` (before any file is read where possible); file problems raise
``DataError``.

Environment: ``DYBW_DATA_DIR`` (dataset files, default ``./data``), ``DYBW_CACHE_DIR``
(MD5 memo and preprocessing cache, default ``~/.cache/dybw``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Import the submodules, not their same-named functions: binding `partition` / `preprocess` here
# would shadow the submodules, making `import dybw.data.preprocess as m` return the function.
from dybw.data import partition as _partition
from dybw.data import preprocess as _preprocess
from dybw.data.partition import SPLITS
from dybw.data.preprocess import NORMALIZE_CHOICES
from dybw.data.sources import cache_dir_from_env, data_dir_from_env, ensure_files, files_digest, load_raw
from dybw.data.synthetic import make_synthetic
from dybw.errors import ConfigError, DataError
from dybw.rng import stream

__all__ = [
    "DATASET_INFO",
    "DATASET_NAMES",
    "NORMALIZE_CHOICES",
    "SPLITS",
    "ConfigError",
    "DataError",
    "Dataset",
    "cache_dir_from_env",
    "data_dir_from_env",
    "ensure_files",
    "AUGMENTATIONS",
    "FEATURES",
    "as_images",
    "feature_dim_of",
    "features_of",
    "fetch_dataset_files",
    "input_dim_of",
    "input_shape_of",
    "load_dataset",
    "load_raw",
    "make_synthetic",
    "hold_out",
    "holdout_of",
    "num_classes_of",
    "test_size_of",
    "train_size_of",
]

DATASET_INFO = {
    "mnist": {"train": 60000, "test": 10000, "input_dim": 784, "classes": 10, "image_shape": (28, 28, 1)},
    "cifar10": {"train": 50000, "test": 10000, "input_dim": 3072, "classes": 10, "image_shape": (32, 32, 3)},
}
DATASET_NAMES = (*DATASET_INFO, "synthetic")
FEATURES = ("pca", "raw")  # flat, optionally PCA-reduced features | no PCA, images in their natural shape
AUGMENTATIONS = ("none", "crop_flip")  # crop_flip: random crops and flips of raw images (dybw.augment)

_MISSING = object()


@dataclass(frozen=True, eq=False)  # eq=False: element-wise array comparison has no single truth value
class Dataset:
    """A preprocessed dataset split among workers.

    ``shards[i]`` holds the sorted int64 indices into ``x_train`` / ``y_train`` of worker i.
    """

    name: str
    x_train: np.ndarray  # float32 [n_train, dim] (after preprocessing)
    y_train: np.ndarray  # int32 [n_train]
    x_test: np.ndarray  # float32 [n_test, dim]
    y_test: np.ndarray  # int32 [n_test]
    num_classes: int
    shards: tuple[np.ndarray, ...]  # per worker, int64 indices into x_train

    @property
    def input_dim(self) -> int:
        """Number of input values per sample (pca_dim when PCA is on; H * W * C for raw images)."""
        return int(np.prod(self.x_train.shape[1:]))

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample as the model sees it: ``(d,)`` for flat features, ``(H, W, C)`` for images."""
        return tuple(int(d) for d in self.x_train.shape[1:])


def _field(cfg, key: str, default=_MISSING):
    """``cfg.key`` for an attribute object (dataclass, OmegaConf DictConfig) or ``cfg[key]`` for a
    mapping; ``default`` when absent or None; ``ConfigError`` when absent and required."""
    try:
        value = cfg[key] if isinstance(cfg, Mapping) else getattr(cfg, key)
    except Exception:  # noqa: BLE001 - AttributeError/KeyError and OmegaConf's missing-value errors
        value = None
    if value is None:
        if default is _MISSING:
            raise ConfigError(f"dataset.{key}", None, "is required but missing from the dataset config")
        return default
    return value


def _name(cfg) -> str:
    name = _field(cfg, "name")
    if name not in DATASET_NAMES:
        raise ConfigError("dataset.name", name, f"valid: {', '.join(DATASET_NAMES)}")
    return name


def _int_field(cfg, key: str, lo: int, default=_MISSING) -> int:
    value = _field(cfg, key, default)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ConfigError(f"dataset.{key}", value, f"must be an integer >= {lo}")
    return int(value)


def input_dim_of(cfg) -> int:
    """Raw feature dimension d of the configured dataset (before PCA), without loading it."""
    name = _name(cfg)
    return _int_field(cfg, "input_dim", 1) if name == "synthetic" else DATASET_INFO[name]["input_dim"]


def feature_dim_of(cfg) -> int:
    """Feature dimension after preprocessing: ``pca_dim`` if > 0, else :func:`input_dim_of`."""
    pca_dim = _field(cfg, "pca_dim", 0)
    return int(pca_dim) if isinstance(pca_dim, (int, np.integer)) and pca_dim > 0 else input_dim_of(cfg)


def features_of(cfg) -> str:
    """``dataset.features``: ``pca`` or ``raw``."""
    features = _field(cfg, "features")
    if features not in FEATURES:
        raise ConfigError("dataset.features", features, f"valid: {', '.join(FEATURES)}")
    return features


def input_shape_of(cfg) -> tuple[int, ...]:
    """Shape of one sample as the model sees it, without loading the data: ``(H, W, C)`` for raw MNIST and
    CIFAR-10 images, else ``(d,)`` (``pca_dim``, or every input value without PCA)."""
    if features_of(cfg) == "raw":
        name = _name(cfg)
        return tuple(DATASET_INFO[name]["image_shape"]) if name in DATASET_INFO else (input_dim_of(cfg),)
    return (feature_dim_of(cfg),)


def as_images(name: str, x: np.ndarray) -> np.ndarray:
    """Raw rows ``[n, d]`` (:func:`load_raw`'s layout) in their natural shape ``[n, H, W, C]``: MNIST is
    row-major 28x28, CIFAR-10 channel-major (3 planes of 32x32), moved to channels last."""
    if name == "cifar10":
        return np.ascontiguousarray(x.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    return x.reshape(-1, *DATASET_INFO[name]["image_shape"])


def _file_train_size(cfg) -> int:
    name = _name(cfg)
    return _int_field(cfg, "num_train", 1) if name == "synthetic" else DATASET_INFO[name]["train"]


def holdout_of(cfg) -> int:
    """``dataset.holdout``: training samples set aside as the evaluation set (0: evaluate on the test set)."""
    holdout = _int_field(cfg, "holdout", 0, default=0)
    available = _file_train_size(cfg)
    if holdout >= available:
        raise ConfigError(
            "dataset.holdout", holdout, f"allowed range [0, {available - 1}] (the training set's size - 1)"
        )
    return holdout


def train_size_of(cfg) -> int:
    """Number of samples the workers train on, without loading the data: the training set less the
    ``dataset.holdout`` samples set aside."""
    return _file_train_size(cfg) - holdout_of(cfg)


def test_size_of(cfg) -> int:
    """Number of samples a run is evaluated on, without loading it: the test set, or the held-out
    training samples when ``dataset.holdout > 0``."""
    name = _name(cfg)
    holdout = holdout_of(cfg)
    if holdout:
        return holdout
    return _int_field(cfg, "num_test", 1) if name == "synthetic" else DATASET_INFO[name]["test"]


def hold_out(x_train, y_train, count: int, data_seed: int):
    """Split ``count`` training samples, drawn from the stream ``(data_seed, "holdout")``, off the training
    set: returns ``(x_rest, y_rest, x_held, y_held)``, each part in its original order.

    With ``dataset.holdout > 0`` the held-out part replaces the test set, so that a step size (or any other
    setting) can be tuned without ever looking at test accuracy; ``count=0`` changes nothing."""
    held = np.zeros(len(y_train), dtype=bool)
    held[stream(data_seed, "holdout").permutation(len(y_train))[:count]] = True
    return x_train[~held], y_train[~held], x_train[held], y_train[held]


def num_classes_of(cfg) -> int:
    """Number of classes of the configured dataset, without loading it."""
    name = _name(cfg)
    return _int_field(cfg, "num_classes", 2) if name == "synthetic" else DATASET_INFO[name]["classes"]


def fetch_dataset_files(cfg, data_dir=None) -> None:
    """Verify the dataset's files (downloading missing ones) without loading them; nothing for synthetic.

    What a launcher does once before starting several processes that will each load the data."""
    name = _name(cfg)
    if name != "synthetic":
        ensure_files(name, Path(data_dir) if data_dir else data_dir_from_env(), cache_dir=cache_dir_from_env())


def _batch_error(batch_size: int, smallest: int, num_workers: int, split: str) -> ConfigError:
    return ConfigError(
        "dataset.batch_size",
        batch_size,
        f"must be at most the smallest worker shard ({smallest} samples with {num_workers} workers, split={split})",
    )


def load_dataset(
    cfg,
    num_workers: int,
    data_seed: int,
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> Dataset:
    """Load, preprocess and partition the dataset described by ``cfg``.

    ``cfg`` fields (the ``dataset`` config; every one is required, defaults live in
    ``conf/dataset/``): ``name`` (mnist | cifar10 | synthetic), ``batch_size``, ``features`` (pca | raw:
    ``pca_dim`` and ``whiten`` apply to pca only), ``normalize``, ``pca_dim``, ``whiten``, ``split``,
    ``shards_per_worker``, ``dirichlet_alpha``, ``holdout`` (optional, default 0: training samples set aside
    to evaluate on instead of the test set, :func:`hold_out`); for synthetic
    ``num_train``, ``num_test``, ``input_dim``, ``num_classes``, ``class_sep``.

    ``data_seed`` seeds the partition (``default_rng(data_seed)``) and the synthetic data.
    Files come from ``data_dir`` (default ``$DYBW_DATA_DIR`` or ``./data``); the preprocessing
    cache lives in ``cache_dir`` (default ``$DYBW_CACHE_DIR`` or ``~/.cache/dybw``).
    Raises ``ConfigError`` if some worker's shard is smaller than ``batch_size``.
    """
    # --- validate everything that does not need the data, so config errors come first -----------
    name = _name(cfg)
    batch_size = _int_field(cfg, "batch_size", 1)
    if isinstance(num_workers, (bool, np.bool_)) or not isinstance(num_workers, (int, np.integer)) or num_workers < 1:
        raise ConfigError("num_workers", num_workers, "must be an integer >= 1")
    num_workers = int(num_workers)
    normalize = _field(cfg, "normalize")
    features = features_of(cfg)
    if features == "pca":
        whiten = _field(cfg, "whiten")
        pca_dim = _preprocess.check_options(input_dim_of(cfg), normalize, _field(cfg, "pca_dim"), whiten)
    elif normalize not in NORMALIZE_CHOICES:
        raise ConfigError("dataset.normalize", normalize, f"valid: {', '.join(NORMALIZE_CHOICES)}")
    split = _field(cfg, "split")
    if split not in SPLITS:
        raise ConfigError("dataset.split", split, f"valid: {', '.join(SPLITS)}")
    k = _int_field(cfg, "shards_per_worker", 1)
    alpha = _field(cfg, "dirichlet_alpha")
    holdout = holdout_of(cfg)
    n_train = train_size_of(cfg)
    # Best case for the smallest shard, known before loading: iid / dirichlet cannot beat
    # floor(n/N); shards give exactly k * floor(n / (N k)).
    best = n_train // num_workers if split != "shards" else k * (n_train // (num_workers * k))
    if best < batch_size:
        raise _batch_error(batch_size, best, num_workers, split)

    # --- raw data -------------------------------------------------------------------------------
    if name == "synthetic":
        x_tr, y_tr, x_te, y_te = make_synthetic(
            _int_field(cfg, "num_train", 1),
            _int_field(cfg, "num_test", 1),
            _int_field(cfg, "input_dim", 1),
            _int_field(cfg, "num_classes", 2),
            _field(cfg, "class_sep"),
            data_seed,
        )
        cache_key = None  # regenerating is cheaper than caching every seed
    else:
        data_dir = Path(data_dir) if data_dir is not None else data_dir_from_env()
        cache_dir = Path(cache_dir) if cache_dir is not None else cache_dir_from_env()
        x_tr, y_tr, x_te, y_te = load_raw(name, data_dir, cache_dir=cache_dir)
        # The files were verified against these MD5s, so they identify the raw bytes exactly.
        cache_key = f"{name}-{files_digest(name)}"
    if holdout:  # the test set is set aside: it is neither trained nor evaluated on
        x_tr, y_tr, x_te, y_te = hold_out(x_tr, y_tr, holdout, data_seed)

    # --- partition before the (possibly slow, cold-cache) PCA, so its errors come early --------
    shards = _partition.partition(
        y_tr,
        num_workers,
        split=split,
        seed=data_seed,
        shards_per_worker=k,
        dirichlet_alpha=alpha,
        min_size=batch_size if split == "dirichlet" else 1,
    )
    smallest = min(s.shape[0] for s in shards)
    if smallest < batch_size:
        raise _batch_error(batch_size, smallest, num_workers, split)

    if features == "raw":
        if name in DATASET_INFO:
            x_tr, x_te = as_images(name, x_tr), as_images(name, x_te)
        x_tr, x_te = _preprocess.standardise_channels(x_tr, x_te, normalize=normalize)
    else:
        x_tr, x_te = _preprocess.preprocess(
            x_tr,
            x_te,
            normalize=normalize,
            pca_dim=pca_dim,
            whiten=bool(whiten),
            cache_dir=cache_dir if cache_key is not None else None,
            cache_key=cache_key,
        )
    return Dataset(
        name=name,
        x_train=x_tr,
        y_train=y_tr.astype(np.int32),
        x_test=x_te,
        y_test=y_te.astype(np.int32),
        num_classes=num_classes_of(cfg) if name == "synthetic" else DATASET_INFO[name]["classes"],
        shards=tuple(shards),
    )
