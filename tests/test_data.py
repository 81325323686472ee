"""Tests of dybw.data: file verification/download, decoding, preprocessing, partitions, loading.

Real datasets come from $DYBW_DATA_DIR or ../shared/data beside the repository (read-only).
No test touches the network: the URL opener is replaced by a stub for every test.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
import time
import urllib.error
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import dybw.data.preprocess as pp
import dybw.data.sources as src
from dybw.data import (
    DATASET_INFO,
    Dataset,
    data_dir_from_env,
    feature_dim_of,
    hold_out,
    input_dim_of,
    load_dataset,
    train_size_of,
)
from dybw.data.partition import partition
from dybw.data.preprocess import fit_transform, preprocess
from dybw.data.sources import DATASETS, ensure_files, load_raw
from dybw.data.synthetic import make_synthetic
from dybw.errors import ConfigError, DataError

pytestmark = pytest.mark.unit  # no TensorFlow, MPI or subprocess: make test-fast

DATA_DIR = Path(os.environ.get("DYBW_DATA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "data")
MNIST_FILES = list(DATASETS["mnist"].files)
CIFAR_FILES = list(DATASETS["cifar10"].files)


def _have(name: str) -> bool:
    folder = DATA_DIR / DATASETS[name].subdir
    return all((folder / f).is_file() for f in DATASETS[name].files)


needs_mnist = pytest.mark.skipif(not _have("mnist"), reason=f"MNIST files not in {DATA_DIR}/mnist")
needs_cifar = pytest.mark.skipif(not _have("cifar10"), reason=f"CIFAR-10 files not in {DATA_DIR}/cifar10")


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory) -> Path:
    """One MD5 memo for the session so the real files are hashed once, never in ~/.cache."""
    return tmp_path_factory.mktemp("dybw_cache")


@pytest.fixture(autouse=True)
def _isolate(monkeypatch, session_cache):
    monkeypatch.setenv("DYBW_CACHE_DIR", str(session_cache))

    def no_network(url, timeout):
        raise urllib.error.URLError(f"network disabled in tests ({url})")

    monkeypatch.setattr(src, "_open_url", no_network)


@pytest.fixture(scope="module")
def mnist_raw(session_cache):
    if not _have("mnist"):
        pytest.skip("MNIST files not available")
    return load_raw("mnist", DATA_DIR, cache_dir=session_cache)


def _copy_mnist(dst_root: Path) -> Path:
    folder = dst_root / "mnist"
    folder.mkdir(parents=True)
    for f in MNIST_FILES:
        shutil.copyfile(DATA_DIR / "mnist" / f, folder / f)
    return folder


def _flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


# ----------------------------------------------------------------------------------------------
# sources: locating, verifying, downloading
# ----------------------------------------------------------------------------------------------


def test_data_dir_from_env(monkeypatch):
    monkeypatch.delenv("DYBW_DATA_DIR", raising=False)
    assert data_dir_from_env() == Path("./data")
    monkeypatch.setenv("DYBW_DATA_DIR", "/some/where")
    assert data_dir_from_env() == Path("/some/where")
    monkeypatch.setenv("DYBW_DATA_DIR", "")
    assert data_dir_from_env("fallback") == Path("fallback")


@needs_mnist
def test_verified_files_are_not_rehashed(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    assert ensure_files("mnist", DATA_DIR, cache_dir=cache) == DATA_DIR / "mnist"
    memo = json.loads((cache / "verified_md5.json").read_text())
    assert len(memo) == 4  # the shared files are old, so their verification is remembered

    def boom(path):
        raise AssertionError(f"re-hashed {path}")

    monkeypatch.setattr(src, "md5_of", boom)
    ensure_files("mnist", DATA_DIR, cache_dir=cache)  # served from the memo


@needs_mnist
@pytest.mark.parametrize("victim", ["train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz"])
def test_corrupted_file_is_reported(tmp_path, victim):
    folder = _copy_mnist(tmp_path)
    _flip_byte(folder / victim, 1000 if "images" in victim else 100)
    with pytest.raises(DataError) as ei:
        load_raw("mnist", tmp_path, cache_dir=tmp_path / "cache")
    msg = str(ei.value)
    assert "\n" not in msg
    assert str(folder / victim) in msg
    assert DATASETS["mnist"].files[victim] in msg  # expected md5
    assert src.md5_of(folder / victim) in msg  # actual md5
    assert "delete it to re-download" in msg


@needs_mnist
def test_truncated_file_is_reported(tmp_path):
    folder = _copy_mnist(tmp_path)
    victim = folder / "train-images-idx3-ubyte.gz"
    with open(victim, "r+b") as f:
        f.truncate(5_000_000)
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz is corrupted"):
        load_raw("mnist", tmp_path, cache_dir=tmp_path / "cache")


@needs_mnist
def test_memo_does_not_hide_a_later_corruption(tmp_path):
    folder = _copy_mnist(tmp_path)
    old = time.time() - 3600
    for f in MNIST_FILES:
        os.utime(folder / f, (old, old))
    cache = tmp_path / "cache"
    ensure_files("mnist", tmp_path, cache_dir=cache)
    assert str((folder / MNIST_FILES[1]).absolute()) in json.loads((cache / "verified_md5.json").read_text())
    _flip_byte(folder / MNIST_FILES[1], 50)  # same size, new mtime/ctime
    with pytest.raises(DataError, match=MNIST_FILES[1]):
        ensure_files("mnist", tmp_path, cache_dir=cache)


@needs_cifar
def test_corrupted_cifar_pickle_is_never_unpickled(tmp_path, monkeypatch):
    folder = tmp_path / DATASETS["cifar10"].subdir
    folder.mkdir(parents=True)
    for f in CIFAR_FILES[:-1]:
        (folder / f).symlink_to(DATA_DIR / DATASETS["cifar10"].subdir / f)
    shutil.copyfile(DATA_DIR / DATASETS["cifar10"].subdir / "test_batch", folder / "test_batch")
    _flip_byte(folder / "test_batch", 12345)

    def no_unpickling(*a, **k):
        raise AssertionError("a file was unpickled before verification")

    monkeypatch.setattr(src.pickle, "load", no_unpickling)
    with pytest.raises(DataError, match="test_batch is corrupted"):
        load_raw("cifar10", tmp_path, cache_dir=tmp_path / "cache")


def test_missing_files_without_network(tmp_path):
    with pytest.raises(DataError) as ei:
        ensure_files("mnist", tmp_path / "data", cache_dir=tmp_path / "cache")
    msg = str(ei.value)
    assert "\n" not in msg
    assert str(tmp_path / "data" / "mnist") in msg and "DYBW_DATA_DIR" in msg
    for f, md5 in DATASETS["mnist"].files.items():
        assert f"{f} (md5 {md5})" in msg
    assert "network disabled in tests" in msg  # the cause is shown
    assert not (tmp_path / "data").exists()  # no partial files, nor the folders made for them, left behind

    with pytest.raises(DataError) as ei:
        ensure_files("cifar10", tmp_path / "data", cache_dir=tmp_path / "cache")
    msg = str(ei.value)
    assert "\n" not in msg and "cifar-10-python.tar.gz" in msg and "DYBW_DATA_DIR" in msg
    for f, md5 in DATASETS["cifar10"].files.items():
        assert f"{f} (md5 {md5})" in msg
    assert not (tmp_path / "data").exists()


def test_a_failed_download_keeps_the_folders_that_were_there(tmp_path):
    (tmp_path / "data" / "mnist").mkdir(parents=True)
    (tmp_path / "data" / "cifar10").mkdir()
    for name in ("mnist", "cifar10"):
        with pytest.raises(DataError):
            ensure_files(name, tmp_path / "data", cache_dir=tmp_path / "cache")
    # the user's (empty) folders stay; only the one the download made below them is gone
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["cifar10", "mnist"]
    assert list((tmp_path / "data" / "cifar10").iterdir()) == []


def test_uncreatable_data_dir_without_network(tmp_path):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("")  # a folder cannot be created below a file, even by root
    with pytest.raises(DataError) as ei:
        ensure_files("mnist", blocker / "data", cache_dir=tmp_path / "cache")
    msg = str(ei.value)
    assert f"cannot create {blocker / 'data' / 'mnist'}" in msg and "DYBW_DATA_DIR" in msg and "\n" not in msg


@needs_mnist
def test_download_falls_back_to_next_mirror_and_verifies(tmp_path, monkeypatch):
    official = {f: (DATA_DIR / "mnist" / f).read_bytes() for f in MNIST_FILES}
    calls = []

    def fake_open(url, timeout):
        calls.append(url)
        fname = url.rsplit("/", 1)[1]
        if url.startswith(DATASETS["mnist"].mirrors[0]):
            return io.BytesIO(b"<html>moved</html>")  # first mirror serves garbage
        return io.BytesIO(official[fname])

    monkeypatch.setattr(src, "_open_url", fake_open)
    folder = ensure_files("mnist", tmp_path, cache_dir=tmp_path / "cache")
    assert sorted(p.name for p in folder.iterdir()) == sorted(MNIST_FILES)  # no temp files left
    assert all((folder / f).stat().st_mode & 0o777 == 0o644 for f in MNIST_FILES)
    assert len(calls) == 8
    x_tr, y_tr, x_te, y_te = load_raw("mnist", tmp_path, cache_dir=tmp_path / "cache")
    assert x_tr.shape == (60000, 784) and y_te.shape == (10000,)


def test_download_with_wrong_content_everywhere_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(src, "_open_url", lambda url, timeout: io.BytesIO(b"not mnist"))
    with pytest.raises(DataError) as ei:
        ensure_files("mnist", tmp_path, cache_dir=tmp_path / "cache")
    bad = hashlib.md5(b"not mnist").hexdigest()
    assert f"received md5 {bad}" in str(ei.value)
    assert not (tmp_path / "mnist").exists()  # nothing left behind


def test_archive_download_unpacks_only_the_named_members(tmp_path, monkeypatch):
    contents = {"data_batch_1": b"one", "test_batch": b"two"}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in [*contents.items(), ("../evil", b"x")]:
            info = tarfile.TarInfo(("cifar-10-batches-py/" if name in contents else "") + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    archive = buf.getvalue()
    spec = DATASETS["cifar10"]
    fake = replace(
        spec,
        files={k: hashlib.md5(v).hexdigest() for k, v in contents.items()},
        archive=replace(spec.archive, md5=hashlib.md5(archive).hexdigest()),
    )
    monkeypatch.setitem(DATASETS, "cifar10", fake)
    monkeypatch.setattr(src, "_open_url", lambda url, timeout: io.BytesIO(archive))
    folder = ensure_files("cifar10", tmp_path / "d", cache_dir=tmp_path / "cache")
    assert folder == tmp_path / "d" / "cifar10" / "cifar-10-batches-py"
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == contents
    assert sorted(p.name for p in folder.parent.iterdir()) == ["cifar-10-batches-py"]  # archive removed
    assert not (tmp_path / "d" / "evil").exists() and not (tmp_path / "evil").exists()


# ----------------------------------------------------------------------------------------------
# decoding
# ----------------------------------------------------------------------------------------------


def test_mnist_raw(mnist_raw):
    x_tr, y_tr, x_te, y_te = mnist_raw
    assert x_tr.shape == (60000, 784) and x_te.shape == (10000, 784)
    assert x_tr.dtype == np.uint8 and y_tr.dtype == np.int64
    assert set(np.unique(y_tr)) == set(range(10)) and set(np.unique(y_te)) == set(range(10))
    assert np.bincount(y_tr).tolist()[:3] == [5923, 6742, 5958]  # official class counts
    xs, _ = preprocess(x_tr, x_te, normalize="scale", pca_dim=0, whiten=False)
    assert xs.dtype == np.float32 and xs.min() == 0.0 and xs.max() == 1.0
    assert abs(xs.mean() - 0.1307) < 5e-4 and abs(xs.std() - 0.3081) < 5e-4


def test_idx_magic_is_checked(tmp_path):
    bad = tmp_path / "x.gz"
    bad.write_bytes(gzip.compress(bytes([0, 0, 8, 3]) + (2).to_bytes(4, "big") * 3 + bytes(8)))
    with pytest.raises(DataError, match="magic number 0x00000803, expected 0x00000801"):
        src.read_idx(bad, 0x801, (2,))
    with pytest.raises(DataError, match=r"dimensions \(2, 2, 2\), expected \(3, 2, 2\)"):
        src.read_idx(bad, 0x803, (3, 2, 2))


@needs_cifar
def test_cifar_raw(session_cache):
    x_tr, y_tr, x_te, y_te = load_raw("cifar10", DATA_DIR, cache_dir=session_cache)
    assert x_tr.shape == (50000, 3072) and x_te.shape == (10000, 3072) and x_tr.dtype == np.uint8
    assert y_tr.dtype == np.int64 and np.bincount(y_tr).tolist() == [5000] * 10
    assert np.bincount(y_te).tolist() == [1000] * 10
    channel_means = x_tr.reshape(-1, 3, 1024).mean(axis=(0, 2)) / 255  # channel-major layout
    np.testing.assert_allclose(channel_means, [0.4914, 0.4822, 0.4465], atol=1e-3)


# ----------------------------------------------------------------------------------------------
# preprocessing
# ----------------------------------------------------------------------------------------------


def test_pca_whitened_and_cached(mnist_raw, tmp_path):
    x_tr, _, x_te, _ = mnist_raw
    kw = dict(normalize="standard", pca_dim=50, whiten=True, cache_dir=tmp_path, cache_key="mnist-test")
    fits = pp.stats["fits"]
    a_tr, a_te = preprocess(x_tr, x_te, **kw)
    assert pp.stats["fits"] == fits + 1
    assert a_tr.shape == (60000, 50) and a_te.shape == (10000, 50) and a_tr.dtype == np.float32
    np.testing.assert_allclose(a_tr.mean(axis=0), 0, atol=1e-3)
    np.testing.assert_allclose(a_tr.var(axis=0), 1, atol=1e-3)
    assert np.abs(np.corrcoef(a_tr, rowvar=False) - np.eye(50)).max() < 1e-3  # decorrelated

    files = sorted((tmp_path / "preprocess").glob("*.npz"))
    assert [f.name.split(".", 1)[1] for f in files] == ["arrays.npz", "transform.npz"]
    with np.load(next(f for f in files if f.name.endswith("transform.npz"))) as z:
        v, lam = z["components"], z["explained_variance"]
    np.testing.assert_allclose(v.T @ v, np.eye(50), atol=1e-10)  # orthonormal
    assert np.all(np.diff(lam) <= 0) and lam[-1] > 0  # decreasing variance
    assert np.all(v[np.abs(v).argmax(axis=0), np.arange(50)] > 0)  # sign convention

    mtimes = [f.stat().st_mtime_ns for f in files]
    loads = pp.stats["array_loads"]
    b_tr, b_te = preprocess(x_tr, x_te, **kw)
    assert pp.stats["fits"] == fits + 1 and pp.stats["array_loads"] == loads + 1  # no recomputation
    assert [f.stat().st_mtime_ns for f in files] == mtimes
    np.testing.assert_array_equal(a_tr, b_tr)
    np.testing.assert_array_equal(a_te, b_te)

    # Same key but different data must not be served from the cache.
    c_tr, _ = preprocess(x_tr[:30000], x_te, **kw)
    assert pp.stats["fits"] == fits + 2 and c_tr.shape == (30000, 50)


def test_pca_matches_the_svd_of_the_centred_data():
    """The principal axes from an SVD of the centred data in float64 (the textbook definition; dybw uses an
    eigendecomposition of the covariance): the same variances, axes up to sign, and projections."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((500, 12)) @ rng.standard_normal((12, 12)) + 3).astype(np.float32)
    t = fit_transform(x, normalize="none", pca_dim=5, whiten=False)
    centred = x.astype(np.float64) - x.astype(np.float64).mean(axis=0)
    _, singular, axes = np.linalg.svd(centred, full_matrices=False)
    np.testing.assert_allclose(t.explained_variance, singular[:5] ** 2 / 500, rtol=1e-6)
    signs = np.sign(np.sum(t.components.T * axes[:5], axis=1))
    np.testing.assert_allclose(t.components.T * signs[:, None], axes[:5], atol=1e-6)
    np.testing.assert_allclose(t.apply(x) * signs, centred @ axes[:5].T, atol=1e-4)


