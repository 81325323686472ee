"""The CPU kernels are pinned (dybw.numerics): which variables are set and when, that every entry point's
processes run with them, and that the pins absorb what a different CPU would change (core count, L1 size)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dybw import numerics
from helpers import REPO, TINY

TESTS = Path(__file__).resolve().parent
REFERENCE = numerics.is_reference_cpu()
ALL_PINS = {item.variable for item in numerics.pins()}


def _values(environ: dict) -> dict:
    return {key: environ.get(key) for key in sorted(ALL_PINS)}


def test_every_pin_is_set_on_a_cpu_with_avx2_and_fma():
    environ: dict = {}
    applied = numerics.pin(environ, reference_cpu=True)
    assert environ["OPENBLAS_CORETYPE"] == "Haswell" and environ["OPENBLAS_NUM_THREADS"] == "1"
    assert environ["ONEDNN_MAX_CPU_ISA"] == "AVX2" and environ["TF_ENABLE_ONEDNN_OPTS"] == "0"
    assert "X86_V4" in environ["NPY_DISABLE_CPU_FEATURES"] or "AVX512F" in environ["NPY_DISABLE_CPU_FEATURES"]
    assert environ["XLA_FLAGS"].split() == ["--xla_cpu_max_isa=AVX2", "--xla_cpu_enable_platform_dependent_math=false"]
    assert len(applied) == len(numerics.pins())
    assert numerics.pin(environ, reference_cpu=True) == []  # idempotent: nothing left to set


def test_what_the_user_set_is_kept_and_xla_flags_are_appended():
    environ = {"OPENBLAS_CORETYPE": "Zen", "XLA_FLAGS": "--xla_cpu_max_isa=AVX --xla_dump_to=/tmp/x"}
    numerics.pin(environ, reference_cpu=True)
    assert environ["OPENBLAS_CORETYPE"] == "Zen"
    assert environ["XLA_FLAGS"].split() == [
        "--xla_cpu_max_isa=AVX",
        "--xla_dump_to=/tmp/x",
        "--xla_cpu_enable_platform_dependent_math=false",
    ]


def test_no_instruction_set_is_named_on_other_cpus_and_nothing_when_opted_out():
    environ: dict = {}
    numerics.pin(environ, reference_cpu=False)
    assert set(environ) == {"OPENBLAS_NUM_THREADS", "XLA_FLAGS", "TF_ENABLE_ONEDNN_OPTS"}
    assert environ["XLA_FLAGS"] == "--xla_cpu_enable_platform_dependent_math=false"
    opted_out = {"DYBW_CPU_PINS": "0"}
    assert numerics.pin(opted_out, reference_cpu=True) == [] and opted_out == {"DYBW_CPU_PINS": "0"}
    assert numerics.is_reference_cpu("x86_64", frozenset({"avx", "avx2", "fma"}))
    assert not numerics.is_reference_cpu("x86_64", frozenset({"avx", "avx2"}))  # no FMA
    assert not numerics.is_reference_cpu("aarch64", frozenset({"avx2", "fma"}))


def _expect_pinned(record: dict, where: str) -> None:
    """A process's status shows every pin in effect (TensorFlow's Eigen sizes only if it loaded it)."""
    expected = {}
    numerics.pin(expected, reference_cpu=record["reference_cpu"])
    assert _values(record["environment"]) == _values(expected), where
    blas = record["openblas"]
    assert blas is not None and blas["threads"] == 1, (where, blas)
    if record["reference_cpu"]:
        assert blas["core"] == "Haswell", (where, blas)
        assert not any(target.startswith(("X86_V4", "AVX512")) for target in record["numpy"].values()), where
    if record["tensorflow"]:
        assert record["eigen"], (where, "no Eigen cache-size static found in TensorFlow's libraries")
        assert all(tuple(sizes) == numerics.EIGEN_CACHE_SIZES for sizes in record["eigen"].values()), where


def test_this_test_process_is_pinned():
    """conftest imports dybw (and TensorFlow through it) before anything else."""
    _expect_pinned({"tensorflow": True, **numerics.status()}, "pytest")


def _unpinned_environment(probe_dir: Path) -> dict:
    """This environment without any pin, so that a child process is pinned only if its entry point pins it."""
    env = {key: value for key, value in os.environ.items() if key not in ALL_PINS}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH", "")]))
    env["DYBW_PIN_PROBE_DIR"] = str(probe_dir)
    return env


def _records(probe_dir: Path) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(probe_dir.glob("*.json"))]


SPEC = """
title: the pins in the figure pipeline
figure: convergence
why: its jobs run in processes the pipeline starts
sweeps:
  - label: tiny
    kind: train
    base:
      plugins=[pin_probe]: records the kernels the process ran with
      dataset=synthetic: no files
      model=logreg: small
      num_workers=4: small
      iterations=6: short
      eval_every=3: two evaluations
      dataset.num_train=512: small
      dataset.num_test=128: small
      dataset.batch_size=16: fits 512/4
    variants:
      cb_full: {overrides: [algo=cb_full], why: one curve}
      cb_dybw: {overrides: [algo=cb_dybw], why: another}
