"""The Hydra tree composes, validates and runs, option by option; the typed conversion rejects bad input."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import DictConfig, OmegaConf

from dybw.algorithms import ALGORITHMS
from dybw.clock import SYNC_MODES, UPDATE_ORDERS
from dybw.config import DATASETS, SPLITS, load, schema_keys, validate
from dybw.data import load_dataset
from dybw.errors import ConfigError
from dybw.mixing import MIXING_RULES
from dybw.runners import RUNNERS
from helpers import CONF, TINY, compose, run_config

GROUPS = ("algo", "dataset", "model", "topology", "straggler", "runner", "logger", "experiment")
RESULT_FILES = ("metrics.csv", "timeline.parquet", "topology.json", "summary.json")
REGISTRIES = {"algo": ALGORITHMS, "dataset": DATASETS, "runner": RUNNERS, "logger": ("none", "wandb")}

# The built-in CNN's channels in a tiny run.
NARROW_CNN = ["model.kwargs.widths=[8,8,8]"]
# Options that need more than the defaults to make sense.
NEEDS = {
    ("topology", "custom"): ["num_workers=4"],  # its example edge list covers workers 0..3
    ("topology", "random_regular"): ["num_workers=6"],  # d = 4 needs more than 4 workers
    ("straggler", "trace"): ["num_workers=16"],  # the example trace has 16 workers
    # CNNs take raw images; a tiny run evaluates twice (each evaluation is 60-70k images through the network),
    # the average model only: the presets' per-worker scores (N more passes over the test set) are code every
    # MLP run here covers.
    ("model", "lenet5"): ["dataset.features=raw", "eval_every=2", "eval_local=false"],
    # The GroupNorm CNN at a tiny width (its 8 groups need multiples of 8): the same layers at a tenth of the
    # work. Its 32/64/128 channels are built and counted in tests/test_keras_models.py and trained by the
    # figures' CNN runs (make figures ONLY=deep).
    ("model", "cnn"): ["dataset.features=raw", "eval_every=2", "eval_local=false", *NARROW_CNN],  # MNIST's images
    ("model", "keras"): ["model.factory=keras_factories:small_net"],  # a user's factory (tests/keras_factories.py)
    ("experiment", "cnn_mnist"): ["eval_every=2", "eval_local=false"],
    ("experiment", "cnn_cifar10"): ["eval_every=2", "eval_local=false", *NARROW_CNN],
    ("algo", "ad_psgd"): ["runner=local"],  # the event engine: runner=mpi (the default) lacks it
}
# Options whose tiny run trains a CNN on a real dataset: tens of seconds each.
SLOW = {("model", "lenet5"), ("model", "cnn"), ("experiment", "cnn_mnist"), ("experiment", "cnn_cifar10")}

# TINY without its synthetic dataset: what fits any dataset.
COMMON = [o for o in TINY if not o.startswith("dataset")]
# A tiny run on a real dataset: few PCA features, a small batch, two iterations.
REAL = ["dataset.pca_dim=10", "dataset.batch_size=32", "iterations=2", "eval_every=1"]


def options(group: str) -> list[str]:
    """The option files of a config group (a new yaml is covered without touching the tests); a file whose
    name starts with ``_`` is a base the options extend, not an option."""
    return sorted(p.stem for p in (CONF / group).glob("*.yaml") if not p.stem.startswith("_"))


def all_options() -> list[tuple[str, str]]:
    return [(group, option) for group in GROUPS for option in options(group)]


def pending(group: str, option: str) -> list:
    """An xfail mark for a yaml whose option dybw.config does not accept yet (a backend still being added).

    Tied to the registry, so the test runs for real as soon as the option is registered.
    """
    known = REGISTRIES.get(group)
    if known is None or option in known:
        return []
    return [
        pytest.mark.xfail(
            strict=True,
            raises=ConfigError,
            reason=f"conf/{group}/{option}.yaml exists but dybw.config accepts only {known}",
        )
    ]


@functools.cache
def _defaults(path: Path) -> dict[str, str]:
    """A yaml's ``defaults:`` choices by group: ``- dataset: mnist`` and ``- override /dataset: mnist`` alike."""
    entries = OmegaConf.load(path).get("defaults", [])
    pairs = [next(iter(entry.items())) for entry in entries if isinstance(entry, DictConfig)]
    return {key.removeprefix("override ").strip("/"): str(value) for key, value in pairs}


