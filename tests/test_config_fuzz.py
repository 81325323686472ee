"""Property tests of the configuration front door: bad input is one line, before any work starts.

(a) Random **invalid** command lines — out-of-range values, wrong types, unknown group options and keys,
    cross-field errors, bad sweeps, broken override syntax — mixed with valid overrides: every one is
    rejected with exactly one line on stderr that names the field, exit status 2, no traceback and nothing
    started.  Most run in-process through :func:`dybw.cli.prevalidate` (what ``run.py`` calls first; ~0.15 s
    each); a handful go through the real ``python run.py`` subprocess.
(b) Random **valid** tiny synthetic runs (2-6 workers, 1-5 iterations, random topology, straggler model,
    algorithm, update order, mixing rule, sync mode, split, model, chunk size and learning rate): every run
    ends with a valid status and writes ``summary.json``.

Hypothesis is derandomised (the same examples every run: CI never flakes) and writes no example database.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dybw.cli import prevalidate
from dybw.engine import Diverged
from helpers import CONF, run_cli, run_config

FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=15,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --------------------------------------------------------------------------------------------------
# Rendering values as Hydra override text


def text(value) -> str:
    """``value`` as it is written on the command line."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return (
            "nan"
            if math.isnan(value)
            else ("inf" if value == math.inf else "-inf" if value == -math.inf else repr(value))
        )
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(text(v) for v in value) + "]"
    return str(value)


def ov(key: str, value) -> str:
    return f"{key}={text(value)}"


# --------------------------------------------------------------------------------------------------
# Invalid cases: (overrides, fields) — the message must name one of ``fields``

NONFINITE = st.sampled_from([math.nan, math.inf, -math.inf])
POS_INF_NAN = st.sampled_from([math.nan, math.inf])


def below(bound, strict=True):
    """Finite floats < bound (or <= bound)."""
    return st.floats(max_value=bound, exclude_max=strict, allow_nan=False, allow_infinity=False)


def above(bound, strict=True):
    return st.floats(min_value=bound, exclude_min=strict, allow_nan=False, allow_infinity=False)


