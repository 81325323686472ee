"""The convergence figures: training loss and test accuracy of the average model against iterations and
virtual time, for every algorithm of a spec (``convergence``), for several sweeps side by side
(``convergence_sweeps``), and on each split of the training set (``noniid``: the accuracy curves per split,
the final accuracy and the paired cut of the mean iteration duration).

Curves are the mean over seeds with a band of one standard deviation; paired comparisons (same seed =
same delays and minibatches) are computed in :mod:`.analysis`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from . import analysis, load, style
from .registry import figure
from .scaffold import Context, Drawn, dataset_name, job_setup, no_data, no_runs, source_of


def _seed_band(frame: pd.DataFrame, x: str, y: str, points: int = 200):
    """Mean and std over seeds of ``y`` against ``x``: on the shared x values (iterations), or, for
    ``x='time'``, interpolated on a grid up to the earliest final time among the seeds."""
    if x == "iteration":
        grouped = frame.groupby("iteration")[y]
        return grouped.mean().index.to_numpy(), grouped.mean().to_numpy(), grouped.std().to_numpy()
    runs = [g.sort_values(x) for _, g in frame.groupby("seed")]
    end = min(r[x].max() for r in runs)
    grid = np.linspace(0.0, end, points)
    stacked = np.stack([np.interp(grid, r[x].to_numpy(), r[y].to_numpy()) for r in runs])
    std = stacked.std(axis=0, ddof=1) if len(runs) > 1 else np.full(points, np.nan)
    return grid, stacked.mean(axis=0), std


def _curves(ax, frame, x, y, labels, colors, dash="-", legend_suffix=""):
    handles = []
    frame = frame[frame[y].notna()]  # the evaluations that compute y (train_loss: the full ones)
    for label in labels:
        rows = frame[frame["label"] == label]
        if rows.empty:
            continue
        xs, mean, std = _seed_band(rows, x, y)
        width = 2.0 if label == analysis.DYBW else 1.5
        (line,) = ax.plot(xs, mean, color=colors[label], lw=width, ls=dash, label=label + legend_suffix)
        if np.isfinite(std).any():
            ax.fill_between(xs, mean - std, mean + std, color=colors[label], alpha=0.18, lw=0)
        handles.append(line)
    return handles


def _accuracy_limits(ax, frame, iterations):
    late = frame[frame["iteration"] >= 0.1 * iterations]["test_accuracy"]
    if len(late):
        ax.set_ylim(max(0.0, late.min() - 0.03), min(1.0, late.max() + 0.015))


@figure("convergence")
def convergence(ctx: Context) -> Drawn:
    jobs = ctx.completed_jobs(ctx.select(spec=ctx.spec.name, kind="train"))
    frame = ctx.metrics(jobs)
    fig, axes = style.figure(2, 2, width=5.2, height=3.4)
    name, title = ctx.spec.name, ctx.title
    if frame.empty:
        return no_runs(ctx, fig, axes, name, title)
    labels = style.ordered(frame["label"])
    colors = style.palette(labels)
    plain, topology = job_setup(ctx, jobs)
    handles = []
    for row, (y, ylabel) in enumerate(
        [("train_loss", "training loss (average model)"), ("test_accuracy", "test accuracy (average model)")]
    ):
        for col, (x, xlabel) in enumerate([("iteration", "iteration k"), ("time", "virtual time (s)")]):
            ax = axes[row, col]
            handles = _curves(ax, frame, x, y, labels, colors)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.set_title(f"{ylabel.split(' (')[0]} vs {'iterations' if x == 'iteration' else 'time'}")
            if y == "train_loss":
                ax.set_yscale("log")
                style.plain_log_ticks(ax)
            else:
                _accuracy_limits(ax, frame, plain["iterations"])
                ax.axhline(plain["target_accuracy"], color="0.3", ls=":", lw=1)
                ax.text(
                    ax.get_xlim()[1],
                    plain["target_accuracy"],
                    f"target {plain['target_accuracy']:g} ",
                    ha="right",
                    va="bottom",
                    fontsize=8,
                    color="0.3",
                )
    style.panel_letters(axes)
    style.top_legend(fig, handles, [h.get_label() for h in handles])
    seeds = style.seeds_text(frame["seed"].unique())
    per_iteration = frame.groupby(["label", "iteration"])["test_accuracy"].mean().unstack("label")
    late = per_iteration[per_iteration.index >= 0.1 * plain["iterations"]]
    gap = float((late.max(axis=1) - late.min(axis=1)).max()) if late.shape[1] > 1 else math.nan
    overlap = (
        f" Against iterations the curves lie on top of each other: after the first "
        f"{int(0.1 * plain['iterations'])} iterations the mean test accuracies of the algorithms differ by at "
        f"most {100 * gap:.2f} points."
        if math.isfinite(gap) and gap < 0.01
        else ""
    )
    caption = (
        f"Lines: mean over {seeds}; bands: +-1 standard deviation across seeds.{overlap} The average model "
        f"{style.describe_evaluation(plain)}. Setup: "
        f"{style.describe_clock(plain, topology)}; {style.describe_training(plain)}. cb-Static's b is "
        f"clamped per worker to at most d_j-1. Every algorithm sees the same delays and minibatches per seed. "
        f"Source: training runs (local backend, virtual clock), {source_of(ctx, jobs)}."
    )
    return Drawn(name, title, caption, style.finish(fig, ctx.out, name, title, caption))


@figure("convergence_sweeps")
def convergence_sweeps(ctx: Context) -> Drawn:
    """Convergence side by side, one column per sweep (e.g. one dataset and model each): training loss and
    test accuracy against iterations, test accuracy against virtual time, every algorithm of the sweep."""
    jobs = ctx.completed_jobs(ctx.select(spec=ctx.spec.name, kind="train"))
    frame = ctx.metrics(jobs)
    sweeps = list(dict.fromkeys(j.params["sweep"] for j in ctx.select(spec=ctx.spec.name, kind="train")))
    fig, axes = style.figure(max(1, len(sweeps)), 3, width=4.6, height=3.0)
    name, title = ctx.spec.name, ctx.title
    if frame.empty:
        return no_runs(ctx, fig, axes, name, title)
    labels = style.ordered(frame["label"])
    colors = style.palette(labels)
    handles, setups = {}, []
    panels = [
        ("iteration", "train_loss", "training loss (average model)"),
        ("iteration", "test_accuracy", "test accuracy (average model)"),
        ("time", "test_accuracy", "test accuracy (average model)"),
    ]
    for col, sweep in enumerate(sweeps):
        rows = frame[frame["sweep"] == sweep]
        own = [j for j in jobs if j.params["sweep"] == sweep]
        for row, (x, y, ylabel) in enumerate(panels):
            ax = axes[row, col]
            if rows.empty:
                no_data(ax)
                ax.set_title(sweep)
                continue
            for handle in _curves(ax, rows, x, y, labels, colors):
                handles[handle.get_label()] = handle
            ax.set_xlabel("iteration k" if x == "iteration" else "virtual time (s)")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{sweep}: {ylabel.split(' (')[0]} vs {'iterations' if x == 'iteration' else 'time'}")
            plain = own[0].plain
            if y == "train_loss":
                ax.set_yscale("log")
                style.plain_log_ticks(ax)
            else:
                _accuracy_limits(ax, rows, plain["iterations"])
                ax.axhline(plain["target_accuracy"], color="0.3", ls=":", lw=1)
        if own and not rows.empty:
            plain = own[0].plain
            # a sweep may give each algorithm its own tuned step (experiments/deep.yaml)
            steps = style.describe_steps({load.algo_label(j.plain): style.step_rule(j.plain["algo"]) for j in own})
            setups.append(
                f"{sweep}: {style.describe_training(plain, step=False)}, {steps}, "
                f"evaluated every {plain['eval_every']} iterations"
            )
    style.panel_letters(axes)
    ordered = [h for label, h in handles.items()]
    style.top_legend(fig, ordered, [h.get_label() for h in ordered])
    plain, topology = job_setup(ctx, jobs)
    caption = (
        f"Columns: {'; '.join(setups)}. Lines: mean over {style.seeds_text(frame['seed'].unique())}"
        f" (bands: +-1 standard deviation when there are several); dotted: the target accuracy. Clock: "
        f"{style.describe_clock(plain, topology)}. Every algorithm sees the same delays and minibatches per seed. "
        f"Source: training runs (virtual clock), {source_of(ctx, jobs)}."
    )
    return Drawn(name, title, caption, style.finish(fig, ctx.out, name, title, caption))


def _group_names(frame: pd.DataFrame, specs: list[str]) -> dict[str, str]:
    """Display name of each spec's runs: its dataset, plus the spec when two specs share a dataset."""
    names = {s: dataset_name(frame[frame["spec"] == s]["dataset"].iloc[0]) for s in specs}
    return {s: (n if list(names.values()).count(n) == 1 else f"{n}\n({s})") for s, n in names.items()}


