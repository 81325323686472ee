"""The ``baselines`` figure: cb-DyBW against the methods one would pick instead (cb-Full with and without a
barrier, the best static b and timeout in hindsight, cb-Adaptive, AD-PSGD, isolated workers) -- time to target
and final test accuracy, per delay preset and split."""

from __future__ import annotations

import numpy as np

from . import analysis, style
from .frames import PRESET_WORDS, SPLIT_WORDS, baseline_order, baselines_frame
from .registry import figure
from .scaffold import Context, Drawn, job_setup, no_runs, source_of

QUANTITIES = [
    ("time_to_target", "time to target", "virtual time to target (s)"),
    ("final_test_accuracy", "final accuracy", "final test accuracy"),
]
# An accuracy this far below the best method's is marked at the axis' edge, so the others stay readable.
OFF_SCALE = 0.05


@figure("baselines")
def baselines(ctx: Context) -> Drawn:
    frame = baselines_frame(ctx)
    presets = list(dict.fromkeys(frame["preset"])) if not frame.empty else []
    splits = list(dict.fromkeys(frame["split"])) if not frame.empty else []
    columns = [(p, s) for p in presets for s in splits] or [("", "")]
    fig, axes = style.figure(len(columns), 2, width=4.0, height=3.4)
    if frame.empty:
        return no_runs(ctx, fig, axes)
    shown = frame[frame["chosen"]].copy()
    # One row per family: the best static b or deadline may differ between panels, so their row is named
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
        setting = f"{PRESET_WORDS.get(preset, preset)}, {SPLIT_WORDS.get(split, split)}"
        for row_index, (value, quantity, xlabel) in enumerate(QUANTITIES):
            ax = axes[row_index, col]
            _dots(ax, rows, methods, colors, value)
            ax.set_yticks(range(len(methods)), methods if col == 0 else [""] * len(methods), fontsize=8)
            ax.set_ylim(len(methods) - 0.5, -0.5)
            ax.set_xlabel(xlabel)
            ax.set_title(f"{quantity}\n{setting}")
    style.panel_letters(axes)
    jobs = ctx.completed_jobs(ctx.select(spec="baselines"))
    plain, topology = job_setup(ctx, jobs)
    picked = "; ".join(
        f"{p}/{s}: " + ", ".join(sorted(set(frame[(frame['preset'] == p) & (frame['split'] == s) & frame['chosen']
                                              & frame['algo'].isin(['cb_static', 'cb_timeout'])]['method'])))
        for p in presets for s in splits
    )  # fmt: skip
    caption = (
        f"Time to target (test accuracy {plain['target_accuracy']:g}) and final test accuracy: small dots are "
        f"single runs, large dots and whiskers the mean +- std over {style.seeds_text(frame['seed'].unique())}, "
        f"every method on the same delays and minibatches per seed. A time to target averages the runs that "
        f"reached it (how many did is written beside a method where not all did); an accuracy more than "
        f"{OFF_SCALE * 100:g} points below the best method's is marked at the panel's left edge with its value. "
        f"Lock-step methods pay the same flooded agreement (control messages "
        f"{style.describe_delay(plain['straggler']['control'])}); cb-DyBW (instant) is the paper's idealisation, "
        f"cb-Full (no barrier) runs without one. cb-Static and cb-Timeout: the best b and deadline in hindsight "
        f"(lowest mean time to target) among those run: {picked}. Presets: 'paper' (communication-dominated) and "
        f"'compute_bound' (compute-dominated). Setup: {style.describe_training(plain, splits=splits)}. "
        f"Source: {source_of(ctx, jobs)}."
    )
    return ctx.finish(fig, caption)


def _dots(ax, rows, methods: list[str], colors: dict, value: str) -> None:
    """One row per method: each seed's run as a faint dot, the mean as a large dot with +-1 std across seeds.
    Time to target starts at zero (its ratios are read off the axis); runs that missed the target are
    counted beside the row. Accuracies far below the best (isolated workers on label shards) are marked at
    the axis' left edge with their value, so the differences between the others stay visible."""
    means = {m: analysis.values(rows, value, method=m) for m in methods}
    finite = [stats[0] for stats in means.values() if stats[2]]
    floor = max(finite) - OFF_SCALE if value == "final_test_accuracy" and finite else None
    shown = [m for m in finite if floor is None or m >= floor]
    if value == "time_to_target":
        ax.set_xlim(0, 1.12 * max((rows[value].max() if len(rows) else 0) or 1.0, 1e-9))
    elif shown:
        spread = rows.loc[rows[value] >= floor, value] if floor is not None else rows[value]
        low, high = float(spread.min()), float(spread.max())
        pad = max(0.15 * (high - low), 0.002)
        ax.set_xlim(low - pad, high + pad)
    left = ax.get_xlim()[0]
    for i, method in enumerate(methods):
        mean, std, count = means[method]
        reached, total = analysis.reached(rows, method=method)
        seeds = rows.loc[rows["method"] == method, value].dropna()
        if count and floor is not None and mean < floor:
            ax.annotate(
                f"{mean:.3f} (off scale)", (left, i), xytext=(9, 0), textcoords="offset points", va="center",
                fontsize=7.5, color=colors[method], arrowprops=None,
            )  # fmt: skip
            ax.plot([left], [i], marker="<", color=colors[method], markersize=7, clip_on=False)
            continue
        style.dot_interval(ax, i, seeds, colors[method])
        notes = []
        if value == "time_to_target":
            choice = rows.loc[rows["method"] == method, "choice"]
            if len(choice) and choice.iloc[0]:
                notes.append(choice.iloc[0])
            notes.append(style.reach_note(reached, total))
        notes = [note for note in notes if note]
        if notes:
            x = mean + (std if count > 1 and np.isfinite(std) else 0) if count else left
            ax.annotate(", ".join(notes), (x, i), xytext=(5, 0), textcoords="offset points", va="center",
                        fontsize=7.5, color="0.3")  # fmt: skip
