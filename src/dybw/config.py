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
RUNNERS = ("local",)
LOGGERS = ("none",)


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
    name: str = "local"
    chunk: int = 64  # iterations whose timing, weights and batches are prepared at once


@dataclass
class LoggerConfig:
    name: str = "none"


@dataclass
class RunConfig:
    num_workers: int = 16
    iterations: int = 300
    eval_every: int = 10
    seed: int = 0
    data_seed: int = 0
    model_seed: int = 0
    target_accuracy: float = 0.95
    target_loss: typing.Optional[float] = None
    data_dir: typing.Optional[str] = None
    experiment_name: str = "adhoc"
    force: bool = False
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
        raise ConfigError(where or "config", data, f"must be a mapping with keys {', '.join(f.name for f in dataclasses.fields(cls))}")
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


def shard_size_bound(dataset: DatasetConfig, num_workers: int) -> int | None:
    """The smallest shard a worker gets, when it is known without loading data (not for dirichlet)."""
    from .data import train_size_of

    n = train_size_of(dataset)
    if dataset.split == "iid":
        return n // num_workers
    if dataset.split == "shards":
        return (n // (num_workers * dataset.shards_per_worker)) * dataset.shards_per_worker
    return None


def validate(cfg: RunConfig):
    """Check every value of ``cfg``; returns the graph (built once here, and reused by the run)."""
    from .data import input_dim_of
    from .policies import make_policy
    from .topology import build_graph

    _at_least("num_workers", cfg.num_workers, 2)
    _at_least("iterations", cfg.iterations, 1)
    _at_least("eval_every", cfg.eval_every, 1)
    _in_range("target_accuracy", cfg.target_accuracy, 0.0, 1.0, low_open=True)

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
    if not data.dirichlet_alpha > 0:
        raise ConfigError("dataset.dirichlet_alpha", data.dirichlet_alpha, "must be > 0")
    if data.name == "synthetic":
        _at_least("dataset.num_train", data.num_train, cfg.num_workers)
        _at_least("dataset.num_test", data.num_test, 1)
        _at_least("dataset.input_dim", data.input_dim, 1)
        _at_least("dataset.num_classes", data.num_classes, 2)
    input_dim = input_dim_of(data)
    _in_range("dataset.pca_dim", data.pca_dim, 0, input_dim)
    smallest = shard_size_bound(data, cfg.num_workers)
    if smallest is not None and data.batch_size > smallest:
        raise ConfigError("dataset.batch_size", data.batch_size,
                          f"must be at most the smallest worker shard ({smallest} samples with "
                          f"{cfg.num_workers} workers, split={data.split})")

    _choice("model.name", cfg.model.name, ("logreg", "mlp"))
    for i, width in enumerate(cfg.model.hidden):
        _at_least(f"model.hidden[{i}]", width, 1)
    _at_least("model.weight_decay", cfg.model.weight_decay, 0.0)

    cfg.straggler.compute.validate("straggler.compute")
    cfg.straggler.link.validate("straggler.link")
    _choice("protocol.sync", cfg.protocol.sync, SYNC_MODES)
    _choice("runner.name", cfg.runner.name, RUNNERS)
    _at_least("runner.chunk", cfg.runner.chunk, 1)
    _choice("logger.name", cfg.logger.name, LOGGERS)

    graph = build_graph(cfg.topology, cfg.num_workers)
    make_policy(algo, graph.degrees)  # b / m that no worker can honour
    return graph


def load(plain: dict) -> RunConfig:
    """Typed config from the composed, resolved config (``OmegaConf.to_container(cfg, resolve=True)``)."""
    plain = {k: v for k, v in plain.items() if k != "hydra"}
    return build(RunConfig, plain)
