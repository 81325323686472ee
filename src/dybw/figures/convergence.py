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
from .frames import SPLIT_WORDS
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


def _overlap(frame: pd.DataFrame, iterations: int) -> dict[str, str]:
    """Whether the algorithms that average (all but workers that send nothing) lie on one curve against
    iterations after the first 10 %: their largest gap in mean test accuracy (points) and in mean training loss
    (relative), and the seeds' largest spread -- the numbers the panels and the caption state when the lines
    hide each other and their bands. Empty when they do not overlap (accuracy gap of 1 point or more)."""
    from ..algorithms import ALGORITHMS

    start = int(0.1 * iterations)
    sends = np.array([ALGORITHMS[a].sends for a in frame["algo"]], dtype=bool)
    averaging = frame[sends & (frame["iteration"] >= start).to_numpy()]
    labels = style.ordered(averaging["label"])
    if len(labels) < 2:
        return {}
    accuracy = averaging.groupby(["label", "iteration"])["test_accuracy"].mean().unstack("label").dropna()
    loss = averaging.dropna(subset=["train_loss"]).groupby(["label", "iteration"])["train_loss"].mean()
    loss = loss.unstack("label").dropna()
    gap = float((accuracy.max(axis=1) - accuracy.min(axis=1)).max()) if len(accuracy) else math.nan
    loss_gap = float((loss.max(axis=1) / loss.min(axis=1) - 1).max()) if len(loss) else math.nan
    spread = float(averaging.groupby(["label", "iteration"])["test_accuracy"].std().max())
    if not math.isfinite(gap) or gap >= 0.01:
        return {}
    names = ", ".join(labels[:-1]) + " and " + labels[-1]
    spread_text = f"; seeds' spread (1 std) at most {100 * spread:.2f} points" if math.isfinite(spread) else ""
    return {
        "loss_note": f"{names}\nlie on one line: losses within {100 * loss_gap:.1f} %\nafter iteration {start}",
        "accuracy_note": f"{names}\nlie on one line: accuracies within {100 * gap:.2f} points\n"
        f"after iteration {start}{spread_text.replace('; ', chr(10))}",
        "caption": f" Against iterations {names} lie on top of each other, bands included: after the first {start} "
        f"iterations their mean test accuracies differ by at most {100 * gap:.2f} points and their training losses "
        f"by at most {100 * loss_gap:.1f} %{spread_text}.",
    }


def _cuts_text(summary: pd.DataFrame, splits: list[str]) -> str:
    cuts = [(split, analysis.reduction(summary, analysis.DYBW, split=split)) for split in splits]
    return ", ".join(f"{analysis.fmt_pm(cut, 1, 100, ' %')} ({SPLIT_WORDS.get(split, split)})" for split, cut in cuts)


def _note(ax, text: str) -> None:
    """``text`` boxed in the corner of the panel that its curves leave emptiest (drawn last: it reads them)."""
    drawn = [line.get_xydata() for line in ax.lines]
    drawn += [path.vertices for band in ax.collections for path in band.get_paths()]  # the bands too
    to_axes = ax.transAxes.inverted()
    points = np.concatenate([to_axes.transform(ax.transData.transform(xy)) for xy in drawn] or [np.empty((0, 2))])
    corners = {(0.97, 0.95): "right top", (0.97, 0.05): "right bottom", (0.03, 0.05): "left bottom",
               (0.03, 0.95): "left top"}  # fmt: skip

    def crowding(corner) -> int:  # curve points inside a box of half the width and a third of the height
        x, y = corner
        inside_x = (points[:, 0] >= 0.5) if x > 0.5 else (points[:, 0] <= 0.5)
        inside_y = (points[:, 1] >= 0.62) if y > 0.5 else (points[:, 1] <= 0.38)
        return int((inside_x & inside_y).sum())

    (x, y), where = min(corners.items(), key=lambda item: crowding(item[0]))
    ha, va = where.split()
    ax.text(x, y, text, transform=ax.transAxes, ha=ha, va=va, fontsize=8, color="0.25",
            bbox={"facecolor": "white", "edgecolor": "0.8", "alpha": 0.9})  # fmt: skip


