"""Hydra's default launcher (``hydra/launcher=basic``): a sweep's jobs one after another from this process.

Hydra announces them as "Launching N jobs locally" whatever they do; under ``runner=mpi`` each job starts
an MPI world of its own, which ``runner.launcher`` may place on other hosts.  This subclass says which.
"""

from __future__ import annotations

from hydra._internal.core_plugins import basic_launcher as hydra_basic

from dybw.launchers import compose_jobs, reworded, sequence_line


class BasicLauncher(hydra_basic.BasicLauncher):
    def launch(self, job_overrides, initial_job_idx):
        jobs = compose_jobs(self, job_overrides)
        with reworded(hydra_basic.log, f"Launching {len(job_overrides)} jobs locally", sequence_line(jobs)):
            return super().launch(job_overrides, initial_job_idx)
