"""What needs no Slurm of the way dybw handles a Slurm job's end (tests/cluster runs the real thing): the
reason read from a job's log, and the shared memory a killed MPI world leaves behind."""

from __future__ import annotations

import mmap
import os
import time

import pytest

from dybw.mpi.shm import remove_stale_segments, stale_segments
from dybw.slurm import task_error

pytestmark = pytest.mark.unit  # no TensorFlow, MPI or subprocess: make test-fast

# What srun and slurmstepd wrote into the batch log of real jobs on the test cluster.
KILLED_RANK = """\
srun: error: vm: task 1: Killed
srun: launch/slurm: _step_signal: Terminating StepId=11.0
slurmstepd-vm: error: *** STEP 11.0 ON vm CANCELLED AT 2026-12-06T02:29:47 ***
Abort(143) on node 0 (rank 0 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 143) - process 0
srun: Job step aborted: Waiting up to 32 seconds for job step to finish.
srun: error: vm: task 0: Exited with exit code 143
"""
SIGNALLED_AT_START = """\
slurmstepd-vm: error: *** JOB 8 ON vm CANCELLED AT 2026-12-06T02:21:39 DUE TO JOB REQUEUE ***
srun: error: vm: task 0: Terminated
srun: error: vm: task 1: Killed
srun: error: vm: tasks 0-1: User defined signal 2
"""
CANCELLED = """\
slurmstepd-vm: error: *** JOB 5 ON vm CANCELLED AT 2026-12-06T02:12:48 ***
srun: forcing job termination
srun: error: vm: task 0: Exited with exit code 143
"""


def test_the_reason_is_the_task_that_failed_not_what_followed_from_it():
    assert task_error(KILLED_RANK) == "srun: error: vm: task 1: Killed"
    assert task_error(SIGNALLED_AT_START) == "srun: error: vm: tasks 0-1: User defined signal 2"
    assert task_error(CANCELLED) == ""  # our own exit on SIGTERM, and the cancellation: no task failed
    assert task_error("") == ""


def _segment(directory, name, age_s):
    path = directory / name
    path.write_bytes(b"\0" * 4096)
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_only_old_unmapped_segments_of_mpich_are_removed(tmp_path):
    stale = _segment(tmp_path, "mpich_shm_497cbda1_0", age_s=60)  # a killed world's
    vci = _segment(tmp_path, "mpich_vci_497cbda1_0", age_s=60)
    young = _segment(tmp_path, "mpich_shm_11111111_0", age_s=0)  # a rank may have just created it
    mapped = _segment(tmp_path, "mpich_shm_22222222_0", age_s=60)  # a running world's
    other = _segment(tmp_path, "psm2_shm_1", age_s=60)  # not MPICH's
    with open(mapped, "r+b") as handle, mmap.mmap(handle.fileno(), 4096):
        assert set(stale_segments(tmp_path)) == {stale, vci}
        assert sorted(remove_stale_segments(tmp_path)) == [stale.name, vci.name]
        assert not stale.exists() and not vci.exists()
        assert young.exists() and mapped.exists() and other.exists()
    assert remove_stale_segments(tmp_path) == [mapped.name]  # its world ended without unlinking it
    assert remove_stale_segments(tmp_path, min_age_s=0) == [young.name]
    assert other.exists()
