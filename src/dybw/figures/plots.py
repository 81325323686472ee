"""One drawing function per figure kind (``figure:`` in a spec). Each reads only results files.

Every function takes a :class:`Context` and returns a :class:`Drawn` (name, title, caption, files).
Curves are the mean over seeds with a band of one standard deviation; paired comparisons (same seed =
same delays and minibatches) are computed in :mod:`.analysis`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from . import analysis, load, rules, style
from .frames import delay_ratio, paper_ratio, ratio_crossing, ratio_frame
from .registry import figure
from .scaffold import (
    Context,
    Drawn,
    dataset_name,
    job_setup,
    no_data,
    no_runs,
    source_of,
)


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


# ------------------------------------------------------------------------------------------------------
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


# ------------------------------------------------------------------------------------------------------
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


# ------------------------------------------------------------------------------------------------------
WINDOW_A = 150  # iterations shown in the backups figure's panel (a)


@figure("backups")
def backups(ctx: Context) -> Drawn:
    name, title = ctx.spec.name, ctx.title
    train = ctx.completed_jobs(ctx.select(kind="train"))
    clock = ctx.completed_jobs(ctx.select(spec=ctx.spec.name, kind="clock"))
    fig, axes = style.figure(3, 1, width=4.6, height=3.5)
    if not train and not clock:
        return no_runs(ctx, fig, axes, name, title, source="training + clock")
    labels = style.ordered(load.algo_label(j.plain) for j in train)
    colors = style.palette(labels or [analysis.DYBW])
    # (a) mean over workers of b_j(k), per iteration
    ax = axes[0, 0]
    handles = []
    first_dataset = train[0].plain["dataset"]["name"] if train else None
    for label in [name for name in labels if name != analysis.REFERENCE]:
        mats = [
            load.backups_matrix(tl)
            for j in train
            if load.algo_label(j.plain) == label
            and j.plain["dataset"]["name"] == first_dataset
            and (tl := load.timeline(j, ctx.results)) is not None
        ]
        if not mats:
            continue
        per_iter = np.stack([m.mean(axis=1) for m in mats])[:, :WINDOW_A]
        k = np.arange(per_iter.shape[1])
        mean = per_iter.mean(axis=0)
        (line,) = ax.plot(k, mean, color=colors[label], lw=1.6 if label == analysis.DYBW else 1.2, label=label)
        if len(mats) > 1:
            std = per_iter.std(axis=0, ddof=1)
            ax.fill_between(k, mean - std, mean + std, color=colors[label], alpha=0.18, lw=0)
        handles.append(line)
    if not handles:
        no_data(ax)
    ax.set_xlabel("iteration k")
    ax.set_ylabel("backup workers, mean over workers")
    ax.set_title(f"backups over time ({dataset_name(first_dataset or '')})")
    ax.set_ylim(bottom=0)
    # (b) a few workers of cb-DyBW, seed 0
    ax = axes[0, 1]
    dybw = [
        j for j in train if load.algo_label(j.plain) == analysis.DYBW and j.plain["dataset"]["name"] == first_dataset
    ]
    dybw.sort(key=lambda j: j.plain["seed"])
    shown = 0
    if dybw and (tl := load.timeline(dybw[0], ctx.results)) is not None:
        topo = load.topology(dybw[0], ctx.results)
        degrees = np.asarray(topo["degrees"])
        order = np.argsort(degrees, kind="stable")
        picks = list(dict.fromkeys([int(order[0]), int(order[len(order) // 2]), int(order[-1])]))
        matrix = load.backups_matrix(tl)
        window = min(60, matrix.shape[0])
        for c, worker in enumerate(picks):
            colour = style.EXTRA[c]
            ax.step(
                np.arange(window),
                matrix[:window, worker],
                where="post",
                color=colour,
                lw=1.4,
                label=f"worker {worker} (d={degrees[worker]})",
            )
            ax.axhline(degrees[worker], color=colour, ls=":", lw=1)
            shown += 1
        ax.legend(loc="upper right", fontsize=8, ncol=1)
        ax.set_ylim(-0.3, degrees[picks].max() + 0.8)
    else:
        no_data(ax)
    ax.set_xlabel("iteration k")
    ax.set_ylabel("backup workers b_j(k)")
    ax.set_title("cb-DyBW, individual workers (seed 0)")
    # (c) clock: whose messages are used, with and without slow links
    ax = axes[0, 2]
    variants = list(dict.fromkeys(j.params["variant"] for j in clock))
    usage = analysis.usage_frame(clock, ctx.results, variants[-1]) if clock else pd.DataFrame()
    if not usage.empty:
        senders = ["other messages", "slow workers' messages"]
        sender_colors = {"other messages": "0.6", "slow workers' messages": colors.get(analysis.DYBW, "C3")}
        for v, variant in enumerate(variants):
            for s_i, sender in enumerate(senders):
                stats = analysis.usage_stats(usage, variant, sender)
                x = v + (s_i - 0.5) * 0.38
                ax.bar(
                    x,
                    100 * stats[0],
                    0.36,
                    color=sender_colors[sender],
                    yerr=100 * stats[1] if stats[2] > 1 else None,
                    capsize=2,
                    label=sender if v == 0 else None,
                )
                ax.text(x, 100 * stats[0] + 2, f"{100 * stats[0]:.0f}%", ha="center", va="bottom", fontsize=8)
        slow_ids = usage["slow_ids"].iloc[0]
        names = {variants[0]: "all links alike", variants[-1]: f"links out of\nworkers {slow_ids} slow"}
        ax.set_xticks(range(len(variants)), [names.get(v, v) for v in variants])
        ax.set_ylim(0, 128)
        ax.legend(loc="upper center", fontsize=8, ncol=2, handlelength=1.2, columnspacing=0.8)
    else:
        no_data(ax)
    ax.set_ylabel("messages used by the receiver (%)")
    ax.set_title("cb-DyBW drops slow senders (clock)")
    style.panel_letters(axes)
    if handles:
        style.top_legend(fig, handles, [h.get_label() for h in handles])
    seeds = style.seeds_text({j.plain["seed"] for j in dybw})
    clock_text = ""
    if clock:
        slow_job = [j for j in clock if j.params["variant"] == variants[-1]][0]
        clock_text = (
            f"(c) Virtual clock only, {clock[0].plain['iterations']} iterations x "
            f"{style.seeds_text({j.plain['seed'] for j in clock})}: share of iterations in which a "
            f"neighbour used a message (usage.parquet), averaged over the links out of the slow workers "
            f"and out of the others, without and with slow links "
            f"({style.describe_delay(slow_job.plain['straggler']['link'])}). "
        )
    plain, topology = job_setup(ctx, dybw or train or clock)
    caption = (
        f"(a) Mean over workers of the backup count b_j(k) = d_j - |S_j(k)| per iteration (first "
        f"{min(WINDOW_A, train[0].plain['iterations']) if train else WINDOW_A} iterations), mean over {seeds} "
        f"(band +-1 std), from the training runs' timeline.parquet; cb-Static's count is fixed up to clamping "
        f"and ties. (b) b_j(k) of three workers (lowest, median, highest degree d, dotted) over the first "
        f"iterations. {clock_text}Setup: {style.describe_clock(plain, topology)}. Source: "
        f"{source_of(ctx, dybw + clock)}."
    )
    return Drawn(name, title, caption, style.finish(fig, ctx.out, name, title, caption), source="training + clock")


# ------------------------------------------------------------------------------------------------------
@figure("speedup")
def speedup(ctx: Context) -> Drawn:
    name, title = ctx.spec.name, ctx.title
    jobs = ctx.completed_jobs(ctx.select(spec=ctx.spec.name, kind="train"))
    frame = ctx.summaries(jobs)
    fig, axes = style.figure(3, 1, width=4.6, height=3.7)
    if frame.empty:
        return no_runs(ctx, fig, axes, name, title)
    labels = style.ordered(frame["label"])
    colors = style.palette(labels)
    sweeps = list(dict.fromkeys(frame["sweep"]))
    dashes = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "D"]
    slopes = {v: analysis.slopes(frame, v) for v in ("iterations_to_target", "time_to_target")}
    handles = []
    for col, (value, ylabel, scale) in enumerate(
        [("iterations_to_target", "iterations to target", 1.0), ("time_to_target", "virtual time to target (s)", 1.0)]
    ):
        ax = axes[0, col]
        for s, sweep in enumerate(sweeps):
            for label in labels:
                rows = frame[(frame["sweep"] == sweep) & (frame["label"] == label)]
                if rows.empty:
                    continue
                stats = rows.groupby("num_workers")[value].agg(["mean", "std", "count"]).reset_index()
                slope = slopes[value]
                slope = slope[(slope["sweep"] == sweep) & (slope["label"] == label)]["slope"]
                slope_text = f"{slope.iloc[0]:.2f}" if len(slope) and np.isfinite(slope.iloc[0]) else "n/a"
                line = ax.errorbar(
                    stats["num_workers"],
                    scale * stats["mean"],
                    yerr=scale * stats["std"].fillna(0),
                    color=colors[label],
                    ls=dashes[s % 4],
                    marker=markers[s % 4],
                    ms=5,
                    lw=1.5,
                    capsize=2,
                    label=f"{label}, {sweep}",
                )
                if col == 0:
                    handles.append((line, f"{label}, {sweep} (slope {slope_text})"))
        # linear reference through the smallest N of the first sweep's cb-DyBW (or first) curve
        ref_rows = frame[
            (frame["sweep"] == sweeps[0])
            & (frame["label"] == (analysis.DYBW if analysis.DYBW in labels else labels[0]))
        ]
        ref = ref_rows.groupby("num_workers")[value].mean().dropna()
        if len(ref):
            n = np.array(sorted(frame["num_workers"].unique()), dtype=float)
            (line,) = ax.plot(n, ref.iloc[0] * ref.index[0] / n, color="0.3", ls=(0, (1, 1)), lw=1.2)
            if col == 0:
                handles.append((line, "linear speed-up (slope -1)"))
        ax.set_xscale("log", base=2)
        if (frame[value] > 0).any():
            ax.set_yscale("log")
            style.plain_log_ticks(ax)
        else:
            ax.text(0.5, 0.5, "target not reached", ha="center", va="center", transform=ax.transAxes, color="0.4")
        ax.set_xticks(sorted(frame["num_workers"].unique()), [str(n) for n in sorted(frame["num_workers"].unique())])
        ax.set_xlabel("number of workers N")
        ax.set_ylabel(ylabel + " (log)")
        ax.set_title(ylabel + " vs N")
    ax = axes[0, 2]
    for label in labels:
        rows = frame[(frame["label"] == label) & (frame["sweep"] == sweeps[0])]
        stats = rows.groupby("num_workers")["mean_iteration_duration"].agg(["mean", "std"]).reset_index()
        ax.errorbar(
            stats["num_workers"],
            1000 * stats["mean"],
            yerr=1000 * stats["std"].fillna(0),
            color=colors[label],
            marker="o",
            ms=5,
            lw=1.5,
            capsize=2,
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(frame["num_workers"].unique()), [str(n) for n in sorted(frame["num_workers"].unique())])
    ax.set_xlabel("number of workers N")
    ax.set_ylabel("mean iteration duration (ms)")
    ax.set_title("iteration duration vs N")
    ax.set_ylim(bottom=0)
    style.panel_letters(axes)
    style.top_legend(fig, [h for h, _ in handles], [t for _, t in handles], ncol=min(3, len(handles)))
    plain, topology = job_setup(ctx, jobs)
    reached, total = int(frame["iterations_to_target"].notna().sum()), len(frame)
    rules = "; ".join(
        f"'{s}': step "
        + ", ".join(
            f"{e:g}"
            for e in frame[frame["sweep"] == s].sort_values("num_workers").drop_duplicates("num_workers")["eta0"]
        )
        for s in sweeps
    )
    time_slopes = "; ".join(
        f"{r['label']}, {r['sweep']}: {r['slope']:.2f}"
        for _, r in slopes["time_to_target"].iterrows()
        if np.isfinite(r["slope"])
    )
    caption = (
        f"Iterations and virtual time until the average model's test accuracy first reaches "
        f"{plain['target_accuracy']:g} ({style.describe_resolution(frame.get('target_resolution', []))}), "
        f"mean +- std over "
        f"{style.seeds_text(frame['seed'].unique())}; {reached}/{total} runs reached it. Slopes: least-squares "
        f"log-log slope per seed, averaged (slope -1 = linear speed-up); legend: slopes of (a); slopes of (b): "
        f"{time_slopes or 'n/a'}. Dotted: linear speed-up from the smallest N. Step sizes for N = "
        f"{', '.join(str(n) for n in sorted(frame['num_workers'].unique()))}: {rules}. "
        f"Setup: Erdos-Renyi graphs (p={plain['topology'].get('p')}) of N workers, delays "
        f"'{plain['straggler']['name']}'; {style.describe_training(plain, step=False)}. "
        f"Source: training runs, {source_of(ctx, jobs)}."
    )
    return Drawn(name, title, caption, style.finish(fig, ctx.out, name, title, caption))


# ------------------------------------------------------------------------------------------------------
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


@figure("ratio")
def ratio(ctx: Context) -> Drawn:
    name, title = ctx.spec.name, ctx.title
    jobs = ctx.completed_jobs(ctx.select(spec=ctx.spec.name, kind="clock"))
    frame = ctx.summaries(jobs)
    fig, axes = style.figure(3, 1, width=4.6, height=3.6)
    if frame.empty:
        return no_runs(ctx, fig, axes, name, title, source="clock")
    by_job = {str(j.relative_dir): j for j in jobs}
    frame["ratio"] = [delay_ratio(by_job[j].plain) for j in frame["job"]]
    labels = style.ordered(frame["label"])
    colors = style.palette(labels)
    red = ratio_frame(ctx, jobs)
    ax = axes[0, 0]
    handles = []
    for label in labels:
        if label == analysis.REFERENCE:
            continue
        stats = red[red["label"] == label].groupby("ratio")["reduction"].agg(["mean", "std"]).reset_index()
        line = ax.errorbar(
            stats["ratio"],
            100 * stats["mean"],
            yerr=100 * stats["std"].fillna(0),
            color=colors[label],
            marker="o",
            ms=4,
            lw=1.6,
            capsize=2,
        )
        handles.append((line, label))
    low, high = (100 * cut for cut in rules.PAPER_CUT)
    ax.axhspan(low, high, color="0.5", alpha=0.2, lw=0)
    ax.text(
        0.02,
        (low + high) / 2,
        f"paper: {rules.paper_cut()}",
        va="center",
        fontsize=8,
        color="0.25",
        transform=ax.get_yaxis_transform(),
    )
    ax.set_ylim(min(0, ax.get_ylim()[0]), 100)
    ax.set_xscale("log")
    ax.set_xlabel("mean link delay / mean compute time")
    ax.set_ylabel("reduction of mean iteration duration\nvs cb-Full (%)")
    ax.set_title("iteration-time cut vs delay mix")
    ax = axes[0, 1]
    for label in labels:
        stats = frame[frame["label"] == label].groupby("ratio")["mean_backups"].agg(["mean", "std"]).reset_index()
        line = ax.errorbar(
            stats["ratio"],
            stats["mean"],
            yerr=stats["std"].fillna(0),
            color=colors[label],
            marker="o",
            ms=4,
            lw=1.6,
            capsize=2,
        )
        if label == analysis.REFERENCE:
            handles.insert(0, (line, label))
    ax.set_xscale("log")
    ax.set_xlabel("mean link delay / mean compute time")
    ax.set_ylabel("mean backup workers per worker")
    ax.set_title("backups used vs delay mix")
    ax = axes[0, 2]
    for label in labels:
        stats = (
            frame[frame["label"] == label]
            .groupby("ratio")["mean_iteration_duration"]
            .agg(["mean", "std"])
            .reset_index()
        )
        ax.errorbar(
            stats["ratio"],
            1000 * stats["mean"],
            yerr=1000 * stats["std"].fillna(0),
            color=colors[label],
            marker="o",
            ms=4,
            lw=1.6,
            capsize=2,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    style.plain_log_ticks(ax)
    ax.set_xlabel("mean link delay / mean compute time")
    ax.set_ylabel("mean iteration duration (ms, log)")
    ax.set_title("iteration duration vs delay mix")
    # the 'paper' preset's own ratio (conf/straggler/paper.yaml)
    preset = paper_ratio(ctx)
    if preset is not None:
        for a in axes.flat:
            a.axvline(preset, color="0.3", ls=":", lw=1)
    for a in axes.flat:
        style.plain_log_ticks(a, "x")
    style.panel_letters(axes)
    style.top_legend(fig, [h for h, _ in handles], [t for _, t in handles])
    plain, topology = job_setup(ctx, jobs)
    swept = sorted({delay_ratio(j.plain) for j in jobs})
    scales = sorted({j.plain["straggler"]["link"]["scale"] for j in jobs})
    level = rules.C2.reproduced
    cross = ratio_crossing(red, analysis.DYBW, level)
    crossing = (
        f"; cb-DyBW's cut reaches {rules.percent(level)} from a ratio of {cross:.2g} on"
        if math.isfinite(cross)
        else f"; cb-DyBW's cut stays below {rules.percent(level)} at every ratio swept"
    )
    link = dict(plain["straggler"]["link"])
    setup = style.describe_clock(plain, topology).replace(
        style.describe_delay(link),
        f"{1000 * link['shift']:g} ms + Exp(mean {1000 * scales[0]:g}-{1000 * scales[-1]:g} ms, swept)",
    )
    caption = (
        f"Virtual clock only ({plain['iterations']} iterations per point, no training), mean +- std over "
        f"{style.seeds_text(frame['seed'].unique())}. The link delay's exponential scale is swept with compute fixed, "
        f"giving mean-link/mean-compute ratios {swept[0]:.2g}-{swept[-1]:.2g}"
        + (f"; dotted line: the 'paper' preset ({preset:.2g})" if preset else "")
        + ". (a) Paired reduction "
        f"1 - T_alg/T_cb-Full of the mean iteration duration; grey band: the paper's {rules.paper_cut()} "
        f"claim{crossing}. "
        f"(b) Mean backup count per worker. (c) Mean iteration duration. Setup: {setup}."
    )
    return Drawn(name, title, caption, style.finish(fig, ctx.out, name, title, caption), "clock")


# ------------------------------------------------------------------------------------------------------
@figure("static_b")
def static_b(ctx: Context) -> Drawn:
    name, title = ctx.spec.name, ctx.title
    clock = ctx.completed_jobs(ctx.select(spec=ctx.spec.name, kind="clock"))
    train = ctx.completed_jobs(ctx.select(kind="train"))
    frame = ctx.summaries(clock)
    fig, axes = style.figure(3, 1, width=4.6, height=3.6)
    if not clock and not train:
        return no_runs(ctx, fig, axes, name, title, source="clock + training")
    colors = style.palette(style.ORDER)
    static_color = style.EXTRA[0]
    handles = []
    if not frame.empty:
        static = frame[frame["algo"].isin(["cb_static", "cb_full"])].copy()
        static["b"] = static["b"].fillna(0)
        dybw = frame[frame["algo"] == "cb_dybw"]
        for col, (value, ylabel, scale) in enumerate(
            [
                ("mean_iteration_duration", "mean iteration duration (ms)", 1000),
                ("mean_used", "neighbours used per worker, mean |S_j|", 1),
            ]
        ):
            ax = axes[0, col]
            stats = static.groupby("b")[value].agg(["mean", "std"]).reset_index()
            line = ax.errorbar(
                stats["b"],
                scale * stats["mean"],
                yerr=scale * stats["std"].fillna(0),
                color=static_color,
                marker="o",
                ms=5,
                lw=1.6,
                capsize=2,
            )
            d = analysis.mean_std(dybw[value])
            if d[2]:
                dl = ax.axhline(scale * d[0], color=colors[analysis.DYBW], lw=2)
                if math.isfinite(d[1]):
                    ax.axhspan(
                        scale * (d[0] - d[1]), scale * (d[0] + d[1]), color=colors[analysis.DYBW], alpha=0.15, lw=0
                    )
                if col == 0:
                    handles = [(line, "cb-Static(b), b = 0 is cb-Full"), (dl, "cb-DyBW")]
            ax.set_xlabel("static backup workers b")
            ax.set_ylabel(ylabel)
            ax.set_xticks(sorted(stats["b"].astype(int)))
            ax.set_ylim(bottom=0)
        axes[0, 0].set_title("iteration duration vs b (clock)")
        axes[0, 1].set_title("neighbours used vs b (clock)")
    else:
        no_data(axes[0, 0])
        no_data(axes[0, 1])
    ax = axes[0, 2]
    summary = ctx.summaries(train)
    first = summary["dataset"].iloc[0] if not summary.empty else None
    if not summary.empty:
        summary = summary[summary["dataset"] == first]
        labels = style.ordered(summary["label"])
        for i, label in enumerate(labels):
            stats = analysis.values(summary, "time_to_target", label=label)
            reached, total = analysis.reached(summary, label=label)
            ax.bar(
                i,
                stats[0] if stats[2] else 0,
                0.7,
                color=colors.get(label, static_color),
                yerr=stats[1] if stats[2] > 1 else None,
                capsize=2,
            )
            top = (stats[0] if stats[2] else 0) + (stats[1] if stats[2] > 1 else 0)
            ax.text(i, top, f"{reached}/{total}", ha="center", va="bottom", fontsize=8)
        ticks = [name.replace("cb-Static ", "Static\n").replace("cb-", "") for name in labels]
        ax.set_xticks(range(len(labels)), ticks)
        ax.set_ylabel("virtual time to target (s)")
        ax.set_title(f"time to target, training ({dataset_name(first)})")
        ax.margins(y=0.15)
    else:
        no_data(ax)
    style.panel_letters(axes)
    if handles:
        style.top_legend(fig, [h for h, _ in handles], [t for _, t in handles])
    plain, topology = job_setup(ctx, clock or train)
    target = train[0].plain["target_accuracy"] if train else math.nan
    finding = ""
    if not frame.empty and (frame["algo"] == "cb_dybw").any():
        per_b = static.groupby("b")[["mean_iteration_duration", "mean_used"]].mean()
        d_t, d_u = dybw["mean_iteration_duration"].mean(), dybw["mean_used"].mean()
        as_fast = per_b[per_b["mean_iteration_duration"] <= 1.01 * d_t]
        if len(as_fast):
            b0 = int(as_fast.index.min())
            finding = (
                f" cb-DyBW's iterations ({1000 * d_t:.1f} ms) are as short as cb-Static's from b = {b0} on "
                f"({1000 * per_b.loc[b0, 'mean_iteration_duration']:.1f} ms), yet it uses {d_u:.2f} neighbours per "
                f"worker against {per_b.loc[b0, 'mean_used']:.2f}."
            )
        else:
            finding = (
                f" No static b is as fast as cb-DyBW ({1000 * d_t:.1f} ms; fastest static "
                f"{1000 * per_b['mean_iteration_duration'].min():.1f} ms)."
            )
    caption = (
        f"(a, b) Virtual clock only ({plain['iterations']} iterations, no training), mean +- std over "
        f"{style.seeds_text(frame['seed'].unique()) if not frame.empty else 'no seeds'}: cb-Static for every "
        f"b the graph "
        f"allows (clamped per worker to d_j - b >= 1) against cb-DyBW (line, band +-1 std). A larger b shortens "
        f"iterations but each worker averages fewer neighbours.{finding} (c) Time until the test accuracy "
        f"reaches {target:g} in the training runs (labels: "
        f"runs that reached it). Setup: {style.describe_clock(plain, topology)}. Source: "
        f"{source_of(ctx, clock + train)}."
    )
    return Drawn(name, title, caption, style.finish(fig, ctx.out, name, title, caption), "clock + training")
