"""What every runner is: a registered class that owns its config keys and executes a job.

A runner is chosen by ``runner.name`` (:data:`RUNNERS`): ``local`` (one process) and ``mpi`` (MPI ranks,
:mod:`dybw.runners.mpi`) are peers.  The class declares ``Config`` (its keys, defaults in
``conf/runner/<name>.yaml``), the ``clocks`` it offers, :meth:`check` (its own options, and whether it
can run the chosen algorithm) and :meth:`run`.  Nothing outside a runner imports its internals.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar

from ..algorithms import ENGINES
from ..errors import ConfigError
from ..registry import Registry
from ..results import NUMERIC_RUNNER_KEYS, completed_before
from ..schema import AtLeast

RUNNERS = Registry("runner", "runner")


@dataclass
class RunnerConfig:
    """The keys every runner has."""

    name: str
    chunk: Annotated[int, AtLeast(1)]  # iterations whose timing, weights and batches are prepared at once
    threads: Annotated[int, AtLeast(1)]  # TF threads per process: part of the numbers (tf_setup.use_threads)
    clock: str  # virtual (simulated delays) | wall (delays slept, times measured); see the runner's clocks


# A new runner key changes only how the same bits are computed, unless it is one of these (then it is
# part of a job's config hash).
assert set(NUMERIC_RUNNER_KEYS) <= {"clock", "threads"}


class Runner:
    """Base of every runner; subclasses set the class attributes and implement :meth:`run`."""

    name: ClassVar[str]
    Config: ClassVar[type] = RunnerConfig
    clocks: ClassVar[tuple[str, ...]] = ("virtual",)
    engines: ClassVar[tuple[str, ...]] = ("iteration",)  # the algorithm engines it can execute
    default_config: ClassVar[dict | None] = None

    @classmethod
    def check(cls, cfg, algorithm) -> None:
        """Checks of the runner's options against the whole config and the chosen algorithm class."""
        if cfg.runner.clock not in cls.clocks:
            others = [name for name, runner in RUNNERS.items() if cfg.runner.clock in runner.clocks]
            hint = f" (the {cfg.runner.clock} clock needs runner={'|'.join(others)})" if others else ""
            raise ConfigError("runner.clock", cfg.runner.clock, f"choose one of: {', '.join(cls.clocks)}{hint}")
        if algorithm.engine not in cls.engines:
            others = [name for name, runner in RUNNERS.items() if algorithm.engine in runner.engines]
            hint = f": use runner={'|'.join(others)}" if others else ""
            raise ConfigError(
                "runner",
                cls.name,
                f"algo={algorithm.name} runs on the {algorithm.engine} engine ({ENGINES[algorithm.engine]}), "
                f"which runner={cls.name} lacks (it runs the {', '.join(cls.engines)} engine){hint}",
            )
        if cfg.runner.clock not in algorithm.clocks:
            raise ConfigError(
                "runner.clock",
                cfg.runner.clock,
                f"algo={algorithm.name} runs on the {', '.join(algorithm.clocks)} clock",
            )

    @classmethod
    def run(cls, cfg, graph, job_dir: Path, resolved: dict, digest: str) -> dict:
        """Execute the job into ``job_dir``; returns its summary (a dict, as ``summary.json`` holds it)."""
        raise NotImplementedError


def run_job(cfg, graph, job_dir: Path, resolved: dict, digest: str, runner: str | None = None) -> dict:
    """Run one job with its runner unless ``job_dir`` holds a completed run of the same config.

    ``runner`` names another registered runner to run it on than ``cfg.runner.name`` (the figure pipeline
    trains on ``local``, whose bits are ``mpi``'s, with one TensorFlow start-up per process)."""
    import logging

    previous = completed_before(job_dir, digest)
    if previous and not cfg.force:
        logging.getLogger("dybw").info(
            "%s: already completed (config %s); skipped — pass force=true to rerun", job_dir, digest
        )
        return previous
    return RUNNERS[runner or cfg.runner.name].run(cfg, graph, Path(job_dir), resolved, digest)
