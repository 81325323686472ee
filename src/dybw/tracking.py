"""Experiment tracking hooks called by :func:`dybw.job.run_job` on the process that writes results.

:func:`make_tracker` returns an object with

- ``log_iterations(first, end_times, backups)``: iterations ``first .. first+T-1``; ``end_times[t]`` is
  ``E(k)`` and ``backups[t]`` the ``[N]`` backup counts of iteration k,
- ``log_evaluation(row)``: one row of ``metrics.csv``,
- ``log_figures(paths)``: PNG files to attach (the figure pipeline),
- ``finish(summary)``: the contents of ``summary.json``.

``logger=none`` (or ``logger.mode=disabled``) gives :class:`NullTracker`; ``logger=wandb`` gives
:class:`WandbTracker`: one W&B run per job (docs/tracking.md).

Tracking must never fail or slow a run.  :class:`WandbTracker` therefore makes every W&B call
(``wandb.init``, each ``log``, ``finish``) on one background thread fed by a queue: the job's thread only
puts plain numbers on the queue, and joins the thread once, in :meth:`WandbTracker.finish`.  Any exception
raised by W&B becomes one warning line and turns the tracker into a no-op for the rest of the job.

:func:`read_run_file` reads a W&B run file (``<dir>/wandb/offline-run-*/run-*.wandb``) back into plain
Python (what the tests and ``python -m dybw.report`` use; wandb >= 0.2x has no public reader).
"""

from __future__ import annotations

import logging
import netrc
import os
import queue
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

log = logging.getLogger("dybw.tracking")

DEFAULT_BASE_URL = "https://api.wandb.ai"
PROBE_TIMEOUT_S = 2.0  # how long `auto`/`online` may spend checking that the W&B host answers (background)
FINISH_TIMEOUT_S = {"offline": 30.0, "online": 120.0}  # how long finish() waits for the W&B thread
# What log_iterations logs per iteration (log_evaluation logs the numeric columns of metrics.csv).
ITERATION_KEYS = ("iteration", "time", "iteration_duration", "backups_mean", "backups_min", "backups_max")
# Keys of the job directory name that the run name already shows (or that do not describe the job).
_NAME_KEYS = ("algo", "dataset", "num_workers", "seed")
_NAME_DROP_PREFIXES = ("logger", "progress", "force", "data_dir", "experiment", "hydra")


class NullTracker:
    """Tracks nothing."""

    def log_iterations(self, first, end_times, backups) -> None:
        pass

    def log_evaluation(self, row) -> None:
        pass

    def log_figures(self, paths) -> None:
        pass

    def log_table(self, name, table) -> None:
        pass

    def finish(self, summary=None) -> None:
        pass


# --------------------------------------------------------------------------------------------------
# Mode: auto | online | offline | disabled  ->  the mode wandb.init gets


def _base_url() -> str:
    return os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL


def has_credentials() -> bool:
    """W&B credentials without asking anyone: ``WANDB_API_KEY`` (or an identity token file) or a netrc entry
    for the W&B host (``$NETRC``, ``~/.netrc`` or ``~/_netrc``), as wandb itself looks them up."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlsplit(_base_url()).netloc
    candidates = (
        [Path(os.environ["NETRC"]).expanduser()]
        if os.environ.get("NETRC")
        else [Path("~/.netrc").expanduser(), Path("~/_netrc").expanduser()]
    )
    for path in candidates:
        try:
            entry = netrc.netrc(str(path)).authenticators(host)
        except (OSError, netrc.NetrcParseError):
            continue
        if entry and entry[2]:
            return True
    return False


def host_reachable(timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the W&B host opens within ``timeout`` seconds (name lookup included)."""
    parts = urlsplit(_base_url())
    host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    if not host:
        return False
    answer: list[bool] = []

    def probe():
        try:
            with socket.create_connection((host, port), timeout=timeout):
                answer.append(True)
        except OSError:
            answer.append(False)

    thread = threading.Thread(target=probe, name="dybw-wandb-probe", daemon=True)  # getaddrinfo has no timeout
    thread.start()
    thread.join(timeout)
    return bool(answer and answer[0])


def requested_mode(mode: str) -> str:
    """``logger.mode`` without touching the network: ``disabled``, ``offline``, or ``online`` (to be probed).

    ``auto`` honours ``WANDB_MODE=offline|dryrun|disabled`` and is ``online`` only with credentials.
    """
    if mode == "auto":
        env = os.environ.get("WANDB_MODE", "").strip().lower()
        if env in ("disabled", "offline", "dryrun"):
            return "disabled" if env == "disabled" else "offline"
        return "online" if has_credentials() else "offline"
    return mode


