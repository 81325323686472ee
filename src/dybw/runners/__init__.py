"""The runners, found by ``runner.name`` (:data:`RUNNERS`): ``local`` here, ``mpi`` in :mod:`dybw.mpi`.

:func:`run_job` is what ``run.py`` and the figure pipeline call for a job: it skips a job completed with
the same config, else hands it to the chosen runner.
"""

from __future__ import annotations

from ..mpi import runner as _mpi  # noqa: F401 - registers runner=mpi
from . import local  # noqa: F401 - registers runner=local
from .base import NUMERIC_RUNNER_KEYS, RUNNERS, Runner, RunnerConfig, run_job

__all__ = ["NUMERIC_RUNNER_KEYS", "RUNNERS", "Runner", "RunnerConfig", "run_job"]