# (key, strategy of bad values, context that makes the key meaningful)
OUT_OF_RANGE = [
    ("num_workers", st.integers(max_value=1), []),
    ("iterations", st.integers(max_value=0), []),
    ("eval_every", st.integers(max_value=0), []),
    ("evaluation.full_every_evals", st.integers(max_value=0), []),
    ("seed", st.integers(max_value=-1), []),
    ("data_seed", st.integers(max_value=-1), []),
    ("model_seed", st.integers(max_value=-1), []),
    ("target_accuracy", st.one_of(below(0, strict=False), above(1), st.just(math.nan)), []),
    ("target_loss", NONFINITE, []),
    ("algo.eta0", st.one_of(below(0, strict=False), POS_INF_NAN), []),
    ("algo.delta", st.one_of(below(0, strict=False), above(1), POS_INF_NAN), []),
    ("algo.min_neighbors", st.integers(max_value=0), ["algo=cb_dybw"]),
    ("algo.b", st.integers(max_value=-1), ["algo=cb_static"]),
    ("dataset.batch_size", st.integers(max_value=0), []),
    ("dataset.holdout", st.integers(max_value=-1), []),
    ("dataset.holdout", st.integers(min_value=8192), ["dataset=synthetic"]),  # every training sample held out
    ("dataset.shards_per_worker", st.integers(max_value=0), []),
    ("dataset.dirichlet_alpha", st.one_of(below(0, strict=False), POS_INF_NAN), []),
    ("dataset.pca_dim", st.one_of(st.integers(max_value=-1), st.integers(min_value=785)), ["dataset=mnist"]),
    ("dataset.pca_dim", st.one_of(st.integers(max_value=-1), st.integers(min_value=3073)), ["dataset=cifar10"]),
    ("dataset.num_test", st.integers(max_value=0), ["dataset=synthetic"]),
    ("dataset.input_dim", st.integers(max_value=0), ["dataset=synthetic"]),
    ("dataset.num_classes", st.integers(max_value=1), ["dataset=synthetic"]),
    ("dataset.class_sep", st.one_of(below(0), NONFINITE), ["dataset=synthetic"]),
    ("model.weight_decay", st.one_of(below(0), NONFINITE), []),
    ("topology.p", st.one_of(below(0, strict=False), above(1), st.just(math.nan)), ["topology=erdos_renyi"]),
    ("topology.max_tries", st.integers(max_value=0), ["topology=erdos_renyi"]),
    ("topology.seed", st.integers(max_value=-1), ["topology=erdos_renyi"]),
    ("runner.chunk", st.integers(max_value=0), []),
    ("runner.ranks", st.integers(max_value=-1), ["runner=mpi"]),
    ("runner.timeout_s", st.one_of(below(0, strict=False), st.just(math.nan)), ["runner=mpi"]),
    ("runner.startup_timeout_s", st.one_of(below(0, strict=False), st.just(math.nan)), ["runner=mpi"]),
]
for side in ("compute", "link"):
    OUT_OF_RANGE += [
        (f"straggler.{side}.shift", st.one_of(below(0), NONFINITE), ["straggler=shifted_exp"]),
        (f"straggler.{side}.scale", st.one_of(below(0), NONFINITE), ["straggler=shifted_exp"]),
        (f"straggler.{side}.alpha", st.one_of(below(0, strict=False), st.just(math.nan)), ["straggler=pareto"]),
        (f"straggler.{side}.sigma", st.one_of(below(0), st.just(math.nan)), ["straggler=lognormal"]),
        (f"straggler.{side}.slow_prob", st.one_of(below(0), above(1), st.just(math.nan)), ["straggler=mixture"]),
        (f"straggler.{side}.slow_factor", st.one_of(below(0, strict=False), POS_INF_NAN), ["straggler=mixture"]),
    ]
OUT_OF_RANGE += [
    ("straggler.link.persistent_fraction", st.one_of(below(0), above(1), st.just(math.nan)), ["straggler=persistent"]),
    ("straggler.compute.persistent_factor", st.one_of(below(0, strict=False), POS_INF_NAN), ["straggler=persistent"]),
    (
        "straggler.compute.persistent_ids",
        st.lists(st.integers(min_value=16), min_size=1, max_size=3),
        ["straggler=persistent"],
    ),
]


@st.composite
def out_of_range(draw):
    key, values, context = draw(st.sampled_from(OUT_OF_RANGE))
    return context + [ov(key, draw(values))], (key,)


# Types: int, float, bool, str and list fields, each given values of the wrong kind.
INT_FIELDS = [
    "num_workers",
    "iterations",
    "eval_every",
    "evaluation.full_every_evals",
    "seed",
    "algo.min_neighbors",
    "dataset.batch_size",
    "runner.chunk",
    "dataset.pca_dim",
]
FLOAT_FIELDS = ["algo.eta0", "algo.delta", "target_accuracy", "model.weight_decay", "dataset.dirichlet_alpha"]
BOOL_FIELDS = ["force", "progress", "resume", "dataset.whiten", "evaluation.probe_target"]
STR_FIELDS = ["experiment_name", "algo.update", "algo.mixing", "protocol.sync", "dataset.split"]
LIST_FIELDS = ["model.hidden", "logger.tags"]
WORDS = st.from_regex(r"[a-z][a-z_]{1,8}", fullmatch=True).filter(
    lambda w: w not in {"true", "false", "null", "nan", "inf", "yes", "no", "on", "off"}
)


