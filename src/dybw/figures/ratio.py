"""The ``ratio`` figure: the link delay swept with compute fixed (virtual clock only) -- the paired cut of the
mean iteration duration against cb-Full, the backups used and the iteration duration against the delay mix
(mean link delay / mean compute time), with the 'paper' preset's own ratio marked."""

from __future__ import annotations

import math

from . import analysis, rules, style
from .frames import delay_ratio, paper_ratio, ratio_crossing, ratio_frame
from .registry import figure
from .scaffold import Context, Drawn, job_setup, no_runs


@figure("ratio")
def ratio(ctx: Context) -> Drawn:
    jobs = ctx.completed_jobs(ctx.select(spec=ctx.spec.name, kind="clock"))
    frame = ctx.summaries(jobs)
    fig, axes = style.figure(3, 1, width=4.6, height=3.6)
    if frame.empty:
        return no_runs(ctx, fig, axes, "clock")
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
    return ctx.finish(fig, caption, "clock")
