"""``hydra/launcher=submitit_slurm`` (each job a Slurm job: ``runner.ranks`` tasks started by ``srun``)
and ``hydra/launcher=submitit_local`` (each job a local process, all at once)."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher

from dybw.cli import report_returns
from dybw.launchers import compose_jobs, job_shape, share_cores

log = logging.getLogger("dybw.launchers")


class _DybwSubmitit(BaseSubmititLauncher):
    """The plugin's launcher, with per-job resources (:meth:`resources`); jobs with the same resources
    go out as one job array, every array before waiting for any result."""

    def resources(self, job) -> dict:
        """The executor's parameters that depend on the job (a composed job config)."""
        raise NotImplementedError

    def submitting(self, jobs):
        """A context around the submissions (the local executor's jobs share the cores)."""
        return contextlib.nullcontext()

    def launch(self, job_overrides, initial_job_idx):
        from omegaconf import OmegaConf

        self.submitted_from = os.getcwd()  # where the jobs' relative results/ paths start, whatever their cwd
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if "mode" in self.config.hydra.sweep:
            os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))
        log.info("Submitit '%s' sweep output dir: %s", self._EXECUTOR, sweep_dir)
        jobs = compose_jobs(self, job_overrides)
        groups: dict[tuple, list[int]] = {}
        for index, job in enumerate(jobs):
            groups.setdefault(tuple(sorted(self.resources(job).items())), []).append(index)

        base = set(OmegaConf.structured(BaseQueueConf).keys())
        params = {
            key if key in base else f"{self._EXECUTOR}_{key}": value
            for key, value in self.params.items()
            if key not in ("submitit_folder", "max_num_timeout")
        }
        with self.submitting(jobs):
            submitted = self._submit(groups, job_overrides, initial_job_idx, params)
        returns = [submitted[index].results()[0] for index in range(len(jobs))]
        report_returns(returns, output_seen=False)  # the jobs' output is in their .submitit/ logs
        return returns

    def _submit(self, groups, job_overrides, initial_job_idx, params) -> dict:
        """One job array per group of jobs with the same resources; the submitted jobs by job index."""
        import submitit
        from hydra.core.singleton import Singleton
        from hydra.core.utils import filter_overrides

        submitted = {}
        for resources, indices in groups.items():
            executor = submitit.AutoExecutor(
                cluster=self._EXECUTOR,
                folder=self.params["submitit_folder"],
                **{f"{self._EXECUTOR}_max_num_timeout": self.params.get("max_num_timeout", 0)},
            )
            executor.update_parameters(**{**params, **dict(resources)})
            arguments = []
            for index in indices:
                number = initial_job_idx + index
                overrides = list(job_overrides[index])
                log.info("\t#%d : %s (%s)", number, " ".join(filter_overrides(overrides)), _shown(resources))
                arguments.append((overrides, "hydra.sweep.dir", number, f"job_id_for_{number}", Singleton.get_state()))
            submitted.update(zip(indices, executor.map_array(self, *zip(*arguments))))
        return submitted

    def __call__(self, sweep_overrides, job_dir_key, job_num, job_id, singleton_state):
        """In the job: from where run.py was started, so that results/ is the same directory; with the
        number of tasks srun started together, which form the job's MPI world."""
        import submitit

        from dybw.mpi import WORLD_SIZE_VARIABLE

        os.chdir(self.submitted_from)
        tasks = submitit.JobEnvironment().num_tasks
        if tasks > 1:
            os.environ[WORLD_SIZE_VARIABLE] = str(tasks)
        return super().__call__(sweep_overrides, job_dir_key, job_num, job_id, singleton_state)

    def checkpoint(self, sweep_overrides, *args, **kwargs):
        """Requeued after its time ran out (``hydra.launcher.max_num_timeout`` > 0): continue from the
        job's last checkpoint, saved at every evaluation."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, [*sweep_overrides, "resume=true"], *args, **kwargs)


def _shown(resources) -> str:
    return ", ".join(f"{key}={value}" for key, value in resources)


class SlurmLauncher(_DybwSubmitit):
    """Each job one Slurm job: ``runner.ranks`` tasks over ``hydra.launcher.nodes`` nodes, ``srun`` starting
    them (they are the job's MPI world) with ``runner.threads`` CPUs each; ``runner=local``: one task."""

    _EXECUTOR = "slurm"

    def resources(self, job) -> dict:
        shape = job_shape(job, cores=1)  # ranks=0 is refused before anything starts (check_job)
        nodes = int(self.params.get("nodes") or 1)
        cpus = self.params.get("cpus_per_task") or shape.threads
        return {"nodes": nodes, "tasks_per_node": shape.processes // nodes, "cpus_per_task": int(cpus)}


class LocalLauncher(_DybwSubmitit):
    """Each job a local process, all started at once and sharing the cores; a job on ``runner=mpi``
    starts its own world with ``runner.launcher`` (mpiexec), as under the basic launcher."""

    _EXECUTOR = "local"

    def resources(self, job) -> dict:
        return {"tasks_per_node": 1}

    def submitting(self, jobs):
        # The local executor starts every job at once.
        return share_cores("submitit_local", jobs, len(jobs), fewer="the jobs of the sweep")