"""


def test_every_entry_point_runs_pinned(tmp_path):
    """run.py (runner=local), run.py's MPI ranks and ``python -m dybw.figures``, each started without a pin
    in its environment: every process records the pinned kernels."""
    common = [*TINY, "plugins=[pin_probe]", "force=true"]
    commands = {
        "run.py local": [sys.executable, str(REPO / "run.py"), *common, f"hydra.run.dir={tmp_path / 'local'}"],
        "run.py mpi": [
            sys.executable,
            str(REPO / "run.py"),
            *common,
            "runner=mpi",
            "runner.ranks=2",
            f"hydra.run.dir={tmp_path / 'mpi'}",
        ],
        "python -m dybw.figures": [
            sys.executable,
            "-m",
            "dybw.figures",
            "--quick",
            "--experiments",
            str(tmp_path / "specs"),
            "--results",
            str(tmp_path / "results"),
            "--out",
            str(tmp_path / "figures"),
            "--jobs",
            "2",
        ],
    }
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "pins.yaml").write_text(SPEC)
    for name, command in commands.items():
        probe_dir = tmp_path / "probe" / name.replace(" ", "_")
        done = subprocess.run(
            command, cwd=tmp_path, env=_unpinned_environment(probe_dir), capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, (name, done.stdout[-2000:], done.stderr[-2000:])
        records = _records(probe_dir)
        ranks = sorted(r["rank"] for r in records if r["rank"] is not None)
        if name == "python -m dybw.figures":
            # the pipeline's own process, and the one or two pool processes the two jobs ran in
            assert 2 <= len(records) <= 3 and any(r["argv"][0].endswith("__main__.py") for r in records), records
        else:
            assert len(records) == (3 if name == "run.py mpi" else 1), (name, records)
        if name == "run.py mpi":
            assert ranks == ["0", "1"], records
        for record in records:
            _expect_pinned(record, f"{name} {record['argv']}")
        # Every process that trained loaded TensorFlow, and with it the pinned Eigen sizes.
        assert any(record["tensorflow"] for record in records), name


def _gradient_contraction_bits() -> str:
    """The weight gradient's shape: a [128, 10] sum over a 1024-sample batch, in XLA as a job computes it."""
    from dybw.tf_setup import import_tensorflow

    tf = import_tensorflow()
    rng = np.random.default_rng(0)
    hidden = tf.constant(rng.standard_normal((1024, 128), dtype=np.float32))
    delta = tf.constant(rng.standard_normal((1024, 10), dtype=np.float32))
    product = tf.function(lambda: tf.matmul(hidden, delta, transpose_a=True), jit_compile=True)
    return hashlib.sha256(product().numpy().tobytes()).hexdigest()


def test_eigen_blocks_by_the_pinned_l1_whatever_the_cpu_says():
    """With a 48 KiB L1 (Ice Lake, Zen 5) Eigen cuts the batch sum into other blocks and the bits change;
    the pin writes the reference sizes back and the bits are the reference ones again."""
    reference = _gradient_contraction_bits()
    try:
        assert numerics.pin_eigen_cache_sizes((48 * 1024, 1 << 20, 32 << 20)), "Eigen's cache sizes not found"
        other_cpu = _gradient_contraction_bits()
    finally:
        numerics.pin_eigen_cache_sizes()
    assert other_cpu != reference
    assert _gradient_contraction_bits() == reference


PCA = """
import hashlib, os, sys
import dybw
from dybw.data import load_raw, data_dir_from_env
from dybw.data.preprocess import fit_transform
x = load_raw("mnist", data_dir_from_env())[0].reshape(60000, -1)
t = fit_transform(x, normalize="standard", pca_dim=50, whiten=True)
print(hashlib.sha256(t.components.tobytes() + t.apply(x[:5000]).tobytes()).hexdigest())
"""


def _pca_bits(cores: set[int], pinned: bool) -> str:
    env = {key: value for key, value in os.environ.items() if key not in ALL_PINS}
    if not pinned:
        env["DYBW_CPU_PINS"] = "0"
    done = subprocess.run(
        [sys.executable, "-c", PCA],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=lambda: os.sched_setaffinity(0, cores),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores to compare 1 core with 2")
def test_the_pca_does_not_depend_on_the_core_count():
    """OpenBLAS splits the covariance and eigh work by its thread count, one per core unless pinned: the
    MNIST PCA on 1 core and on 2 cores differs unpinned, and is the same pinned."""
    one, two = {min(os.sched_getaffinity(0))}, set(sorted(os.sched_getaffinity(0))[:2])
    assert _pca_bits(one, pinned=False) != _pca_bits(two, pinned=False)
    assert _pca_bits(one, pinned=True) == _pca_bits(two, pinned=True)


def test_a_pca_cached_with_other_blas_kernels_is_not_read(tmp_path, monkeypatch):
    """The preprocessing cache key holds the BLAS fingerprint: a transform fitted with other kernels (another
    CPU, or unpinned) is refitted here, not read."""
    from dybw.data import preprocess

    rng = np.random.default_rng(0)
    x_train, x_test = rng.integers(0, 256, (300, 12), dtype=np.uint8), rng.integers(0, 256, (50, 12), dtype=np.uint8)
    options = dict(normalize="standard", pca_dim=4, whiten=True, cache_dir=tmp_path, cache_key="k")
    assert "Haswell" in numerics.blas_fingerprint() or not REFERENCE
    fits = preprocess.stats["fits"]
    preprocess.preprocess(x_train, x_test, **options)
    preprocess.preprocess(x_train, x_test, **options)  # same kernels: read from the cache
    assert preprocess.stats["fits"] == fits + 1
    monkeypatch.setattr(preprocess, "blas_fingerprint", lambda: "numpy 0|OpenBLAS SkylakeX|SkylakeX|2")
    preprocess.preprocess(x_train, x_test, **options)
    assert preprocess.stats["fits"] == fits + 2
