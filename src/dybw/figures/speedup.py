"""The ``speedup`` figure (claim C1): iterations and virtual time to target against the number of workers N,
with their log-log slopes (slope -1 is linear speed-up), and the mean iteration duration against N."""

from __future__ import annotations

import numpy as np

from . import analysis, style
from .registry import figure
from .scaffold import Context, Drawn, job_setup, no_runs, source_of


@figure("speedup")
def speedup(ctx: Context) -> Drawn:
    jobs = ctx.completed_jobs(ctx.select(spec=ctx.spec.name, kind="train"))
    frame = ctx.summaries(jobs)
    fig, axes = style.figure(3, 1, width=4.6, height=3.7)
    if frame.empty:
        return no_runs(ctx, fig, axes)
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
    return ctx.finish(fig, caption)
