"""The ``baselines`` figure: cb-DyBW against the methods one would pick instead (cb-Full with and without a
barrier, the best static b and timeout in hindsight, cb-Adaptive, AD-PSGD, isolated workers) -- time to target
and final test accuracy, per delay preset and split."""

from __future__ import annotations

import numpy as np

from . import analysis, style
from .frames import baseline_order, baselines_frame
from .registry import figure
from .scaffold import Context, Drawn, job_setup, no_runs, source_of


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