def effective_mode(requested: str) -> tuple[str, str]:
    """``(mode for wandb.init, why it differs from the request or "")``; may probe the host (background)."""
    if requested != "online":
        return requested, ""
    if not has_credentials():
        return "offline", "no W&B credentials (WANDB_API_KEY or `wandb login`)"
    if not host_reachable():
        return "offline", f"{urlsplit(_base_url()).netloc} is unreachable"
    return "online", ""


# --------------------------------------------------------------------------------------------------
# The W&B tracker


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _one_line(text) -> str:
    return re.sub(r"\s+", " ", str(text)).strip()


def _number(value):
    """A plain Python int/float for W&B (numpy scalars, NaN kept), or None when not a number."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        as_float = float(value)
    except (TypeError, ValueError):
        return None
    if isinstance(value, int) or (hasattr(value, "dtype") and value.dtype.kind in "iu"):
        return int(value)
    return as_float


def _overrides_of(job_dir: Path) -> list[str]:
    """The job's ``key=value`` overrides: Hydra's ``.hydra/overrides.yaml``, else the directory name
    (``override_dirname``; a name cut short ends with ``~<hash>`` and loses its last, partial item)."""
    job_dir = Path(job_dir)
    try:
        import yaml

        items = yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text())
        if isinstance(items, list):
            return [str(item) for item in items if "=" in str(item)]
    except Exception:  # noqa: BLE001 - no such file (in-process jobs) or unreadable: use the directory name
        pass
    name = job_dir.name
    cut = re.fullmatch(r"(.*)~[0-9a-f]{12}", name)
    items = re.split(r",(?=[+~]?[\w.\-/]+=)", cut.group(1) if cut else name)
    return [item for item in (items[:-1] if cut else items) if "=" in item]


def run_name(cfg, job_dir: Path, limit: int = 128) -> str:
    """``cb_dybw-mnist-N16-s0`` plus the job's overrides that the name does not show yet (sorted by key;
    the last override of a key wins, as in Hydra)."""
    name = f"{cfg.algo.name}-{cfg.dataset.name}-N{cfg.num_workers}-s{cfg.seed}"
    extra: dict[str, str] = {}
    for item in _overrides_of(job_dir):
        key = item.split("=", 1)[0].lstrip("+~")
        if key not in _NAME_KEYS and not key.startswith(_NAME_DROP_PREFIXES):
            extra[key] = item.lstrip("+~")
    if extra:
        name = f"{name} {','.join(extra[key] for key in sorted(extra))}"
    return name if len(name) <= limit else name[: limit - 1] + "…"


class WandbTracker:
    """One W&B run, fed from the job's thread through a queue and driven by one background thread.

    ``init`` holds the keyword arguments of ``wandb.init`` (without mode/dir/settings).  Every W&B call
    happens on the background thread; the first exception from W&B is logged as one warning and the
    tracker drops everything after it.  :meth:`finish` writes the summary, finishes the run, stops
    W&B's service process and waits (bounded) for the thread.
    """

    def __init__(self, mode: str, directory: Path, init: dict, label: str = "job", configured: str = "auto"):
        self.requested = mode  # online | offline (requested_mode of the configured logger.mode)
        self.configured = configured
        self.mode = None  # what wandb.init got (online can fall back to offline); set by the thread
        self.directory = Path(directory)
        self.init = init
        self.label = label
        self.run_dir: Path | None = None
        self.dead = False
        self.main_thread_seconds = 0.0  # time this tracker cost the job's thread
        self._warned = False
        self._finished = False
        self._last_end = 0.0
        self._last_iteration = 0
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name="dybw-wandb", daemon=True)
        self._thread.start()

    # -- the job's thread ----------------------------------------------------------------------------
    def _put(self, kind: str, payload) -> None:
        if not self.dead and not self._finished:
            self._queue.put((kind, payload))

    def log_iterations(self, first, end_times, backups) -> None:
        """Per iteration k = first+1 .. first+T (iterations done): ``time`` = E, ``iteration_duration``
        T(k) = E(k) - E(k-1), and the mean / min / max backup count over the workers."""
        if self.dead or self._finished:
            return
        started = time.perf_counter()
        try:
            import numpy as np

            end = np.asarray(end_times, dtype=float)
            if len(end):
                counts = np.asarray(backups, dtype=float).reshape(len(end), -1)
                durations = np.diff(end, prepend=self._last_end)
                self._last_end = float(end[-1])
                self._put(
                    "iterations",
                    (int(first) + 1, end, durations, counts.mean(axis=1), counts.min(axis=1), counts.max(axis=1)),
                )
        except Exception as error:  # noqa: BLE001 - tracking never fails a run
            self._fail("log_iterations", error)
        self.main_thread_seconds += time.perf_counter() - started

    def log_evaluation(self, row) -> None:
        """One ``metrics.csv`` row; its ``iteration`` is the step metric, ``time`` the alternative x-axis.

        Only the columns the row's evaluation computed (not NaN); a probe's (``evaluation=probe``) under
        ``probe/``, so the evaluations' charts keep their regular spacing."""
        if self.dead or self._finished:
            return
        started = time.perf_counter()
        try:
            row = dict(row)
            probe = row.get("evaluation") == "probe"
            values = {key: _number(value) for key, value in row.items()}
            values = {
                f"probe/{key}" if probe and key not in ("iteration", "time") else key: value
                for key, value in values.items()
                if value is not None and value == value  # NaN: a column this evaluation does not compute
            }
            if "iteration" in values:
                values["iteration"] = int(values["iteration"])
                self._last_iteration = values["iteration"]
            self._put("log", values)
        except Exception as error:  # noqa: BLE001
            self._fail("log_evaluation", error)
        self.main_thread_seconds += time.perf_counter() - started

    def log_figures(self, paths) -> None:
        """Attach image files (PNG, JPEG) as ``figures/<file stem>``."""
        self._put("figures", [Path(p) for p in paths])

    def log_table(self, name: str, table) -> None:
        """Attach a table (a pandas DataFrame, or the path of a CSV file) as ``tables/<name>``."""
        self._put("table", (name, table))

    def finish(self, summary=None) -> None:
        """Put ``summary`` into the run's summary, finish the run, stop W&B's process; at most once."""
        if self._finished:
            return
        started = time.perf_counter()
        self._queue.put(("finish", dict(summary or {})))
        self._finished = True
        timeout = FINISH_TIMEOUT_S["online" if self.requested == "online" else "offline"]
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._fail("finish", TimeoutError(f"W&B did not finish within {timeout:.0f} s"))
        self.main_thread_seconds += time.perf_counter() - started
        log.debug("W&B tracking cost the job's thread %.3f s", self.main_thread_seconds)

    def _fail(self, what: str, error: BaseException) -> None:
        self.dead = True
        if not self._warned:
            self._warned = True
            log.warning(
                "W&B tracking is off for this %s: %s failed (%s: %s); the run goes on without it",
                self.label,
                what,
                type(error).__name__,
                _one_line(error)[:300],
            )

    # -- the W&B thread -------------------------------------------------------------------------------
    def _work(self) -> None:
        run = None
        try:
            run = self._start()
        except BaseException as error:  # noqa: BLE001 - includes SystemExit from a W&B login prompt
            self._fail("wandb.init", error)
        while True:
            kind, payload = self._queue.get()
            if kind == "finish":
                self._close(run, payload)
                return
            if self.dead or run is None:
                continue
            try:
                self._handle(run, kind, payload)
            except BaseException as error:  # noqa: BLE001
                self._fail(f"wandb {kind}", error)

    def _start(self):
        os.environ.setdefault("WANDB_SILENT", "true")
        mode, why = effective_mode(self.requested)
        if why:  # logger.mode=online asked for it: a warning; auto falls back quietly
            (log.warning if self.configured == "online" else log.info)(
                "W&B: %s; logging offline (upload later: wandb sync %s/wandb/offline-run-*)", why, self.directory
            )
        self.mode = mode
        import wandb

        self.directory.mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(
            silent=True,
            quiet=True,
            console="off",
            show_info=False,
            show_warnings=False,
            x_disable_stats=True,
            x_save_requirements=False,
            save_code=False,
            disable_job_creation=True,
            init_timeout=60.0,
        )
        run = wandb.init(dir=str(self.directory), mode=mode, settings=settings, reinit="create_new", **self.init)
        self.run_dir = Path(run.dir).parent if getattr(run, "dir", None) else None
        run.define_metric("iteration")
        run.define_metric("time", step_metric="iteration")
        run.define_metric("*", step_metric="iteration")
        return run

    def _handle(self, run, kind: str, payload) -> None:
        if kind == "log":
            run.log(payload)
        elif kind == "iterations":
            first, end, durations, mean, low, high = payload
            for t in range(len(end)):
                run.log(
                    dict(
                        zip(
                            ITERATION_KEYS,
                            (first + t, float(end[t]), float(durations[t]), float(mean[t]), int(low[t]), int(high[t])),
                        )
                    )
                )
        elif kind == "figures":
            import wandb

            images = {
                f"figures/{p.stem}": wandb.Image(str(p))
                for p in payload
                if p.suffix.lower() in (".png", ".jpg", ".jpeg") and p.is_file()
            }
            if images:
                run.log({"iteration": self._last_iteration, **images})
        elif kind == "table":
            import wandb

            name, table = payload
            if isinstance(table, (str, Path)):
                import pandas as pd

                table = pd.read_csv(table)
            run.log({"iteration": self._last_iteration, f"tables/{name}": wandb.Table(dataframe=table)})

    def _close(self, run, summary: dict) -> None:
        if run is not None:
            status = summary.get("status", "completed")
            try:
                if not self.dead:
                    run.summary.update(dict(summary.items()))
                run.finish(exit_code=0 if status == "completed" else 1)
                if self.mode == "offline" and self.run_dir is not None:
                    log.info("W&B offline run saved; upload with: wandb sync %s", _shown(self.run_dir))
            except BaseException as error:  # noqa: BLE001
                self._fail("wandb finish", error)
        try:  # stop wandb-core: no W&B process outlives the job (unless someone else's run still uses it)
            import sys

            wandb = sys.modules.get("wandb")
            if wandb is not None and getattr(wandb, "run", None) is None:
                wandb.teardown()
        except BaseException as error:  # noqa: BLE001
            log.debug("wandb.teardown failed: %s", error)