def preset_of(group: str, option: str) -> list[str]:
    """The options of the same group a yaml builds on through its ``defaults:`` list."""
    defaults = OmegaConf.load(CONF / group / f"{option}.yaml").get("defaults", [])
    return [entry for entry in defaults if isinstance(entry, str) and entry != "_self_"]


def chosen(group: str, option: str, wanted: str) -> str:
    """The option of group ``wanted`` that ``group=option`` selects: itself, an experiment preset's override,
    else conf/config.yaml's default.  Read from the yaml files because the marks are decided while
    collecting, in every pytest process, where composing each option cost about 4 CPU-s a process;
    :func:`test_every_option_composes_and_validates` holds this reading to Hydra's composition."""
    if group == wanted:
        return option
    presets = [CONF / "experiment" / f"{option}.yaml"] if group == "experiment" else []
    return next(d[wanted] for d in map(_defaults, [*presets, CONF / "config.yaml"]) if wanted in d)


def dataset_of(group: str, option: str) -> str:
    return chosen(group, option, "dataset")


def trains_keras(group: str, option: str) -> bool:
    model = chosen(group, option, "model")
    return "keras" in (model, *preset_of("model", model))


def tier_of(group: str, option: str):
    """``unit`` unless validating the option builds a Keras model (which imports TensorFlow)."""
    return pytest.mark.integration if trains_keras(group, option) else pytest.mark.unit


def tiny_overrides(group: str, option: str) -> list[str]:
    """Overrides of a tiny run that still uses ``group=option`` for real."""
    choice = [f"{group}={option}"]
    if dataset_of(group, option) == "synthetic":
        # An experiment picks its own dataset and model: keep the sizes of TINY, not its group choices.
        base = [o for o in TINY if not o.startswith(("dataset=", "model="))] if group == "experiment" else TINY
        return base + choice + NEEDS.get((group, option), [])
    base = [o for o in COMMON if not o.startswith("model=")] if group == "experiment" else COMMON
    return base + choice + REAL + NEEDS.get((group, option), [])


@pytest.fixture(scope="session")
def data_cache(tmp_path_factory):
    """A private preprocessing cache shared by the tests of this session, and by every pytest-xdist worker of
    it (their temporary directories share a parent): the first PCA fit is reused, not made once per worker.
    Workers fitting the same data at once are safe: the cache writes each file atomically."""
    base = tmp_path_factory.getbasetemp()
    cache = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "dybw-cache"
    cache.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DYBW_CACHE_DIR", str(cache))
        yield cache


def assert_completed(summary: dict, job_dir: Path) -> None:
    assert summary["status"] == "completed", summary["message"]
    for name in RESULT_FILES:
        assert (job_dir / name).is_file(), f"{name} missing in {job_dir}"
    assert len(pd.read_csv(job_dir / "metrics.csv")) >= 2  # evaluations at 0 and at the end


# --------------------------------------------------------------------------------------------------
# Every yaml composes and validates


@pytest.mark.unit
def test_every_group_has_options():
    for group in GROUPS:
        assert options(group), f"conf/{group}/ has no yaml"


@pytest.mark.unit
def test_default_config_composes_and_validates():
    cfg, plain = compose([])
    validate(cfg)
    assert "hydra" not in plain


