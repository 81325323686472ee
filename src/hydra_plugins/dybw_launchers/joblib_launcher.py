"""``hydra/launcher=joblib``: a sweep's jobs side by side on this machine, sharing its cores."""

from __future__ import annotations

from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher as PluginJoblibLauncher

from dybw.cli import report_returns
from dybw.launchers import compose_jobs, share_cores


class JoblibLauncher(PluginJoblibLauncher):
    """The plugin's launcher (``hydra.launcher.n_jobs`` jobs at a time, -1 = one per core), with each job's
    share of the cores for ``runner.ranks=0`` and one line on how busy the cores will be."""

    def launch(self, job_overrides, initial_job_idx):
        from joblib import effective_n_jobs

        at_once = effective_n_jobs(self.joblib.get("n_jobs", -1))
        jobs = compose_jobs(self, job_overrides)
        with share_cores("joblib", jobs, at_once, fewer="hydra.launcher.n_jobs"):  # the workers inherit it
            returns = super().launch(job_overrides, initial_job_idx)
        report_returns(returns, output_seen=True)  # the workers print to our stderr
        return returns
