"""Figures of what the protocol's choices cost: how an iteration's end is agreed on, and cb-DyBW's ``m``.

- ``durations``: mean iteration duration per algorithm under every way of ending a lock-step iteration
  (the agreements) and without a barrier, over graphs and seeds (claim C2);
- ``agreement``: cb-DyBW's cut against the delay of one control message;
- ``min_neighbors``: iteration duration, neighbours used and time to target against ``m``.

All three read the virtual clock's results (clock-only jobs: the clock does not depend on the data);
``min_neighbors`` adds training runs for the time to target.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from . import analysis, load, rules, style
from .analysis import BARRIER_FREE, DYBW, PAPER_SETTING, REFERENCE
from .frames import (
    agreement_frame,
    baseline_order,
    baselines_frame,
    break_even,
    describe_break_even,
    min_neighbors_frame,
    settings_in,
    wall_load_text,
    wall_pairs,
)
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


# ------------------------------------------------------------------------------------------------------
@figure("durations")
def durations(ctx: Context) -> Drawn:
    name, title = ctx.spec.name, ctx.title
    jobs = ctx.completed_jobs(ctx.select(spec=ctx.spec.name, kind="clock"))
    frame = ctx.summaries(jobs)
    fig, axes = style.figure(2, 1, width=6.2, height=3.8)
    if frame.empty:
        return no_runs(ctx, fig, axes, name, title, source="clock")
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
    ax.set_ylabel("mean iteration duration E(K-1)/K (ms)")
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
    ax.set_xlabel("iteration duration T(k) = E(k) - E(k-1) (ms, log scale)")
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
        f"bars +-1 std over both. (a) Mean iteration duration; the label on each bar is the paired cut "
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
    return Drawn(name, title, caption, style.finish(fig, ctx.out, name, title, caption), "clock")


AGREEMENT_STYLE = {
    ("allreduce", "same agreement"): ("#0173B2", "-"),
    ("flood", "same agreement"): ("#D55E00", "-"),
    ("allreduce", "no barrier"): ("#0173B2", "--"),
    ("flood", "no barrier"): ("#D55E00", "--"),
}  # fmt: skip


@figure("agreement")
def agreement(ctx: Context) -> Drawn:
    name, title = ctx.spec.name, ctx.title
    jobs = ctx.completed_jobs(ctx.select(spec=ctx.spec.name, kind="clock"))
    frame = ctx.summaries(jobs)
    fig, axes = style.figure(2, 1, width=5.4, height=3.8)
    if frame.empty:
        return no_runs(ctx, fig, axes, name, title, source="clock")
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
    return Drawn(name, title, caption, style.finish(fig, ctx.out, name, title, caption), "clock")


def _preset_control(ctx: Context) -> float:
    """The 'paper' preset's mean control delay (s), as composed; nan when it cannot be read."""
    from ..cli import compose_job

    try:
        return load.delay_mean(compose_job(ctx.conf_dir, ["straggler=paper"]), "control")
    except Exception:  # noqa: BLE001 - a caption detail
        return math.nan


@figure("min_neighbors")
def min_neighbors(ctx: Context) -> Drawn:
    name, title = ctx.spec.name, ctx.title
    clock, train = min_neighbors_frame(ctx)
    fig, axes = style.figure(3, 1, width=4.4, height=3.6)
    if clock.empty and train.empty:
        return no_runs(ctx, fig, axes, name, title, source="clock + training")
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
                ax.text(row["m"], scale * row["mean"], f" {reached}/{total}", fontsize=7.5, va="bottom")
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
        f"reaches {target:g} in training runs on the first graph (labels: runs that reached it). "
        f"Setup: {style.describe_clock(plain, topology)}. Source: {source_of(ctx, jobs)}."
    )
    return Drawn(name, title, caption, style.finish(fig, ctx.out, name, title, caption), "clock + training")


@figure("wall_vs_virtual")
def wall_vs_virtual(ctx: Context) -> Drawn:
    name, title = ctx.spec.name, ctx.spec.title
    pairs = wall_pairs(ctx)
    fig, axes = style.figure(2, 2, width=5.2, height=3.4)
    if not pairs:
        return no_runs(ctx, fig, axes, name, title, source="training, wall clock + virtual clock")
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
    return Drawn(name, title, caption, style.finish(fig, ctx.out, name, title, caption), "training, wall + virtual")


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


