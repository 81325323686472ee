"""Structured configs and their validation.

The Hydra tree under ``conf/`` composes a plain config; :func:`validate` turns it into typed dataclasses
and checks every value before any worker starts.  A bad value raises :class:`~dybw.errors.ConfigError`
naming the field, the value and what is allowed, which ``run.py`` prints as one line.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field

from .errors import ConfigError
from .mixing import MIXING_RULES
from .protocol import SYNC_MODES, UPDATE_ORDERS
from .stragglers import DelaySpec

ALGORITHMS = ("cb_dybw", "cb_full", "cb_static")
DATASETS = ("cifar10", "mnist", "synthetic")
NORMALIZATIONS = ("standard", "scale", "none")
SPLITS = ("iid", "shards", "dirichlet")
RUNNERS = ("local", "mpi")
CLOCKS = ("virtual", "wall")
FAULTS = ("none", "raise", "hang", "exit")
LOGGERS = ("none", "wandb")
LOGGER_MODES = ("auto", "online", "offline", "disabled")
GROUPS = ("algo", "dataset", "model", "topology", "straggler", "runner", "logger")  # config groups a job needs


@dataclass
class AlgoConfig:
    name: str = "cb_dybw"
    b: int = 1  # cb_static: backup workers per worker
    min_neighbors: int = 1  # cb_dybw: m, neighbours a worker needs before it may stop
    update: str = "atc"
    mixing: str = "uniform"
    eta0: float = 0.1
    delta: float = 1.0


@dataclass
class DatasetConfig:
    name: str = "mnist"
    pca_dim: int = 50
    normalize: str = "standard"
    whiten: bool = True
    split: str = "iid"
    shards_per_worker: int = 2
    dirichlet_alpha: float = 0.5
    batch_size: int = 1024
    target_accuracy: float = 0.95
    # synthetic only
    num_train: int = 8192
    num_test: int = 2048
    input_dim: int = 20
    num_classes: int = 4
    class_sep: float = 2.0


@dataclass
class ModelConfig:
    name: str = "mlp"
    hidden: list[int] = field(default_factory=lambda: [128])
    weight_decay: float = 0.0


@dataclass
class TopologyConfig:
    name: str = "erdos_renyi"
    p: float = 0.3
    d: int = 4
    rows: int = 0
    edges: list = field(default_factory=list)
    seed: int = 0
    max_tries: int = 100


@dataclass
class StragglerConfig:
    name: str = "paper"
    compute: DelaySpec = field(default_factory=DelaySpec)
    link: DelaySpec = field(default_factory=DelaySpec)


@dataclass
class ProtocolConfig:
    sync: str = "lockstep"


@dataclass
class RunnerConfig:
    name: str = "mpi"
    chunk: int = 64  # iterations whose timing, weights and batches are prepared at once
    threads: int = 1  # TF threads per process (per rank); part of the numbers (tf_setup.use_threads)
    # runner=mpi only
    ranks: int = 0  # 0 = min(num_workers, cores)
    clock: str = "virtual"
    launcher: list[str] = field(default_factory=lambda: ["mpiexec", "-n", "{ranks}"])
    timeout_s: float = 120.0  # silence (no heartbeat) after a rank's first iteration that fails the job
    startup_timeout_s: float = 600.0  # silence allowed before it (TF import, data, XLA compile)
    fault: str = "none"  # test hook: make fault_rank raise / hang / exit at fault_iteration
    fault_rank: int = 1
    fault_iteration: int = 5


@dataclass
class LoggerConfig:
    name: str = "none"  # none | wandb (docs/tracking.md)
    mode: str = "auto"  # auto: online with credentials, else offline | online | offline | disabled
    project: str = "dybw"
    entity: str | None = None
    tags: list[str] = field(default_factory=list)
    dir: str | None = None  # where wandb/ goes (null: the job directory)


@dataclass
class RunConfig:
    num_workers: int = 16
    iterations: int = 300
    eval_every: int = 10
    seed: int = 0
    data_seed: int = 0
    model_seed: int = 0
    target_accuracy: float = 0.95
    target_loss: float | None = None
    data_dir: str | None = None
    experiment_name: str = "adhoc"
    force: bool = False
    resume: bool = False
    progress: bool = True
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    straggler: StragglerConfig = field(default_factory=StragglerConfig)
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)


# --------------------------------------------------------------------------------------------------
# Conversion: plain nested dict -> dataclasses, with one-line type errors


def _convert(kind, value, where: str):
    origin = typing.get_origin(kind)
    if origin is typing.Union:  # Optional[x]
        if value is None:
            return None
        (inner,) = [a for a in typing.get_args(kind) if a is not type(None)]
        return _convert(inner, value, where)
    if dataclasses.is_dataclass(kind):
        return build(kind, value, where)
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(where, value, "must be true or false")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(where, value, "must be an integer")
    if kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(where, value, "must be a number")
    if kind is str:
        if isinstance(value, str):
            return value
        raise ConfigError(where, value, "must be a string")
    if kind is list or origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(where, value, "must be a list")
        args = typing.get_args(kind)
        return [_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)] if args else list(value)
    return value


def build(cls, data, where: str = ""):
    """``cls(**data)`` with every field type-checked; unknown keys are errors naming the valid ones."""
    prefix = f"{where}." if where else ""
    if not isinstance(data, dict):
        raise ConfigError(
            where or "config", data, f"must be a mapping with keys {', '.join(f.name for f in dataclasses.fields(cls))}"
        )
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ConfigError(prefix + unknown[0], data[unknown[0]], f"unknown key; valid keys here: {', '.join(names)}")
    values = {name: _convert(hints[name], data[name], prefix + name) for name in names if name in data}
    return cls(**values)


# --------------------------------------------------------------------------------------------------
# Validation: ranges and cross-field rules


def _choice(where: str, value: str, allowed) -> None:
    if value not in allowed:
        raise ConfigError(where, value, "choose one of: " + ", ".join(sorted(allowed)))


def _at_least(where: str, value, low) -> None:
    if value < low:
        raise ConfigError(where, value, f"must be >= {low}")


def _in_range(where: str, value, low, high, low_open=False, high_open=False) -> None:
    ok = (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not (ok and math.isfinite(value)):
        lb, rb = "(" if low_open else "[", ")" if high_open else "]"
        raise ConfigError(where, value, f"allowed range {lb}{low}, {high}{rb}")


def _finite(where: str, value, low, strict: bool = False) -> None:
    """``value`` is a finite number ``> low`` (strict) or ``>= low``."""
    if not (math.isfinite(value) and (value > low if strict else value >= low)):
        raise ConfigError(where, value, f"must be a finite number {'>' if strict else '>='} {low}")


def shard_size_bound(dataset: DatasetConfig, num_workers: int) -> int | None:
    """The smallest shard a worker gets, when it is known without loading data (not for dirichlet)."""
    from .data import train_size_of

    n = train_size_of(dataset)
    if dataset.split == "iid":
        return n // num_workers
    if dataset.split == "shards":
        return (n // (num_workers * dataset.shards_per_worker)) * dataset.shards_per_worker
    return None


def _validate_stragglers(cfg: RunConfig, graph) -> None:
    """Persistent worker ids exist; a replayed trace covers every worker / link (after ``DelaySpec.validate``)."""
    from .stragglers import DelaySampler

    for where, spec in (("straggler.compute", cfg.straggler.compute), ("straggler.link", cfg.straggler.link)):
        for i, worker in enumerate(spec.persistent_ids):
            if isinstance(worker, bool) or not isinstance(worker, int) or not 0 <= worker < cfg.num_workers:
                raise ConfigError(
                    f"{where}.persistent_ids[{i}]",
                    worker,
                    f"must be a worker id in 0..{cfg.num_workers - 1} ({cfg.num_workers} workers)",
                )
    # Reading the traces and keying the streams is cheap; it raises the errors a run would hit later.
    DelaySampler(cfg.straggler.compute, cfg.straggler.link, graph.directed_links(), cfg.num_workers, cfg.seed)


def validate(cfg: RunConfig):
    """Check every value of ``cfg``; returns the graph (built once here, and reused by the run)."""
    from .data import input_dim_of
    from .policies import make_policy
    from .topology import build_graph

    _at_least("num_workers", cfg.num_workers, 2)
    _at_least("iterations", cfg.iterations, 1)
    _at_least("eval_every", cfg.eval_every, 1)
    for name in ("seed", "data_seed", "model_seed"):
        _at_least(name, getattr(cfg, name), 0)
    _in_range("target_accuracy", cfg.target_accuracy, 0.0, 1.0, low_open=True)
    if cfg.target_loss is not None and not math.isfinite(cfg.target_loss):
        raise ConfigError("target_loss", cfg.target_loss, "must be a finite number or null")
    # results/<experiment_name>/ must stay inside results/: nested names (a/b) are fine, escapes are not.
    parts = cfg.experiment_name.split("/")
    if not cfg.experiment_name.strip() or any(part in ("", ".", "..") or "\0" in part for part in parts):
        raise ConfigError(
            "experiment_name",
            cfg.experiment_name,
            "must be a non-empty relative name (a or a/b) without '.' or '..' parts "
            "(results go to results/<experiment_name>/)",
        )

    algo = cfg.algo
    _choice("algo.name", algo.name, ALGORITHMS)
    _choice("algo.update", algo.update, UPDATE_ORDERS)
    _choice("algo.mixing", algo.mixing, MIXING_RULES)
    _at_least("algo.b", algo.b, 0)
    _at_least("algo.min_neighbors", algo.min_neighbors, 1)
    if not (algo.eta0 > 0 and math.isfinite(algo.eta0)):
        raise ConfigError("algo.eta0", algo.eta0, "must be a finite number > 0")
    _in_range("algo.delta", algo.delta, 0.0, 1.0, low_open=True)

    data = cfg.dataset
    _choice("dataset.name", data.name, DATASETS)
    _choice("dataset.normalize", data.normalize, NORMALIZATIONS)
    _choice("dataset.split", data.split, SPLITS)
    _at_least("dataset.batch_size", data.batch_size, 1)
    _at_least("dataset.shards_per_worker", data.shards_per_worker, 1)
    _finite("dataset.dirichlet_alpha", data.dirichlet_alpha, 0, strict=True)
    if data.name == "synthetic":
        _at_least("dataset.num_train", data.num_train, cfg.num_workers)
        _at_least("dataset.num_test", data.num_test, 1)
        _at_least("dataset.input_dim", data.input_dim, 1)
        _at_least("dataset.num_classes", data.num_classes, 2)
        _finite("dataset.class_sep", data.class_sep, 0)
    input_dim = input_dim_of(data)
    _in_range("dataset.pca_dim", data.pca_dim, 0, input_dim)
    if data.whiten and data.pca_dim == 0:
        raise ConfigError(
            "dataset.whiten",
            data.whiten,
            "whitening scales PCA components; set dataset.pca_dim > 0 or dataset.whiten=false",
        )
    smallest = shard_size_bound(data, cfg.num_workers)
    if smallest is not None and data.batch_size > smallest:
        raise ConfigError(
            "dataset.batch_size",
            data.batch_size,
            f"must be at most the smallest worker shard ({smallest} samples with "
            f"{cfg.num_workers} workers, split={data.split})",
        )
    if smallest is None:  # dirichlet: shard sizes are random, but the smallest is at most n // N
        from .data import train_size_of

        best = train_size_of(data) // cfg.num_workers
        if data.batch_size > best:
            raise ConfigError(
                "dataset.batch_size",
                data.batch_size,
                f"must be at most the smallest worker shard (at most {best} samples with "
                f"{cfg.num_workers} workers, split={data.split})",
            )

    _choice("model.name", cfg.model.name, ("logreg", "mlp"))
    for i, width in enumerate(cfg.model.hidden):
        _at_least(f"model.hidden[{i}]", width, 1)
    _finite("model.weight_decay", cfg.model.weight_decay, 0.0)

    for where, spec in (("straggler.compute", cfg.straggler.compute), ("straggler.link", cfg.straggler.link)):
        spec.validate(where)
    _choice("protocol.sync", cfg.protocol.sync, SYNC_MODES)
    _choice("runner.name", cfg.runner.name, RUNNERS)
    _at_least("runner.chunk", cfg.runner.chunk, 1)
    _at_least("runner.threads", cfg.runner.threads, 1)
    _validate_runner(cfg)
    _choice("logger.name", cfg.logger.name, LOGGERS)
    _choice("logger.mode", cfg.logger.mode, LOGGER_MODES)
    if not cfg.logger.project.strip():
        raise ConfigError("logger.project", cfg.logger.project, "must be a non-empty W&B project name")

    graph = build_graph(cfg.topology, cfg.num_workers)
    low, high = int(graph.degrees.min()), int(graph.degrees.max())
    # A value some workers cannot honour is clamped for them (with a warning); one that no worker can is an error.
    if algo.name == "cb_static" and algo.b > high - 1:
        raise ConfigError(
            "algo.b",
            algo.b,
            f"allowed range 0..{high - 1} on this graph (degrees {low}..{high}): "
            "worker j waits for d_j - b >= 1 neighbours",
        )
    if algo.name == "cb_dybw" and algo.min_neighbors > high:
        raise ConfigError(
            "algo.min_neighbors", algo.min_neighbors, f"allowed range 1..{high} on this graph (degrees {low}..{high})"
        )
    make_policy(algo, graph.degrees)  # the policy's own check of b / m
    _validate_stragglers(cfg, graph)
    return graph


def schema_keys(key: str) -> tuple[str, list[str], bool]:
    """Where a dotted ``key`` stops matching the typed schema.

    Returns ``(section, names, is_field)``: the deepest config section on the key's path (``""`` for the
    top level), the field names of that section, and whether the whole key is a field of the schema.
    """
    cls, parts = RunConfig, key.split(".")
    for i, part in enumerate(parts):
        section = ".".join(parts[:i])
        names = [f.name for f in dataclasses.fields(cls)]
        if part not in names:
            return section, names, False
        kind = typing.get_type_hints(cls)[part]
        if i == len(parts) - 1:
            return section, names, True
        if not dataclasses.is_dataclass(kind):
            return section, names, False
        cls = kind
    raise AssertionError("unreachable")


def _validate_runner(cfg: RunConfig) -> None:
    runner = cfg.runner
    if cfg.resume and runner.clock == "wall":
        raise ConfigError(
            "resume",
            cfg.resume,
            "wall-clock runs are measurements and are not checkpointed: resume needs runner.clock=virtual",
        )
    _choice("runner.clock", runner.clock, CLOCKS)
    _choice("runner.fault", runner.fault, FAULTS)
    _at_least("runner.ranks", runner.ranks, 0)
    if runner.ranks > cfg.num_workers:
        raise ConfigError("runner.ranks", runner.ranks, f"allowed range 0..{cfg.num_workers} (num_workers; 0 = auto)")
    if runner.fault != "none":
        from .mpi.launch import resolve_ranks

        highest = resolve_ranks(cfg) - 1
        if not 0 <= runner.fault_rank <= highest:
            raise ConfigError("runner.fault_rank", runner.fault_rank, f"allowed range 0..{highest} (a rank of the job)")
    if runner.clock == "wall" and runner.ranks not in (0, cfg.num_workers):
        raise ConfigError(
            "runner.ranks", runner.ranks, f"the wall clock runs one worker per rank: use 0 or {cfg.num_workers}"
        )
    if runner.clock == "wall" and runner.name != "mpi":
        raise ConfigError("runner.clock", runner.clock, "the wall clock needs runner=mpi")
    for name in ("timeout_s", "startup_timeout_s"):
        if not getattr(runner, name) > 0:
            raise ConfigError(f"runner.{name}", getattr(runner, name), "must be > 0 seconds")
    if not runner.launcher:
        raise ConfigError("runner.launcher", runner.launcher, "must name a launcher, e.g. [mpiexec, -n, '{ranks}']")
    if runner.name == "mpi":
        from .mpi import world_size_from_environment
        from .mpi.launch import find_launcher

        if world_size_from_environment() == 1 and find_launcher(str(runner.launcher[0])) is None:
            raise ConfigError(
                "runner.launcher",
                runner.launcher,
                f"{runner.launcher[0]!r} is not on PATH: pip install mpich provides mpiexec (or run with runner=local)",
            )


def load(plain: dict) -> RunConfig:
    """Typed config from the composed, resolved config (``OmegaConf.to_container(cfg, resolve=True)``)."""
    plain = {k: v for k, v in plain.items() if k != "hydra"}
    for group in GROUPS:
        if group not in plain:  # e.g. `~algo`: silently falling back to the dataclass defaults would mislead
            raise ConfigError(
                group,
                None,
                f"the config group is required: choose an option with {group}=<name> (the yaml files in conf/{group}/)",
            )
    return build(RunConfig, plain)
