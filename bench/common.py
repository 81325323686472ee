"""What the benchmark scripts share: where the repository and the data are, configs composed as run.py
composes them, number formatting, and the environment recorded beside every result."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
os.environ.setdefault("DYBW_DATA_DIR", str((REPO / ".." / "shared" / "data").resolve()))  # as the Makefile


def compose(overrides):
    """Typed config and graph as ``tests/helpers.compose`` (and run.py) build them: Hydra compose, load,
    validate."""
    from dybw.cli import compose_job, register_resolvers
    from dybw.config import load, validate

    register_resolvers()
    cfg = load(compose_job(CONF, overrides))
    return cfg, validate(cfg)


def fmt(x, digits=2) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def med(x) -> float:
    return float(np.median(x))


def environment(**extra) -> dict:
    """Python, numpy, CPUs, the git commit (and whether the tree is dirty), the dybw imported, and ``extra``."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
        )
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "", None
    import dybw

    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "git_commit": commit,
        "git_dirty": dirty,
        "dybw": str(Path(dybw.__file__).parent),
        **extra,
    }