@st.composite
def wrong_type(draw):
    kind = draw(st.sampled_from(["int", "float", "bool", "str", "list"]))
    if kind == "int":
        key = draw(st.sampled_from(INT_FIELDS))
        value = draw(
            st.one_of(
                WORDS,
                st.booleans(),
                st.just(None),
                st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: x != int(x)),
                st.lists(st.integers(0, 9), min_size=1, max_size=3).map(text),
                WORDS.map(lambda w: "{" + w + ":1}"),
                st.integers(0, 99).map(lambda i: f"'{i}'"),
            )
        )
    elif kind == "float":
        key = draw(st.sampled_from(FLOAT_FIELDS))
        value = draw(
            st.one_of(
                WORDS, st.booleans(), st.just(None), st.lists(st.integers(0, 9), min_size=1, max_size=3).map(text)
            )
        )
    elif kind == "bool":
        key = draw(st.sampled_from(BOOL_FIELDS))
        value = draw(
            st.one_of(
                WORDS,
                st.integers(-5, 5),
                st.floats(allow_nan=False),
                st.just(None),
                st.lists(st.booleans(), min_size=1, max_size=2).map(text),
            )
        )
    elif kind == "str":
        key = draw(st.sampled_from(STR_FIELDS))
        value = draw(
            st.one_of(
                st.integers(),
                st.booleans(),
                st.floats(allow_nan=False),
                st.just(None),
                st.lists(WORDS, min_size=1, max_size=2).map(text),
            )
        )
    else:
        key = draw(st.sampled_from(LIST_FIELDS))
        value = draw(st.one_of(st.integers(), st.booleans(), WORDS))
    context = ["model=mlp"] if key == "model.hidden" else ["dataset=mnist"] if key == "dataset.whiten" else []
    return context + [ov(key, value) if not isinstance(value, str) else f"{key}={value}"], (key,)


GROUP_OPTIONS = {
    group: sorted(p.stem for p in (CONF / group).glob("*.yaml"))
    for group in ("algo", "dataset", "model", "topology", "straggler", "runner", "logger", "experiment")
}
CHOICE_FIELDS = {
    "algo.name": [],
    "algo.update": [],
    "algo.mixing": [],
    "protocol.sync": [],
    "dataset.split": [],
    "dataset.normalize": [],
    "model.name": [],
    "topology.name": [],
    "straggler.compute.dist": [],
    "straggler.link.dist": [],
    "runner.clock": ["runner=mpi"],
    "runner.fault": ["runner=mpi"],
    "logger.mode": ["logger=wandb"],
}
KNOWN_CHOICES = {
    "cb_dybw",
    "cb_full",
    "cb_static",
    "atc",
    "cta",
    "uniform",
    "metropolis",
    "lockstep",
    "free",
    "iid",
    "shards",
    "dirichlet",
    "standard",
    "scale",
    "none",
    "logreg",
    "mlp",
    "constant",
    "shifted_exp",
    "pareto",
    "lognormal",
    "trace",
    "virtual",
    "wall",
    "raise",
    "hang",
    "exit",
    "auto",
    "online",
    "offline",
    "disabled",
    "complete",
    "custom",
    "erdos_renyi",
    "exponential",
    "random_regular",
    "ring",
    "torus",
}


@st.composite
def unknown_option(draw):
    if draw(st.booleans()):
        group = draw(st.sampled_from(sorted(GROUP_OPTIONS)))
        name = draw(WORDS.filter(lambda w: w not in GROUP_OPTIONS[group]))
        return [f"{group}={name}"], (group,)
    key = draw(st.sampled_from(sorted(CHOICE_FIELDS)))
    name = draw(WORDS.filter(lambda w: w not in KNOWN_CHOICES))
    return CHOICE_FIELDS[key] + [f"{key}={name}"], (key if not key.startswith("topology") else "topology",)


