"""Helpers shared by tests: compose configs exactly as run.py does, and run jobs into a directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dybw.cli import compose_job, register_resolvers
from dybw.config import load, validate
from dybw.results import config_hash

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
# runner=local: a tiny job in this process takes a fraction of a second, where the default runner=mpi
# starts MPI ranks (seconds); tests/mpi compares the two (same bits) and the README's command runs on MPI.
TINY = [
    "dataset=synthetic",
    "model=logreg",
    "logger=none",
    "runner=local",
    "num_workers=4",
    "iterations=6",
    "eval_every=3",
    "progress=false",
    "dataset.num_train=512",
    "dataset.num_test=128",
    "dataset.batch_size=16",
]

# Delays of 80 ms and more keep the wall clock's own costs (a poll's latency per message, ranks sharing
# cores) a few per cent of an iteration, so the wall-clock tests check the clock rather than the machine's load.
SLOW_DELAYS = [
    "straggler=shifted_exp",
    "straggler.compute.shift=0.08",
    "straggler.compute.scale=0.02",
    "straggler.link.shift=0.08",
    "straggler.link.scale=0.08",
]


def compose(overrides: list[str]):
    """(typed config, resolved plain dict) for the overrides, through Hydra's compose API."""
    register_resolvers()
    plain = compose_job(CONF, overrides)
    return load(plain), plain


def run_config(overrides: list[str], job_dir: Path) -> dict:
    """Validate and run one job into ``job_dir``; returns its summary."""
    from dybw.runners import run_job

    cfg, plain = compose(overrides)
    graph = validate(cfg)
    return run_job(cfg, graph, job_dir, plain, config_hash(plain))


def run_in_shared_worlds(jobs: dict[Path, list[str]]) -> dict[Path, object]:
    """Run MPI jobs (``runner=mpi`` overrides each), keyed by their directories, in as few MPI worlds as their
    ranks, launcher and threads allow (:meth:`dybw.runners.mpi.MpiRunner.run_batch`, as a multirun does): the
    ranks start, and import TensorFlow, once per world.  Returns what each job yielded: its summary, or the
    exception that failed it."""
    from dybw.runners.mpi import MpiRunner

    worlds: dict[tuple, list[tuple]] = {}
    for job_dir, overrides in jobs.items():
        cfg, plain = compose(overrides)
        validate(cfg)
        worlds.setdefault(MpiRunner.batch_key(cfg), []).append((cfg, job_dir, plain, config_hash(plain)))
    results = {}
    for world in worlds.values():
        for (_, job_dir, _, _), (result, _) in zip(world, MpiRunner.run_batch(world), strict=True):
            results[job_dir] = result
    return results


def run_cli(args: list[str], cwd: Path, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python run.py ARGS`` in a subprocess (results under ``cwd``; ``env`` replaces the environment)."""
    return subprocess.run(
        [sys.executable, str(REPO / "run.py"), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


# The figures ``python -m dybw.figures`` draws by default (the opt-in CNN spec's ``deep`` apart).
DEFAULT_FIGURES = [
    "agreement",
    "backups",
    "baselines",
    "convergence_cifar10",
    "convergence_mnist",
    "durations",
    "min_neighbors",
    "noniid",
    "ratio",
    "speedup",
    "static_b",
    "wall_vs_virtual",
]


def run_figures(*args: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    """``python -m dybw.figures ARGS`` in a subprocess, from the checkout."""
    return subprocess.run(
        [sys.executable, "-m", "dybw.figures", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def topology(name: str, **values):
    """The typed topology config of ``conf/topology/<name>.yaml``, with ``values`` replacing its keys."""
    import yaml

    from dybw.schema import build
    from dybw.topology import TOPOLOGY_CONFIGS

    plain = {**yaml.safe_load((CONF / "topology" / f"{name}.yaml").read_text()), **values}
    return build(TOPOLOGY_CONFIGS[name], plain, "topology")
