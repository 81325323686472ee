"""Split a training set among workers: iid, label shards (McMahan et al. 2017), or Dirichlet.

Every split returns one sorted int64 index array per worker; the arrays are pairwise disjoint.
All randomness comes from ``np.random.default_rng(seed)``, so a split is a pure function of
(labels, num_workers, split parameters, seed).
"""

from __future__ import annotations

import numpy as np

from dybw.errors import ConfigError

__all__ = ["SPLITS", "partition"]

SPLITS = ("iid", "shards", "dirichlet")


def _iid(n: int, num_workers: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Random permutation cut into N blocks of m = floor(n / N); the n - N*m leftovers are dropped
    so that every worker holds exactly the same number of samples."""
    m = n // num_workers
    perm = rng.permutation(n)
    return [perm[i * m : (i + 1) * m] for i in range(num_workers)]


def _shards(labels: np.ndarray, num_workers: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Classic non-iid split: sort by label, cut into S = N*k shards of size q = floor(n / S),
    give each worker k shards drawn without replacement. A worker then sees at most k classes
    plus the ones its shards straddle at class boundaries (at most 2k in all)."""
    n = labels.shape[0]
    num_shards = num_workers * k
    q = n // num_shards
    # The n - S*q leftover samples are dropped at random (not from the end of the label-sorted
    # order, which would only ever drop the last class).
    keep = np.sort(rng.permutation(n)[: num_shards * q])
    by_label = keep[np.argsort(labels[keep], kind="stable")]
    shard_ids = rng.permutation(num_shards)
    return [
        np.concatenate([by_label[s * q : (s + 1) * q] for s in shard_ids[i * k : (i + 1) * k]])
        for i in range(num_workers)
    ]


def _dirichlet(
    labels: np.ndarray, num_workers: int, alpha: float, min_size: int, max_tries: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """For each class c with index set I_c (shuffled): p_c ~ Dir(alpha * 1_N) and worker j gets the
    slice of I_c between floor(n_c * sum_{i<j} p_ci) and floor(n_c * sum_{i<=j} p_ci). Whole draws
    are repeated (continuing the same generator, so the result stays a function of the seed)
    until every worker holds >= min_size samples, at most ``max_tries`` times."""
    classes = np.unique(labels)
    by_class = [np.flatnonzero(labels == c) for c in classes]
    smallest = 0
    for _ in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_workers)]
        for idx in by_class:
            idx = rng.permutation(idx)
            p = rng.dirichlet(np.full(num_workers, alpha))
            cuts = np.floor(np.cumsum(p)[:-1] * idx.shape[0]).astype(np.int64)
            for j, piece in enumerate(np.split(idx, cuts)):
                parts[j].append(piece)
        out = [np.concatenate(ps) for ps in parts]
        smallest = min(o.shape[0] for o in out)
        if smallest >= min_size:
            return out
    raise ConfigError(
        "dataset.dirichlet_alpha",
        alpha,
        f"in {max_tries} Dirichlet draws some of the {num_workers} worker shards always came out smaller than "
        f"the batch size {min_size} (smallest {smallest} samples); raise dataset.dirichlet_alpha "
        f"(more even shards) or lower dataset.batch_size / the number of workers",
    )


def _as_int(field: str, value, lo: int, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ConfigError(field, value, what)
    return int(value)


def partition(
    labels: np.ndarray,
    num_workers: int,
    *,
    split: str,
    seed: int,
    shards_per_worker: int = 2,
    dirichlet_alpha: float = 0.5,
    min_size: int = 1,
    max_tries: int = 100,
) -> list[np.ndarray]:
    """Return ``num_workers`` disjoint, sorted int64 arrays of indices into ``labels``.

    * ``iid``: equal random blocks of floor(n / N) samples.
    * ``shards``: label-sorted shards, ``shards_per_worker`` random ones per worker.
    * ``dirichlet``: per-class proportions ~ Dir(``dirichlet_alpha``); redrawn (up to
      ``max_tries``) until every worker has at least ``min_size`` samples, else ``ConfigError``.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be 1-d, got shape {labels.shape}")
    n = labels.shape[0]
    if split not in SPLITS:
        raise ConfigError("dataset.split", split, f"valid: {', '.join(SPLITS)}")
    num_workers = _as_int("num_workers", num_workers, 1, "must be an integer >= 1")
    if num_workers > n:
        raise ConfigError("num_workers", num_workers, f"must be at most the training-set size {n}")
    rng = np.random.default_rng(seed)
    if split == "iid":
        out = _iid(n, num_workers, rng)
    elif split == "shards":
        k = _as_int("dataset.shards_per_worker", shards_per_worker, 1, "must be an integer >= 1")
        if num_workers * k > n:
            raise ConfigError(
                "dataset.shards_per_worker", k, f"{num_workers} workers x {k} shards exceed the {n} training samples"
            )
        out = _shards(labels, num_workers, k, rng)
    else:
        alpha = dirichlet_alpha
        if (
            isinstance(alpha, (bool, np.bool_))
            or not isinstance(alpha, (int, float, np.integer, np.floating))
            or not (np.isfinite(alpha) and alpha > 0)
        ):
            raise ConfigError("dataset.dirichlet_alpha", alpha, "must be a finite number > 0")
        min_size = _as_int("min_size", min_size, 0, "must be an integer >= 0")
        max_tries = _as_int("max_tries", max_tries, 1, "must be an integer >= 1")
        out = _dirichlet(labels, num_workers, float(alpha), min_size, max_tries, rng)
    return [np.sort(o).astype(np.int64, copy=False) for o in out]