def test_standardisation_and_constant_features(mnist_raw):
    x_tr, _, x_te, _ = mnist_raw
    z_tr, z_te = preprocess(x_tr, x_te, normalize="standard", pca_dim=0, whiten=False)
    varying = x_tr.std(axis=0) > 0
    np.testing.assert_allclose(z_tr[:, varying].mean(axis=0), 0, atol=1e-4)
    np.testing.assert_allclose(z_tr[:, varying].std(axis=0), 1, atol=1e-3)
    # Pixels constant (0) in train but not always in test stay at their [0,1] value, not ~1e8.
    assert np.abs(z_te[:, ~varying]).max() <= 1.0


def test_damaged_cache_file_is_recomputed(tmp_path):
    x, _, xt, _ = make_synthetic(300, 50, 8, 3, 2.0, seed=1)
    kw = dict(normalize="none", pca_dim=3, whiten=True, cache_dir=tmp_path, cache_key="syn")
    ref, _ = preprocess(x, xt, **kw)
    for f in (tmp_path / "preprocess").glob("*.npz"):
        f.write_bytes(b"garbage")
    fits = pp.stats["fits"]
    again, _ = preprocess(x, xt, **kw)
    assert pp.stats["fits"] == fits + 1
    np.testing.assert_allclose(again, ref, rtol=1e-6)