@pytest.mark.unit
@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["experiment=cnn_cifar10", "seed=3"],
        ["hydra/launcher=submitit_local", "algo=cb_static", "algo.b=1"],
        ["experiment=real_network", "hydra.run.dir=/tmp/elsewhere", "+hydra.job.env_set.FOO=1"],
    ],
)
def test_run_pys_first_job_is_composed_once_as_compose_job_composes_it(overrides):
    """run.py's check of its first job composes once, with Hydra's own config, for both the job and its
    launcher: the same job config, key for key and in order, and the same launcher settings."""
    from dybw.cli import _compose_job_and_launcher, _compose_launcher, compose_job

    plain, launcher = _compose_job_and_launcher(CONF, overrides)
    assert repr(plain) == repr(compose_job(CONF, overrides))
    assert launcher == _compose_launcher(CONF, overrides)


def validated_option_params():
    params = []
    for group, option in all_options():
        tier = tier_of(group, option)
        params.append(pytest.param(group, option, marks=[tier, *pending(group, option)], id=f"{group}={option}"))
    return params


@pytest.mark.parametrize(("group", "option"), validated_option_params())
def test_every_option_composes_and_validates(group, option):
    cfg, plain = compose([f"{group}={option}"] + NEEDS.get((group, option), []))
    graph = validate(cfg)
    assert graph.num_nodes == cfg.num_workers and graph.is_connected()
    if group == "experiment":
        assert cfg.experiment_name == option
    else:  # the file's name is the option's name, or the name of the option it presets (model=lenet5 is a keras)
        assert plain[group]["name"] in (option, *preset_of(group, option))
    # the collection's reading of the yaml files, which put the test in its tier, agrees with Hydra
    assert cfg.dataset.name == dataset_of(group, option)
    assert (cfg.model.name == "keras") == trains_keras(group, option)


# --------------------------------------------------------------------------------------------------
# A tiny run of every option completes


def option_params():
    """Every (group, option).  Those on CIFAR-10 are marked slow: the first one of a session reads the files
    and fits the PCA into the session's cache (~10 s on an idle 2-core machine, 30-40 s under load); MNIST's
    first run costs ~3 s more than a synthetic one, and later runs on either reuse the cache (~2 s)."""
    params = []
    for group, option in all_options():
        slow = dataset_of(group, option) == "cifar10" or (group, option) in SLOW
        marks = [pytest.mark.slow] if slow else []
        params.append(pytest.param(group, option, marks=marks + pending(group, option), id=f"{group}={option}"))
    return params


@pytest.mark.parametrize(("group", "option"), option_params())
@pytest.mark.filterwarnings("ignore:algo.b=1. clamped:UserWarning")  # degree-1 workers of the 4-worker graph
def test_tiny_run_of_every_option_completes(group, option, tmp_path, data_cache):
    overrides = tiny_overrides(group, option)  # run_config validates them first
    summary = run_config(overrides, tmp_path)
    assert_completed(summary, tmp_path)
    iterations = [int(o.split("=")[1]) for o in overrides if o.startswith("iterations=")][-1]
    assert summary["iterations"] == iterations
    if group == "dataset":
        assert summary["dataset"] == option


@pytest.mark.parametrize(
    "override",
    [f"protocol.sync={v}" for v in SYNC_MODES]
    + [f"algo.update={v}" for v in UPDATE_ORDERS]
    + [f"algo.mixing={v}" for v in MIXING_RULES]
    + [f"dataset.split={v}" for v in SPLITS],
)
def test_tiny_run_of_every_mode_completes(override, tmp_path):
    assert_completed(run_config(TINY + [override], tmp_path), tmp_path)


# --------------------------------------------------------------------------------------------------
# Typed conversion


@pytest.mark.unit
def test_unknown_key_is_rejected_with_the_valid_keys():
    _, plain = compose(TINY)
    with pytest.raises(ConfigError) as error:
        load({**plain, "foo": 1})
    assert error.value.field == "foo"
    assert "unknown key" in str(error.value)
    for name in ("num_workers", "iterations", "algo", "dataset", "straggler"):
        assert name in str(error.value)


