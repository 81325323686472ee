"""``runner=local``: every worker in this process, on the virtual clock."""

from __future__ import annotations

from pathlib import Path

from ..engine import IterationEngine
from ..event_engine import EventEngine
from ..job import train
from .base import RUNNERS, Runner

# The engine class that runs an algorithm, by the algorithm's ``engine`` (algorithms.ENGINES).
ENGINES = {"iteration": IterationEngine, "event": EventEngine}


@RUNNERS.register
class LocalRunner(Runner):
    """One process runs the job; deterministic, and the reference the MPI runner equals bit for bit."""

    name = "local"
    engines = tuple(ENGINES)

    @classmethod
    def run(cls, cfg, graph, job_dir: Path, resolved: dict, digest: str) -> dict:
        from ..algorithms import ALGORITHMS

        engine = ENGINES[ALGORITHMS[cfg.algo.name].engine]
        return train(cfg, graph, job_dir, resolved, digest, make_engine=engine)
