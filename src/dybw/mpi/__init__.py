"""What ``runner=mpi`` (:mod:`dybw.runners.mpi`) runs on (docs/mpi.md): the protocol executed by real MPI ranks.

- :mod:`.launch`   the parent side: ``mpiexec -n R python -m dybw.mpi_rank <job dir>`` per job,
                   heartbeats, timeout, naming a dead or hung rank, no orphans.
- :mod:`.virtual`  ``runner.clock=virtual``: ranks host groups of workers; the virtual clock decides who
                   is used, so the numbers equal the local backend's.
- :mod:`.wall`     ``runner.clock=wall``: one worker per rank, delays really slept, times measured.
- :mod:`.exchange` the neighbour exchange plan between ranks (flat float32 buffers, never pickles).
- :mod:`.health`   heartbeat and error files in ``<job dir>/.mpi/``.
"""

from __future__ import annotations

import os

# Set by the launchers we support: dybw's submitit launcher in a Slurm job's tasks (the task count srun
# started, whatever MPI plugin srun uses), MPICH/Hydra (PMI_*), Open MPI (OMPI_*), PMIx.
WORLD_SIZE_VARIABLE = "DYBW_WORLD_SIZE"
_SIZE_VARIABLES = (WORLD_SIZE_VARIABLE, "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS")


def world_size_from_environment() -> int:
    """Size of the MPI world this process was started in (1 when not under an MPI launcher).

    Read from the environment so that deciding whether to launch does not initialise MPI.
    """
    for name in _SIZE_VARIABLES:
        value = os.environ.get(name)
        if value and value.isdigit():
            return int(value)
    return 1


def runs_in_started_world() -> bool:
    """Whether a ``runner=mpi`` job runs in the MPI world this process was started in rather than launching
    one of its own: a world of several ranks, or a Slurm job's tasks, a single task too (dybw's submitit
    launcher sets :data:`WORLD_SIZE_VARIABLE` there: an ``mpiexec`` started inside the task would not
    survive Slurm's signals, which go to every process of the job)."""
    return world_size_from_environment() > 1 or WORLD_SIZE_VARIABLE in os.environ