@pytest.mark.unit
def test_unknown_nested_key_is_rejected_with_the_keys_of_its_section():
    _, plain = compose(TINY)
    plain["algo"]["eta"] = 0.5
    with pytest.raises(
        ConfigError,
        match=r"algo\.eta=0\.5 is invalid: unknown key; valid keys here: name, update, mixing, eta0, delta, "
        r"min_neighbors$",  # cb_dybw's keys: those of every algorithm, then its own
    ):
        load(plain)
    _, plain = compose(TINY)
    plain["straggler"]["link"]["mean"] = 1.0
    with pytest.raises(ConfigError, match=r"straggler\.link\.mean=.*valid keys here: dist, shift, scale"):
        load(plain)


@pytest.mark.unit
def test_a_key_missing_from_the_yaml_is_an_error_not_a_default():
    _, plain = compose(TINY)
    del plain["algo"]["eta0"]
    with pytest.raises(ConfigError, match=r"^algo\.eta0 is missing: the config must set eta0$"):
        load(plain)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("override", "field", "expected"),
    [
        ("num_workers=abc", "num_workers", "must be an integer"),
        ("num_workers=2.5", "num_workers", "must be an integer"),
        ("iterations=true", "iterations", "must be an integer"),
        ("algo.eta0=fast", "algo.eta0", "must be a number"),
        ("force=maybe", "force", "must be true or false"),
        ("progress=1", "progress", "must be true or false"),
        ("experiment_name=[a,b]", "experiment_name", "must be a string"),
        ("model=mlp model.hidden=[8,x]", "model.hidden[1]", "must be an integer"),
        ("model=mlp model.hidden=8", "model.hidden", "must be a list"),
        ("straggler.link=3", "straggler.link", "must be a mapping with keys dist, shift, scale"),
        ("target_loss=low", "target_loss", "must be a number"),
    ],
)
def test_wrong_types_are_rejected_with_the_field_name(override, field, expected):
    with pytest.raises(ConfigError) as error:
        compose(TINY + override.split())
    assert error.value.field == field
    assert str(error.value).startswith(f"{field}=")
    assert expected in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.unit
def test_a_removed_group_is_rejected_not_defaulted():
    _, plain = compose(TINY)
    del plain["straggler"]
    with pytest.raises(ConfigError, match=r"straggler=None is invalid: the config group is required"):
        load(plain)


@pytest.mark.unit
def test_conversion_keeps_types():
    cfg, _ = compose(TINY + ["algo.eta0=1", "target_loss=0.5", "model=mlp", "model.hidden=[4,3]"])
    assert isinstance(cfg.algo.eta0, float) and cfg.algo.eta0 == 1.0
    assert cfg.target_loss == 0.5 and cfg.model.hidden == [4, 3]
    assert compose(TINY)[0].target_loss is None


@pytest.mark.unit
def test_schema_keys():
    assert schema_keys("num_workers")[2]
    section, names, is_field = schema_keys("algo.b")  # a key of one algorithm (cb_static) is a schema key
    assert (section, is_field) == ("algo", True)
    assert names[:5] == ["name", "update", "mixing", "eta0", "delta"] and {"b", "min_neighbors"} <= set(names)
    section, names, is_field = schema_keys("straggler.compute.foo")
    assert (section, is_field) == ("straggler.compute", False) and "persistent_ids" in names
    assert schema_keys("runner.ranks")[2] and schema_keys("topology.p")[2] and not schema_keys("topology.q")[2]
    assert schema_keys("foo")[0:3:2] == ("", False)
    assert schema_keys("num_workers.x")[0:3:2] == ("", False)


# --------------------------------------------------------------------------------------------------
# Validation: what a run would only find out later is rejected up front