SECTIONS = {
    "": [
        "num_workers",
        "iterations",
        "eval_every",
        "seed",
        "data_seed",
        "model_seed",
        "target_accuracy",
        "target_loss",
        "data_dir",
        "experiment_name",
        "force",
        "resume",
        "progress",
        "algo",
        "dataset",
        "model",
        "topology",
        "straggler",
        "protocol",
        "evaluation",
        "runner",
        "logger",
        "hydra",
        "experiment",
    ],
    "algo": ["name", "b", "min_neighbors", "update", "mixing", "eta0", "delta"],
    "dataset": [
        "name",
        "pca_dim",
        "normalize",
        "whiten",
        "split",
        "shards_per_worker",
        "dirichlet_alpha",
        "batch_size",
        "target_accuracy",
        "holdout",
        "num_train",
        "num_test",
        "input_dim",
        "num_classes",
        "class_sep",
    ],
    "model": ["name", "hidden", "weight_decay"],
    "protocol": ["sync"],
    "evaluation": ["full_every_evals", "probe_target"],
    "straggler.link": [
        "dist",
        "shift",
        "scale",
        "alpha",
        "sigma",
        "slow_prob",
        "slow_factor",
        "persistent_ids",
        "persistent_fraction",
        "persistent_factor",
        "path",
    ],
    "runner": [
        "name",
        "chunk",
        "ranks",
        "clock",
        "launcher",
        "timeout_s",
        "startup_timeout_s",
        "fault",
        "fault_rank",
        "fault_iteration",
        "fault_pause_s",
    ],
    "logger": ["name", "mode", "project", "entity", "tags", "dir"],
    "hydra": [
        "run",
        "sweep",
        "job",
        "mode",
        "verbose",
        "output_subdir",
        "runtime",
        "help",
        "hydra_help",
        "callbacks",
        "sweeper",
        "launcher",
        "env",
        "searchpath",
        "overrides",
        "job_logging",
        "hydra_logging",
    ],
}


@st.composite
def unknown_key(draw):
    section = draw(st.sampled_from(sorted(SECTIONS)))
    leaf = draw(WORDS.filter(lambda w: w not in SECTIONS[section]))
    key = f"{section}.{leaf}" if section else leaf
    plus = "+" if section != "hydra" and draw(st.booleans()) else ""
    return [f"{plus}{key}={draw(st.integers(0, 9))}"], (key,)


