"""The runners, one module each, found by ``runner.name`` (:data:`RUNNERS`): ``local`` and ``mpi`` (whose
ranks run the protocol of :mod:`dybw.mpi`).

:func:`run_job` is what ``run.py`` and the figure pipeline call for a job: it skips a job completed with
the same config, else hands it to the chosen runner.
"""

from __future__ import annotations

from . import local, mpi  # noqa: F401 - importing a runner's module registers it
from .base import NUMERIC_RUNNER_KEYS, RUNNERS, Runner, RunnerConfig, run_job

__all__ = ["NUMERIC_RUNNER_KEYS", "RUNNERS", "Runner", "RunnerConfig", "run_job"]