@pytest.mark.unit
def test_whiten_without_pca_is_rejected_up_front_as_by_load_dataset():
    cfg, _ = compose(TINY + ["dataset.whiten=true", "dataset.pca_dim=0"])
    with pytest.raises(ConfigError) as error:
        validate(cfg)
    assert error.value.field == "dataset.whiten" and "pca_dim" in str(error.value)
    with pytest.raises(ConfigError) as later:
        load_dataset(cfg.dataset, cfg.num_workers, cfg.data_seed)
    assert later.value.field == "dataset.whiten"
    validate(compose(TINY + ["dataset.whiten=true", "dataset.pca_dim=5"])[0])  # with PCA it is fine


@pytest.mark.unit
@pytest.mark.parametrize(
    ("overrides", "field", "expected"),
    [
        (["num_workers=1"], "num_workers", ">= 2"),
        (["data_seed=-1"], "data_seed", ">= 0"),
        (["seed=-3"], "seed", ">= 0"),
        (["target_loss=nan"], "target_loss", "finite"),
        (["experiment_name=''"], "experiment_name", "non-empty"),
        (["experiment_name=../elsewhere"], "experiment_name", "'..' parts"),
        (["experiment_name=/tmp/x"], "experiment_name", "relative"),
        (["topology=ring", "algo=cb_static", "algo.b=2"], "algo.b", "allowed range 0..1"),
        (["topology=ring", "algo.min_neighbors=3"], "algo.min_neighbors", "allowed range 1..2"),
        (["topology.p=0"], "topology.p", "(0, 1]"),
        (["topology.p=1.5"], "topology.p", "(0, 1]"),
        (["topology=custom", "topology.edges=[[0,1],[2,3]]"], "topology.edges", "disconnected"),
        (["straggler.link.scale=-1"], "straggler.link.scale", ">= 0"),
        (["dataset.batch_size=129"], "dataset.batch_size", "128 samples"),
        (["dataset.split=dirichlet", "dataset.batch_size=129"], "dataset.batch_size", "at most 128 samples"),
        (["dataset.pca_dim=21"], "dataset.pca_dim", "[0, 20]"),
        (["dataset.class_sep=inf"], "dataset.class_sep", "finite"),
        (["dataset.dirichlet_alpha=inf"], "dataset.dirichlet_alpha", "finite"),
        (["model.weight_decay=nan"], "model.weight_decay", "finite"),
        (
            ["straggler=persistent", "straggler.compute.persistent_ids=[4]"],
            "straggler.compute.persistent_ids[0]",
            "0..3",
        ),
        (
            ["straggler=persistent", "straggler.compute.persistent_ids=[a]"],
            "straggler.compute.persistent_ids[0]",
            "worker id",
        ),
        (["straggler=trace", "num_workers=20"], "straggler.compute.path", "no row"),
        (["straggler.time_scale=0"], "straggler.time_scale", "> 0"),
        (["straggler.time_scale=-2"], "straggler.time_scale", "> 0"),
        (["runner=mpi", "runner.clock=wall", "runner.ranks=2"], "runner.ranks", "one worker per rank"),
        (["runner=mpi", "runner.poll_s=0"], "runner.poll_s", "> 0"),
    ],
)
def test_bad_values_are_rejected_before_any_data_is_loaded(overrides, field, expected):
    with pytest.raises(ConfigError) as error:  # by the typed conversion, or by the checks across fields
        validate(compose(TINY + overrides)[0])
    assert error.value.field == field
    assert expected in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.unit
def test_the_wall_clock_needs_as_many_ranks_as_workers_in_the_world_it_is_started_in(monkeypatch):
    """``mpiexec -n 3 python run.py runner.clock=wall num_workers=4``: one line, before anything starts."""
    monkeypatch.setenv("PMI_SIZE", "3")
    with pytest.raises(ConfigError) as error:
        validate(compose(TINY + ["runner=mpi", "runner.clock=wall"])[0])
    assert error.value.field == "num_workers" and "3 ranks" in str(error.value) and "\n" not in str(error.value)
    monkeypatch.setenv("PMI_SIZE", "4")
    validate(compose(TINY + ["runner=mpi", "runner.clock=wall"])[0])


