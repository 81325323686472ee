"""``runner=mpi``: the job on MPI ranks, launched by ``run.py`` or in the world it was started in."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from ..errors import ConfigError, DataError, DybwError
from ..mpi import runs_in_started_world, world_size_from_environment
from ..schema import AtLeast, Choice, Finite
from .base import RUNNERS, Runner, RunnerConfig

FAULTS = ("none", "raise", "hang", "exit", "slow")
WAKES = ("bell", "poll")


@dataclass
class MpiRunnerConfig(RunnerConfig):
    ranks: Annotated[int, AtLeast(0)]  # 0 = min(num_workers, cores); ranks host contiguous groups of workers
    launcher: list[str]  # e.g. [mpiexec, -n, "{ranks}"] or [srun, -n, "{ranks}"]
    timeout_s: Annotated[float, Finite(0, strict=True, unit="seconds")]  # silence while iterating that fails the job
    startup_timeout_s: Annotated[float, Finite(0, strict=True, unit="seconds")]  # ... while starting or evaluating
    fault: Annotated[str, Choice(*FAULTS)]  # test hook: make fault_rank raise / hang / exit at fault_iteration,
    fault_rank: int  # or (slow) every rank pause fault_pause_s after each iteration from fault_iteration on
    fault_iteration: int
    fault_pause_s: Annotated[float, Finite(0, unit="seconds")]
    poll_s: Annotated[float, Finite(0, strict=True, unit="seconds")]  # wall clock: longest sleep unless rung
    wake: Annotated[str, Choice(*WAKES)]  # wall clock: bell (senders wake receivers; one host) | poll


@RUNNERS.register
class MpiRunner(Runner):
    """Ranks host groups of workers (virtual clock: the local runner's bits) or one worker each (wall clock:
    real delays, measured times).  ``docs/mpi.md``."""

    name = "mpi"
    Config = MpiRunnerConfig
    clocks = ("virtual", "wall")

    @classmethod
    def check(cls, cfg, algorithm) -> None:
        super().check(cfg, algorithm)
        from ..mpi.launch import find_launcher, resolve_ranks

        runner = cfg.runner
        if cfg.resume and runner.clock == "wall":
            raise ConfigError(
                "resume",
                cfg.resume,
                "wall-clock runs are measurements and are not checkpointed: resume needs runner.clock=virtual",
            )
        if runner.ranks > cfg.num_workers:
            raise ConfigError(
                "runner.ranks", runner.ranks, f"allowed range 0..{cfg.num_workers} (num_workers; 0 = auto)"
            )
        if runner.clock == "wall":
            from ..mpi.agreements import WALL_AGREEMENTS

            WALL_AGREEMENTS.get(cfg.protocol.agreement, "protocol.agreement")  # a plugin's may lack a wall side
            if runner.ranks not in (0, cfg.num_workers):
                raise ConfigError(
                    "runner.ranks",
                    runner.ranks,
                    f"the wall clock runs one worker per rank: use 0 or {cfg.num_workers} (num_workers)",
                )
            world = world_size_from_environment()
            if world > 1 and world != cfg.num_workers:
                raise ConfigError(
                    "num_workers",
                    cfg.num_workers,
                    f"the wall clock runs one worker per rank, and this MPI world has {world} ranks: "
                    f"use num_workers={world} or start {cfg.num_workers} ranks",
                )
        if runner.fault not in ("none", "slow"):  # a slow node slows every rank
            highest = resolve_ranks(cfg) - 1
            if not 0 <= runner.fault_rank <= highest:
                raise ConfigError(
                    "runner.fault_rank", runner.fault_rank, f"allowed range 0..{highest} (a rank of the job)"
                )
        if not runner.launcher:
            raise ConfigError("runner.launcher", runner.launcher, "must name a launcher, e.g. [mpiexec, -n, '{ranks}']")
        if not runs_in_started_world() and find_launcher(str(runner.launcher[0])) is None:
            raise ConfigError(
                "runner.launcher",
                runner.launcher,
                f"{runner.launcher[0]!r} is not on PATH: pip install mpich provides mpiexec (or run with runner=local)",
            )

    @classmethod
    def run(cls, cfg, graph, job_dir: Path, resolved: dict, digest: str) -> dict:
        """In the MPI world ``run.py`` was started in, or in one launched for this job."""
        if runs_in_started_world():
            from mpi4py import MPI

            from ..mpi.world import run_in_world

            started_together = world_size_from_environment()
            if MPI.COMM_WORLD.size != started_together:
                # Each process would run the whole job alone, all into one directory.
                raise DybwError(
                    f"this process is one of {started_together} started together, but MPI sees a world of "
                    f"{MPI.COMM_WORLD.size}: the launcher's MPI is not mpi4py's (under srun, pick the PMI your "
                    f"MPI speaks: srun --mpi=pmi2 or --mpi=pmix, or SLURM_MPI_TYPE)"
                )
            return run_in_world(MPI.COMM_WORLD, cfg, graph, job_dir, resolved, digest)
        from ..mpi.launch import launch_job, warn_if_oversubscribed

        warn_if_oversubscribed(cfg)
        _fetch_files(cfg, job_dir, digest)
        return launch_job(cfg, job_dir, resolved, digest)

    @staticmethod
    def batch_key(cfg) -> tuple:
        """Jobs with the same key can share one MPI world (:meth:`run_batch`): same ranks, launcher, threads."""
        from ..mpi.launch import resolve_ranks

        return (resolve_ranks(cfg), tuple(cfg.runner.launcher), cfg.runner.threads)

    @classmethod
    def run_batch(cls, jobs: list[tuple]):
        """Launch ``jobs`` -- ``(cfg, job_dir, resolved, digest)`` each, one :meth:`batch_key` -- in one MPI
        world, one after the other (the ranks start once); yields each job's summary, or the exception
        that failed it, and its seconds (:func:`dybw.mpi.launch.launch_jobs`)."""
        from ..mpi.launch import launch_jobs, warn_if_oversubscribed

        warn_if_oversubscribed(jobs[0][0])
        for cfg, job_dir, _, digest in jobs:
            _fetch_files(cfg, job_dir, digest)
        yield from launch_jobs(jobs)


def _fetch_files(cfg, job_dir: Path, digest: str) -> None:
    """The dataset's files, checked here: R ranks would otherwise each verify (and race to download) them,
    and a missing one would reach the user through a rank's abort instead of as the one line
    runner=local gives."""
    from ..data import fetch_dataset_files
    from ..results import Summary

    try:
        fetch_dataset_files(cfg.dataset, cfg.data_dir)
    except DataError as error:
        message = f"{type(error).__name__}: {error}"
        Summary.from_metrics_file(cfg, job_dir, "failed", message, digest, 0.0).write(job_dir)
        raise
