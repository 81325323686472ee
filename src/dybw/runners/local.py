"""``runner=local``: every worker in this process, on the virtual clock."""

from __future__ import annotations

from pathlib import Path

from ..engine import IterationEngine
from ..job import train
from .base import RUNNERS, Runner


@RUNNERS.register
class LocalRunner(Runner):
    """One process runs the job; deterministic, and the reference the MPI runner equals bit for bit."""

    name = "local"

    @classmethod
    def run(cls, cfg, graph, job_dir: Path, resolved: dict, digest: str) -> dict:
        return train(cfg, graph, job_dir, resolved, digest, make_engine=IterationEngine)