@figure("baselines")
def baselines(ctx: Context) -> Drawn:
    name, title = ctx.spec.name, ctx.title
    frame = baselines_frame(ctx)
    presets = list(dict.fromkeys(frame["preset"])) if not frame.empty else []
    splits = list(dict.fromkeys(frame["split"])) if not frame.empty else []
    columns = [(p, s) for p in presets for s in splits] or [("", "")]
    fig, axes = style.figure(len(columns), 2, width=4.0, height=3.4)
    if frame.empty:
        return no_runs(ctx, fig, axes, name, title)
    shown = frame[frame["chosen"]].copy()
    # One bar per family: the best static b or deadline may differ between panels, so their bar is named
    # after the family and labelled with the panel's choice.
    tuned = shown["family"].isin(["cb_static", "cb_timeout"])
    shown["choice"] = np.where(tuned, shown["method"].str.extract(r"\((.*)\)$", expand=False).fillna(""), "")
    shown.loc[tuned, "method"] = shown.loc[tuned, "method"].str.replace(r" \(.*\)$", "", regex=True) + " (best)"
    methods = baseline_order(shown["method"])
    colors = {m: style.EXTRA[i % len(style.EXTRA)] for i, m in enumerate(methods)}
    for m in methods:
        rows = shown[shown["method"] == m]
        color = style.color(rows["label"].iloc[0]) if rows["label"].iloc[0] in style.COLORS else None
        colors[m] = color or colors[m]
    for col, (preset, split) in enumerate(columns):
        rows = shown[(shown["preset"] == preset) & (shown["split"] == split)]
        for row_index, (value, ylabel, scale) in enumerate(
            [("time_to_target", "virtual time to target (s)", 1), ("final_test_accuracy", "final test accuracy", 1)]
        ):
            ax = axes[row_index, col]
            for i, method in enumerate(methods):
                stats = analysis.values(rows, value, method=method)
                reached, total = analysis.reached(rows, method=method)
                height = scale * stats[0] if stats[2] else 0
                ax.barh(i, height, color=colors[method], xerr=scale * stats[1] if stats[2] > 1 else None, capsize=2)
                if value == "time_to_target":
                    choice = rows.loc[rows["method"] == method, "choice"]
                    chosen = f", {choice.iloc[0]}" if len(choice) and choice.iloc[0] else ""
                    ax.text(height, i, f" {reached}/{total}{chosen}", va="center", fontsize=7)
            ax.set_yticks(range(len(methods)), methods if col == 0 else [""] * len(methods), fontsize=8)
            ax.invert_yaxis()
            ax.set_xlabel(ylabel)
            if value == "final_test_accuracy":
                finals = rows[value].dropna()
                if len(finals):
                    ax.set_xlim(max(0.0, finals.min() - 0.05), min(1.0, finals.max() + 0.01))
            ax.set_title(f"{preset}, {split}" if row_index == 0 else "")
    style.panel_letters(axes)
    jobs = ctx.completed_jobs(ctx.select(spec="baselines"))
    plain, topology = job_setup(ctx, jobs)
    picked = "; ".join(
        f"{p}/{s}: " + ", ".join(sorted(set(frame[(frame['preset'] == p) & (frame['split'] == s) & frame['chosen']
                                              & frame['algo'].isin(['cb_static', 'cb_timeout'])]['method'])))
        for p in presets for s in splits
    )  # fmt: skip
    caption = (
        f"Time to target (test accuracy {plain['target_accuracy']:g}; labels: runs that reached it) and final test "
        f"accuracy, mean +- std over {style.seeds_text(frame['seed'].unique())}, every method on the same delays and "
        f"minibatches per seed. Lock-step methods pay the same flooded agreement (control messages "
        f"{style.describe_delay(plain['straggler']['control'])}); cb-DyBW (instant) is the paper's idealisation, "
        f"cb-Full (no barrier) runs without one. cb-Static and cb-Timeout: the best b and deadline in hindsight "
        f"(lowest mean time to target) among those run: {picked}. Presets: 'paper' (communication-dominated) and "
        f"'compute_bound' (compute-dominated). Setup: {style.describe_training(plain, splits=splits)}. "
        f"Source: {source_of(ctx, jobs)}."
    )
    return Drawn(name, title, caption, style.finish(fig, ctx.out, name, title, caption))
