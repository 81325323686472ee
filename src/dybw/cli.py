"""Command-line glue for ``run.py``: check every job of a (multi)run before any starts, then run each.

Hydra reports a bad group option or key as a multi-line error with a hint about stack traces; a user
sweeping configs wants one line naming the field, the value and what is allowed, before anything is
computed.  :func:`prevalidate` composes every job of the sweep with Hydra's compose API and validates it
with :mod:`dybw.config`; :func:`run_hydra_job` is what each Hydra job calls.
"""

from __future__ import annotations

import difflib
import itertools
import logging
import re
import sys
import warnings
from pathlib import Path

from .errors import ConfigError, DybwError

log = logging.getLogger("dybw")
FAILED_JOBS: list[str] = []  # filled by run_hydra_job; run.py exits non-zero when a job failed


def fail(message: str, code: int = 2) -> None:
    """Print one line to stderr and exit (no traceback)."""
    message = re.sub(r"\s*\n\s*", " ", str(message)).strip()
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)


def register_resolvers() -> None:
    from omegaconf import OmegaConf

    from .results import job_dirname

    if not OmegaConf.has_resolver("job_dirname"):
        OmegaConf.register_new_resolver("job_dirname", job_dirname)


def _config_loader(conf_dir: Path):
    """Hydra's config loader over ``conf_dir``: what a ``glob(...)`` sweep of a group is expanded against."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path

    return ConfigLoaderImpl(config_search_path=create_config_search_path(str(conf_dir)))


def expand_sweep(overrides: list[str], conf_dir: Path | None = None) -> list[list[str]]:
    """Every job's override list of a Hydra basic sweep, in the order Hydra's basic sweeper launches them.

    As in the basic sweeper, a later override of the same key replaces an earlier one, and the jobs are
    the cartesian product of the sweeps (``a,b``, ``choice()``, ``range()``, ``glob()`` over a group).
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    loader = _config_loader(conf_dir) if conf_dir is not None else None
    parsed = OverridesParser.create(config_loader=loader).parse_overrides(overrides)
    choices: dict[str, list[str]] = {}
    for override in parsed:
        key = override.get_key_element()
        if override.is_sweep_override():
            if not override.is_discrete_sweep():
                raise ConfigError(
                    key,
                    override.input_line.split("=", 1)[-1],
                    "a multirun sweeps a list: a,b,c | choice(a,b) | range(start,stop[,step]) | glob(*)",
                )
            choices[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            choices[key] = [override.input_line]
    return [list(job) for job in itertools.product(*choices.values())]


def _one_line(error: Exception) -> str:
    """Hydra's composition errors as one line; a missing group option lists the valid options."""
    text = str(error)
    missing = re.search(r"Could not find '([^']+)/([^']*)'", text)
    if missing:
        group, option = missing.groups()
        options = re.findall(r"^\s+(\S+)\s*$", text.split("Available options", 1)[-1], flags=re.M)
        from .registry import REGISTRIES

        hint = f" ({REGISTRIES[group].plugin_hint()})" if group in REGISTRIES else ""
        return str(ConfigError(group, option, "choose one of: " + ", ".join(sorted(options)) + hint))
    text = text.replace("\n", " ").strip()
    return re.sub(r"\s+", " ", text)


def _unknown_key(conf_dir: Path, overrides: list[str], error: Exception) -> str | None:
    """Hydra's "Could not override 'k'" as one line naming the key, the value and the valid keys."""
    from .config import schema_keys

    found = re.search(r"Could not override '([^']+)'\.\s*To append to your config use \+([^\n]+)", str(error))
    if not found:
        return None
    key, line = found.group(1), found.group(2).strip()
    value = line.split("=", 1)[1] if "=" in line else line
    if key.startswith("hydra.launcher."):
        try:
            others = [o for o in overrides if o.split("=", 1)[0] != key]
            keys = [k for k in _compose_launcher(conf_dir, others) if k != "_target_"]
            valid = f"its keys: {', '.join(keys)}" if keys else "it takes no settings (e.g. Hydra's basic launcher)"
            return f"{key}={value} is invalid: not a key of the chosen hydra/launcher; {valid}"
        except Exception:  # noqa: BLE001 - the explanation is best effort; the generic line below stands
            pass
    if key.split(".")[0] == "hydra":
        return f"{key}={value} is invalid: not a key of Hydra's own config (see python run.py --hydra-help)"
    section, names, is_field = schema_keys(key)
    leaf = key.rsplit(".", 1)[-1]
    if not is_field:
        where = f"of {section}" if section else "at the top level"
        close = difflib.get_close_matches(leaf, names, n=1)
        meant = f"did you mean {key[: len(key) - len(leaf)]}{close[0]}? " if close else ""
        return f"{key}={value} is invalid: unknown key; {meant}valid keys {where}: {', '.join(names)}"
    # A key of the schema that the chosen group option does not set (e.g. algo.b with algo=cb_full).
    chosen = ""
    try:
        others = [o for o in overrides if o.split("=", 1)[0] != key]
        node = compose_job(conf_dir, others)
        group = section.split(".")[0]
        if isinstance(node.get(group), dict) and "name" in node[group]:
            chosen = f" ({group}={node[group]['name']})"
        for part in section.split("."):
            node = node[part]
        present = f" (it sets: {', '.join(node)})"
    except Exception:  # noqa: BLE001 - the explanation is best effort; the error stands anyway
        present = ""
    users = _options_using(section, leaf)
    if users:
        return (
            f"{key}={value} is invalid: the chosen {section}{chosen} does not use '{leaf}'{present}; "
            f"{' and '.join(f'{section}={name}' for name in users)} {'does' if len(users) == 1 else 'do'}: "
            f"e.g. {section}={users[0]} {key}={value}"
        )
    return (
        f"{key}={value} is invalid: the chosen {section}{chosen} does not use '{leaf}'{present}; "
        f"to add it anyway write +{key}={value}"
    )


def _options_using(group: str, key: str) -> list[str]:
    """The options of a registry's group whose config has ``key`` (``b`` in algo: cb_static)."""
    import dataclasses

    from .registry import REGISTRIES

    registry = REGISTRIES.get(group)
    if registry is None:
        return []
    return sorted(
        name
        for name, cls in registry.items()
        if hasattr(cls, "Config") and key in {field.name for field in dataclasses.fields(cls.Config)}
    )


def _bad_syntax(overrides: list[str]) -> str | None:
    """The first override Hydra's grammar rejects, as ``key=value is invalid: ...`` (None if all parse)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_overrides([override])
        except Exception as error:  # noqa: BLE001 - Hydra raises its own parse error types
            key, _, value = override.partition("=")
            reason = re.sub(r"\s+", " ", re.split(r"\s*See https://", str(error))[0]).strip()
            return str(ConfigError(key.lstrip("+~"), value, f"not valid override syntax ({reason})"))
    return None


def _is_hydra_override(override: str) -> bool:
    return override.lstrip("+~").startswith(("hydra.", "hydra/"))


def _composed(conf_dir: Path, overrides: list[str], with_hydra: bool):
    """Hydra's composition of ``conf/config.yaml`` with the overrides (a tenth of a second or more each);
    ``with_hydra``: Hydra's own config too, under ``hydra``, so a bad ``hydra.*`` override fails here."""
    from hydra import compose, initialize_config_dir

    from .registry import import_installed_plugins

    import_installed_plugins()  # a plugin may bring config options (algo=<its name>)
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        return compose(config_name="config", overrides=overrides, return_hydra_config=with_hydra)


def _compose_launcher(conf_dir: Path, overrides: list[str]) -> dict:
    """The chosen launcher's settings (``hydra.launcher``)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(_composed(conf_dir, overrides, True).hydra.launcher, resolve=False)


def _compose_job_and_launcher(conf_dir: Path, overrides: list[str]) -> tuple[dict, dict]:
    """:func:`compose_job`'s plain config and :func:`_compose_launcher`'s settings from one composition
    (``run.py`` needs both for its first job)."""
    from omegaconf import OmegaConf, open_dict

    cfg = _composed(conf_dir, overrides, True)
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=False)
    with open_dict(cfg):
        del cfg["hydra"]  # what Hydra itself does to a job's config
    return OmegaConf.to_container(cfg, resolve=True), launcher


def compose_job(conf_dir: Path, overrides: list[str]):
    """The resolved plain config of one job (``hydra.*`` overrides left to Hydra itself)."""
    from omegaconf import OmegaConf

    job_overrides = [o for o in overrides if not _is_hydra_override(o)]
    return OmegaConf.to_container(_composed(conf_dir, job_overrides, False), resolve=True)


def plugins_on_command_line(overrides: list[str]) -> list[str]:
    """The modules a ``plugins=[...]`` override names (imported before composing: they may add options)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for override in reversed(overrides):
        if override.split("=", 1)[0].lstrip("+") == "plugins":
            try:
                value = OverridesParser.create().parse_override(override).value()
            except Exception:  # noqa: BLE001 - bad syntax is reported by the composition itself
                return []
            return [str(v) for v in value] if isinstance(value, list) else [str(value)]
    return []


def prevalidate(argv: list[str], conf_dir: Path) -> list[str]:
    """Compose and validate every job the command line asks for; exit with one line on the first error.

    Returns the overrides ``run.py`` adds for Hydra: dybw's subclass of the chosen launcher, if it has one
    (:mod:`dybw.launchers`)."""
    from hydra._internal.utils import get_args_parser

    from .config import load, validate
    from .launchers import check_job, check_launcher, runs_elsewhere, target_override
    from .registry import import_installed_plugins, import_plugins

    args, _ = get_args_parser().parse_known_args(argv)
    if args.help or args.hydra_help or args.cfg or args.info or args.shell_completion:
        return []
    register_resolvers()
    try:
        import_installed_plugins()  # before composing: a plugin may bring config options (algo=<its name>)
        import_plugins(plugins_on_command_line(args.overrides))
    except DybwError as error:
        fail(str(error))
    multirun = args.multirun or any(re.fullmatch(r"hydra\.mode=['\"]?MULTIRUN['\"]?", o) for o in args.overrides)
    try:
        jobs = expand_sweep(args.overrides, conf_dir) if multirun else [args.overrides]
    except DybwError as error:
        fail(str(error))
    except Exception as error:  # Hydra's override grammar errors
        fail(_bad_syntax(args.overrides) or _one_line(error))
    launcher: dict = {}
    datasets: dict[tuple, dict] = {}  # what the jobs read, once each: (name, data_dir) -> a dataset config
    for number, overrides in enumerate(jobs):
        prefix = f"[job {' '.join(overrides)}] " if len(jobs) > 1 else ""
        try:
            if number == 0 or any(_is_hydra_override(o) for o in overrides):
                # Hydra's own settings too (hydra.run.dir, hydra/launcher=..., an experiment's launcher)
                plain, launcher = _compose_job_and_launcher(conf_dir, overrides)
            else:
                plain = compose_job(conf_dir, overrides)
        except Exception as error:
            fail(prefix + (_bad_syntax(overrides) or _unknown_key(conf_dir, overrides, error) or _one_line(error)))
        try:
            with warnings.catch_warnings():  # e.g. a clamped algo.b: the job itself warns when it runs
                warnings.simplefilter("ignore")
                cfg = load(plain)
                validate(cfg)
            if multirun:
                check_job(launcher, plain)
        except DybwError as error:
            fail(prefix + str(error))
        datasets.setdefault((cfg.dataset.name, cfg.data_dir), cfg.dataset)
    if multirun:
        try:
            check_launcher(launcher)
        except DybwError as error:
            fail(str(error))
    if not runs_elsewhere(launcher):
        check_data(datasets)
    return target_override(launcher) if multirun else []


def check_data(datasets: dict[tuple, object]) -> None:
    """Make sure each dataset the jobs read is there (downloading what is missing), once for the whole
    command: files that are missing offline are one line saying what to do, not one long error per job;
    the full story (files, MD5s, each download's error) goes to a log file the line names."""
    from .data import fetch_dataset_files
    from .data.sources import cache_dir_from_env
    from .errors import DataMissing

    for (_, data_dir), dataset in datasets.items():
        try:
            fetch_dataset_files(dataset, data_dir)
        except DataMissing as missing:
            log = cache_dir_from_env() / "data-error.log"
            try:
                log.parent.mkdir(parents=True, exist_ok=True)
                log.write_text(str(missing) + "\n")
                fail(f"{missing.short} (details: {log})")
            except OSError:
                fail(str(missing))
        except DybwError as error:  # a corrupted file: its line names it and the MD5 it should have
            fail(str(error))


def outcome(job_name: str, summary: dict, job_dir: str | Path | None = None, overrides: str | None = None) -> str:
    """The line a finished job logs: status, accuracy, mean iteration, time to target and where its results
    are (an interrupted one's says why, and how to go on).  The job is also kept, under its ``overrides``
    (``k=v,k=v``), for the multirun's table."""
    line = (
        f"{job_name}: {summary['status']}, test accuracy {summary['final_test_accuracy'] or float('nan'):.4f}, "
        f"mean iteration {summary['mean_iteration_duration'] or float('nan'):.4f} s"
    )
    target = summary.get("target_accuracy")
    if target is not None and summary["status"] == "completed":
        reached = summary.get("time_to_target")
        line += (
            f", {_target_text(target)} at {reached:.1f} s (iteration {summary['iterations_to_target']})"
            if reached is not None
            else f", {_target_text(target)} not reached"
        )
    if summary["status"] == "interrupted":
        line += f"; {summary.get('message') or 'interrupted'} after iteration {summary.get('iterations', 0)}"
    if job_dir:
        line += f"; results in {_shown(job_dir)}"
    OUTCOMES.setdefault(str(job_dir or job_name), (overrides or job_name, summary))
    return line


OUTCOMES: dict[str, tuple[str, dict]] = {}  # the jobs this command saw end, for the multirun's table


def _target_text(target: float) -> str:
    return f"{100 * target:g} % test accuracy"


def _shown(path: str | Path) -> str:
    """``path`` relative to the working directory when it lies below it (as a user would type it)."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def multirun_table(outcomes: dict[str, tuple[str, dict]]) -> str:
    """The jobs of a multirun side by side, and cb-DyBW's cut against cb-Full where a job of each differs
    in nothing else (same overrides but ``algo``)."""
    rows = [("job", "status", "accuracy", "mean iteration", "to target")]
    by_overrides: dict[str, dict[str, float]] = {}
    names = [name.split(",") for name, _ in outcomes.values()]
    common = set.intersection(*map(set, names)) if names else set()
    for parts, (name, summary) in zip(names, outcomes.values()):
        name = ",".join(p for p in parts if p not in common) or name  # what tells the jobs apart
        mean = summary.get("mean_iteration_duration")
        reached = summary.get("time_to_target")
        rows.append(
            (
                name,
                summary["status"],
                f"{summary.get('final_test_accuracy') or float('nan'):.4f}",
                f"{mean:.4f} s" if mean else "-",
                f"{reached:.1f} s" if reached is not None else "-",
            )
        )
        algo = next((p.split("=", 1)[1] for p in parts if p.startswith("algo=")), None)
        if algo and mean:
            rest = ",".join(p for p in parts if not p.startswith("algo=") and p not in common)
            by_overrides.setdefault(rest, {})[algo] = mean
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    if common and len(names) > 1:
        lines.insert(0, f"{len(names)} jobs, all with {','.join(p for p in names[0] if p in common)}:")
    for rest, means in by_overrides.items():
        if "cb_full" in means:
            for algo, mean in means.items():
                if algo != "cb_full":
                    where = f" ({rest})" if rest else ""
                    lines.append(
                        f"{algo}'s mean iteration is {100 * (1 - mean / means['cb_full']):.1f} % shorter "
                        f"than cb_full's{where}"
                    )
    return "\n".join(lines)


def run_hydra_job(cfg) -> dict:
    """Body of the Hydra task: validate, run the job into Hydra's output dir, report failures in one line.

    Returns the job's summary with its ``job_dir``, or ``{"status": "failed", "error": ..., "job_dir": ...}``:
    what a launcher that ran the job in another process hands back to ``run.py`` (:mod:`dybw.launchers`).
    """
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from .config import load, validate
    from .results import config_hash
    from .runners import run_job

    plain = OmegaConf.to_container(cfg, resolve=True)
    job_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        run_cfg = load(plain)
        graph = validate(run_cfg)
        summary = run_job(run_cfg, graph, job_dir, plain, config_hash(plain))
        log.info("%s", outcome(job_dir.name, summary, job_dir, HydraConfig.get().job.override_dirname))
        return {**summary, "job_dir": str(job_dir)}
    except DybwError as error:
        FAILED_JOBS.append(str(job_dir))
        OUTCOMES.setdefault(str(job_dir), (HydraConfig.get().job.override_dirname, {"status": "failed"}))
        print(f"error: {job_dir.name}: {error}", file=sys.stderr)
        return {"status": "failed", "error": f"{job_dir.name}: {error}", "job_dir": str(job_dir)}


def report_returns(returns, output_seen: bool) -> None:
    """The jobs' outcomes, as ``run.py`` reports those it ran itself.

    Failed jobs go into ``run.py``'s list (it exits non-zero).  When the jobs' own output is not on our
    console (``output_seen`` False: submitit writes it to ``.submitit/`` logs), each job's line is
    repeated here: the usual ``<job>: completed, test accuracy ...`` or ``error: <job>: ...``.
    """
    from hydra.core.utils import JobStatus

    for job_return in returns:
        value = getattr(job_return, "_return_value", None)
        if job_return.status != JobStatus.COMPLETED or not isinstance(value, dict):
            continue  # an exception: Hydra reports it
        if value.get("error"):
            FAILED_JOBS.append(value.get("job_dir", ""))
            OUTCOMES.setdefault(value.get("job_dir", ""), (",".join(job_return.overrides or []), {"status": "failed"}))
            if not output_seen:
                print(f"error: {value['error']}", file=sys.stderr)
            continue
        if value.get("status") != "completed":  # e.g. interrupted by the cluster's scheduler
            FAILED_JOBS.append(value.get("job_dir", ""))
        line = outcome(
            Path(value.get("job_dir", "")).name, value, value.get("job_dir"), ",".join(job_return.overrides or [])
        )
        if not output_seen:
            log.info("%s", line)
