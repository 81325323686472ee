"""The ``backups`` figure (claim C4): cb-DyBW's backup count b_j(k) over the iterations, mean over workers and
for three workers, and, on the virtual clock, how often the slow senders' messages are used against the
others'."""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import analysis, load, style
from .registry import figure
from .scaffold import Context, Drawn, dataset_name, job_setup, no_data, no_runs, source_of

WINDOW_A = 150  # iterations shown in the backups figure's panel (a)


@figure("backups")
def backups(ctx: Context) -> Drawn:
    train = ctx.completed_jobs(ctx.select(kind="train"))
    clock = ctx.completed_jobs(ctx.select(spec=ctx.spec.name, kind="clock"))
    fig, axes = style.figure(3, 1, width=4.6, height=3.5)
    if not train and not clock:
        return no_runs(ctx, fig, axes, "training + clock")
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
    return ctx.finish(fig, caption, "training + clock")
