"""The ``min_neighbors`` figure: iteration duration and neighbours used (virtual clock) and time to target
(training runs) of cb-DyBW against ``m``, the neighbours a worker needs before it may stop."""

from __future__ import annotations

import math

from matplotlib.lines import Line2D

from . import style
from .analysis import DYBW, REFERENCE
from .frames import min_neighbors_frame
from .registry import figure
from .scaffold import Context, Drawn, job_setup, no_data, no_runs, source_of


@figure("min_neighbors")
def min_neighbors(ctx: Context) -> Drawn:
    clock, train = min_neighbors_frame(ctx)
    fig, axes = style.figure(3, 1, width=4.4, height=3.6)
    if clock.empty and train.empty:
        return no_runs(ctx, fig, axes, "clock + training")
    colors = style.palette([REFERENCE, DYBW])
    panels = [
        ("mean_iteration_duration", "mean iteration duration (ms)", 1000, clock),
        ("mean_used", "neighbours used per worker, mean |S_j|", 1, clock),
        ("time_to_target", "virtual time to target (s)", 1, train),
    ]  # fmt: skip
    for col, (value, ylabel, scale, frame) in enumerate(panels):
        ax = axes[0, col]
        dybw = frame[frame["algo"] == "cb_dybw"] if not frame.empty else frame
        if dybw.empty:
            no_data(ax)
            continue
        stats = dybw.groupby("m")[value].agg(["mean", "std", "count"]).reset_index()
        ax.errorbar(
            stats["m"],
            scale * stats["mean"],
            yerr=scale * stats["std"].fillna(0),
            color=colors[DYBW],
            marker="o",
            ms=5,
            lw=1.8,
            capsize=2,
        )
        full = frame[frame["algo"] == "cb_full"][value]
        if len(full):
            ax.axhline(scale * full.mean(), color=colors[REFERENCE], ls="--", lw=1.4)
        if value == "time_to_target":
            for _, row in stats.iterrows():
                reached = int(dybw[dybw["m"] == row["m"]][value].notna().sum())
                total = int((dybw["m"] == row["m"]).sum())
                note = style.reach_note(reached, total)
                if note:
                    ax.text(row["m"], scale * row["mean"], f" {note}", fontsize=7.5, va="bottom")
        ax.set_xticks(sorted(stats["m"].astype(int)))
        ax.set_xlabel("m: neighbours needed before a worker may stop")
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
    axes[0, 0].set_title("iteration duration vs m (clock)")
    axes[0, 1].set_title("neighbours used vs m (clock)")
    axes[0, 2].set_title("time to target vs m (training)")
    style.panel_letters(axes)
    handles = [Line2D([], [], color=colors[DYBW], marker="o", lw=1.8), Line2D([], [], color=colors[REFERENCE], ls="--")]
    style.top_legend(fig, handles, ["cb-DyBW(m)", "cb-Full"])
    jobs = ctx.completed_jobs(ctx.select(spec="min_neighbors"))
    plain, topology = job_setup(ctx, jobs or ctx.jobs)
    target = train["target_accuracy"].iloc[0] if not train.empty and "target_accuracy" in train else math.nan
    caption = (
        f"cb-DyBW lets a worker stop once it has its own update and m neighbours' (lock-step: once every worker "
        f"could); m = 1 is the reading used everywhere else. (a, b) Virtual clock only, mean +- std over "
        f"{style.seeds_text(clock['seed'].unique()) if not clock.empty else 'no seeds'}; dashed: cb-Full. A larger m "
        f"waits longer and averages more neighbours. (c) Virtual time until the average model's test accuracy "
        f"reaches {target:g} in training runs on the first graph, over the runs that reached it (a label says "
        f"how many did where not all did). "
        f"Setup: {style.describe_clock(plain, topology)}. Source: {source_of(ctx, jobs)}."
    )
    return ctx.finish(fig, caption, "clock + training")
