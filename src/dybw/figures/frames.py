"""The data frames that a figure and REPRODUCTION.md both read: each is computed here, once, so that the
drawing modules and the claims and sections import it from one place, never from each other."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from . import analysis, load, rules
from .analysis import BARRIER_FREE, DYBW, REFERENCE
from .scaffold import Context, dataset_name
from .specs import Job


# --- the convergence specs, one task per dataset --------------------------------------------------------
def spec_summaries(ctx: Context, spec: str, **params) -> pd.DataFrame:
    """The summaries of one spec's completed runs (``params``: of its jobs with those parameters only)."""
    return ctx.summaries(ctx.select(spec=spec, **params))


CONVERGENCE = ("convergence_mnist", "convergence_cifar10")


def per_dataset(ctx: Context, with_shards: bool = False) -> list[tuple[str, pd.DataFrame]]:
    """``(name, summaries)`` of each convergence spec (one per dataset; named by spec when datasets repeat),
    then, with ``with_shards``, the label-shards runs of ``noniid`` (a task isolated workers cannot learn)."""
    groups = [(spec, spec_summaries(ctx, spec)) for spec in CONVERGENCE]
    missing = [spec for spec, frame in groups if frame.empty]
    if missing:  # a dataset without runs: the claim cannot be checked on every dataset
        ctx.missing = missing
    groups = [(spec, frame) for spec, frame in groups if not frame.empty]
    names = [dataset_name(frame["dataset"].iloc[0]) for _, frame in groups]
    tasks = [
        (name if names.count(name) == 1 else f"{name} ({spec})", frame) for name, (spec, frame) in zip(names, groups)
    ]
    if with_shards:
        shards = ctx.summaries(ctx.select(spec="noniid"))
        shards = shards[shards["split"] != "iid"] if not shards.empty else shards
        if not shards.empty:
            tasks.append((f"{dataset_name(shards['dataset'].iloc[0])}, {shards['split'].iloc[0]}", shards))
    return tasks


# --- durations: the ways of ending an iteration --------------------------------------------------------
SETTING_ORDER = ["lock-step, instant", "lock-step, allreduce", "lock-step, flood", "free"]


def settings_in(frame: pd.DataFrame) -> list[str]:
    present = list(dict.fromkeys(frame["setting"]))
    return [s for s in SETTING_ORDER if s in present] + [s for s in present if s not in SETTING_ORDER]


# --- agreement: the cut against the control-message delay ----------------------------------------------
def agreement_frame(ctx: Context, jobs) -> pd.DataFrame:
    """Per agreement and control delay: cb-DyBW's paired cut against cb-Full of the same agreement, and
    against the barrier-free cb-Full (columns ``agreement``, ``control_delay``, ``versus``, ``cut``)."""
    frame = ctx.summaries(jobs)
    if frame.empty:
        return frame
    rows = []
    lock = frame[frame["sync"] == "lockstep"]
    free = frame[(frame["setting"] == BARRIER_FREE) & (frame["label"] == REFERENCE)]
    for (agreement, delay), group in lock.groupby(["agreement", "control_delay"]):
        dybw = group[group["label"] == DYBW][["seed", "mean_iteration_duration"]]
        for versus, ref in (("same agreement", group[group["label"] == REFERENCE]), ("no barrier", free)):
            both = dybw.merge(ref[["seed", "mean_iteration_duration"]], on="seed", suffixes=("", "_ref"))
            for _, row in both.iterrows():
                rows.append(
                    {
                        "agreement": agreement,
                        "control_delay": delay,
                        "versus": versus,
                        "seed": row["seed"],
                        "cut": 1 - row["mean_iteration_duration"] / row["mean_iteration_duration_ref"],
                    }
                )
    return pd.DataFrame(rows)


def break_even(cuts: pd.DataFrame, agreement: str, versus: str, level: float = rules.C2.reproduced) -> float:
    """The control delay (s) at which the mean cut falls below ``level`` (default: C2's threshold; nan: never;
    -inf: from the start)."""
    rows = cuts[(cuts["agreement"] == agreement) & (cuts["versus"] == versus)]
    means = rows.groupby("control_delay")["cut"].mean().sort_index()
    return analysis.crossing_below(means.index, means.to_numpy(), level) if len(means) else math.nan


