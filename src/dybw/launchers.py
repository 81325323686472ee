"""Hydra launchers for sweeps: ``hydra/launcher=joblib`` (a sweep's jobs side by side on this machine),
``hydra/launcher=submitit_slurm`` / ``submitit_local`` (each job a Slurm job, or a local process), and
Hydra's default ``basic`` (one after another from this process), whose first line says where the jobs run
(Hydra's own says "locally", even when each job starts MPI ranks on other hosts).  ``docs/cluster.md``.

dybw's launchers are subclasses of the plugins' (``hydra-joblib-launcher``, ``hydra-submitit-launcher``)
and of Hydra's basic launcher, with their keys unchanged, in ``src/hydra_plugins/dybw_launchers/`` (Hydra
instantiates plugins only from the ``hydra_plugins`` package); this module holds what they share.  On top
of the plugins they add:

- **cores** (joblib, submitit_local): jobs that run at once share the machine.  Each job's share,
  ``cores // jobs at a time``, is what ``runner.ranks=0`` (auto) fills (``$DYBW_CORES``,
  :func:`dybw.tf_setup.usable_cores`), and one line says how many jobs x ranks x threads run on how
  many cores -- a warning when explicit ``runner.ranks``/``runner.threads`` oversubscribe them.
- **resources** (submitit_slurm): a job's Slurm task count is its ``runner.ranks`` (``srun`` starts the
  ranks, which use the world they were started in) and its CPUs per task ``runner.threads``; jobs that
  differ go out as separate job arrays.
- **outcomes**: a job that failed in another process still makes ``run.py`` exit non-zero, and each
  job's outcome line reaches the console even when its output went to a log file
  (:func:`dybw.cli.report_returns`).

``run.py`` points ``hydra.launcher._target_`` at these subclasses when a plugin's launcher is chosen
(:func:`target_override`); a config file named like the plugin's would shadow its schema instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass

from .errors import ConfigError, DybwError

log = logging.getLogger("dybw.launchers")

_PLUGINS = "hydra_plugins.hydra_{0}_launcher.{0}_launcher."
_OURS = "hydra_plugins.dybw_launchers.{0}_launcher."
OURS = {  # the plugin's launcher class -> dybw's subclass
    "hydra._internal.core_plugins.basic_launcher.BasicLauncher": _OURS.format("basic") + "BasicLauncher",
    _PLUGINS.format("joblib") + "JoblibLauncher": _OURS.format("joblib") + "JoblibLauncher",
    _PLUGINS.format("submitit") + "SlurmLauncher": _OURS.format("submitit") + "SlurmLauncher",
    _PLUGINS.format("submitit") + "LocalLauncher": _OURS.format("submitit") + "LocalLauncher",
}
SLURM = _OURS.format("submitit") + "SlurmLauncher"


def target_override(launcher: dict) -> list[str]:
    """The override that makes Hydra instantiate dybw's subclass of the chosen launcher ([] if none)."""
    ours = OURS.get(str(launcher.get("_target_", "")))
    return [f"hydra.launcher._target_={ours}"] if ours else []


# Slurm checks its jobs' time limits once a minute and signals a job up to this much before it asked.
SLURM_SIGNAL_RESOLUTION_S = 60


