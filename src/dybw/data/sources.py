"""Locate, verify, download and decode the raw dataset files.

Layout under a data directory ``D`` (``$DYBW_DATA_DIR``, default ``./data``)::

    D/mnist/train-images-idx3-ubyte.gz ... t10k-labels-idx1-ubyte.gz      (official IDX files)
    D/cifar10/cifar-10-batches-py/data_batch_1 ... data_batch_5, test_batch (official pickles)

Every file is checked against the MD5 published for the official file before it is read, so a
truncated or altered copy is reported (``DataError``) and never parsed -- in particular a CIFAR
pickle is only unpickled once its bytes are known to be the official ones.

Missing files are downloaded (only then is anything written into the data directory). Without
network access the error says exactly which files, with which MD5, to put in which directory.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import pickle
import shutil
import tarfile
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dybw.errors import ConfigError, DataError, DataMissing

DOWNLOAD_TIMEOUT_S = 10.0  # per blocking socket operation of one download attempt
_COPY_CHUNK = 1 << 20
# A verification is only remembered for files whose mtime is at least this old: file timestamps
# have a coarse (jiffy) granularity, so a file rewritten right after hashing could keep the same
# size and mtime ("racy git" problem). Files older than this cannot be silently rewritten in-tick.
_RACY_WINDOW_S = 2.0
_VERIFY_CACHE_NAME = "verified_md5.json"


@dataclass(frozen=True)
class Archive:
    """An archive that contains the dataset files under ``member_prefix``."""

    url: str
    filename: str
    md5: str
    member_prefix: str


@dataclass(frozen=True)
class SourceSpec:
    """Where a dataset's files live (``subdir`` of the data dir), their MD5s, and how to fetch them.

    Files are fetched either one by one from ``mirrors`` (``mirror + filename``, mirrors tried in
    order) or, when ``archive`` is set, by downloading and unpacking that archive.
    """

    subdir: str
    files: dict[str, str]  # filename -> official md5
    mirrors: tuple[str, ...] = ()
    archive: Archive | None = None


DATASETS: dict[str, SourceSpec] = {
    "mnist": SourceSpec(
        subdir="mnist",
        files={
            "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
            "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
            "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
            "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
        },
        mirrors=(
            "https://ossci-datasets.s3.amazonaws.com/mnist/",
            "http://yann.lecun.com/exdb/mnist/",
        ),
    ),
    "cifar10": SourceSpec(
        subdir="cifar10/cifar-10-batches-py",
        files={
            "data_batch_1": "c99cafc152244af753f735de768cd75f",
            "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
            "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
            "data_batch_4": "634d18415352ddfa80567beed471001a",
            "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
            "test_batch": "40351d587109b95175f43aff81a1287e",
        },
        archive=Archive(
            url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
            filename="cifar-10-python.tar.gz",
            md5="c58f30108f718f92721af3b95e74349a",
            member_prefix="cifar-10-batches-py/",
        ),
    ),
}


def data_dir_from_env(default: str | os.PathLike = "./data") -> Path:
    """Return ``$DYBW_DATA_DIR`` if set and non-empty, else ``default`` (``~`` expanded)."""
    return Path(os.environ.get("DYBW_DATA_DIR") or default).expanduser()


def cache_dir_from_env() -> Path:
    """Return ``$DYBW_CACHE_DIR`` if set and non-empty, else ``~/.cache/dybw``."""
    return Path(os.environ.get("DYBW_CACHE_DIR") or "~/.cache/dybw").expanduser()


def _spec(name: str) -> SourceSpec:
    if name not in DATASETS:
        raise ConfigError("dataset.name", name, f"no files are known for it; valid: {', '.join(DATASETS)}")
    return DATASETS[name]


def dataset_dir(name: str, data_dir: str | os.PathLike) -> Path:
    """The folder ``data_dir / subdir`` that must hold the files of dataset ``name``."""
    return Path(data_dir) / _spec(name).subdir


def md5_of(path: str | os.PathLike) -> str:
    """Hex MD5 of a file, read in 1 MiB chunks (~1 GB/s; CIFAR-10's 186 MB take ~0.2 s)."""
    h = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(_COPY_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _one_line(err: BaseException) -> str:
    """``Type: message`` squeezed onto one line (messages are printed as a single line)."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


# ---------------------------------------------------------------------------------------------
# MD5 verification with a stat-keyed memo, so repeated runs do not re-hash 186 MB of CIFAR-10.
# ---------------------------------------------------------------------------------------------


def _stat_key(st: os.stat_result) -> list[int]:
    # ctime cannot be set by user code (unlike mtime via os.utime), and any rewrite changes it.
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _read_verify_cache(cache_file: Path) -> dict:
    try:
        with open(cache_file, encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_json_atomic(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=0, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def verify_file(path: Path, expected_md5: str, cache_dir: Path | None) -> None:
    """Raise ``DataError`` unless ``md5(path) == expected_md5``.

    A successful check is remembered in ``cache_dir/verified_md5.json`` keyed by the absolute path
    and (size, mtime_ns, ctime_ns, inode); while those are unchanged the file is not re-hashed.
    The memo is best effort: an unwritable cache dir just means hashing every time.
    """
    path = Path(path)
    st = path.stat()
    key = str(path.absolute())
    cache_file = Path(cache_dir) / _VERIFY_CACHE_NAME if cache_dir is not None else None
    memo = _read_verify_cache(cache_file) if cache_file is not None else {}
    entry = memo.get(key)
    if isinstance(entry, dict) and entry.get("stat") == _stat_key(st) and entry.get("md5") == expected_md5:
        return
    actual = md5_of(path)
    if actual != expected_md5:
        raise DataError(
            f"{path} is corrupted: md5 {actual} (size {st.st_size} bytes) but the official file has md5 "
            f"{expected_md5}; delete it to re-download, or replace it with the official file"
        )
    if cache_file is not None and time.time() - st.st_mtime > _RACY_WINDOW_S:
        memo = _read_verify_cache(cache_file)  # re-read: another process may have added entries
        memo[key] = {"stat": _stat_key(st), "md5": actual}
        try:
            _write_json_atomic(cache_file, memo)
        except OSError:
            pass  # read-only cache dir: verification still happened, it just is not remembered


# ---------------------------------------------------------------------------------------------
# Downloading
# ---------------------------------------------------------------------------------------------


def _publish(tmp: str | os.PathLike, final: Path) -> None:
    """Atomically move a finished temp file into place, readable by all like a normal download
    (mkstemp creates files with mode 0600)."""
    os.chmod(tmp, 0o644)
    os.replace(tmp, final)


def _open_url(url: str, timeout: float):
    """Open ``url`` for reading (module-level so tests can replace it and never touch the network)."""
    return urllib.request.urlopen(url, timeout=timeout)  # noqa: S310 (fixed https/http URLs)


def _download_to(url: str, folder: Path, final_name: str, timeout: float) -> tuple[Path, str]:
    """Stream ``url`` into a temp file in ``folder``; return (temp path, md5 of what was received).

    The temp file lives in the destination folder so the caller's ``os.replace`` is atomic.
    """
    with _open_url(url, timeout) as resp:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{final_name}.", suffix=".part")
        try:
            h = hashlib.md5()
            with os.fdopen(fd, "wb") as out:
                while chunk := resp.read(_COPY_CHUNK):
                    h.update(chunk)
                    out.write(chunk)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return Path(tmp), h.hexdigest()


def _no_network_error(name: str, spec: SourceSpec, folder: Path, missing: list[str], reason: str) -> DataMissing:
    wanted = ", ".join(f"{f} (md5 {spec.files[f]})" for f in missing)
    how = (
        f" (the official archive {spec.archive.url}, md5 {spec.archive.md5}, unpacks to them)"
        if spec.archive
        else f" (official mirrors: {', '.join(spec.mirrors)})"
    )
    return DataMissing(
        f"{name}: {len(missing)} file(s) missing in {folder} and the download failed ({reason}). "
        f"Without network access, put the official files {wanted} into the directory {folder}{how}, "
        f"or set DYBW_DATA_DIR to a data directory whose {spec.subdir}/ already holds them.",
        short=f"{name}: {len(missing)} file(s) missing in {folder} and they could not be downloaded: run `make data` "
        f"(it links ./data to an offline copy) or set DYBW_DATA_DIR to a directory whose {spec.subdir}/ holds them",
    )


def _fetch_mirrored(name: str, spec: SourceSpec, folder: Path, missing: list[str], timeout: float) -> None:
    for fname in missing:
        errors = []
        for mirror in spec.mirrors:
            url = mirror + fname
            try:
                tmp, md5 = _download_to(url, folder, fname, timeout)
            except Exception as e:  # noqa: BLE001 - every failure mode means "try the next mirror"
                errors.append(f"{url}: {_one_line(e)}")
                continue
            if md5 != spec.files[fname]:
                tmp.unlink(missing_ok=True)
                errors.append(f"{url}: received md5 {md5}, expected {spec.files[fname]}")
                continue
            _publish(tmp, folder / fname)
            break
        else:
            # Stop at the first file no mirror could deliver: without a network every further
            # attempt would only add another timeout before the same message.
            still = [f for f in missing if not (folder / f).is_file()]
            raise _no_network_error(name, spec, folder, still, "; ".join(errors))


def _fetch_archive(name: str, spec: SourceSpec, folder: Path, missing: list[str], timeout: float) -> None:
    arc = spec.archive
    assert arc is not None
    parent = folder.parent  # e.g. <data_dir>/cifar10; the archive's top folder becomes `folder`
    try:
        tmp, md5 = _download_to(arc.url, parent, arc.filename, timeout)
    except Exception as e:  # noqa: BLE001
        raise _no_network_error(name, spec, folder, missing, f"{arc.url}: {_one_line(e)}") from e
    try:
        if md5 != arc.md5:
            raise _no_network_error(name, spec, folder, missing, f"{arc.url}: received md5 {md5}, expected {arc.md5}")
        # Only the named members are read (streamed through extractfile), never extractall, so an
        # archive cannot place files outside `folder`.
        with tarfile.open(tmp, "r:*") as tar:
            for fname in missing:
                try:
                    member = tar.getmember(arc.member_prefix + fname)
                    src = tar.extractfile(member)
                except KeyError:
                    src = None
                if src is None:
                    raise DataError(f"{arc.url} (md5 {md5}) has no regular file {arc.member_prefix + fname}")
                fd, part = tempfile.mkstemp(dir=folder, prefix=f".{fname}.", suffix=".part")
                try:
                    with os.fdopen(fd, "wb") as out, src:
                        shutil.copyfileobj(src, out, _COPY_CHUNK)
                    got = md5_of(part)
                    if got != spec.files[fname]:
                        raise DataError(f"{arc.url}: member {fname} has md5 {got}, expected {spec.files[fname]}")
                    _publish(part, folder / fname)
                except BaseException:
                    Path(part).unlink(missing_ok=True)
                    raise
    finally:
        tmp.unlink(missing_ok=True)  # the 163 MB archive is not needed once unpacked


def ensure_files(
    name: str,
    data_dir: str | os.PathLike,
    *,
    cache_dir: str | os.PathLike | None = None,
    timeout: float = DOWNLOAD_TIMEOUT_S,
) -> Path:
    """Make sure every file of dataset ``name`` is in ``data_dir/<subdir>`` with its official MD5.

    Present files are verified first (a corrupted one raises ``DataError`` naming it, and is left
    alone -- it is never overwritten or loaded). Missing files are then downloaded to a temp file
    in the same folder, verified, and moved in place with ``os.replace``. Nothing is written into
    ``data_dir`` unless something is missing, so a read-only data dir with all files works.
    ``cache_dir`` (default ``$DYBW_CACHE_DIR`` or ``~/.cache/dybw``) holds the MD5 memo.

    Returns the folder holding the files.
    """
    spec = _spec(name)
    folder = Path(data_dir) / spec.subdir
    cache = Path(cache_dir) if cache_dir is not None else cache_dir_from_env()
    missing = []
    for fname, md5 in spec.files.items():
        path = folder / fname
        if path.is_file():
            verify_file(path, md5, cache)
        elif path.exists():
            raise DataError(f"{path} exists but is not a regular file; replace it with the official file (md5 {md5})")
        else:
            missing.append(fname)
    if not missing:
        return folder
    created = [d for d in (folder, *folder.parents) if not d.exists()]  # deepest first
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _no_network_error(name, spec, folder, missing, f"cannot create {folder}: {_one_line(e)}") from e
    try:
        if spec.archive is not None:
            _fetch_archive(name, spec, folder, missing, timeout)
        else:
            _fetch_mirrored(name, spec, folder, missing, timeout)
    except BaseException:
        # A failed download leaves no empty folders behind: an empty ./data would stop `make data` from
        # linking the offline copy there, and the next run would fail the same way.
        for directory in created:
            if directory.is_dir() and not any(directory.iterdir()):
                directory.rmdir()
        raise
    return folder


# ---------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------


def read_idx(path: str | os.PathLike, magic: int, shape: tuple[int, ...]) -> np.ndarray:
    """Decode a gzipped IDX file of unsigned bytes.

    Header: big-endian uint32 ``magic`` (``0x00000803`` for 3-d images, ``0x00000801`` for 1-d
    labels: two zero bytes, type byte 0x08 = uint8, number of dimensions), then one big-endian
    uint32 per dimension, then ``prod(dims)`` uint8 values. ``shape`` is the expected dims.
    """
    path = Path(path)
    raw = gzip.decompress(path.read_bytes())
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: IDX header truncated ({len(raw)} bytes)")
    got_magic = int.from_bytes(raw[:4], "big")
    if got_magic != magic:
        raise DataError(f"{path}: IDX magic number {got_magic:#010x}, expected {magic:#010x}")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    if dims != tuple(shape):
        raise DataError(f"{path}: IDX dimensions {dims}, expected {tuple(shape)}")
    if len(raw) != header + int(np.prod(dims)):
        raise DataError(f"{path}: IDX payload has {len(raw) - header} bytes, expected {int(np.prod(dims))}")
    # frombuffer views the immutable bytes object; copy so callers get an ordinary writable array.
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims).copy()


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with open(path, "rb") as f:
        # Safe only because the file's MD5 was verified to be the official one before this call.
        d = pickle.load(f, encoding="bytes")  # noqa: S301
    x = np.asarray(d[b"data"], dtype=np.uint8)
    y = np.asarray(d[b"labels"], dtype=np.int64)
    if x.shape != (10000, 3072) or y.shape != (10000,):
        raise DataError(f"{path}: data {x.shape} / labels {y.shape}, expected (10000, 3072) / (10000,)")
    return x, y


def load_raw(
    name: str, data_dir: str | os.PathLike, *, cache_dir: str | os.PathLike | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(x_train, y_train, x_test, y_test)``: uint8 ``[n, d]`` features, int64 labels.

    MNIST: 28x28 images flattened row-major to d = 784. CIFAR-10: d = 3072 in the pickles'
    channel-major order (1024 red, 1024 green, 1024 blue values, each 32 rows of 32).
    Calls :func:`ensure_files` first, so only verified files are ever decoded.
    """
    folder = ensure_files(name, data_dir, cache_dir=cache_dir)
    if name == "mnist":
        x_tr = read_idx(folder / "train-images-idx3-ubyte.gz", 0x803, (60000, 28, 28)).reshape(60000, 784)
        y_tr = read_idx(folder / "train-labels-idx1-ubyte.gz", 0x801, (60000,)).astype(np.int64)
        x_te = read_idx(folder / "t10k-images-idx3-ubyte.gz", 0x803, (10000, 28, 28)).reshape(10000, 784)
        y_te = read_idx(folder / "t10k-labels-idx1-ubyte.gz", 0x801, (10000,)).astype(np.int64)
        return x_tr, y_tr, x_te, y_te
    if name == "cifar10":
        parts = [_read_cifar_batch(folder / f"data_batch_{i}") for i in range(1, 6)]
        x_te, y_te = _read_cifar_batch(folder / "test_batch")
        x_tr = np.concatenate([p[0] for p in parts])
        y_tr = np.concatenate([p[1] for p in parts])
        return x_tr, y_tr, x_te, y_te
    raise ConfigError("dataset.name", name, f"no reader for it; valid: {', '.join(DATASETS)}")


def files_digest(name: str) -> str:
    """A short digest of the official MD5s of dataset ``name``: identifies its verified raw bytes."""
    spec = _spec(name)
    text = ";".join(f"{k}={v}" for k, v in sorted(spec.files.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:12]
