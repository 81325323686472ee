"""Command-line glue for ``run.py``: check every job of a (multi)run before any starts, then run each.

Hydra reports a bad group option or key as a multi-line error with a hint about stack traces; a user
sweeping configs wants one line naming the field, the value and what is allowed, before anything is
computed.  :func:`prevalidate` composes every job of the sweep with Hydra's compose API and validates it
with :mod:`dybw.config`; :func:`run_hydra_job` is what each Hydra job calls.
"""

from __future__ import annotations

import itertools
import logging
import re
import sys
from pathlib import Path

from .errors import ConfigError, DybwError

log = logging.getLogger("dybw")
FAILED_JOBS: list[str] = []  # filled by run_hydra_job; run.py exits non-zero when a job failed


def fail(message: str, code: int = 2) -> None:
    """Print one line to stderr and exit (no traceback)."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)


def register_resolvers() -> None:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("dirname_or"):
        # An empty Hydra override_dirname (plain `python run.py`) would make the job dir the sweep dir.
        OmegaConf.register_new_resolver("dirname_or", lambda name, default: name or default)


def expand_sweep(overrides: list[str]) -> list[list[str]]:
    """Every job's override list of a Hydra basic sweep (cartesian product of the sweep overrides)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    choices = []
    for override in parsed:
        if override.is_sweep_override():
            key = override.get_key_element()
            choices.append([f"{key}={value}" for value in override.sweep_string_iterator()])
        else:
            choices.append([override.input_line])
    return [list(job) for job in itertools.product(*choices)]


def _one_line(error: Exception) -> str:
    """Hydra's composition errors as one line; a missing group option lists the valid options."""
    text = str(error)
    missing = re.search(r"Could not find '([^']+)/([^']+)'", text)
    if missing:
        group, option = missing.groups()
        options = re.findall(r"^\s+(\S+)\s*$", text.split("Available options", 1)[-1], flags=re.M)
        return str(ConfigError(group, option, "choose one of: " + ", ".join(sorted(options))))
    text = text.replace("\n", " ").strip()
    return re.sub(r"\s+", " ", text)


def compose_job(conf_dir: Path, overrides: list[str]):
    """The resolved plain config of one job (``hydra.*`` overrides left to Hydra itself)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    job_overrides = [o for o in overrides if not o.lstrip("+~").startswith(("hydra.", "hydra/"))]
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        cfg = compose(config_name="config", overrides=job_overrides)
    return OmegaConf.to_container(cfg, resolve=True)


def prevalidate(argv: list[str], conf_dir: Path) -> None:
    """Compose and validate every job the command line asks for; exit with one line on the first error."""
    from hydra._internal.utils import get_args_parser

    from .config import load, validate

    args, _ = get_args_parser().parse_known_args(argv)
    if args.help or args.hydra_help or args.cfg or args.info or args.shell_completion:
        return
    register_resolvers()
    try:
        jobs = expand_sweep(args.overrides) if args.multirun else [args.overrides]
    except Exception as error:  # Hydra's override grammar errors
        fail(_one_line(error))
    for overrides in jobs:
        try:
            plain = compose_job(conf_dir, overrides)
        except Exception as error:
            fail(_one_line(error))
        try:
            validate(load(plain))
        except DybwError as error:
            prefix = f"[job {' '.join(overrides)}] " if len(jobs) > 1 else ""
            fail(prefix + str(error))


def run_hydra_job(cfg) -> dict | None:
    """Body of the Hydra task: validate, run the job into Hydra's output dir, report failures in one line."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from .config import load, validate
    from .job import run_job
    from .results import config_hash

    plain = OmegaConf.to_container(cfg, resolve=True)
    job_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        run_cfg = load(plain)
        graph = validate(run_cfg)
        summary = run_job(run_cfg, graph, job_dir, plain, config_hash(plain))
        log.info("%s: %s, test accuracy %.4f, mean iteration %.4f s", job_dir.name, summary["status"],
                 summary["final_test_accuracy"] or float("nan"), summary["mean_iteration_duration"] or float("nan"))
        return summary
    except DybwError as error:
        FAILED_JOBS.append(str(job_dir))
        print(f"error: {job_dir.name}: {error}", file=sys.stderr)
        return None
