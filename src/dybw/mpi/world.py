"""This rank's part of a job in an MPI world: :func:`run_in_world` (from ``python -m dybw.mpi_rank``,
or from ``run.py`` started under ``mpiexec``).

Every rank reads ``<job dir>/.mpi/job.json`` (the resolved config), builds the same graph, data and
schedule, and runs its share; rank 0 writes the results.  A rank that fails writes its error to
``.mpi/rank-<r>.error`` and aborts the world, so no rank is left waiting for it.
"""

from __future__ import annotations

import os
from pathlib import Path


def _maybe_inject_fault(cfg, rank: int, iteration: int) -> None:
    """Test hook (``runner.fault``): make one rank fail in a chosen way at a chosen iteration, or (``slow``)
    every rank pause ``fault_pause_s`` after each iteration from ``fault_iteration`` on -- a slow node: a job
    that lasts minutes, as a scheduler's time limits need, while using little CPU (every rank sleeps, so
    none spins in MPI waiting for another)."""
    if cfg.runner.fault == "slow":
        if iteration >= cfg.runner.fault_iteration:
            import time

            time.sleep(cfg.runner.fault_pause_s)
        return
    if cfg.runner.fault == "none" or rank != cfg.runner.fault_rank or iteration != cfg.runner.fault_iteration:
        return
    if cfg.runner.fault == "raise":
        raise RuntimeError(f"injected fault on rank {rank} at iteration {iteration}")
    if cfg.runner.fault == "hang":
        import time

        while True:  # a rank stuck in computation: only the launcher's timeout ends it
            time.sleep(1)
    if cfg.runner.fault == "exit":
        os._exit(3)


def run_in_world(comm, cfg, graph, job_dir: Path, plain: dict, digest: str) -> dict:
    """This rank's part of the job; rank 0 writes the results and returns the summary."""
    from ..job import train
    from .health import Heartbeat

    heartbeat = Heartbeat(job_dir, comm.rank)

    def on_iteration(iteration):
        heartbeat.beat(iteration, phase="iterating")
        _maybe_inject_fault(cfg, comm.rank, iteration)

    if cfg.runner.clock == "wall":
        from .wall import WallClockEngine as Engine
    else:
        from .virtual import MpiVirtualEngine as Engine

    def make_engine(cfg_, graph_, dataset, network):
        return Engine(
            comm,
            cfg_,
            graph_,
            dataset,
            network,
            on_iteration=on_iteration,
            on_wait=heartbeat.waiting,
            on_evaluate=heartbeat.evaluating,
        )

    from ..errors import Diverged

    try:
        summary = train(cfg, graph, job_dir, plain, digest, make_engine=make_engine, writes=comm.rank == 0)
    except Diverged:
        heartbeat.beat(heartbeat.iteration, finished=True)  # every rank agreed: the job ended, not the rank
        raise
    heartbeat.beat(cfg.iterations, finished=True)
    return summary