@figure("convergence")
def convergence(ctx: Context) -> Drawn:
    jobs = ctx.completed_jobs(ctx.select(spec=ctx.spec.name, kind="train"))
    frame = ctx.metrics(jobs)
    fig, axes = style.figure(2, 2, width=5.2, height=3.4)
    if frame.empty:
        return no_runs(ctx, fig, axes)
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
    overlap = _overlap(frame, plain["iterations"])
    if overlap:
        _note(axes[0, 0], overlap["loss_note"])
        _note(axes[1, 0], overlap["accuracy_note"])
    caption = (
        f"Lines: mean over {seeds}; bands: +-1 standard deviation across seeds.{overlap.get('caption', '')} "
        f"The average model "
        f"{style.describe_evaluation(plain)}. Setup: "
        f"{style.describe_clock(plain, topology)}; {style.describe_training(plain)}. cb-Static's b is "
        f"clamped per worker to at most d_j-1. Every algorithm sees the same delays and minibatches per seed. "
        f"Source: training runs (local backend, virtual clock), {source_of(ctx, jobs)}."
    )
    return ctx.finish(fig, caption)


@figure("convergence_sweeps")
def convergence_sweeps(ctx: Context) -> Drawn:
    """Convergence side by side, one column per sweep (e.g. one dataset and model each): training loss and
    test accuracy against iterations, test accuracy against virtual time, every algorithm of the sweep."""
    jobs = ctx.completed_jobs(ctx.select(spec=ctx.spec.name, kind="train"))
    frame = ctx.metrics(jobs)
    sweeps = list(dict.fromkeys(j.params["sweep"] for j in ctx.select(spec=ctx.spec.name, kind="train")))
    fig, axes = style.figure(max(1, len(sweeps)), 3, width=4.6, height=3.0)
    if frame.empty:
        return no_runs(ctx, fig, axes)
    labels = style.ordered(frame["label"])
    colors = style.palette(labels)
    handles, setups, overlaps = {}, [], []
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
            overlap = _overlap(rows, plain["iterations"])
            if overlap:
                _note(axes[0, col], overlap["loss_note"])
                _note(axes[1, col], overlap["accuracy_note"])
                overlaps.append(f" {sweep}: against" + overlap["caption"].removeprefix(" Against"))
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
        f" (bands: +-1 standard deviation when there are several); dotted: the target accuracy."
        f"{''.join(overlaps)} Clock: "
        f"{style.describe_clock(plain, topology)}. Every algorithm sees the same delays and minibatches per seed. "
        f"Source: training runs (virtual clock), {source_of(ctx, jobs)}."
    )
    return ctx.finish(fig, caption)


def _group_names(frame: pd.DataFrame, specs: list[str]) -> dict[str, str]:
    """Display name of each spec's runs: its dataset, plus the spec when two specs share a dataset."""
    names = {s: dataset_name(frame[frame["spec"] == s]["dataset"].iloc[0]) for s in specs}
    return {s: (n if list(names.values()).count(n) == 1 else f"{n}\n({s})") for s, n in names.items()}


@figure("noniid")
def noniid(ctx: Context) -> Drawn:
    jobs = ctx.completed_jobs(ctx.select(kind="train"))
    frame = ctx.metrics(jobs)
    fig, axes = style.figure(3, 1, width=4.6, height=3.6)
    if frame.empty:
        return no_runs(ctx, fig, axes)
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
    for s, split in enumerate(splits):
        present = [label for label in labels if ((summary["label"] == label) & (summary["split"] == split)).any()]
        for i, label in enumerate(present):
            rows = summary[(summary["label"] == label) & (summary["split"] == split)]
            x = s + (i - (len(present) - 1) / 2) * 0.8 / max(len(present), 2)
            style.dot_interval(ax, x, rows["final_test_accuracy"], colors[label], horizontal=False)
    ax.set_xticks(range(len(splits)), [SPLIT_WORDS.get(s, s) for s in splits])
    ax.set_xlim(-0.5, len(splits) - 0.5)
    ax.set_xlabel("split of the training set")
    ax.set_ylabel("final test accuracy")
    ax.set_title("final accuracy per split")
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
        f"{plain['target_accuracy']:g}. (c) Final test accuracy: small dots are single runs, large dots and "
        f"whiskers the mean +- std. The split does not change the clock (delays never depend on the data), so "
        f"cb-DyBW's paired cut of the mean iteration duration against cb-Full is the same on every split: "
        f"{_cuts_text(summary, splits)}. Setup: {style.describe_clock(plain, topology)}; "
        f"{style.describe_training(plain).replace('i.i.d. split', 'split as shown')}. "
        f"Source: training runs, {source_of(ctx, jobs)}."
    )
    return ctx.finish(fig, caption)
