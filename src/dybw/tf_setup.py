"""Import TensorFlow quietly and deterministically, and size its thread pools (one place for both)."""

from __future__ import annotations

import os
import warnings

from .numerics import pin_eigen_cache_sizes

_eigen_pinned = False


def import_tensorflow():
    """TensorFlow with its start-up chatter silenced, and the cache sizes its Eigen products block by
    pinned.  Its other CPU kernels (oneDNN off, XLA's instruction set, YNNPACK's consistent sums) were
    pinned by the environment when ``dybw`` was imported, before TensorFlow (numerics.py)."""
    global _eigen_pinned
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    if not _eigen_pinned:
        _eigen_pinned = True
        tf.get_logger().setLevel("ERROR")
        pin_eigen_cache_sizes()
    return tf


def compiled(function, jit_compile: bool):
    """``tf.function(function)`` traced without AutoGraph.  Every program of dybw spells its control flow on
    tensors (``tf.cond``, ``tf.while_loop``, ``tf.map_fn``), as Keras 3 does in its own steps, so AutoGraph's
    rewriting of the Python source changes no graph; it cost about 0.6 CPU-s of each process's start."""
    return import_tensorflow().function(function, jit_compile=jit_compile, autograph=False)


CORES_VARIABLE = "DYBW_CORES"  # a job's share of the cores, set by launchers that run jobs side by side


def usable_cores() -> int:
    """CPUs this job may use: ``$DYBW_CORES`` when a launcher runs several jobs on this machine at once
    (``hydra/launcher=joblib``: each job's share), else the process's affinity mask, which cluster
    schedulers set (else all CPUs)."""
    share = os.environ.get(CORES_VARIABLE, "")
    if share.isdigit() and int(share) > 0:
        return int(share)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def use_threads(threads: int) -> None:
    """Run TensorFlow's kernels on ``threads`` threads in this process.

    The count is part of the numbers, not only of the speed: Eigen splits a long contraction (the weight
    gradient sums over the minibatch) across threads, and a different split rounds differently.  So
    ``runner.threads`` is fixed (1 by default) and equal in every process of a job, and runner=local
    and runner=mpi agree bit for bit on any machine.  Pools are created with TF's first operation; after
    that the count cannot change, and a different request only warns.
    """
    tf = import_tensorflow()
    if tf.config.threading.get_intra_op_parallelism_threads() == threads:
        return
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:
        warnings.warn(
            f"runner.threads={threads}: TensorFlow already runs in this process with its thread pools "
            f"sized; results may differ in the last bits from a fresh process",
            stacklevel=2,
        )
