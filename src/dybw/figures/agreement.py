"""The ``agreement`` figure: cb-DyBW's cut of the mean iteration duration against the delay of one control
message, for each paid agreement (all-reduce, flood), against cb-Full under the same agreement and without a
barrier, with where the cut falls below C2's threshold; read from the virtual clock's results."""

from __future__ import annotations

import math

import numpy as np

from . import load, rules, style
from .analysis import BARRIER_FREE, DYBW, REFERENCE
from .frames import agreement_frame, break_even, describe_break_even
from .registry import figure
from .scaffold import Context, Drawn, job_setup, no_runs, source_of

AGREEMENT_STYLE = {
    ("allreduce", "same agreement"): ("#0173B2", "-"),
    ("flood", "same agreement"): ("#D55E00", "-"),
    ("allreduce", "no barrier"): ("#0173B2", "--"),
    ("flood", "no barrier"): ("#D55E00", "--"),
}  # fmt: skip


@figure("agreement")
def agreement(ctx: Context) -> Drawn:
    jobs = ctx.completed_jobs(ctx.select(spec=ctx.spec.name, kind="clock"))
    frame = ctx.summaries(jobs)
    fig, axes = style.figure(2, 1, width=5.4, height=3.8)
    if frame.empty:
        return no_runs(ctx, fig, axes, "clock")
    cuts = agreement_frame(ctx, jobs)
    ax = axes[0, 0]
    handles = []
    for (agreement_name, versus), (color, dash) in AGREEMENT_STYLE.items():
        rows = cuts[(cuts["agreement"] == agreement_name) & (cuts["versus"] == versus)]
        if rows.empty:
            continue
        stats = rows.groupby("control_delay")["cut"].agg(["mean", "std"]).reset_index()
        line = ax.errorbar(
            1000 * stats["control_delay"],
            100 * stats["mean"],
            yerr=100 * stats["std"].fillna(0),
            color=color,
            ls=dash,
            marker="o",
            ms=4,
            lw=1.6,
            capsize=2,
        )
        crossing = break_even(cuts, agreement_name, versus)
        if np.isfinite(crossing):
            ax.plot(1000 * crossing, 100 * rules.C2.reproduced, marker="x", color=color, ms=8, mew=2)
        what = "vs cb-Full, same agreement" if versus == "same agreement" else "vs barrier-free cb-Full"
        handles.append((line, f"{agreement_name}, {what}"))
    low, high = (100 * cut for cut in rules.PAPER_CUT)
    ax.axhspan(low, high, color="0.5", alpha=0.2, lw=0)
    ax.text(
        0.99,
        (low + high) / 2,
        f"paper: {rules.paper_cut()}",
        ha="right",
        va="center",
        fontsize=8,
        color="0.25",
        transform=ax.get_yaxis_transform(),
    )
    plain, topology = job_setup(ctx, jobs)
    link_mean = load.delay_mean(plain, "link")
    preset = 1000 * _preset_control(ctx)
    for a in axes.flat:
        if np.isfinite(preset):
            a.axvline(preset, color="0.3", ls=":", lw=1)
        a.axvline(1000 * link_mean, color="0.3", ls="--", lw=0.8)
    ax.set_xlabel("mean control-message delay (ms)")
    ax.set_ylabel("cb-DyBW's cut of the mean\niteration duration (%)")
    ax.set_title("the cut as control messages slow down")
    ax = axes[0, 1]
    lock = frame[frame["sync"] == "lockstep"]
    for agreement_name in sorted(lock["agreement"].unique()):
        color = AGREEMENT_STYLE.get((agreement_name, "same agreement"), ("0.3", "-"))[0]
        for label, dash in ((REFERENCE, "--"), (DYBW, "-")):
            rows = lock[(lock["agreement"] == agreement_name) & (lock["label"] == label)]
            stats = rows.groupby("control_delay")["mean_iteration_duration"].agg(["mean", "std"]).reset_index()
            ax.errorbar(
                1000 * stats["control_delay"],
                1000 * stats["mean"],
                yerr=1000 * stats["std"].fillna(0),
                color=color,
                ls=dash,
                marker="o",
                ms=3,
                lw=1.3,
                capsize=2,
                label=f"{label}, {agreement_name}",
            )
    free = frame[(frame["setting"] == BARRIER_FREE) & (frame["label"] == REFERENCE)]["mean_iteration_duration"]
    if len(free):
        ax.axhline(1000 * free.mean(), color="0.2", ls=(0, (1, 1)), lw=1.4, label="cb-Full, no barrier")
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    ax.set_xlabel("mean control-message delay (ms)")
    ax.set_ylabel("mean iteration duration (ms)")
    ax.set_title("iteration durations")
    ax.set_ylim(bottom=0)
    style.panel_letters(axes)
    style.top_legend(fig, [h for h, _ in handles], [t for _, t in handles], ncol=2)
    lines = "; ".join(
        f"{agreement_name} vs {'the same agreement' if versus == 'same agreement' else 'barrier-free cb-Full'}: "
        f"{describe_break_even(break_even(cuts, agreement_name, versus))}"
        for agreement_name, versus in AGREEMENT_STYLE
        if not cuts[(cuts["agreement"] == agreement_name) & (cuts["versus"] == versus)].empty
    )
    caption = (
        f"Virtual clock only ({plain['iterations']} iterations per job), mean +- std over "
        f"{style.seeds_text(frame['seed'].unique())}. Every lock-step agreement (the end of each iteration for "
        f"every policy, and theta for cb-DyBW) is paid with control messages of delay c + Exp(c/4) -- a recursive "
        f"doubling between the workers (all-reduce) or a flood over the graph -- for c from 0 (the instant "
        f"agreement) to the data links' mean ({1000 * link_mean:.0f} ms, dashed). Dotted: the 'paper' preset's "
        f"control delay ({preset:.1f} ms). (a) cb-DyBW's paired cut against cb-Full under the same agreement "
        f"(solid) and against cb-Full without a barrier (dashed); x: where the mean cut falls below "
        f"{rules.percent(rules.C2.reproduced)}: "
        f"{lines}. (b) Mean iteration durations. Setup: {style.describe_clock(plain, topology)}. "
        f"Source: {source_of(ctx, jobs)}."
    )
    return ctx.finish(fig, caption, "clock")


def _preset_control(ctx: Context) -> float:
    """The 'paper' preset's mean control delay (s), as composed; nan when it cannot be read."""
    from ..cli import compose_job

    try:
        return load.delay_mean(compose_job(ctx.conf_dir, ["straggler=paper"]), "control")
    except Exception:  # noqa: BLE001 - a caption detail
        return math.nan