@pytest.mark.parametrize("bad", [785, -1, 2.5, True])
def test_pca_dim_out_of_range(bad):
    x = np.zeros((10, 784), dtype=np.uint8)
    with pytest.raises(ConfigError) as ei:
        preprocess(x, x, normalize="scale", pca_dim=bad, whiten=False)
    assert str(ei.value) == f"dataset.pca_dim={bad!r} is invalid: allowed range 0..784 (0 = no PCA)"


def test_other_preprocess_options_are_checked():
    x = np.zeros((10, 4), dtype=np.uint8)
    with pytest.raises(ConfigError, match="dataset.normalize='zscore' is invalid: valid: standard, scale, none"):
        preprocess(x, x, normalize="zscore", pca_dim=0, whiten=False)
    with pytest.raises(ConfigError, match="dataset.whiten=True is invalid"):
        preprocess(x, x, normalize="scale", pca_dim=0, whiten=True)


# ----------------------------------------------------------------------------------------------
# partitions
# ----------------------------------------------------------------------------------------------


def _check_disjoint(parts, n):
    allidx = np.concatenate(parts)
    assert all(p.dtype == np.int64 and np.all(np.diff(p) > 0) for p in parts)  # sorted, unique
    assert np.unique(allidx).size == allidx.size and allidx.min() >= 0 and allidx.max() < n
    return allidx.size