def _import_wandb_early() -> None:
    """Import wandb on the job's thread while TensorFlow is not loaded yet, else leave it to the W&B thread.

    wandb's pydantic models look up their docstrings with ``inspect.getmodule``, whose cost grows with
    ``sys.modules``: with TensorFlow's ~5000 modules loaded, ``import wandb`` plus the launch module
    ``wandb.init`` imports cost about 1.7 s of CPU; before TensorFlow, about 0.6 s.  The W&B thread would
    hold the GIL for that time while the job imports TensorFlow and builds its model, so doing it here
    first is the cheaper of the two.
    """
    import sys

    if "wandb" in sys.modules or "tensorflow" in sys.modules:
        return
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb  # noqa: F401

    try:
        import wandb.sdk.launch.inputs.internal  # noqa: F401 - what wandb.init imports on every run
    except Exception:  # noqa: BLE001 - an optimisation only
        pass


def _logger_value(logger, key, default=None):
    if isinstance(logger, dict):
        return logger.get(key, default)
    return getattr(logger, key, default)


def _tracker_for(logger, directory: Path, init: dict, label: str):
    if _logger_value(logger, "name", "none") != "wandb":
        return NullTracker()
    try:
        configured = _logger_value(logger, "mode", "auto")
        mode = requested_mode(configured)
        if mode == "disabled":
            return NullTracker()
        _import_wandb_early()
        init = dict(
            project=_logger_value(logger, "project", "dybw"),
            entity=_logger_value(logger, "entity"),
            tags=list(_logger_value(logger, "tags", None) or []),
            **init,
        )
        return WandbTracker(mode, directory, init, label=label, configured=configured)
    except Exception as error:  # noqa: BLE001
        log.warning("W&B tracking is off for this %s: %s: %s", label, type(error).__name__, _one_line(error))
        return NullTracker()


