"""Experiment tracking hooks called by :func:`dybw.job.run_job` on the process that writes results.

:func:`make_tracker` returns an object with

- ``log_iterations(first, end_times, backups)``: iterations ``first .. first+T-1``; ``end_times[t]`` is
  ``E(k)`` and ``backups[t]`` the ``[N]`` backup counts of iteration k,
- ``log_evaluation(row)``: one row of ``metrics.csv``,
- ``finish(summary)``: the contents of ``summary.json``.

``logger=none`` gives :class:`NullTracker`.  Tracking must never fail or slow a run.
"""

from __future__ import annotations


class NullTracker:
    """Tracks nothing."""

    def log_iterations(self, first, end_times, backups) -> None:
        pass

    def log_evaluation(self, row) -> None:
        pass

    def finish(self, summary) -> None:
        pass


def make_tracker(cfg, job_dir, resolved: dict):
    """The tracker chosen by ``logger.name``."""
    return NullTracker()
