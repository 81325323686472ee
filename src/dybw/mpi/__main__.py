"""``python -m dybw.mpi <job dir>``: one MPI rank of a job prepared by :mod:`dybw.mpi.launch`.

Every rank reads ``<job dir>/.mpi/job.json`` (the resolved config), builds the same graph, data and
schedule, and runs its share; rank 0 writes the results.  A rank that fails writes its error to
``.mpi/rank-<r>.error`` and aborts the world, so no rank is left waiting for it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def _maybe_inject_fault(cfg, rank: int, iteration: int) -> None:
    """Test hook (``runner.fault``): make one rank fail in a chosen way at a chosen iteration."""
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
    from ..job import run_job
    from .health import Heartbeat

    heartbeat = Heartbeat(job_dir, comm.rank)

    def on_iteration(iteration):
        heartbeat.beat(iteration, force=iteration == 1)  # the launcher learns at once that all started
        _maybe_inject_fault(cfg, comm.rank, iteration)

    if cfg.runner.clock == "wall":
        from .wall import WallClockEngine as Engine
    else:
        from .virtual import MpiVirtualEngine as Engine

    def make_engine(cfg_, graph_, dataset, network):
        return Engine(comm, cfg_, graph_, dataset, network, on_iteration=on_iteration, on_wait=heartbeat.waiting)

    summary = run_job(cfg, graph, job_dir, plain, digest, make_engine=make_engine, writes=comm.rank == 0)
    heartbeat.beat(cfg.iterations, finished=True)
    return summary


def _exit_with_parent(parent: dict | None) -> None:
    """A daemon thread that ends this rank when the launching ``run.py`` is gone (same host only)."""
    import threading
    import time

    from .health import HOST

    if not parent or parent.get("host") != HOST:
        return

    def watch():
        while True:
            time.sleep(1.0)
            try:
                os.kill(parent["pid"], 0)
            except ProcessLookupError:
                os._exit(4)
            except PermissionError:
                pass

    threading.Thread(target=watch, daemon=True, name="dybw-parent-watch").start()


def run_rank(comm, job_dir: Path) -> int:
    from ..config import load, validate
    from ..engine import Diverged

    spec = json.loads((job_dir / ".mpi" / "job.json").read_text())
    _exit_with_parent(spec.get("parent"))
    cfg = load(spec["config"])
    graph = validate(cfg)
    try:
        run_in_world(comm, cfg, graph, job_dir, spec["config"], spec["digest"])
    except Diverged:
        return 3  # every rank agrees on divergence (an Allreduce); rank 0 wrote status 'diverged'
    return 0


def main(argv: list[str]) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    job_dir = Path(argv[0])
    from mpi4py import MPI

    from .health import write_error

    comm = MPI.COMM_WORLD
    try:
        return run_rank(comm, job_dir)
    except BaseException as error:  # noqa: BLE001 - any failure must bring the whole world down
        write_error(job_dir, comm.rank, f"{type(error).__name__}: {error}")
        sys.stderr.write(f"dybw rank {comm.rank}: {type(error).__name__}: {error}\n")
        sys.stderr.flush()
        comm.Abort(1)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