def describe_break_even(value: float) -> str:
    """:func:`break_even`'s delay in words (at C2's threshold)."""
    level = rules.percent(rules.C2.reproduced)
    if math.isnan(value):
        return f"never falls below {level} in the range swept"
    if value == -math.inf:
        return f"is below {level} even with free control messages"
    return f"falls below {level} at a control delay of {1000 * value:.1f} ms"


# --- ratio: the cut against the delay mix --------------------------------------------------------------
def delay_ratio(plain: dict) -> float:
    """A job's mean link delay over its mean compute time (the x axis of ``ratio``)."""
    from ..distributions import delay_spec

    return delay_spec(plain["straggler"]["link"]).mean / delay_spec(plain["straggler"]["compute"]).mean


def paper_ratio(ctx: Context) -> float | None:
    """The mean link / mean compute delay of the ``paper`` straggler preset, as composed (its defaults too)."""
    from ..cli import compose_job

    try:
        return delay_ratio(compose_job(ctx.conf_dir, ["straggler=paper"]))
    except Exception:  # noqa: BLE001 - a caption detail: missing, it reads "n/a" rather than failing the figure
        return None


def ratio_frame(ctx: Context, jobs: list[Job]) -> pd.DataFrame:
    """Paired reductions of the clock sweep, with the delay ratio of each job (``ratio`` column)."""
    frame = ctx.summaries(jobs)
    if frame.empty:
        return frame
    by_job = {str(j.relative_dir): j for j in jobs}
    frame["ratio"] = [delay_ratio(by_job[j].plain) for j in frame["job"]]
    red = analysis.paired(frame, "mean_iteration_duration", keys=("ratio", "seed"))
    red["reduction"] = 1 - red["mean_iteration_duration"] / red["ref"]
    return red


def ratio_crossing(red: pd.DataFrame, label: str, level: float) -> float:
    """The smallest swept ratio from which ``label``'s mean reduction stays >= ``level`` (nan if never)."""
    if red.empty:
        return math.nan
    means = red[red["label"] == label].groupby("ratio")["reduction"].mean().sort_index()
    above = means >= level
    for i, ratio_value in enumerate(means.index):
        if above.iloc[i:].all():
            return float(ratio_value)
    return math.nan


# --- min_neighbors: cb-DyBW's m ------------------------------------------------------------------------
def min_neighbors_frame(ctx: Context) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(clock summaries with an ``m`` column: 0 for cb-Full, training summaries of the first graph with ``m``)."""
    clock = ctx.summaries(ctx.completed_jobs(ctx.select(spec="min_neighbors", kind="clock")))
    # m = 1 and cb-Full are convergence_mnist's runs of the same setting: runs of other specs (other delays,
    # models or tasks, e.g. the CNN presets) have times to target that do not compare with m > 1's
    same_setting = ctx.select(spec="min_neighbors", kind="train") + ctx.select(spec="convergence_mnist", kind="train")
    train = ctx.summaries(ctx.completed_jobs(same_setting))
    for frame in (clock, train):
        if not frame.empty:
            frame["m"] = np.where(frame["algo"] == "cb_dybw", frame["min_neighbors"], np.nan)
    if not train.empty:
        first_graph = train["graph"].min()
        train = train[
            (train["graph"] == first_graph) & (train["split"] == "iid") & train["algo"].isin(["cb_dybw", "cb_full"])
        ]
        train = train[train["dataset"] == train["dataset"].iloc[0]] if not train.empty else train
    return clock, train


# --- wall_vs_virtual: the wall clock against the virtual clock -----------------------------------------
def wall_pairs(ctx: Context) -> list[dict]:
    """Per policy and update order of ``wall_vs_virtual``: the wall run and its virtual twin compared
    (:func:`dybw.compare_clocks.compare`), with ``label``, ``update`` and the two jobs."""
    from ..compare_clocks import compare

    spec = "wall_vs_virtual"
    wall = ctx.completed_jobs(ctx.select(spec=spec, role="wall"))
    virtual = {
        (j.params["variant"], j.params.get("algo.update")): j
        for j in ctx.completed_jobs(ctx.select(spec=spec, role="virtual"))
    }
    pairs = []
    for job in wall:
        key = (job.params["variant"], job.params.get("algo.update"))
        twin = virtual.get(key)
        if twin is None:
            continue
        try:
            result = compare(job.job_dir(ctx.results), twin.job_dir(ctx.results))
        except (OSError, ValueError):
            continue
        result.update(label=load.algo_label(job.plain), update=key[1], wall_job=job, virtual_job=twin)
        pairs.append(result)
    return pairs


def wall_load(pairs: list[dict]) -> list[float]:
    """The machine's mean 1-minute load average during each wall run (sampled every iteration), lowest and
    highest ([] when not recorded)."""
    loads = [p["wall_load_average"] for p in pairs if math.isfinite(p.get("wall_load_average", math.nan))]
    return [min(loads), max(loads)] if loads else []


def wall_load_text(pairs: list[dict]) -> str:
    """The machine's load average while the wall runs ran, in a sentence."""
    loads = wall_load(pairs)
    if not loads:
        return ""
    return f" Mean 1-minute load average of the machine during the wall runs: {loads[0]:.1f}-{loads[1]:.1f}."


