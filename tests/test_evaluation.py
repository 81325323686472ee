"""Light evaluations and the probes of time to target (dybw.evaluation) against evaluating everything.

The reference is a run of the same job whose every evaluation is full and which probes nothing
(``evaluation.full_every_evals=1 evaluation.probe_target=false``): the evaluation every row had before
light rows existed (a manual check found its metrics.csv equal, bit for bit, to the code before them).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from dybw.errors import ConfigError
from dybw.evaluation import evaluation_kind
from helpers import TINY, compose, run_config
from test_engine import engine_for

EVERYTHING = ["evaluation.full_every_evals=1", "evaluation.probe_target=false"]
# Columns every kind of row computes, and those only a full evaluation computes.
SHARED = ["iteration", "time", "lr", "test_loss", "test_accuracy", "consensus_distance", "mean_iteration_duration"]
FULL_ONLY = ["train_loss", "local_test_accuracy"]
JOB = TINY + ["model=mlp", "model.hidden=[8]", "straggler=shifted_exp", "iterations=30", "eval_every=3"]


def metrics(job_dir) -> pd.DataFrame:
    return pd.read_csv(job_dir / "metrics.csv").drop(columns="wall_seconds")


def summary(job_dir) -> dict:
    return json.loads((job_dir / "summary.json").read_text())


def test_the_cadence_of_full_and_light_evaluations():
    cfg, _ = compose(TINY + ["iterations=25", "eval_every=2", "evaluation.full_every_evals=3"])
    kinds = {k: evaluation_kind(cfg, k) for k in range(26) if evaluation_kind(cfg, k)}
    assert kinds == {
        **dict.fromkeys((2, 4, 8, 10, 14, 16, 20, 22), "light"),
        **dict.fromkeys((0, 6, 12, 18, 24, 25), "full"),  # every 3rd, the first and the last (k = K)
    }


def test_full_evaluations_keep_the_bits_of_evaluating_everything(tmp_path):
    """At a full evaluation every column equals the reference's bits; at a light one the columns it computes
    do, and train_loss and local_test_accuracy are empty."""
    run_config(JOB + ["evaluation.full_every_evals=4", "target_accuracy=0.99"], tmp_path / "new")
    run_config(JOB + EVERYTHING + ["target_accuracy=0.99"], tmp_path / "reference")
    new, reference = metrics(tmp_path / "new"), metrics(tmp_path / "reference")
    assert list(new["iteration"]) == list(reference["iteration"]) == list(range(0, 31, 3))
    assert list(new["evaluation"]) == ["full", "light", "light", "light"] * 2 + ["full", "light", "full"]
    assert set(reference["evaluation"]) == {"full"}
    full, light = new["evaluation"] == "full", new["evaluation"] == "light"
    pd.testing.assert_frame_equal(new[full], reference[full], check_exact=True)
    pd.testing.assert_frame_equal(new.loc[light, SHARED], reference.loc[light, SHARED], check_exact=True)
    assert new.loc[light, FULL_ONLY].isna().all().all() and reference[FULL_ONLY].notna().all().all()
    # the summary reads the same final numbers (the last evaluation is always full)
    for key in ("final_train_loss", "final_test_accuracy", "best_test_accuracy", "mean_iteration_duration"):
        assert summary(tmp_path / "new")[key] == summary(tmp_path / "reference")[key]


def _crossing(every: pd.DataFrame, eval_every: int, column: str, sign: int) -> tuple[int, float]:
    """From a run evaluated at every iteration: the last iteration k between two evaluations at which
    ``column`` beats every earlier value (``sign`` 1: higher is better, -1: lower) and is at least that good
    again at the evaluation after k.  With the target set to its value, k is the first iteration reaching
    the target, and the first evaluation reaching it is the one after k: the probes must find k."""
    values = dict(zip(every["iteration"], sign * every[column]))
    best, found = -math.inf, None
    for k, value in values.items():
        after = min(eval_every * math.ceil(k / eval_every), max(values))
        if value > best and k % eval_every and values[after] >= value:
            found = int(k), float(sign * value)
        best = max(best, value)
    assert found is not None, f"no crossing of {column} between evaluations in this run"
    return found


def test_probes_find_the_first_iteration_reaching_the_target_exactly(tmp_path):
    """Evaluated at every iteration (the reference), the job reaches the target first at iteration k*; with
    evaluations every 5, the probes report k*, its time, and the reference's bits at every probed iteration."""
    job = JOB + ["eval_every=5"]
    run_config(job + EVERYTHING + ["eval_every=1"], tmp_path / "every")
    every = metrics(tmp_path / "every")
    hit, accuracy = _crossing(every, 5, "test_accuracy", 1)
    target = [f"target_accuracy={accuracy!r}"]
    run_config(job + EVERYTHING + ["eval_every=1"] + target, tmp_path / "every_target")
    run_config(job + target, tmp_path / "probed")
    run_config(job + target + ["evaluation.probe_target=false"], tmp_path / "unprobed")
    exact, probed, unprobed = (summary(tmp_path / name) for name in ("every_target", "probed", "unprobed"))
    assert exact["iterations_to_target"] == probed["iterations_to_target"] == hit
    assert exact["time_to_target"] == probed["time_to_target"]
    assert exact["target_resolution"] == probed["target_resolution"] == 1
    # without probes: the evaluation after k*, resolved to eval_every
    assert unprobed["iterations_to_target"] == 5 * math.ceil(hit / 5) and unprobed["target_resolution"] == 5
    assert unprobed["target_probes"] == 0 and unprobed["target_replayed_iterations"] == 0

    rows = metrics(tmp_path / "probed")
    probes = rows[rows["evaluation"] == "probe"]
    first = 5 * (hit // 5) + 1  # the iteration after the last evaluation below the target
    assert list(probes["iteration"]) == list(range(first, hit + 1))
    assert probed["target_probes"] == probed["target_replayed_iterations"] == len(probes)
    assert probed["target_probe_seconds"] > 0 and probed["evaluation_seconds"] > 0
    assert list(rows["iteration"]) == sorted(rows["iteration"])  # probes sit before the evaluation after them
    by_iteration = every.set_index("iteration")
    for column in SHARED[1:] + ["mean_backups"]:
        assert list(probes[column]) == list(by_iteration.loc[probes["iteration"], column]), column
    assert probes[FULL_ONLY].isna().all().all()
    # the scheduled rows are those of the run without probes: replaying changed nothing after it
    scheduled = rows[rows["evaluation"] != "probe"].reset_index(drop=True)
    pd.testing.assert_frame_equal(scheduled, metrics(tmp_path / "unprobed"), check_exact=True)
    # the final and best accuracies are the scheduled evaluations'
    assert probed["best_test_accuracy"] == unprobed["best_test_accuracy"]


def test_a_loss_target_is_judged_on_every_evaluation_and_probe(tmp_path):
    """With target_loss set, light evaluations and probes also sum the training loss (its exact bits)."""
    job = JOB + ["eval_every=5", "target_accuracy=1.0"]
    run_config(job + EVERYTHING + ["eval_every=1"], tmp_path / "every")
    every = metrics(tmp_path / "every")
    hit, loss = _crossing(every, 5, "train_loss", -1)
    run_config(job + [f"target_loss={loss!r}"], tmp_path / "probed")
    rows = metrics(tmp_path / "probed")
    assert rows["train_loss"].notna().all() and (rows["evaluation"] == "probe").any()
    assert summary(tmp_path / "probed")["iterations_to_target"] == hit
    by_iteration = every.set_index("iteration")
    assert list(rows["train_loss"]) == list(by_iteration.loc[rows["iteration"], "train_loss"])


def _same(row: dict, other: dict) -> bool:
    """Equal rows, wall time aside (NaN equals NaN)."""
    keys = set(row) | set(other)
    return all(
        k == "wall_seconds" or row.get(k) == other.get(k) or (row.get(k) != row.get(k) and other.get(k) != other.get(k))
        for k in keys
    )


def test_a_resumed_run_does_not_probe_again(tmp_path):
    """The checkpoint after an evaluation carries whether the target was reached: a run resumed from it ends
    with the rows of the uninterrupted run and probes nothing more."""
    overrides = ["model=mlp", "model.hidden=[8]", "iterations=30", "eval_every=5", "target_accuracy=0.75"]
    *_, engine = engine_for(overrides)
    rows, states = [], []
    engine.run(rows.append, on_checkpoint=states.append)
    probes = [r for r in rows if r["evaluation"] == "probe"]
    assert probes and rows[-1]["iteration"] == 30
    state = next(s for s in states if s["target_reached"] and s["iteration"] < 30)
    *_, resumed_engine = engine_for(overrides)
    resumed = []
    resumed_engine.run(resumed.append, resume_from=state)
    tail = [r for r in rows if r["iteration"] > state["iteration"]]
    assert [r["evaluation"] for r in resumed] == [r["evaluation"] for r in tail]
    assert all(_same(mine, theirs) for mine, theirs in zip(resumed, tail))
    # The replays before the checkpoint are counted once (they are in its measurements), none after.
    assert resumed_engine.cost.target_replayed_iterations == state["measured_target_replayed_iterations"] > 0


def test_the_replay_puts_the_runs_parameters_back():
    """After the probes the run goes on from its own parameters, whatever the probes stopped at."""
    overrides = ["iterations=12", "eval_every=6"]
    *_, probed = engine_for(overrides + ["target_accuracy=0.6"])
    *_, plain = engine_for(overrides + ["target_accuracy=0.6", "evaluation.probe_target=false"])
    rows = []
    probed.run(rows.append)
    plain.run(lambda row: None)
    assert any(r["evaluation"] == "probe" for r in rows)
    np.testing.assert_array_equal(probed.trainer.params.numpy(), plain.trainer.params.numpy())


@pytest.mark.parametrize(
    "model",
    [
        ["model=mlp", "model.hidden=[8]"],
        ["model=keras", "model.factory=keras_factories:small_net", "+model.kwargs.width=8"],
    ],
    ids=["mlp", "keras"],
)
def test_how_often_a_run_is_evaluated_does_not_change_what_it_trains(model):
    """Evaluations split the iterations into different chunks and probe at different places; the parameters
    after the last iteration are the same bits, so runs evaluated at different cadences can be compared (or
    extended) iteration by iteration."""
    overrides = model + ["algo=cb_dybw", "straggler=paper", "iterations=24", "target_accuracy=0.6"]
    params = []
    for every in (2, 5, 24):
        *_, engine = engine_for(overrides + [f"eval_every={every}"])
        engine.run(lambda row: None)
        params.append(engine.trainer.params.numpy())
    for other in params[1:]:
        np.testing.assert_array_equal(other, params[0])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("evaluation.full_every_evals=0", "evaluation.full_every_evals=0 is invalid: must be >= 1"),
        ("evaluation.full_every_evals=two", "evaluation.full_every_evals='two' is invalid: must be an integer"),
        ("evaluation.probe_target=sometimes", "evaluation.probe_target='sometimes' is invalid: must be true or false"),
        ("+evaluation.every=3", "evaluation.every=3 is invalid: unknown key; valid keys here: full_every_evals, "),
    ],
)
def test_bad_evaluation_keys_are_one_line(override, message):
    """(tests/test_cli.py checks that run.py prints such a line alone, before anything runs.)"""
    with pytest.raises(ConfigError) as error:
        compose(TINY + [override])
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_the_config_hash_tells_old_results_from_new_ones():
    from dybw.results import config_hash

    _, plain = compose(TINY)
    _, everything = compose(TINY + EVERYTHING)
    without = {k: v for k, v in plain.items() if k != "evaluation"}  # a config from before the key existed
    assert len({config_hash(plain), config_hash(everything), config_hash(without)}) == 3
