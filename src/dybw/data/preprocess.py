"""Feature preprocessing: normalisation, then optional PCA (optionally whitened), cached on disk.

For a training matrix ``X`` (n x d) the fitted transform maps a row ``x`` to

    z = (x - shift) / divisor                     normalisation, per feature
    y = ((z - mu) @ V) / s                        PCA to k components (only if pca_dim = k > 0)

with, writing ``p`` for the pixel scale (255 for uint8 images, 1 for float features):

* ``normalize="none"``:      shift = 0,      divisor = 1
* ``normalize="scale"``:     shift = 0,      divisor = p                  (pixels to [0, 1])
* ``normalize="standard"``:  shift = mean(x), divisor = p * sigma, sigma = std(x / p) per feature;
  features whose train std is below 1e-8 (constant, e.g. MNIST's border pixels) keep sigma = 1 --
  dividing by a floored ~0 std would blow a test pixel that is not constant up by ~1e8.
* PCA: ``mu`` = train mean of z, ``C = (Z - mu)^T (Z - mu) / n`` (float64),
  ``C = V diag(lambda) V^T`` by ``numpy.linalg.eigh``; the k columns of V with the largest lambda,
  in decreasing order, each with its largest-magnitude entry made positive (deterministic sign).
* ``s = sqrt(lambda)`` if ``whiten`` (train components then have mean 0 and variance 1; a
  component with std below 1e-8 keeps s = 1), else ``s = 1``.

All statistics are population statistics (divide by n) of the training set only.

Raw inputs (``dataset.features=raw``, :func:`standardise_channels`) skip PCA and keep their shape
``[n, *shape]``; the statistics are taken per channel, over every sample and position of the last axis's
entry (``[n, H, W, C]`` images: per colour channel; ``[n, d]`` features: per feature, as above).

The fitted parameters are cached as ``<cache_dir>/preprocess/<key>-<hash>.transform.npz`` and, when
PCA is on (the result is small and costly to recompute), the transformed float32 arrays as
``...arrays.npz``; both are written atomically (temp file + ``os.replace``).  The hash covers the BLAS
the fit ran on (numpy's version, OpenBLAS's build, kernels and threads: ``numerics.blas_fingerprint``):
other kernels round the covariance and ``eigh`` differently, so a cache made with them -- on another
CPU, or without dybw's pinned kernels -- is never read in place of recomputing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dybw.data.sources import cache_dir_from_env
from dybw.errors import ConfigError
from dybw.numerics import blas_fingerprint

__all__ = [
    "NORMALIZE_CHOICES",
    "Transform",
    "cache_dir_from_env",
    "check_options",
    "fit_transform",
    "preprocess",
    "standardise_channels",
    "stats",
]

NORMALIZE_CHOICES = ("standard", "scale", "none")
STD_FLOOR = 1e-8
CHUNK_ROWS = 4096  # rows per chunk: bounds float64 temporaries to ~100 MB even for CIFAR-10
_CACHE_FORMAT = 1  # bump when the transform's definition changes, so stale caches are ignored

# Counters of what `preprocess` did, for tests and for timing reports.
stats = {"fits": 0, "transform_loads": 0, "array_loads": 0}


@dataclass(frozen=True, eq=False)
class Transform:
    """Fitted parameters: ``y = (((x - shift) / divisor - mean) @ components) / scales``.

    ``components`` is d x k (k = 0 means no PCA; then ``y = (x - shift) / divisor``).
    """

    shift: np.ndarray  # (d,) float64
    divisor: np.ndarray  # (d,) float64
    mean: np.ndarray  # (d,) float64, train mean of the normalised features
    components: np.ndarray  # (d, k) float64, orthonormal columns
    scales: np.ndarray  # (k,) float64
    explained_variance: np.ndarray  # (k,) float64, lambda of each component (before whitening)

    @property
    def input_dim(self) -> int:
        return int(self.shift.shape[0])

    @property
    def output_dim(self) -> int:
        k = self.components.shape[1]
        return int(k) if k else self.input_dim

    def apply(self, x: np.ndarray) -> np.ndarray:
        """Transform rows of ``x`` (n x d, any real dtype) to a new float32 array (n x output_dim)."""
        if x.ndim != 2 or x.shape[1] != self.input_dim:
            raise ValueError(f"expected an array of shape (n, {self.input_dim}), got {x.shape}")
        out = np.empty((x.shape[0], self.output_dim), dtype=np.float32)
        if self.components.shape[1]:
            # Fold normalisation, centring and whitening into one affine map: y = (x - c) @ P with
            # c = shift + divisor * mean (the raw train mean) and P = V / divisor[:, None] / s.
            center = (self.shift + self.divisor * self.mean).astype(np.float32)
            proj = (self.components / self.divisor[:, None] / self.scales[None, :]).astype(np.float32)
            for s in range(0, x.shape[0], CHUNK_ROWS):
                np.matmul(x[s : s + CHUNK_ROWS].astype(np.float32) - center, proj, out=out[s : s + CHUNK_ROWS])
        else:
            shift = self.shift.astype(np.float32)
            inv = (1.0 / self.divisor).astype(np.float32)
            for s in range(0, x.shape[0], CHUNK_ROWS):
                np.multiply(x[s : s + CHUNK_ROWS].astype(np.float32) - shift, inv, out=out[s : s + CHUNK_ROWS])
        return out

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k) for k in ("shift", "divisor", "mean", "components", "scales", "explained_variance")}

    @classmethod
    def from_arrays(cls, arrays) -> Transform:
        return cls(**{k: np.asarray(arrays[k], dtype=np.float64) for k in cls.__dataclass_fields__})


def check_options(input_dim: int, normalize, pca_dim, whiten) -> int:
    """Validate the preprocessing options for features of dimension ``input_dim`` (raising
    ``ConfigError`` naming the field) and return pca_dim as an int (0 = no PCA)."""
    if normalize not in NORMALIZE_CHOICES:
        raise ConfigError("dataset.normalize", normalize, f"valid: {', '.join(NORMALIZE_CHOICES)}")
    d = int(input_dim)
    if pca_dim is None:
        pca_dim = 0
    if isinstance(pca_dim, (bool, np.bool_)) or not isinstance(pca_dim, (int, np.integer)) or not 0 <= pca_dim <= d:
        raise ConfigError("dataset.pca_dim", pca_dim, f"allowed range 0..{d} (0 = no PCA)")
    if not isinstance(whiten, (bool, np.bool_)):
        raise ConfigError("dataset.whiten", whiten, "must be true or false")
    if whiten and pca_dim == 0:
        raise ConfigError(
            "dataset.whiten", whiten, "whitening scales PCA components; set dataset.pca_dim > 0 or dataset.whiten=false"
        )
    return int(pca_dim)


def _pixel_scale(x: np.ndarray) -> float:
    # uint8 images are mapped to [0, 1]; float features (synthetic data) are already in their units.
    return 255.0 if x.dtype == np.uint8 else 1.0


def fit_transform(x_train: np.ndarray, *, normalize: str, pca_dim: int | None, whiten: bool) -> Transform:
    """Fit the normalisation (+ PCA) described in the module docstring on ``x_train`` (n x d)."""
    if x_train.ndim != 2 or x_train.shape[0] < 1:
        raise ValueError(f"x_train must be a non-empty 2-d array, got shape {x_train.shape}")
    k = check_options(x_train.shape[1], normalize, pca_dim, whiten)
    n, d = x_train.shape
    p = _pixel_scale(x_train)
    mean_x = x_train.mean(axis=0, dtype=np.float64)

    # Second moments of the raw features, in float64, one chunk at a time.
    cov_x = np.zeros((d, d)) if k else None
    var_x = np.zeros(d)
    if k or normalize == "standard":
        for s in range(0, n, CHUNK_ROWS):
            c = x_train[s : s + CHUNK_ROWS].astype(np.float64) - mean_x
            if k:
                cov_x += c.T @ c  # numpy dispatches A.T @ A to BLAS syrk
            else:
                var_x += np.einsum("ij,ij->j", c, c)
        if k:
            cov_x /= n
            var_x = np.diag(cov_x).copy()
        else:
            var_x /= n

    if normalize == "none":
        shift, divisor = np.zeros(d), np.ones(d)
    elif normalize == "scale":
        shift, divisor = np.zeros(d), np.full(d, p)
    else:
        sigma = np.sqrt(np.maximum(var_x, 0.0)) / p
        sigma = np.where(sigma > STD_FLOOR, sigma, 1.0)
        shift, divisor = mean_x.copy(), p * sigma
    mean_z = (mean_x - shift) / divisor

    if k:
        cov_z = cov_x / np.outer(divisor, divisor)  # covariance of z = (x - shift) / divisor
        lam, vecs = np.linalg.eigh(cov_z)
        order = np.argsort(-lam, kind="stable")[:k]
        lam, vecs = np.maximum(lam[order], 0.0), vecs[:, order]
        # eigh's signs are arbitrary (they may differ across BLAS builds); fix them so cached and
        # recomputed transforms agree: the largest-|.| entry of each component is positive.
        pivot = vecs[np.argmax(np.abs(vecs), axis=0), np.arange(k)]
        vecs = vecs * np.where(pivot < 0, -1.0, 1.0)
        std = np.sqrt(lam)
        scales = np.where(std > STD_FLOOR, std, 1.0) if whiten else np.ones(k)
    else:
        vecs, scales, lam = np.zeros((d, 0)), np.zeros(0), np.zeros(0)
    return Transform(shift=shift, divisor=divisor, mean=mean_z, components=vecs, scales=scales, explained_variance=lam)


def _fingerprint(x: np.ndarray) -> str:
    """Shape, dtype and a hash of <= 256 evenly spaced rows: cheap (<1 ms) guard against a caller
    reusing a cache_key for different data."""
    rows = np.linspace(0, x.shape[0] - 1, num=min(x.shape[0], 256)).astype(np.int64) if x.shape[0] else []
    h = hashlib.sha1(np.ascontiguousarray(x[rows]).tobytes()).hexdigest()
    return f"{x.shape}|{x.dtype.str}|{h}"


def _cache_paths(cache_dir, cache_key, normalize, pca_dim, whiten, x_train, x_test) -> tuple[Path, Path]:
    ident = {
        "format": _CACHE_FORMAT,
        "key": str(cache_key),
        "normalize": normalize,
        "pca_dim": int(pca_dim),
        "whiten": bool(whiten),
        "train": _fingerprint(x_train),
        "test": _fingerprint(x_test),
        "blas": blas_fingerprint(),
    }
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(cache_key))[:48]
    stem = f"{slug}-{normalize}-pca{int(pca_dim)}{'w' if whiten else ''}-{digest}"
    folder = Path(cache_dir) / "preprocess"
    return folder / f"{stem}.transform.npz", folder / f"{stem}.arrays.npz"


def _save_npz_atomic(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` via a temp file in the same folder and ``os.replace``, so a
    reader (another process, a crash) never sees a half-written cache file. Best effort."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)  # uncompressed: loading is then a plain read
            os.chmod(tmp, 0o644)  # mkstemp makes 0600; a cache is shareable like any output
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        warnings.warn(f"dybw: could not write preprocessing cache {path}: {e}", stacklevel=3)


def _load_npz(path: Path, names: tuple[str, ...]) -> dict[str, np.ndarray] | None:
    """Arrays from a cache file, or None if absent/unreadable (then the caller recomputes)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in names}
    except (OSError, ValueError, KeyError, EOFError):
        return None
    except Exception:  # noqa: BLE001 - e.g. zipfile.BadZipFile from a foreign/damaged file
        return None


