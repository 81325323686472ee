"""The ``durations`` figure (claim C2): mean iteration duration per algorithm under every way of ending a
lock-step iteration (the agreements) and without a barrier, over graphs and seeds, with the paired cut
against cb-Full of the same setting, and the distribution of T(k) in the paper's setting.

It reads the virtual clock's results (clock-only jobs: the clock does not depend on the data).
"""

from __future__ import annotations

import pandas as pd
from matplotlib.lines import Line2D

from . import analysis, load, style
from .analysis import BARRIER_FREE, DYBW, PAPER_SETTING, REFERENCE
from .frames import settings_in
from .registry import figure
from .scaffold import Context, Drawn, job_setup, no_data, no_runs, source_of

SETTING_NAMES = {
    "lock-step, instant": "lock-step,\ninstant agreement",
    "lock-step, allreduce": "lock-step,\nall-reduce",
    "lock-step, flood": "lock-step,\nflooded",
    "free": "no barrier\n(free)",
}


def _spread_text(frame: pd.DataFrame) -> str:
    graphs, seeds = sorted(frame["graph"].unique()), sorted(frame["seed"].unique())
    plural = "s" if len(graphs) > 1 else ""
    return f"{len(graphs)} graph{plural} (topology.seed {', '.join(map(str, graphs))}) x {style.seeds_text(seeds)}"


@figure("durations")
def durations(ctx: Context) -> Drawn:
    jobs = ctx.completed_jobs(ctx.select(spec=ctx.spec.name, kind="clock"))
    frame = ctx.summaries(jobs)
    fig, axes = style.figure(2, 1, width=6.2, height=3.8)
    if frame.empty:
        return no_runs(ctx, fig, axes, "clock")
    labels = style.ordered(frame["label"])
    colors = style.palette(labels)
    settings = settings_in(frame)
    ax = axes[0, 0]
    width = 0.8 / len(labels)
    for s, setting in enumerate(settings):
        rows = frame[frame["setting"] == setting]
        present = [label for label in labels if (rows["label"] == label).any()]
        for i, label in enumerate(labels):
            if label not in present:
                continue
            stats = analysis.values(rows, "mean_iteration_duration", label=label)
            x = s + (i - (len(labels) - 1) / 2) * width
            top = 1000 * (stats[0] + (stats[1] if stats[2] > 1 else 0))
            ax.bar(
                x,
                1000 * stats[0],
                width * 0.92,
                color=colors[label],
                yerr=1000 * stats[1] if stats[2] > 1 else None,
                capsize=2,
                error_kw={"lw": 0.8},
            )
            if label != REFERENCE:
                red = analysis.reduction(rows, label)
                if red[2]:
                    ax.text(x, top + 2, f"-{100 * red[0]:.0f}%", ha="center", va="bottom", fontsize=7, rotation=90)
    ax.set_xticks(range(len(settings)), [SETTING_NAMES.get(s, s) for s in settings])
    ax.set_ylabel("mean iteration duration T̄ (ms)")
    ax.set_title("duration and cut vs cb-Full of the same setting")
    ax.margins(y=0.12)
    # (b) T(k) in the paper's setting, pooled over the first graph's seeds
    ax = axes[0, 1]
    samples = []
    for job in jobs:
        if load.setting_of(job.plain) != PAPER_SETTING or job.plain["topology"].get("seed", 0) != frame["graph"].min():
            continue
        timeline = load.timeline(job, ctx.results)
        if timeline is not None:
            samples.append(pd.DataFrame({"label": load.algo_label(job.plain), "T": 1000 * load.durations(timeline)}))
    if samples:
        import seaborn as sns

        data = pd.concat(samples, ignore_index=True)
        sns.histplot(
            data=data,
            x="T",
            hue="label",
            hue_order=labels,
            palette=colors,
            element="step",
            fill=False,
            stat="density",
            common_norm=False,
            log_scale=True,
            bins=60,
            ax=ax,
            legend=False,
            lw=1.4,
        )
        for label in labels:
            ax.axvline(data[data["label"] == label]["T"].median(), color=colors[label], ls=":", lw=1)
        style.plain_log_ticks(ax, "x")
    else:
        no_data(ax)
    ax.set_xlabel("duration of one iteration T(k) (ms, log scale)")
    ax.set_ylabel("density")
    ax.set_title("distribution of T(k), the paper's setting")
    style.panel_letters(axes)
    style.top_legend(fig, [Line2D([], [], color=colors[label], lw=6) for label in labels], labels)
    plain, topology = job_setup(ctx, jobs)
    free_cut = analysis.cut_against(frame, DYBW, PAPER_SETTING, BARRIER_FREE)
    control = style.describe_delay(plain["straggler"]["control"])
    caption = (
        f"Virtual clock only ({plain['iterations']} iterations per job, no training: the clock does not depend on "
        f"the model or the data, so it is shown once for both datasets), mean over {_spread_text(frame)}, error "
        f"bars +-1 std over both. E(k) is the time at which iteration k has ended at every worker; iteration k "
        f"lasts T(k) = E(k) - E(k-1) (E(-1) = 0), and the mean iteration duration of K iterations is "
        f"T̄ = E(K-1)/K. "
        f"(a) Mean iteration duration T̄; the label on each bar is the paired cut "
        f"1 - T_alg/T_cb-Full against cb-Full of the same setting (same graph and seed = same delays). "
        f"Lock-step needs the workers to agree that an iteration is over (and cb-DyBW that every worker is "
        f"eligible): 'instant' is the paper's idealisation, 'all-reduce' and 'flooded' pay one control message "
        f"delay ({control}) per message of a recursive doubling or of a flood over the graph. 'No barrier': each "
        f"worker starts its next iteration when it finishes, as D-PSGD implementations run; cb-DyBW then uses its "
        f"local rule. Against that barrier-free cb-Full, lock-step cb-DyBW with the instant agreement is "
        f"{analysis.fmt_pm(free_cut, 1, 100, ' %')} shorter. (b) Histogram of the per-iteration durations, paper's "
        f"setting, first graph, pooled over seeds; dotted: medians. Setup: {style.describe_clock(plain, topology)}. "
        f"Source: {source_of(ctx, jobs)}."
    )
    return ctx.finish(fig, caption, "clock")
