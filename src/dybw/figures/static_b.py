"""The ``static_b`` figure: cb-Static for every b the graph allows against cb-DyBW -- iteration duration and
neighbours used on the virtual clock, and the time to target of the training runs."""

from __future__ import annotations

import math

from . import analysis, style
from .registry import figure
from .scaffold import Context, Drawn, dataset_name, job_setup, no_data, no_runs, source_of


@figure("static_b")
def static_b(ctx: Context) -> Drawn:
    clock = ctx.completed_jobs(ctx.select(spec=ctx.spec.name, kind="clock"))
    train = ctx.completed_jobs(ctx.select(kind="train"))
    frame = ctx.summaries(clock)
    fig, axes = style.figure(3, 1, width=4.6, height=3.6)
    if not clock and not train:
        return no_runs(ctx, fig, axes, "clock + training")
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
            note = style.reach_note(reached, total)
            if note:
                ax.text(i, top, note.replace("target ", "").replace(" (", "\n("), ha="center", va="bottom", fontsize=8)
        ticks = [name.replace(" (", "\n(") for name in labels]
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
        f"reaches {target:g} in the training runs, mean +- std over the runs that reached it (a label says how "
        f"many did where not all did). Setup: {style.describe_clock(plain, topology)}. Source: "
        f"{source_of(ctx, clock + train)}."
    )
    return ctx.finish(fig, caption, "clock + training")