def make_tracker(cfg, job_dir, resolved: dict):
    """The tracker chosen by ``logger.name``: one W&B run per job, or nothing."""
    logger = cfg.logger
    directory = Path(_logger_value(logger, "dir") or job_dir)
    config = {key: value for key, value in (resolved or {}).items() if key != "hydra"}
    init = dict(
        group=cfg.experiment_name,
        job_type=cfg.algo.name,
        name=run_name(cfg, job_dir),
        config=config,
        notes=f"dybw job {job_dir}",
    )
    return _tracker_for(logger, directory, init, "job")


def make_figure_tracker(logger, experiment: str, directory):
    """A run of ``job_type=figures`` in the experiment's group, for ``make figures``: ``log_figures(paths)``,
    ``log_table(name, dataframe_or_csv)``, then ``finish()``.  ``logger`` is a LoggerConfig or its dict."""
    init = dict(
        group=experiment,
        job_type="figures",
        name=f"{experiment}-figures",
        config={"experiment_name": experiment},
        notes=f"dybw figures of {experiment}",
    )
    return _tracker_for(logger, Path(directory), init, "figure run")


# --------------------------------------------------------------------------------------------------
# Reading a run file back (offline runs): records of the leveldb-style log wandb writes


_BLOCK = 32768
_HEADER = struct.Struct("<4sHB")  # ":W&B", 0xBEE1, version
_RECORD = struct.Struct("<IHB")  # crc32, length, type (1 full, 2 first, 3 middle, 4 last)