def test_iid_partition(mnist_raw):
    y = mnist_raw[1]
    parts = partition(y, 7, split="iid", seed=3)
    assert _check_disjoint(parts, y.size) == 7 * (60000 // 7)
    assert {p.size for p in parts} == {60000 // 7}
    again = partition(y, 7, split="iid", seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    other = partition(y, 7, split="iid", seed=4)
    assert not np.array_equal(parts[0], other[0])


def test_shards_partition_is_label_skewed(mnist_raw):
    y = mnist_raw[1]
    parts = partition(y, 100, split="shards", seed=0, shards_per_worker=2)
    assert _check_disjoint(parts, y.size) == 60000 and {p.size for p in parts} == {600}
    n_labels = [np.unique(y[p]).size for p in parts]
    assert max(n_labels) <= 4 and np.mean(n_labels) <= 2.5
    iid_labels = [np.unique(y[p]).size for p in partition(y, 100, split="iid", seed=0)]
    assert min(iid_labels) == 10


def test_dirichlet_partition(mnist_raw):
    y = mnist_raw[1]
    parts = partition(y, 20, split="dirichlet", seed=5, dirichlet_alpha=0.3, min_size=64)
    assert _check_disjoint(parts, y.size) == 60000  # every sample is assigned
    assert min(p.size for p in parts) >= 64
    again = partition(y, 20, split="dirichlet", seed=5, dirichlet_alpha=0.3, min_size=64)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    other = partition(y, 20, split="dirichlet", seed=6, dirichlet_alpha=0.3, min_size=64)
    assert any(not np.array_equal(a, b) for a, b in zip(parts, other))
    # Small alpha concentrates each class on few workers; large alpha approaches iid.
    skew = lambda ps: np.mean([np.bincount(y[p], minlength=10).max() / p.size for p in ps])  # noqa: E731
    assert skew(partition(y, 20, split="dirichlet", seed=5, dirichlet_alpha=100.0)) < 0.2 < skew(parts)


def test_dirichlet_too_small_alpha_raises(mnist_raw):
    with pytest.raises(ConfigError) as ei:
        partition(mnist_raw[1], 50, split="dirichlet", seed=0, dirichlet_alpha=0.001, min_size=500, max_tries=5)
    msg = str(ei.value)
    assert msg.startswith("dataset.dirichlet_alpha=0.001 is invalid") and "batch size 500" in msg and "\n" not in msg


def test_partition_argument_checks():
    y = np.arange(10) % 2
    with pytest.raises(ConfigError, match="dataset.split='random' is invalid: valid: iid, shards, dirichlet"):
        partition(y, 2, split="random", seed=0)
    with pytest.raises(ConfigError, match="num_workers=11"):
        partition(y, 11, split="iid", seed=0)
    with pytest.raises(ConfigError, match="dataset.dirichlet_alpha=0.0"):
        partition(y, 2, split="dirichlet", seed=0, dirichlet_alpha=0.0)


def test_partition_invariants_property():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=60, deadline=None)
    @hypothesis.given(
        labels=st.lists(st.integers(0, 4), min_size=20, max_size=300),
        n_workers=st.integers(1, 6),
        split=st.sampled_from(["iid", "shards", "dirichlet"]),
        seed=st.integers(0, 2**32 - 1),
    )
    def check(labels, n_workers, split, seed):
        y = np.array(labels)
        parts = partition(y, n_workers, split=split, seed=seed, shards_per_worker=2, dirichlet_alpha=1.0, min_size=0)
        assert len(parts) == n_workers
        covered = _check_disjoint(parts, y.size) if sum(p.size for p in parts) else 0
        expected = {"iid": n_workers * (y.size // n_workers), "shards": 2 * n_workers * (y.size // (2 * n_workers))}
        assert covered == expected.get(split, y.size)

    check()


# ----------------------------------------------------------------------------------------------
# synthetic data and load_dataset
# ----------------------------------------------------------------------------------------------


def _syn_cfg(**kw):
    base = dict(
        name="synthetic",
        num_train=2000,
        num_test=500,
        input_dim=20,
        num_classes=5,
        class_sep=3.0,
        features="pca",
        pca_dim=0,
        normalize="none",
        whiten=False,
        split="iid",
        shards_per_worker=2,
        dirichlet_alpha=0.5,
        batch_size=16,
    )
    base.update(kw)
    return SimpleNamespace(**base)


def test_synthetic_is_deterministic_and_learnable():
    a = make_synthetic(2000, 500, 20, 5, 3.0, seed=7)
    b = make_synthetic(2000, 500, 20, 5, 3.0, seed=7)
    c = make_synthetic(2000, 500, 20, 5, 3.0, seed=8)
    assert all(np.array_equal(u, v) for u, v in zip(a, b)) and not np.array_equal(a[0], c[0])
    x_tr, y_tr, x_te, y_te = a
    assert x_tr.dtype == np.float32 and x_tr.shape == (2000, 20) and np.bincount(y_tr).tolist() == [400] * 5
    # A linear classifier learns it: the nearest class mean of the training set (chance is 0.2).
    means = np.stack([x_tr[y_tr == c].mean(axis=0) for c in range(5)])
    predicted = np.argmin(((x_te[:, None, :] - means[None]) ** 2).sum(axis=2), axis=1)
    assert np.mean(predicted == y_te) > 0.8


def test_load_dataset_synthetic():
    ds = load_dataset(_syn_cfg(pca_dim=5, normalize="standard", whiten=True, split="shards"), 4, data_seed=11)
    assert isinstance(ds, Dataset) and ds.name == "synthetic" and ds.num_classes == 5 and ds.input_dim == 5
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32 and ds.y_test.dtype == np.int32
    assert len(ds.shards) == 4 and _check_disjoint(list(ds.shards), 2000) == 2000
    again = load_dataset(_syn_cfg(pca_dim=5, normalize="standard", whiten=True, split="shards"), 4, data_seed=11)
    np.testing.assert_array_equal(ds.x_train, again.x_train)


def test_load_dataset_accepts_omegaconf():
    omegaconf = pytest.importorskip("omegaconf")
    cfg = omegaconf.OmegaConf.create(vars(_syn_cfg()))
    omegaconf.OmegaConf.set_struct(cfg, True)
    ds = load_dataset(cfg, 3, data_seed=0)
    assert ds.x_train.shape == (2000, 20) and {s.size for s in ds.shards} == {666}


@pytest.mark.parametrize(
    "split,workers,batch,smallest",
    [("iid", 10, 201, 200), ("shards", 10, 201, 200), ("dirichlet", 10, 201, 200), ("iid", 3, 700, 666)],
)
def test_batch_larger_than_shard(split, workers, batch, smallest):
    with pytest.raises(ConfigError) as ei:
        load_dataset(_syn_cfg(split=split, batch_size=batch), workers, data_seed=0)
    assert str(ei.value) == (
        f"dataset.batch_size={batch} is invalid: must be at most the smallest worker shard "
        f"({smallest} samples with {workers} workers, split={split})"
    )


def test_dirichlet_batch_size_becomes_min_size():
    cfg = _syn_cfg(split="dirichlet", dirichlet_alpha=0.3, batch_size=60)
    ds = load_dataset(cfg, 8, data_seed=2)
    assert min(s.size for s in ds.shards) >= 60
    with pytest.raises(ConfigError, match="dataset.dirichlet_alpha=0.01 is invalid"):
        load_dataset(_syn_cfg(split="dirichlet", dirichlet_alpha=0.01, batch_size=200), 8, data_seed=2)


def test_load_dataset_config_errors():
    with pytest.raises(ConfigError, match="dataset.name='imagenet' is invalid: valid: mnist, cifar10, synthetic"):
        load_dataset(_syn_cfg(name="imagenet"), 2, data_seed=0)
    with pytest.raises(ConfigError, match=r"dataset.pca_dim=21 is invalid: allowed range 0..20"):
        load_dataset(_syn_cfg(pca_dim=21), 2, data_seed=0)
    # pca_dim is checked against the known input size before any file is looked for.
    with pytest.raises(ConfigError, match=r"dataset.pca_dim=1000 is invalid: allowed range 0..784"):
        load_dataset(_syn_cfg(name="mnist", pca_dim=1000, batch_size=8), 2, 0, data_dir="/nonexistent")
    with pytest.raises(ConfigError, match="dataset.batch_size=None is invalid"):
        load_dataset(SimpleNamespace(name="synthetic"), 2, data_seed=0)
    with pytest.raises(ConfigError, match="dataset.whiten=None is invalid: is required"):  # no default of its own
        load_dataset(_syn_cfg(whiten=None), 2, data_seed=0)
    with pytest.raises(ConfigError, match="dataset.features=None is invalid: is required"):
        load_dataset(_syn_cfg(features=None), 2, data_seed=0)
    with pytest.raises(ConfigError, match="dataset.features='pixels' is invalid: valid: pca, raw"):
        load_dataset(_syn_cfg(features="pixels"), 2, data_seed=0)


def test_holdout_replaces_the_test_set_with_training_samples():
    full = load_dataset(_syn_cfg(), 4, data_seed=3)
    held = load_dataset(_syn_cfg(holdout=300), 4, data_seed=3)
    assert held.x_train.shape == (1700, 20) and held.x_test.shape == (300, 20) and len(held.y_test) == 300
    assert _check_disjoint(list(held.shards), 1700) == 1700
    # The two parts are the training set, each in its original order; the test set is not used.
    rows = {row.tobytes(): i for i, row in enumerate(full.x_train)}
    train_rows = [rows[r.tobytes()] for r in held.x_train]
    test_rows = [rows[r.tobytes()] for r in held.x_test]
    assert sorted(train_rows + test_rows) == list(range(2000)) and train_rows == sorted(train_rows)
    np.testing.assert_array_equal(held.y_test, full.y_train[sorted(test_rows)])
    # The held-out samples are drawn from data_seed's own stream; holdout=0 is the dataset as before.
    x, y = full.x_train, full.y_train
    np.testing.assert_array_equal(hold_out(x, y, 300, data_seed=3)[2], held.x_test)
    assert not np.array_equal(hold_out(x, y, 300, data_seed=4)[2], held.x_test)
    again = load_dataset(_syn_cfg(holdout=0), 4, data_seed=3)
    np.testing.assert_array_equal(again.x_test, full.x_test)
    np.testing.assert_array_equal(again.x_train, full.x_train)


def test_holdout_errors_before_loading():
    with pytest.raises(ConfigError) as ei:
        load_dataset(_syn_cfg(name="cifar10", holdout=50000, batch_size=8), 2, 0, data_dir="/nonexistent")
    assert str(ei.value) == "dataset.holdout=50000 is invalid: allowed range [0, 49999] (the training set's size - 1)"
    # The workers' shards come from what is left: 2000 - 1000 samples over 10 workers.
    with pytest.raises(ConfigError, match=r"dataset.batch_size=101 .* \(100 samples with 10 workers"):
        load_dataset(_syn_cfg(holdout=1000, batch_size=101), 10, data_seed=0)
    with pytest.raises(ConfigError, match="dataset.holdout=-1 is invalid: must be an integer >= 0"):
        load_dataset(_syn_cfg(holdout=-1), 2, data_seed=0)


def test_size_helpers():
    assert input_dim_of(SimpleNamespace(name="cifar10")) == 3072 == DATASET_INFO["cifar10"]["input_dim"]
    assert train_size_of(SimpleNamespace(name="mnist")) == 60000
    assert feature_dim_of(SimpleNamespace(name="mnist", pca_dim=50)) == 50
    assert input_dim_of(_syn_cfg()) == 20 and train_size_of(_syn_cfg()) == 2000


@needs_mnist
def test_load_dataset_mnist_pca(tmp_path):
    cfg = SimpleNamespace(
        name="mnist",
        features="pca",
        pca_dim=50,
        normalize="standard",
        whiten=True,
        split="shards",
        shards_per_worker=2,
        dirichlet_alpha=0.5,
        batch_size=32,
    )
    ds = load_dataset(cfg, 10, data_seed=0, data_dir=DATA_DIR, cache_dir=tmp_path)
    assert ds.x_train.shape == (60000, 50) and ds.x_test.shape == (10000, 50) and ds.input_dim == 50
    assert ds.y_train.dtype == np.int32 and ds.num_classes == 10
    assert _check_disjoint(list(ds.shards), 60000) == 60000
    t = time.perf_counter()
    warm = load_dataset(cfg, 10, data_seed=0, data_dir=DATA_DIR, cache_dir=tmp_path)
    warm_s = time.perf_counter() - t
    np.testing.assert_array_equal(ds.x_train, warm.x_train)
    assert warm_s < 5.0  # ~0.2 s normally; generous bound for loaded CI machines
