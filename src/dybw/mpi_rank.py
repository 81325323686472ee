"""``python -m dybw.mpi_rank <job dir> [<job dir> ...]``: one MPI rank of ``runner=mpi``'s jobs, as
prepared by :mod:`dybw.mpi.launch`.

For each job in turn, every rank reads ``<job dir>/.mpi/job.json`` (the resolved config), imports its
``plugins``, builds the same graph, data and schedule, and runs its share
(:func:`dybw.mpi.world.run_in_world`); rank 0 writes the results, and its log records go to
``.mpi/log.jsonl``, which ``run.py`` logs as its own.  Several jobs in one world pay the ranks' start-up
(importing TensorFlow: about 50 s for 16 ranks on 2 cores) once.  A job that diverges is recorded as
such and the next one runs; a rank that fails writes its error to ``.mpi/rank-<r>.error`` and aborts the
world, so no rank is left waiting for it (the jobs after it do not run).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def _exit_with_parent(parent: dict | None) -> None:
    """A daemon thread that ends this rank when the launching ``run.py`` is gone (same host only)."""
    import threading
    import time

    from .mpi.health import HOST

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
    from .config import load, validate
    from .errors import Diverged
    from .mpi.world import run_in_world

    spec = json.loads((job_dir / ".mpi" / "job.json").read_text())
    _exit_with_parent(spec.get("parent"))
    cfg = load(spec["config"])
    graph = validate(cfg)
    # A communicator of the job's own: a message an earlier job of this world left in flight (a diverged
    # one stops mid-exchange) can never match one of this job's.
    job_comm = comm.Dup()
    try:
        run_in_world(job_comm, cfg, graph, job_dir, spec["config"], spec["digest"])
    except Diverged:
        return 3  # every rank agrees on divergence (an Allreduce); rank 0 wrote status 'diverged'
    finally:
        job_comm.Free()
    return 0


def main(argv: list[str]) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from mpi4py import MPI

    from .mpi.health import LogRelay, write_error

    comm = MPI.COMM_WORLD
    codes = []
    for job_dir in map(Path, argv):
        # rank 0's log lines reach run.py's log (the W&B path, resuming), each job's into its own directory
        relay = LogRelay.install(job_dir) if comm.rank == 0 else None
        try:
            codes.append(run_rank(comm, job_dir))
        except BaseException as error:  # noqa: BLE001 - any failure must bring the whole world down
            write_error(job_dir, comm.rank, f"{type(error).__name__}: {error}")
            sys.stderr.write(f"dybw rank {comm.rank}: {type(error).__name__}: {error}\n")
            sys.stderr.flush()
            comm.Abort(1)
            return 1
        finally:
            if relay is not None:
                relay.uninstall()
    return max(codes, default=0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