@st.composite
def cross_field(draw):
    """Values valid alone but not together (graph, shard sizes, runner layout)."""
    case = draw(st.integers(0, 11))
    n = draw(st.integers(3, 12))
    if case == 0:
        return ["algo=cb_static", "topology=ring", ov("algo.b", draw(st.integers(2, 40)))], ("algo.b",)
    if case == 1:
        return [
            "algo=cb_static",
            "topology=complete",
            ov("num_workers", n),
            ov("algo.b", draw(st.integers(n - 1, 3 * n))),
        ], ("algo.b",)
    if case == 2:
        return ["algo=cb_dybw", "topology=ring", ov("algo.min_neighbors", draw(st.integers(3, 40)))], (
            "algo.min_neighbors",
        )
    if case == 3:
        split = draw(st.sampled_from(["iid", "dirichlet"]))
        return [
            "dataset=mnist",
            ov("num_workers", n),
            f"dataset.split={split}",
            ov("dataset.batch_size", draw(st.integers(60000 // n + 1, 10**6))),
        ], ("dataset.batch_size",)
    if case == 4:
        return [
            "dataset=synthetic",
            ov("num_workers", n),
            "dataset.num_train=200",
            ov("dataset.batch_size", draw(st.integers(200 // n + 1, 10**4))),
        ], ("dataset.batch_size",)
    if case == 5:
        dim = draw(st.integers(1, 30))
        return [
            "dataset=synthetic",
            ov("dataset.input_dim", dim),
            ov("dataset.pca_dim", draw(st.integers(dim + 1, dim + 100))),
        ], ("dataset.pca_dim",)
    if case == 6:
        return ["dataset=synthetic", "dataset.whiten=true", "dataset.pca_dim=0"], ("dataset.whiten",)
    if case == 7:  # a custom graph that is disconnected, names an absent worker or has a self-loop
        half = n // 2
        kind = draw(st.sampled_from(["split", "absent", "loop"]))
        edges = [[i, i + 1] for i in range(n - 1) if i + 1 != half]
        if kind == "absent":
            edges = [[i, i + 1] for i in range(n - 1)] + [[0, n + draw(st.integers(0, 5))]]
        elif kind == "loop":
            edges = [[i, i + 1] for i in range(n - 1)] + [[1, 1]]
        return ["topology=custom", ov("num_workers", n), ov("topology.edges", edges)], ("topology.edges",)
    if case == 8:
        rows = draw(st.integers(2, 40).filter(lambda r: n % r != 0))
        return ["topology=torus", ov("num_workers", n), ov("topology.rows", rows)], ("topology.rows",)
    if case == 9:
        d = draw(st.integers(1, 3 * n).filter(lambda d: d >= n or (n * d) % 2 == 1 or (d == 1 and n > 2)))
        return ["topology=random_regular", ov("num_workers", n), ov("topology.d", d)], ("topology.d",)
    if case == 10:
        return ["runner=mpi", ov("num_workers", n), ov("runner.ranks", draw(st.integers(n + 1, 10 * n)))], (
            "runner.ranks",
        )
    return ["dataset=synthetic", ov("num_workers", n), ov("dataset.num_train", draw(st.integers(1, n - 1)))], (
        "dataset.num_train",
    )


@st.composite
def bad_sweep(draw):
    """``-m`` with a sweep the basic sweeper cannot list, or one bad job among good ones."""
    style = draw(st.integers(0, 3))
    multirun = draw(st.sampled_from([["-m"], ["--multirun"], ["hydra.mode=MULTIRUN"]]))
    if style == 0:
        key = draw(st.sampled_from(["seed", "num_workers", "algo.eta0", "iterations"]))
        return multirun + [f"{key}=interval(0,{draw(st.integers(1, 9))})"], (key,)
    if style == 1:  # one bad value hidden in a list of good ones
        overrides, fields = draw(out_of_range())
        key, bad = overrides[-1].split("=", 1)
        good = {"num_workers": "4", "iterations": "3", "eval_every": "2"}.get(key)
        if good is None:
            return multirun + overrides, fields
        return multirun + overrides[:-1] + [f"{key}={good},{bad}"], fields
    if style == 2:
        group = draw(st.sampled_from(["algo", "topology", "straggler"]))
        good = draw(st.sampled_from(GROUP_OPTIONS[group]))
        bad = draw(WORDS.filter(lambda w: w not in GROUP_OPTIONS[group]))
        return multirun + [f"{group}={good},{bad}"], (group,)
    low = draw(st.integers(-5, 0))
    return multirun + [f"iterations=range({low},{low + draw(st.integers(1, 4))})"], ("iterations",)


# Innocent overrides that never make a bad case valid (filtered so they never touch its keys).
CONTEXT = st.lists(
    st.sampled_from(
        [
            "seed=7",
            "data_seed=3",
            "model_seed=5",
            "iterations=4",
            "eval_every=2",
            "experiment_name=fuzz",
            "force=true",
            "progress=false",
            "logger=none",
            "target_loss=0.25",
            "protocol.sync=free",
            "protocol.sync=lockstep",
            "model=logreg",
            "model=mlp",
            "topology=complete",
            "topology=ring",
            "topology=exponential",
            "straggler=none",
            "straggler=pareto",
            "straggler=mixture",
            "dataset=synthetic",
            "algo=cb_full",
            "algo.mixing=metropolis",
            "algo.update=cta",
        ]
    ),
    max_size=4,
    unique=True,
)


def _head(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0].split(".")[0].split("/")[0]


@st.composite
def invalid_command(draw, cases):
    """``(argv, fields)``: innocent context overrides, then one bad case."""
    overrides, fields = draw(cases)
    heads = {_head(o) for o in overrides if not o.startswith("-")} | {f.split(".")[0] for f in fields}
    context = [o for o in draw(CONTEXT) if _head(o) not in heads]
    flags = [o for o in overrides if o.startswith("-")]
    return flags + context + [o for o in overrides if not o.startswith("-")], fields


def rejects(argv: list[str]) -> tuple[int | None, str]:
    """Run ``prevalidate`` as run.py does; ``(exit code, stderr)``."""
    err = io.StringIO()
    code = None
    with contextlib.redirect_stderr(err):
        try:
            prevalidate(argv, CONF)
        except SystemExit as stop:
            code = stop.code
    return code, err.getvalue()


def assert_one_line_naming(argv, fields, code, stderr):
    lines = stderr.strip().splitlines()
    assert code == 2, f"{argv} was accepted (exit {code}); stderr: {stderr!r}"
    assert len(lines) == 1 and lines[0].startswith("error: "), f"{argv}: {stderr!r}"
    assert "Traceback" not in stderr and "HYDRA_FULL_ERROR" not in stderr, f"{argv}: {stderr!r}"
    assert any(field in lines[0] for field in fields), f"{argv}: {lines[0]!r} names none of {fields}"


@FUZZ
@given(invalid_command(out_of_range()))
def test_out_of_range_values_are_one_line_naming_the_field(case):
    argv, fields = case
    assert_one_line_naming(argv, fields, *rejects(argv))


@FUZZ
@given(invalid_command(wrong_type()))
def test_wrong_types_are_one_line_naming_the_field(case):
    argv, fields = case
    assert_one_line_naming(argv, fields, *rejects(argv))


@FUZZ
@given(invalid_command(st.one_of(unknown_option(), unknown_key())))
def test_unknown_options_and_keys_are_one_line_naming_the_field(case):
    argv, fields = case
    assert_one_line_naming(argv, fields, *rejects(argv))


@FUZZ
@given(invalid_command(cross_field()))
def test_cross_field_errors_are_one_line_naming_the_field(case):
    argv, fields = case
    assert_one_line_naming(argv, fields, *rejects(argv))


@FUZZ
@given(invalid_command(bad_sweep()))
def test_bad_sweeps_are_one_line_naming_the_field(case):
    argv, fields = case
    assert_one_line_naming(argv, fields, *rejects(argv))


SYNTAX = st.sampled_from(
    ["[1", "[1,", "[[0,1]", "{a:", "{a:1", "'abc", '"abc', ")", "(", "]", "}", "1)", "=", "${", "[1,2", "choice(1"]
)


@FUZZ
@given(
    st.sampled_from(["num_workers", "seed", "algo.eta0", "model.hidden", "topology.edges", "experiment_name"]),
    SYNTAX,
    st.booleans(),
)
def test_broken_override_syntax_is_one_line_naming_the_field(key, value, multirun):
    argv = (["-m"] if multirun else []) + [f"{key}={value}"]
    assert_one_line_naming(argv, (key,), *rejects(argv))


# Every float field given a value no delay, rate or probability can take.  (The timeouts are left out:
# runner.timeout_s=inf means "wait forever", a choice, not a mistake.)
FLOAT_KEYS = [
    ("target_accuracy", []),
    ("target_loss", []),
    ("algo.eta0", []),
    ("algo.delta", []),
    ("dataset.dirichlet_alpha", []),
    ("dataset.class_sep", ["dataset=synthetic"]),
    ("model.weight_decay", []),
    ("topology.p", ["topology=erdos_renyi"]),
    ("straggler.compute.shift", ["straggler=shifted_exp"]),
    ("straggler.compute.scale", ["straggler=shifted_exp"]),
    ("straggler.compute.sigma", ["straggler=lognormal"]),
    ("straggler.link.sigma", ["straggler=lognormal"]),
    ("straggler.compute.slow_prob", ["straggler=mixture"]),
    ("straggler.compute.slow_factor", ["straggler=mixture"]),
    ("straggler.link.persistent_fraction", ["straggler=persistent"]),
    ("straggler.link.persistent_factor", ["straggler=persistent"]),
]


@pytest.mark.parametrize("value", ["nan", "inf"])
@pytest.mark.parametrize(("key", "context"), FLOAT_KEYS, ids=[k for k, _ in FLOAT_KEYS])
def test_non_finite_numbers_are_rejected(key, context, value):
    argv = context + [f"{key}={value}"]
    assert_one_line_naming(argv, (key,), *rejects(argv))


@settings(derandomize=True, database=None, deadline=None, max_examples=4)
@given(
    invalid_command(
        st.one_of(out_of_range(), wrong_type(), unknown_option(), unknown_key(), cross_field(), bad_sweep())
    )
)
def test_the_real_command_line_rejects_random_invalid_configs(case):
    argv, fields = case
    with tempfile.TemporaryDirectory() as cwd:
        proc = run_cli(argv, cwd=Path(cwd), timeout=120)
        assert proc.returncode == 2, (argv, proc.returncode, proc.stderr)
        assert_one_line_naming(argv, fields, proc.returncode, proc.stderr)
        assert not (Path(cwd) / "results").exists() and not (Path(cwd) / "outputs").exists()


# --------------------------------------------------------------------------------------------------
# Valid tiny runs


@st.composite
def valid_run(draw, algo: str):
    """``(overrides, iterations, eta0)`` of a tiny synthetic run of ``algo``; the options are drawn uniformly
    by a ``random.Random`` seeded from hypothesis and ``algo`` (hypothesis' own choices cluster on edge values,
    and the same draws for every algorithm would test three times the same configs)."""
    rnd = random.Random(f"{algo}-{draw(st.integers(0, 2**32 - 1))}")
    n = rnd.randint(2, 6)
    iterations = rnd.randint(1, 5)
    overrides = [
        "dataset=synthetic",
        "logger=none",
        "progress=false",
        "runner=local",
        ov("num_workers", n),
        ov("iterations", iterations),
        ov("eval_every", rnd.randint(1, 5)),
        ov("seed", rnd.randint(0, 2**40)),
        ov("data_seed", rnd.randint(0, 1000)),
        ov("model_seed", rnd.randint(0, 1000)),
        # light evaluations between full ones, and a target the probes may have to resolve
        ov("evaluation.full_every_evals", rnd.randint(1, 3)),
        ov("evaluation.probe_target", rnd.random() < 0.8),
        ov("target_accuracy", rnd.uniform(0.3, 1.0)),
    ]
    # graph
    topology = rnd.choice(["ring", "complete", "exponential", "erdos_renyi", "random_regular", "torus", "custom"])
    overrides.append(f"topology={topology}")
    if topology == "erdos_renyi":
        overrides += [ov("topology.p", rnd.uniform(0.6, 1.0)), ov("topology.seed", rnd.randint(0, 99))]
    elif topology == "random_regular":
        overrides.append(ov("topology.d", 1 if n == 2 else 2))
    elif topology == "custom":  # a random tree
        overrides.append(ov("topology.edges", [[rnd.randint(0, i - 1), i] for i in range(1, n)]))
    # algorithm (n >= 3: every connected graph has a worker of degree >= 2, so b = 1 and m = 2 are valid)
    overrides.append(f"algo={algo}")
    if algo == "cb_static":
        overrides.append(ov("algo.b", rnd.randint(0, 0 if n == 2 else 1)))
    elif algo == "cb_dybw":
        overrides.append(ov("algo.min_neighbors", rnd.randint(1, 1 if n == 2 else 2)))
    eta0 = 10 ** rnd.uniform(30, 300) if rnd.random() < 0.3 else 10 ** rnd.uniform(-3, 0)
    overrides += [
        f"algo.update={rnd.choice(['atc', 'cta'])}",
        f"algo.mixing={rnd.choice(['uniform', 'metropolis'])}",
        ov("algo.eta0", eta0),
        ov("algo.delta", rnd.uniform(0.5, 1.0)),
        f"protocol.sync={rnd.choice(['lockstep', 'free'])}",
        ov("runner.chunk", rnd.randint(1, 8)),
    ]
    overrides.append(
        "straggler="
        + rnd.choice(
            ["none", "paper", "shifted_exp", "pareto", "lognormal", "uniform", "mixture", "persistent", "trace"]
        )
    )
    # data: every shard holds a batch
    input_dim = rnd.randint(2, 12)
    pca = rnd.randint(0, input_dim)
    overrides += [
        ov("dataset.num_train", rnd.randint(256, 512)),
        ov("dataset.num_test", rnd.randint(8, 64)),
        ov("dataset.input_dim", input_dim),
        ov("dataset.num_classes", rnd.randint(2, 5)),
        ov("dataset.class_sep", rnd.uniform(0.0, 4.0)),
        ov("dataset.pca_dim", pca),
        ov("dataset.whiten", pca > 0 and rnd.random() < 0.5),
        f"dataset.normalize={rnd.choice(['standard', 'scale', 'none'])}",
        f"dataset.split={rnd.choice(['iid', 'shards', 'dirichlet'])}",
        ov("dataset.shards_per_worker", rnd.randint(1, 3)),
        ov("dataset.dirichlet_alpha", rnd.uniform(5.0, 100.0)),
        ov("dataset.batch_size", rnd.randint(1, 4)),
    ]
    model = rnd.choice(["logreg", "mlp"])
    overrides.append(f"model={model}")
    if model == "mlp":
        overrides.append(ov("model.hidden", [rnd.randint(2, 8) for _ in range(rnd.randint(1, 2))]))
    return overrides, iterations, eta0


# A run costs ~2 s: three per algorithm, and no shrinking (a failure is reported with its full config).
@pytest.mark.parametrize("algo", ["cb_full", "cb_static", "cb_dybw"])
@settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=3,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=st.data())
def test_random_valid_tiny_runs_end_with_a_valid_status(algo, data):
    overrides, iterations, eta0 = data.draw(valid_run(algo))
    prevalidate(overrides, CONF)  # accepted by the front door (it would exit otherwise)
    with tempfile.TemporaryDirectory() as tmp:
        job_dir = Path(tmp) / "job"
        try:
            summary = run_config(overrides, job_dir)
        except Diverged as error:  # run_job writes the summary, then re-raises for run.py's exit status
            assert re.search(r"iteration \d+", str(error)) and re.search(r"worker \d+", str(error)), str(error)
            summary = None
        written = json.loads((job_dir / "summary.json").read_text())
        if summary is not None:
            assert json.dumps(written, sort_keys=True) == json.dumps(summary, sort_keys=True)
        assert written["status"] in ("completed", "diverged"), (overrides, written)
        assert (job_dir / "metrics.csv").is_file() and (job_dir / "topology.json").is_file()
        if written["status"] == "completed":
            assert written["iterations"] == iterations, (overrides, written)
            assert (job_dir / "timeline.parquet").is_file()
            assert math.isfinite(written["total_time"]) and written["total_time"] > 0
            if written["iterations_to_target"] is not None and "evaluation.probe_target=true" in overrides:
                assert written["target_resolution"] == 1, (overrides, written)  # the probes resolve it exactly
        else:
            assert eta0 >= 1e30, (overrides, written)  # only a huge step may diverge
            assert re.search(r"iteration \d+", written["message"]) and re.search(r"worker \d+", written["message"])


def test_divergence_found_in_the_parameters_names_the_iteration_and_the_worker(tmp_path):
    """The case the random runs first found: with one iteration the NaN never reaches a loss, only the
    parameters the final evaluation sees (the message named no worker before the fix)."""
    overrides = [
        "dataset=synthetic",
        "model=logreg",
        "logger=none",
        "progress=false",
        "runner=local",
        "num_workers=3",
        "iterations=1",
        "algo=cb_full",
        "algo.eta0=1e40",
        "dataset.num_train=256",
        "dataset.num_test=32",
        "dataset.batch_size=4",
    ]
    with pytest.raises(Diverged, match=r"iteration \d+: worker \d+") as error:
        run_config(overrides, tmp_path / "job")
    written = json.loads((tmp_path / "job" / "summary.json").read_text())
    assert written["status"] == "diverged" and written["message"] == str(error.value)
