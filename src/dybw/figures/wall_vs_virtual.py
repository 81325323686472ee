"""The ``wall_vs_virtual`` figure: the same configs run on the wall clock (MPI ranks exchanging real messages,
every delay slept) and on the virtual clock -- the distribution of T(k), the mean iteration duration and the
backups of each, side by side."""

from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D

from . import load, style
from .frames import wall_load_text, wall_pairs
from .registry import figure
from .scaffold import Context, Drawn, no_data, no_runs, source_of


@figure("wall_vs_virtual")
def wall_vs_virtual(ctx: Context) -> Drawn:
    pairs = wall_pairs(ctx)
    fig, axes = style.figure(2, 2, width=5.2, height=3.4)
    if not pairs:
        return no_runs(ctx, fig, axes, "training, wall clock + virtual clock")
    labels = style.ordered([p["label"] for p in pairs])
    colors = style.palette(labels)
    updates = [u for u in ("atc", "cta") if any(p["update"] == u for p in pairs)]
    # (a, b) the distribution of T(k) per update order: wall solid, virtual dashed
    for col in range(2):
        ax = axes[0, col]
        if col >= len(updates):
            no_data(ax)
            continue
        for p in (p for p in pairs if p["update"] == updates[col]):
            for clock, dash in (("wall", "-"), ("virtual", "--")):
                values = np.sort(1000 * np.asarray(p["durations"][clock]))
                ax.plot(values, np.arange(1, len(values) + 1) / len(values), color=colors[p["label"]], ls=dash, lw=1.5)
        ax.set_xscale("log")
        style.plain_log_ticks(ax, "x")
        ax.set_xlabel("iteration duration T(k) (ms, log scale)")
        ax.set_ylabel("share of iterations <= T")
        ax.set_title(f"distribution of T(k), lock-step {updates[col].upper()}")
    # (c) mean iteration duration, wall against virtual, with the ratio
    groups = [
        (p["label"], p["update"])
        for p in sorted(pairs, key=lambda p: (updates.index(p["update"]), labels.index(p["label"])))
    ]
    by = {(p["label"], p["update"]): p for p in pairs}
    ticks = [f"{label}\n{update.upper()}" for label, update in groups]
    for row, (value, ylabel) in enumerate(
        (("mean_duration", "mean iteration duration (ms)"), ("mean_backups", "mean backups per worker"))
    ):
        ax = axes[1, row]
        for i, key in enumerate(groups):
            p = by[key]
            scale = 1000 if value == "mean_duration" else 1
            for offset, clock, hatch in ((-0.2, "wall", None), (0.2, "virtual", "//")):
                ax.bar(i + offset, scale * p[value][clock], 0.38, color=colors[key[0]], hatch=hatch,
                       alpha=1.0 if clock == "wall" else 0.45, edgecolor="0.2", lw=0.4)  # fmt: skip
            top = scale * max(p[value]["wall"], p[value]["virtual"])
            text = f"x{p['ratio']:.2f}" if value == "mean_duration" else f"{100 * p['same_used_set']:.0f}% same S"
            ax.text(i, top, text, ha="center", va="bottom", fontsize=7.5)
        ax.set_xticks(range(len(groups)), ticks, fontsize=7.5)
        ax.set_ylabel(ylabel)
        ax.margins(y=0.15)
    axes[1, 0].set_title("mean duration: wall (solid) vs virtual (hatched)")
    axes[1, 1].set_title("backups; label: same used set as virtual")
    style.panel_letters(axes)
    handles = [Line2D([], [], color=colors[label], lw=6) for label in labels]
    handles += [Line2D([], [], color="0.3", ls="-"), Line2D([], [], color="0.3", ls="--")]
    style.top_legend(fig, handles, labels + ["wall clock (measured)", "virtual clock"])
    plain = pairs[0]["wall_job"].plain
    topology = load.topology(pairs[0]["wall_job"], ctx.results)
    ratios = ", ".join(f"{label} {update.upper()} x{by[(label, update)]['ratio']:.3f}" for label, update in groups)
    shares = ", ".join(f"{100 * by[key]['same_used_set']:.0f} %" for key in groups)
    load_text = wall_load_text(pairs)
    caption = (
        f"The same configs run twice: with runner.clock=wall ({plain['num_workers']} MPI ranks, one worker each, on "
        f"this machine's {_cores()} cores; each rank sleeps its drawn compute time, holds each message for its drawn "
        f"link delay and agrees on the end of an iteration {_agreement_text(plain)}; every time is measured) and on "
        f"the virtual clock (the same draws, computed). Wall/virtual mean iteration: {ratios}. Same used set S_j(k) as "
        f"the virtual clock, share of (worker, iteration) pairs: {shares}. (a, b) Empirical distribution of the "
        f"per-iteration durations T(k) = E(k) - E(k-1). (c) Mean iteration duration E(K-1)/K; label: wall/virtual. "
        f"(d) Mean backups (unused neighbours) per worker and iteration.{load_text} Setup: "
        f"{style.describe_clock(plain, topology)}; {style.describe_training(plain)}. "
        f"Compare one pair: python -m dybw.compare_clocks <wall job> <virtual job>. "
        f"Source: {source_of(ctx, [p['wall_job'] for p in pairs])}."
    )
    return ctx.finish(fig, caption, "training, wall + virtual")


def _agreement_text(plain: dict) -> str:
    agreement = plain["protocol"]["agreement"]
    if agreement == "instant":
        return (
            "through a barrier in shared memory whose completion every rank takes as the last rank's entry "
            "(the free agreement), the others woken by doorbell"
        )
    return f"by {agreement} control messages, each held for its drawn control delay"


def _cores() -> int:
    from ..tf_setup import usable_cores

    return usable_cores()