# --- baselines: the alternatives to cb-DyBW ------------------------------------------------------------
def method_label(row) -> str:
    """A baseline run's name in the comparison: its algorithm's label and how its iterations end."""
    label = row["label"]
    if row["algo"] in ("cb_full", "cb_dybw"):
        return f"{label} ({'no barrier' if row['sync'] == 'free' else row['agreement']})"
    return label


def baselines_frame(ctx: Context) -> pd.DataFrame:
    """Summaries of the ``baselines`` spec with ``method``, ``preset`` and the best-in-hindsight choices:
    ``chosen`` is False for the static b and timeouts that are not their family's best (lowest mean time
    to target per preset and split; a run that misses the target counts as missing it)."""
    frame = ctx.summaries(ctx.completed_jobs(ctx.select(spec="baselines", kind="train")))
    if frame.empty:
        return frame
    frame["method"] = [method_label(row) for _, row in frame.iterrows()]
    frame["preset"] = [job.plain["straggler"]["name"] for job in _jobs_of(ctx, frame)]
    frame["family"] = frame["algo"].where(frame["algo"].isin(["cb_static", "cb_timeout"]), frame["method"])
    frame["chosen"] = True
    for (preset, split, family), group in frame.groupby(["preset", "split", "family"]):
        if family not in ("cb_static", "cb_timeout"):
            continue
        scores = group.groupby("method")["time_to_target"].agg(lambda t: t.mean() if t.notna().all() else np.inf)
        best = scores.idxmin()
        mask = (frame["preset"] == preset) & (frame["split"] == split) & (frame["family"] == family)
        frame.loc[mask, "chosen"] = frame.loc[mask, "method"] == best
    return frame


def _jobs_of(ctx: Context, frame: pd.DataFrame):
    by_dir = {str(j.relative_dir): j for j in ctx.jobs}
    return [by_dir[job] for job in frame["job"]]


# The delay presets and data splits of the alternatives, in words (panel titles, REPRODUCTION.md).
PRESET_WORDS = {"paper": "the paper's delays", "compute_bound": "compute-bound delays"}
SPLIT_WORDS = {"iid": "i.i.d. split", "shards": "label shards", "dirichlet": "Dirichlet split"}


BASELINE_ORDER = [
    "cb-Full (no barrier)",
    "cb-Full (flood)",
    "cb-Static",
    "cb-Timeout",
    "cb-Adaptive",
    "AD-PSGD",
    "cb-DyBW (flood)",
    "cb-DyBW (instant)",
    "isolated (W = I)",
]


def baseline_order(methods) -> list[str]:
    def rank(method):
        for i, prefix in enumerate(BASELINE_ORDER):
            if method.startswith(prefix):
                return i, method
        return len(BASELINE_ORDER), method

    return sorted(dict.fromkeys(methods), key=rank)
