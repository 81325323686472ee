"""``hydra/launcher=submitit_slurm`` (each job a Slurm job: ``runner.ranks`` tasks started by ``srun``)
and ``hydra/launcher=submitit_local`` (each job a local process, all at once)."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher

from dybw.cli import register_resolvers, report_returns
from dybw.launchers import compose_jobs, job_shape, share_cores
from dybw.slurm import JobFiles, Task, job_end, wait_for_jobs

log = logging.getLogger("dybw.launchers")
# Hydra overrides of the tasks other than rank 0: no .hydra/ or run.log of their own; warnings and errors
# go to the task's own log in .submitit/.
QUIET_RANK = ["hydra.output_subdir=null", "hydra/job_logging=stdout", "hydra.job_logging.root.level=WARNING"]


class _DybwSubmitit(BaseSubmititLauncher):
    """The plugin's launcher, with per-job resources (:meth:`resources`); jobs with the same resources
    go out as one job array, every array before waiting for any result."""

    def resources(self, job) -> dict:
        """The executor's parameters that depend on the job (a composed job config)."""
        raise NotImplementedError

    def executor_params(self) -> dict:
        """Executor parameters dybw sets whatever the user's (none by default)."""
        return {}

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
        params.update(self.executor_params())
        with self.submitting(jobs):
            submitted = self._submit(groups, job_overrides, initial_job_idx, params)
        # Every job is waited for and reported as it ends, whatever ended it (dybw.slurm).
        returns = [None] * len(jobs)
        for index in wait_for_jobs([submitted[index] for index in range(len(jobs))]):
            returns[index] = job_end(submitted[index], JobFiles.of(jobs[index]))
            report_returns([returns[index]], output_seen=False)  # the jobs' output is in their .submitit/ logs
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
        environment = submitit.JobEnvironment()
        if self._EXECUTOR == "slurm":  # the job's MPI world, one task alone too (the local executor's is none)
            os.environ[WORLD_SIZE_VARIABLE] = str(environment.num_tasks)
        if int(os.environ.get("SLURM_RESTART_COUNT") or 0) > 0:
            # Requeued by Slurm itself (a node failure, a preemption, scontrol requeue): continue from the
            # last checkpoint, which gives the numbers of an uninterrupted run, instead of starting over.
            sweep_overrides = _resuming(sweep_overrides)
        if environment.global_rank > 0:
            # One job, one voice: rank 0 keeps the job's .hydra/ and run.log; the others log their own
            # warnings and errors to their task's log in .submitit/ only.
            sweep_overrides = [*sweep_overrides, *QUIET_RANK]
        register_resolvers()
        files = JobFiles.of(self.hydra_context.config_loader.load_sweep_config(self.config, list(sweep_overrides)))
        with Task(files, environment.global_rank, environment.num_tasks):
            return super().__call__(sweep_overrides, job_dir_key, job_num, job_id, singleton_state)

    def checkpoint(self, sweep_overrides, *args, **kwargs):
        """Requeued after its time ran out (``hydra.launcher.max_num_timeout`` > 0): continue from the
        job's last checkpoint, saved at every evaluation."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, _resuming(sweep_overrides), *args, **kwargs)


def _resuming(overrides: list[str]) -> list[str]:
    return [*(o for o in overrides if not o.startswith("resume=")), "resume=true"]


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

    def executor_params(self) -> dict:
        # A task that dies ends the step (and the job): its peers would otherwise wait for its messages
        # until the time limit.
        return {"slurm_srun_args": ["--kill-on-bad-exit=1"]}


class LocalLauncher(_DybwSubmitit):
    """Each job a local process, all started at once and sharing the cores; a job on ``runner=mpi``
    starts its own world with ``runner.launcher`` (mpiexec), as under the basic launcher."""

    _EXECUTOR = "local"

    def resources(self, job) -> dict:
        return {"tasks_per_node": 1}

    def executor_params(self) -> dict:
        """Executor parameters dybw sets whatever the user's (none by default)."""
        return {}

    def submitting(self, jobs):
        # The local executor starts every job at once.
        return share_cores("submitit_local", jobs, len(jobs), fewer="the jobs of the sweep")
