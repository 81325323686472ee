"""The typed config of a job, and the checks that need more than one field.

The Hydra tree under ``conf/`` composes a plain config; :func:`load` turns it into the dataclasses below
(:mod:`dybw.schema`: types and ranges are declared beside the fields, and the yaml files are the only
place defaults live), and :func:`validate` checks what involves several fields, the graph or the
runner, before any worker starts.  A bad value raises :class:`~dybw.errors.ConfigError` naming the
field, the value and what is allowed, which ``run.py`` prints as one line.

Sections chosen by name (``algo``, ``model``, ``runner``, ``dataset``, ``topology``, ``logger``) take
the keys of the chosen class: an algorithm's, a model's and a runner's come from its registry.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated

from .agreement import AGREEMENTS
from .algorithms import ALGORITHMS, AlgoConfig
from .clock import SYNC_MODES
from .distributions import DelaySpec, spec_section
from .errors import ConfigError
from .models import MODELS, ModelConfig
from .registry import Registry, import_plugins
from .runners import RUNNERS, RunnerConfig
from .schema import AtLeast, Choice, Finite, IsFinite, NonEmpty, Range, Section, build, field_names, section_classes
from .topology import TOPOLOGY_CONFIGS, TopologyConfig

DATASETS = ("cifar10", "mnist", "synthetic")
FEATURES = ("pca", "raw")
AUGMENTATIONS = ("none", "crop_flip")
NORMALIZATIONS = ("standard", "scale", "none")
SPLITS = ("iid", "shards", "dirichlet")
LOGGER_MODES = ("auto", "online", "offline", "disabled")
GROUPS = ("algo", "dataset", "model", "topology", "straggler", "runner", "logger")  # config groups a job needs


@dataclass
class DatasetConfig:
    name: Annotated[str, Choice(*DATASETS)]
    features: Annotated[str, Choice(*FEATURES)]  # pca: flat features (PCA if pca_dim > 0) | raw: images as they are
    augment: Annotated[str, Choice(*AUGMENTATIONS)]  # crop_flip: random crops and flips of raw images
    pca_dim: Annotated[int, AtLeast(0)]  # 0 = no PCA; at most the input size (checked with the dataset)
    normalize: Annotated[str, Choice(*NORMALIZATIONS)]
    whiten: bool
    split: Annotated[str, Choice(*SPLITS)]
    shards_per_worker: Annotated[int, AtLeast(1)]
    dirichlet_alpha: Annotated[float, Finite(0, strict=True)]
    batch_size: Annotated[int, AtLeast(1)]
    target_accuracy: Annotated[float, Range(0, 1, low_open=True)]
    holdout: Annotated[int, AtLeast(0)]  # > 0: evaluate on this many held-out training samples, not the test set


@dataclass
class SyntheticDatasetConfig(DatasetConfig):
    num_train: Annotated[int, AtLeast(1)]
    num_test: Annotated[int, AtLeast(1)]
    input_dim: Annotated[int, AtLeast(1)]
    num_classes: Annotated[int, AtLeast(2)]
    class_sep: Annotated[float, Finite(0)]


DATASET_CONFIGS = {"cifar10": DatasetConfig, "mnist": DatasetConfig, "synthetic": SyntheticDatasetConfig}


@dataclass
class StragglerConfig:
    name: str
    compute: Annotated[DelaySpec, spec_section()]  # C_j(k): a local step
    link: Annotated[DelaySpec, spec_section()]  # D_ij(k): a message that carries a model
    control: Annotated[DelaySpec, spec_section()]  # a control message of an agreement (no model on it)
    time_scale: Annotated[float, Finite(0, strict=True)]  # multiplies every drawn delay, in both clocks


@dataclass
class ProtocolConfig:
    sync: Annotated[str, Choice(*SYNC_MODES)]  # lockstep: iterations end together | free: no barrier
    agreement: Annotated[str, Choice(*AGREEMENTS)]  # how lock-step workers learn a global maximum


@dataclass
class EvaluationConfig:
    """What each evaluation computes (:mod:`dybw.evaluation`)."""

    full_every_evals: Annotated[int, AtLeast(1)]  # every n-th evaluation (and those at 0 and K) is full
    probe_target: bool  # replay the interval in which the target is first reached, scoring every iteration


@dataclass
class LoggerConfig:
    """``logger=none``: no tracking."""

    name: str


@dataclass
class WandbLoggerConfig(LoggerConfig):
    mode: Annotated[str, Choice(*LOGGER_MODES)]  # auto: online with credentials, else offline
    project: Annotated[str, NonEmpty("W&B project name")]
    entity: str | None
    tags: list[str]
    dir: str | None  # where wandb/ goes (null: the job directory)


def _by_name(options: dict[str, type], base: type) -> Section:
    """A section whose dataclass is chosen from a fixed table of names."""

    def resolve(name, where):
        Choice(*options).check(where, name)
        return options[name]

    return Section(resolve, base, lambda: list(options.values()))


def _from_registry(registry: Registry, base: type) -> Section:
    """A section whose dataclass is the ``Config`` of the class a registry holds under the name."""
    return Section(
        lambda name, where: registry.get(name, where).Config, base, lambda: [c.Config for _, c in registry.items()]
    )


@dataclass
class RunConfig:
    num_workers: Annotated[int, AtLeast(2)]
    iterations: Annotated[int, AtLeast(1)]
    eval_every: Annotated[int, AtLeast(1)]
    eval_local: bool  # also test every worker's own model at each evaluation (local_test_accuracy)
    seed: Annotated[int, AtLeast(0)]
    data_seed: Annotated[int, AtLeast(0)]
    model_seed: Annotated[int, AtLeast(0)]
    target_accuracy: Annotated[float, Range(0, 1, low_open=True)]
    target_loss: Annotated[float, IsFinite("a finite number or null")] | None
    data_dir: str | None
    experiment_name: str
    force: bool
    resume: bool
    progress: bool
    plugins: list[str]  # modules imported first in every process: they register algorithms, runners, models
    algo: Annotated[AlgoConfig, _from_registry(ALGORITHMS, AlgoConfig)]
    dataset: Annotated[DatasetConfig, _by_name(DATASET_CONFIGS, DatasetConfig)]
    model: Annotated[ModelConfig, _from_registry(MODELS, ModelConfig)]
    topology: Annotated[TopologyConfig, _by_name(TOPOLOGY_CONFIGS, TopologyConfig)]
    straggler: StragglerConfig
    protocol: ProtocolConfig
    evaluation: EvaluationConfig
    runner: Annotated[RunnerConfig, _from_registry(RUNNERS, RunnerConfig)]
    logger: Annotated[LoggerConfig, _by_name({"none": LoggerConfig, "wandb": WandbLoggerConfig}, LoggerConfig)]


def load(plain: dict) -> RunConfig:
    """Typed config from the composed, resolved config (``OmegaConf.to_container(cfg, resolve=True)``).

    The ``plugins`` it names are imported first, so the classes they register are known."""
    plain = {k: v for k, v in plain.items() if k != "hydra"}
    for group in GROUPS:
        if group not in plain:  # e.g. `~algo`: nothing else would say which option is missing
            raise ConfigError(
                group,
                None,
                f"the config group is required: choose an option with {group}=<name> (the yaml files in conf/{group}/)",
            )
    plugins = plain.get("plugins") or []
    if isinstance(plugins, list) and all(isinstance(p, str) for p in plugins):
        import_plugins(plugins)
    return build(RunConfig, plain)


# --------------------------------------------------------------------------------------------------
# Checks across fields


def shard_size_bound(dataset: DatasetConfig, num_workers: int) -> int | None:
    """The smallest shard a worker gets, when it is known without loading data (not for dirichlet)."""
    from .data import train_size_of

    n = train_size_of(dataset)
    if dataset.split == "iid":
        return n // num_workers
    if dataset.split == "shards":
        return (n // (num_workers * dataset.shards_per_worker)) * dataset.shards_per_worker
    return None


def _check_experiment_name(name: str) -> None:
    # results/<experiment_name>/ must stay inside results/: nested names (a/b) are fine, escapes are not.
    parts = name.split("/")
    if not name.strip() or any(part in ("", ".", "..") or "\0" in part for part in parts):
        raise ConfigError(
            "experiment_name",
            name,
            "must be a non-empty relative name (a or a/b) without '.' or '..' parts "
            "(results go to results/<experiment_name>/)",
        )


def _check_dataset(cfg: RunConfig) -> None:
    from .data import holdout_of, input_dim_of, input_shape_of, train_size_of

    data = cfg.dataset
    holdout_of(data)  # below the training set's size
    if data.name == "synthetic" and data.num_train < cfg.num_workers:
        raise ConfigError("dataset.num_train", data.num_train, f"must be >= {cfg.num_workers}")
    if data.augment != "none" and len(input_shape_of(data)) != 3:
        raise ConfigError(
            "dataset.augment",
            data.augment,
            "crops and flips images: needs dataset.features=raw on an image dataset (mnist, cifar10), "
            "or dataset.augment=none",
        )
    input_dim = input_dim_of(data)
    if data.features == "pca":  # raw inputs have no PCA: pca_dim and whiten do not apply to them
        if data.pca_dim > input_dim:
            raise ConfigError("dataset.pca_dim", data.pca_dim, f"allowed range [0, {input_dim}]")
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
        best = train_size_of(data) // cfg.num_workers
        if data.batch_size > best:
            raise ConfigError(
                "dataset.batch_size",
                data.batch_size,
                f"must be at most the smallest worker shard (at most {best} samples with "
                f"{cfg.num_workers} workers, split={data.split})",
            )


def _check_stragglers(cfg: RunConfig, graph) -> None:
    """Persistent worker ids exist; a replayed trace exists and covers every worker / link; control
    messages are drawn, not replayed, and have no persistent stragglers of their own."""
    from .stragglers import DelaySampler

    straggler = cfg.straggler
    for where, spec in (("straggler.compute", straggler.compute), ("straggler.link", straggler.link)):
        spec.check_path(where)
        for i, worker in enumerate(spec.persistent_ids):
            if isinstance(worker, bool) or not isinstance(worker, int) or not 0 <= worker < cfg.num_workers:
                raise ConfigError(
                    f"{where}.persistent_ids[{i}]",
                    worker,
                    f"must be a worker id in 0..{cfg.num_workers - 1} ({cfg.num_workers} workers)",
                )
    control = straggler.control
    if control.distribution.replayed:
        raise ConfigError("straggler.control.dist", control.dist, "control delays are drawn: choose a distribution")
    if control.persistent_ids or control.persistent_fraction:
        raise ConfigError(
            "straggler.control.persistent_ids" if control.persistent_ids else "straggler.control.persistent_fraction",
            control.persistent_ids or control.persistent_fraction,
            "control messages have no persistent stragglers of their own (use slow_prob / slow_factor)",
        )
    # Reading the traces and keying the streams is cheap; it raises the errors a run would hit later.
    DelaySampler(straggler.compute, straggler.link, graph.directed_links(), cfg.num_workers, cfg.seed)


def _check_protocol(cfg: RunConfig) -> None:
    if cfg.protocol.sync == "free" and cfg.protocol.agreement != "instant":
        raise ConfigError(
            "protocol.agreement",
            cfg.protocol.agreement,
            "protocol.sync=free has no global agreement (nobody waits for a global maximum): "
            "use sync=lockstep, or leave protocol.agreement=instant",
        )


def validate(cfg: RunConfig):
    """Check what involves several fields, the graph or the runner; returns the graph (built once here,
    and reused by the run)."""
    from .topology import build_graph

    _check_experiment_name(cfg.experiment_name)
    _check_protocol(cfg)
    _check_dataset(cfg)
    MODELS[cfg.model.name].check(cfg)  # e.g. a Keras factory is built once for the dataset's input shape
    graph = build_graph(cfg.topology, cfg.num_workers)
    algorithm = ALGORITHMS[cfg.algo.name]
    algorithm.check(cfg.algo, graph)
    algorithm.build(cfg.algo, graph.degrees)  # the algorithm's own checks (a b no worker can honour)
    _check_stragglers(cfg, graph)
    RUNNERS[cfg.runner.name].check(cfg, algorithm)
    algorithm.check_options(cfg)  # last: a note on an option the algorithm ignores is for a valid config only
    return graph


def schema_keys(key: str) -> tuple[str, list[str], bool]:
    """Where a dotted ``key`` stops matching the typed schema.

    Returns ``(section, names, is_field)``: the deepest config section on the key's path (``""`` for the
    top level), the field names of that section (for a section chosen by name, the keys of every choice,
    those all choices share first), and whether the whole key is a field of the schema.
    """
    classes, parts = [RunConfig], key.split(".")
    for i, part in enumerate(parts):
        section = ".".join(parts[:i])
        names = list(dict.fromkeys(name for cls in classes for name in field_names(cls)))
        owners = [cls for cls in classes if part in field_names(cls)]
        if not owners:
            return section, names, False
        if i == len(parts) - 1:
            return section, names, True
        classes = [inner for cls in owners for inner in section_classes(cls, part)]
        if not classes:
            return section, names, False
    raise AssertionError("unreachable")


def every_section_class() -> list[type]:
    """Every dataclass a config can be built from, registered classes included (for the schema's tests)."""
    seen: list[type] = []

    def visit(cls):
        if cls not in seen:
            seen.append(cls)
            for f in dataclasses.fields(cls):
                for inner in section_classes(cls, f.name):
                    visit(inner)

    visit(RunConfig)
    return seen