@figure("noniid")
def noniid(ctx: Context) -> Drawn:
    name, title = ctx.spec.name, ctx.title
    jobs = ctx.completed_jobs(ctx.select(kind="train"))
    frame = ctx.metrics(jobs)
    fig, axes = style.figure(3, 1, width=4.6, height=3.6)
    if frame.empty:
        return no_runs(ctx, fig, axes, name, title)
    labels = style.ordered(frame["label"])
    colors = style.palette(labels)
    splits = list(dict.fromkeys(frame["split"]))
    plain, topology = job_setup(ctx, jobs)
    handles = []
    for col, (x, xlabel) in enumerate([("iteration", "iteration k"), ("time", "virtual time (s)")]):
        ax = axes[0, col]
        for split in splits:
            h = _curves(
                ax,
                frame[frame["split"] == split],
                x,
                "test_accuracy",
                labels,
                colors,
                dash=style.DASHES.get(split, "-"),
            )
            if col == 0:
                handles += [(line, f"{line.get_label()}, {split}") for line in h]
        _accuracy_limits(ax, frame, plain["iterations"])
        ax.axhline(plain["target_accuracy"], color="0.3", ls=":", lw=1)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("test accuracy (average model)")
        ax.set_title(f"test accuracy vs {'iterations' if x == 'iteration' else 'time'}")
    ax = axes[0, 2]
    summary = ctx.summaries(jobs)
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        for s, split in enumerate(splits):
            stats = analysis.values(summary, "final_test_accuracy", label=label, split=split)
            x = s + (i - (len(labels) - 1) / 2) * width
            ax.bar(
                x,
                stats[0],
                width * 0.92,
                color=colors[label],
                yerr=stats[1] if stats[2] > 1 else None,
                capsize=2,
                error_kw={"lw": 0.8},
            )
            if label != analysis.REFERENCE:
                red = analysis.reduction(summary, label, split=split)
                ax.text(
                    x,
                    stats[0] + (stats[1] if stats[2] > 1 else 0) + 0.003,
                    f"T -{100 * red[0]:.0f}%",
                    ha="center",
                    va="bottom",
                    fontsize=8,
                )
    finals = summary["final_test_accuracy"]
    ax.set_ylim(max(0.0, finals.min() - 0.05), min(1.0, finals.max() + 0.015))
    ax.set_xticks(range(len(splits)), splits)
    ax.set_xlabel("split of the training set")
    ax.set_ylabel("final test accuracy")
    ax.set_title("final accuracy; iteration-time cut")
    style.panel_letters(axes)
    style.top_legend(fig, [h for h, _ in handles], [t for _, t in handles], ncol=min(4, len(handles)))
    split_text = {
        "iid": "i.i.d. (uniform random)",
        "shards": f"label-sorted shards, {plain['dataset']['shards_per_worker']} per worker",
        "dirichlet": f"Dirichlet(alpha={plain['dataset']['dirichlet_alpha']}) label proportions",
    }
    caption = (
        "Splits: " + "; ".join(f"{s} = {split_text.get(s, s)}" for s in splits) + ". "
        f"(a, b) Mean over {style.seeds_text(frame['seed'].unique())} (band +-1 std); dotted: target "
        f"{plain['target_accuracy']:g}. (c) Final test accuracy (error bars +-1 std); the label is the paired "
        f"reduction of the mean iteration duration vs cb-Full. Setup: {style.describe_clock(plain, topology)}; "
        f"{style.describe_training(plain).replace('i.i.d. split', 'split as shown')}. "
        f"Source: training runs, {source_of(ctx, jobs)}."
    )
    return Drawn(name, title, caption, style.finish(fig, ctx.out, name, title, caption))