def iter_records(path):
    """The ``wandb.proto.wandb_internal_pb2.Record`` messages of a ``.wandb`` run file."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    ident, magic, _version = _HEADER.unpack_from(data, 0)
    if ident != b":W&B" or magic != 0xBEE1:
        raise ValueError(f"{path}: not a W&B run file")
    position, pending = _HEADER.size, b""
    while position + _RECORD.size <= len(data):
        left = _BLOCK - position % _BLOCK
        if left < _RECORD.size:  # block trailer
            position += left
            continue
        _crc, length, kind = _RECORD.unpack_from(data, position)
        if kind == 0:  # zero padding up to the end of the block (or of a file still being written)
            position += left
            continue
        chunk = data[position + _RECORD.size : position + _RECORD.size + length]
        position += _RECORD.size + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def _json(text: str):
    import json

    try:
        return json.loads(text)
    except ValueError:
        return text


def _assign(target: dict, item, value) -> None:
    """``target[key] = value``; a nested key (media, tables: ``["figures/x", "_type"]``) becomes nested dicts."""
    keys = list(item.nested_key) or [item.key]
    for key in keys[:-1]:
        target = target.setdefault(key, {})
    target[keys[-1]] = value


def _remove(target: dict, item) -> None:
    keys = list(item.nested_key) or [item.key]
    for key in keys[:-1]:
        target = target.get(key, {})
    target.pop(keys[-1], None)


def _history_value(item):
    which = item.WhichOneof("value")
    if which in (None, "none"):
        return _json(item.value_json) if item.value_json else None
    if which == "json":
        return _json(item.json)
    return getattr(item, which)


@dataclass
class RunFile:
    """What a W&B run file says about its run."""

    path: Path
    run_id: str = ""
    project: str = ""
    entity: str = ""
    group: str = ""
    job_type: str = ""
    name: str = ""
    notes: str = ""
    tags: list = field(default_factory=list)
    config: dict = field(default_factory=dict)
    history: list = field(default_factory=list)  # one dict per history row
    summary: dict = field(default_factory=dict)
    metrics: list = field(default_factory=list)  # define_metric: {"name"/"glob_name", "step_metric"}
    exit_code: int | None = None


def read_run_file(path, header_only: bool = False) -> RunFile:
    """Parse a ``run-*.wandb`` file (e.g. ``<job dir>/wandb/offline-run-*/run-<id>.wandb``).

    ``header_only``: stop after the run record (id, group, job type, name, tags, initial config).
    """
    run = RunFile(Path(path))

    def update_config(items):
        for item in items:
            if item.key != "_wandb":
                value = _json(item.value_json)
                _assign(
                    run.config,
                    item,
                    value.get("value", value) if isinstance(value, dict) and set(value) == {"value"} else value,
                )

    for record in iter_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            run.run_id, run.project, run.entity = r.run_id, r.project, r.entity
            run.group, run.job_type, run.name, run.notes = r.run_group, r.job_type, r.display_name, r.notes
            run.tags = list(r.tags)
            update_config(r.config.update)
            if header_only:
                break
        elif kind == "config":
            update_config(record.config.update)
        elif kind == "history":
            row: dict = {}
            for item in record.history.item:
                _assign(row, item, _history_value(item))
            run.history.append(row)
        elif kind == "summary":
            for item in record.summary.update:
                _assign(run.summary, item, _json(item.value_json))
            for item in record.summary.remove:
                _remove(run.summary, item)
        elif kind == "metric":
            m = record.metric
            run.metrics.append({"name": m.name, "glob_name": m.glob_name, "step_metric": m.step_metric})
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    return run


def find_run_files(root) -> list[Path]:
    """Every W&B run file under ``root`` (``.../wandb/{offline-,}run-*/run-*.wandb``), oldest first."""
    files = [p for p in Path(root).rglob("run-*.wandb") if p.parent.name.startswith(("offline-run-", "run-"))]
    return sorted(files, key=lambda p: (p.parent.name.split("-", 2)[-1], str(p)))