@pytest.mark.unit
@pytest.mark.parametrize("agreement", ["instant", "allreduce", "flood"])
@pytest.mark.parametrize("algo", ["cb_full", "cb_static", "cb_dybw", "cb_timeout", "cb_adaptive", "isolated"])
def test_the_wall_clock_takes_every_policy_and_agreement(algo, agreement):
    overrides = [
        "runner=mpi",
        "runner.clock=wall",
        "topology=complete",
        f"algo={algo}",
        f"protocol.agreement={agreement}",
    ]
    validate(compose(TINY + overrides)[0])


@pytest.mark.unit
def test_more_ranks_times_threads_than_cores_is_one_warning_line(caplog, monkeypatch):
    from dybw.mpi import launch

    monkeypatch.setattr("dybw.tf_setup.usable_cores", lambda: 2)
    cfg, _ = compose(TINY + ["runner=mpi", "runner.clock=wall", "num_workers=16", "runner.threads=2"])
    with caplog.at_level("WARNING", logger="dybw"):
        assert launch.warn_if_oversubscribed(cfg)
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert "16 ranks x 2" in message and "= 32 > 2 usable cores" in message and "\n" not in message
    caplog.clear()
    cfg, _ = compose(TINY + ["runner=mpi", "runner.ranks=2"])
    with caplog.at_level("WARNING", logger="dybw"):
        assert not launch.warn_if_oversubscribed(cfg)
    assert not caplog.records


@pytest.mark.unit
def test_a_b_some_workers_cannot_honour_is_clamped_not_rejected():
    cfg, _ = compose(
        TINY + ["topology=custom", "topology.edges=[[0,1],[1,2],[2,3],[1,3]]", "algo=cb_static", "algo.b=2"]
    )  # degrees 1, 3, 2, 2: only worker 1 can drop two neighbours
    with pytest.warns(UserWarning, match="clamped"):
        validate(cfg)


@pytest.mark.unit
def test_validation_does_not_touch_the_dataset_files(monkeypatch, tmp_path):
    monkeypatch.setenv("DYBW_DATA_DIR", str(tmp_path / "nothing-here"))
    for name in ("mnist", "cifar10"):
        validate(compose([f"dataset={name}"])[0])
    assert not (tmp_path / "nothing-here").exists()


@pytest.mark.unit
def test_the_config_hash_names_the_numbers_not_how_they_are_executed():
    """runner=local and runner=mpi (any ranks, chunk, launcher) compute the same bits: same hash, so a job
    completed or checkpointed by one backend is the other's.  Threads and the clock change the numbers."""
    from dybw.results import config_hash

    def digest(overrides):
        return config_hash(compose(overrides)[1])

    local = digest(["runner=local"])
    assert digest(["runner=mpi"]) == local
    assert digest(["runner=mpi", "runner.ranks=3", "runner.chunk=8", "runner.timeout_s=5"]) == local
    assert digest(["runner=local", "runner.threads=2"]) != local
    assert digest(["runner=mpi", "runner.clock=wall", "num_workers=4"]) != digest(["runner=local", "num_workers=4"])


@pytest.mark.unit
def test_a_slow_node_pauses_every_rank_after_each_iteration_from_its_start(monkeypatch):
    """``runner.fault=slow``: the Slurm tests' jobs last minutes on little CPU.  Every rank sleeps (a rank
    that waited for a sleeping one would spin in MPI), whatever ``fault_rank`` says, from ``fault_iteration``."""
    import time

    from dybw.mpi import world

    cfg, _ = compose(TINY + ["runner=mpi", "runner.ranks=1", "runner.fault=slow", "runner.fault_iteration=3"])
    validate(cfg)  # fault_rank's default (1) is no rank of a 1-rank job: it does not matter for a slow node
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)
    for rank in (0, 5):
        for iteration in range(1, 6):
            world._maybe_inject_fault(cfg, rank, iteration)
    assert slept == [cfg.runner.fault_pause_s] * 6 and cfg.runner.fault_pause_s == 0.02