def preprocess(
    x_train: np.ndarray,
    x_test: np.ndarray,
    *,
    normalize: str,
    pca_dim: int | None,
    whiten: bool,
    cache_dir: str | os.PathLike | None = None,
    cache_key: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Fit the transform on ``x_train`` only and apply it to both sets; return float32 arrays.

    With both ``cache_dir`` and ``cache_key`` given, results are cached there (see module
    docstring); ``cache_key`` must identify the raw data (e.g. dataset name + file MD5s). The
    cache entry is keyed by a hash of (cache_key, normalize, pca_dim, whiten, array shapes and
    a sample of rows). Raises ``ConfigError`` for an invalid normalize / pca_dim / whiten.
    """
    if x_train.ndim != 2 or x_test.ndim != 2 or x_train.shape[1] != x_test.shape[1]:
        raise ValueError(f"x_train {x_train.shape} and x_test {x_test.shape} must be 2-d with equal columns")
    k = check_options(x_train.shape[1], normalize, pca_dim, whiten)
    use_cache = cache_dir is not None and cache_key is not None
    transform = None
    if use_cache:
        t_path, a_path = _cache_paths(cache_dir, cache_key, normalize, k, whiten, x_train, x_test)
        if k:
            arrays = _load_npz(a_path, ("x_train", "x_test"))
            if (
                arrays is not None
                and arrays["x_train"].shape == (x_train.shape[0], k)
                and arrays["x_test"].shape == (x_test.shape[0], k)
                and arrays["x_train"].dtype == np.float32
                and arrays["x_test"].dtype == np.float32
            ):
                stats["array_loads"] += 1
                return arrays["x_train"], arrays["x_test"]
        loaded = _load_npz(t_path, tuple(Transform.__dataclass_fields__))
        if loaded is not None:
            cand = Transform.from_arrays(loaded)
            if cand.input_dim == x_train.shape[1] and cand.components.shape[1] == k:
                transform = cand
                stats["transform_loads"] += 1
    if transform is None:
        transform = fit_transform(x_train, normalize=normalize, pca_dim=k, whiten=whiten)
        stats["fits"] += 1
        if use_cache:
            _save_npz_atomic(t_path, transform.to_arrays())
    out_train, out_test = transform.apply(x_train), transform.apply(x_test)
    if use_cache and k:
        _save_npz_atomic(a_path, {"x_train": out_train, "x_test": out_test})
    return out_train, out_test


def standardise_channels(x_train: np.ndarray, x_test: np.ndarray, *, normalize: str) -> tuple[np.ndarray, np.ndarray]:
    """Raw inputs ``[n, ..., C]`` normalised per channel (the last axis) with the training set's statistics:
    ``z = (x - shift_c) / divisor_c``, ``shift``/``divisor`` as in the module docstring with the mean and the
    standard deviation taken over every sample and position of channel c.  Returns float32 arrays of the
    same shapes."""
    if normalize not in NORMALIZE_CHOICES:
        raise ConfigError("dataset.normalize", normalize, f"valid: {', '.join(NORMALIZE_CHOICES)}")
    channels = x_train.shape[-1]
    p = _pixel_scale(x_train)
    if normalize == "none":
        shift, divisor = np.zeros(channels), np.ones(channels)
    elif normalize == "scale":
        shift, divisor = np.zeros(channels), np.full(channels, p)
    else:
        flat = x_train.reshape(-1, channels)
        count = flat.shape[0]
        total, squares = np.zeros(channels), np.zeros(channels)
        for start in range(0, count, CHUNK_ROWS * 64):  # float64 sums, in pieces of ~256k rows
            piece = flat[start : start + CHUNK_ROWS * 64].astype(np.float64)
            total += piece.sum(axis=0)
            squares += np.square(piece).sum(axis=0)
        mean = total / count
        sigma = np.sqrt(np.maximum(squares / count - mean**2, 0.0)) / p
        sigma = np.where(sigma > STD_FLOOR, sigma, 1.0)
        shift, divisor = mean, p * sigma

    def apply(x):
        out = np.empty(x.shape, np.float32)
        shift32, inv32 = shift.astype(np.float32), (1.0 / divisor).astype(np.float32)
        for s in range(0, x.shape[0], CHUNK_ROWS):
            np.multiply(x[s : s + CHUNK_ROWS].astype(np.float32) - shift32, inv32, out=out[s : s + CHUNK_ROWS])
        return out

    return apply(x_train), apply(x_test)