def check_launcher(launcher: dict) -> None:
    """What the chosen launcher needs of this machine (one line before anything starts)."""
    import shutil

    target = OURS.get(str(launcher.get("_target_", "")), launcher.get("_target_"))
    if target == SLURM:
        limit, delay = int(launcher.get("timeout_min") or 0) * 60, int(launcher.get("signal_delay_s") or 0)
        # Else the time-limit signal may come as the job starts, before its tasks can act on it (it kills
        # them): Slurm sends it up to a minute before timeout_min*60 - signal_delay_s.
        room = f"Slurm may signal a job up to {SLURM_SIGNAL_RESOLUTION_S} s before timeout_min*60 - signal_delay_s"
        if limit <= SLURM_SIGNAL_RESOLUTION_S:
            raise ConfigError("hydra.launcher.timeout_min", limit // 60, f"{room}: use 2 minutes or more")
        if limit - delay <= SLURM_SIGNAL_RESOLUTION_S:
            raise ConfigError(
                "hydra.launcher.signal_delay_s",
                delay,
                f"{room}: with timeout_min={limit // 60} use less than {limit - SLURM_SIGNAL_RESOLUTION_S}",
            )
    if target == SLURM and not (shutil.which("sbatch") and shutil.which("srun")):
        raise DybwError(
            "hydra/launcher=submitit_slurm needs Slurm's sbatch and srun on PATH (run.py on the cluster's "
            "login node); hydra/launcher=submitit_local runs the same sweep here"
        )


def runs_elsewhere(launcher: dict) -> bool:
    """Whether the launcher runs the jobs on other machines (Slurm's nodes), whose files this one cannot see."""
    return OURS.get(str(launcher.get("_target_", "")), launcher.get("_target_")) == SLURM


def check_job(launcher: dict, job: dict) -> None:
    """What a launcher needs of a job's config, before anything starts (one line on error)."""
    target = OURS.get(str(launcher.get("_target_", "")), launcher.get("_target_"))
    if target != SLURM:
        return
    runner, nodes = job["runner"], int(launcher.get("nodes") or 1)
    if runner["name"] != "mpi":
        if nodes != 1:
            raise ConfigError("hydra.launcher.nodes", nodes, f"runner={runner['name']} runs one task: use 1")
    elif runner["clock"] == "wall":
        if job["num_workers"] % nodes:
            raise ConfigError(
                "hydra.launcher.nodes", nodes, f"must divide the wall clock's {job['num_workers']} ranks (1 per worker)"
            )
    elif runner["ranks"] == 0:
        raise ConfigError(
            "runner.ranks",
            0,
            "under hydra/launcher=submitit_slurm it is each job's Slurm task count: give it (e.g. runner.ranks=16)",
        )
    elif runner["ranks"] % nodes:
        raise ConfigError(
            "runner.ranks", runner["ranks"], f"must split evenly over hydra.launcher.nodes={nodes} (tasks per node)"
        )


@dataclass(frozen=True)
class Shape:
    """A job's processes and TensorFlow threads each."""

    processes: int
    threads: int


def job_shape(job, cores: int) -> Shape:
    """Processes x threads of a composed job config (``runner.ranks=0`` filling ``cores``)."""
    from .mpi.launch import ranks_for

    runner = job.runner
    if runner.name != "mpi":
        return Shape(1, int(runner.threads))
    return Shape(ranks_for(runner.clock, int(runner.ranks), int(job.num_workers), cores), int(runner.threads))


def compose_jobs(launcher, job_overrides) -> list:
    """Each job's config as the launched job composes it (Hydra's own sweep composition)."""
    loader = launcher.hydra_context.config_loader
    return [loader.load_sweep_config(launcher.config, list(overrides)) for overrides in job_overrides]


def share_cores(name: str, jobs: list, at_once: int, fewer: str):
    """Split this machine's cores among ``at_once`` jobs: log one line naming the numbers (a warning when
    they oversubscribe the cores, saying to lower ``fewer`` or the ranks) and return a context in which the
    jobs started get their share (``$DYBW_CORES``)."""
    from .tf_setup import CORES_VARIABLE, usable_cores

    cores = usable_cores()
    at_once = max(1, min(at_once, len(jobs)))
    share = max(1, cores // at_once)
    shapes = sorted((job_shape(job, share) for job in jobs), key=lambda s: s.processes * s.threads, reverse=True)
    busy = sum(s.processes * s.threads for s in shapes[:at_once])
    ranks, threads = max(s.processes for s in shapes), max(s.threads for s in shapes)
    line = (
        f"hydra/launcher={name}: {_count(at_once, 'job')} at a time x {_count(ranks, 'rank')} x "
        f"{_count(threads, 'thread')} = {busy} cores busy of {cores}"
    )
    if busy > cores:
        log.warning("%s: oversubscribed; lower %s or runner.ranks (runner.ranks=0 fits: %s each)", line, fewer, share)
    else:
        log.info("%s (runner.ranks=0: up to %s per job)", line, _count(share, "rank"))
    return _environment(CORES_VARIABLE, str(share))


def sequence_line(jobs) -> str:
    """What Hydra's basic launcher says as it starts a sweep, naming where its jobs run."""
    runners = sorted({str(job.runner.name) for job in jobs})
    start = f"Launching {_count(len(jobs), 'job')}" + (" one after another, each" if len(jobs) > 1 else "")
    if runners == ["mpi"]:
        from .tf_setup import usable_cores

        cores = usable_cores()
        commands = sorted(
            {" ".join(str(p).replace("{ranks}", str(job_shape(job, cores).processes)) for p in job.runner.launcher)
             for job in jobs}
        )  # fmt: skip
        return f"{start} on MPI ranks of its own (runner=mpi: {' | '.join(commands)})"
    if runners == ["local"]:
        return f"{start} in this process (runner=local)"
    return f"Launching {_count(len(jobs), 'job')} one after another (runner={' or '.join(runners)}, per job)"


class _Reword(logging.Filter):
    def __init__(self, old: str, new: str):
        super().__init__()
        self.old, self.new = old, new

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() == self.old:
            record.msg, record.args = self.new, ()
        return True


@contextlib.contextmanager
def reworded(logger: logging.Logger, old: str, new: str):
    """Within the context, ``logger``'s message ``old`` reads ``new`` (a third party's line made accurate)."""
    rewording = _Reword(old, new)
    logger.addFilter(rewording)
    try:
        yield
    finally:
        logger.removeFilter(rewording)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


@contextlib.contextmanager
def _environment(name: str, value: str):
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before
