"""The paper's claims C1-C6 (and C3 and C5 on convolutional networks), each checked against the results:
the number, the verdict and why, as REPRODUCTION.md states them.

Every number is computed from the results files of the jobs (``summary.json``, ``timeline.parquet``,
``topology.json``) through :mod:`.analysis` and :mod:`.frames`; the verdicts and their thresholds all
come from :mod:`.rules`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import pandas as pd

from . import analysis, frames, load, rules, style
from .analysis import DYBW, fmt_pm
from .scaffold import Context, dataset_name

PAPER = {
    "C1": "Convergence rate O(1/sqrt(NK) + 1/K): linear speed-up in the number of workers N.",
    "C2": f"cb-DyBW's mean iteration duration is {rules.paper_cut()} lower than cb-Full's.",
    "C3": "cb-DyBW needs a number of iterations to converge of the same order as cb-Full.",
    "C4": "The number of backup workers varies over time and adapts to worker speed.",
    "C5": "On MNIST and CIFAR-10, test error and training loss are comparable to cb-Full, for far less wall time.",
    "C6": "The above holds with non-i.i.d. data across workers.",
}


@dataclass
class Claim:
    key: str
    figures: list[str]
    number: str
    verdict: str
    why: str
    specs: list[str]
    details: list[str] = field(default_factory=list)
    values: dict = field(default_factory=dict)


def _pct(stats, digits=1):
    return fmt_pm(stats, digits, 100, " %")


# --- the claims -----------------------------------------------------------------------------------------


def claim_c2(ctx: Context) -> Claim:
    """C2 on the virtual clock (clock-only jobs: the clock does not depend on the data), under every way of
    ending a lock-step iteration and against a barrier-free cb-Full; the verdict keeps the paper's setting."""
    frame = ctx.summaries(ctx.completed_jobs(ctx.select(spec="durations", kind="clock")))
    table = [
        "| setting | algorithm | mean iteration duration | cut vs cb-Full, same setting | cut vs cb-Full, no barrier |",
        "|---|---|---|---|---|",
    ]
    values, same_cuts, free_cuts = {}, {}, {}
    for setting in frames.settings_in(frame) if not frame.empty else frames.SETTING_ORDER[:0]:
        rows = frame[frame["setting"] == setting]
        for label in style.frame_labels(rows):
            mean_t = analysis.values(rows, "mean_iteration_duration", label=label)
            same = "-" if label == analysis.REFERENCE else _pct(analysis.reduction(rows, label))
            free = _pct(analysis.cut_against(frame, label, setting, analysis.BARRIER_FREE))
            if label == analysis.REFERENCE and setting == analysis.BARRIER_FREE:
                free = "-"
            table.append(f"| {setting} | {label} | {fmt_pm(mean_t, 1, 1000, ' ms')} | {same} | {free} |")
        same_cuts[setting] = analysis.reduction(rows, DYBW)
        free_cuts[setting] = analysis.cut_against(frame, DYBW, setting, analysis.BARRIER_FREE)
        values[setting] = {"same_setting": _ms(same_cuts[setting]), "vs_barrier_free": _ms(free_cuts[setting])}
    free_cuts.pop(analysis.BARRIER_FREE, None)  # barrier-free cb-DyBW against itself's reference: the same cut
    paper = values.get(analysis.PAPER_SETTING, {}).get("same_setting", {"mean": math.nan, "seeds": 0})
    verdict = rules.c2_verdict(paper["mean"], paper["seeds"])
    spread = _graphs_and_seeds(frame)
    level = rules.percent(rules.C2.reproduced)
    pairs = _pairs_at_threshold(frame)
    pairs_text = (
        f"{pairs[0]} of {pairs[1]} graph/seed pairs at or above {level}, range {100 * pairs[2]:.1f} to "
        f"{100 * pairs[3]:.1f} %"
        if pairs
        else ""
    )
    if pairs:
        values[analysis.PAPER_SETTING].update(
            pairs_at_or_above_threshold=pairs[0], pairs=pairs[1], lowest=pairs[2], highest=pairs[3]
        )
    paid = [f"{name} {_pct(same_cuts[s])}" for s, name in PAID_AGREEMENTS.items() if s in same_cuts]
    number = (
        f"{_pct(_as_stats(paper))} (paper's setting: lock-step, instant agreement{'; ' + pairs_text if pairs else ''})"
        + (f"; with the agreement paid: {', '.join(paid)}" if paid else "")
    )
    mix_text, mix = _delay_mix(ctx)
    why = (
        f"On the virtual clock (clock-only jobs: the clock does not depend on the model or the data, so the number "
        f"holds for MNIST and CIFAR-10 alike and is shown once), cb-DyBW's mean iteration is {_pct(_as_stats(paper))} "
        f"shorter than cb-Full's in the paper's setting -- lock-step, with the workers' agreement on the end of "
        f"each iteration (and on cb-DyBW's threshold theta) taken as instant -- paired over {spread}"
        + (f" ({pairs_text})" if pairs else "")
        + ". "
        + {
            "reproduced": f"That is within or above the paper's {rules.paper_cut()}.",
            "partly": f"Shorter, but below the paper's {rules.percent(rules.PAPER_CUT[0])}.",
            "not": f"Far from the paper's {rules.paper_cut()}.",
        }[verdict]
        + _robustness(same_cuts, free_cuts)
        + _agreement_break_even(ctx)
        + mix_text
    )
    values["break_even_control_delay_s"] = getattr(ctx, "break_even", {})  # nan: never; -inf: from the start
    values["delay_mix"] = mix
    return Claim(
        "C2", ["durations", "agreement", "ratio"], number, verdict, why, ["durations", "agreement"], table, values
    )


# How each way of ending a lock-step iteration reads in a sentence ("... with the instant agreement").
AGREEMENT_WORDS = {
    "lock-step, instant": "the instant agreement",
    "lock-step, allreduce": "an all-reduce agreement",
    "lock-step, flood": "a flooded agreement",
    analysis.BARRIER_FREE: "no barrier",
}
PAID_AGREEMENTS = {"lock-step, allreduce": "all-reduce", "lock-step, flood": "flood"}


def _words(settings: list[str]) -> str:
    names = [AGREEMENT_WORDS.get(s, s) for s in settings]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _robustness(same_cuts: dict, free_cuts: dict) -> str:
    """cb-DyBW's cut in every setting, against cb-Full ending its iterations the same way and against a
    barrier-free cb-Full, in two sentences, then which of them stay at or above C2's threshold."""
    if not same_cuts:
        return ""
    level = rules.percent(rules.C2.reproduced)
    same = [f"{_pct(cut)} with {AGREEMENT_WORDS.get(s, s)}" for s, cut in same_cuts.items() if cut[2]]
    text = " **Robustness.** Against a cb-Full that ends its iterations the same way, cb-DyBW's cut is " + _and(same)
    measured = [s for s, cut in free_cuts.items() if cut[2]]
    if measured:
        agreements = f"the same {_number(len(measured))} agreements" if len(measured) > 1 else _words(measured)
        text += (
            "; against a cb-Full without a barrier (the way decentralised SGD implementations run) it is "
            f"{_and([_pct(free_cuts[s]) for s in measured])} with {agreements}"
        )
    held_same = [s for s, cut in same_cuts.items() if cut[2] and rules.c2_holds(cut[0], cut[2])]
    held_free = [s for s, cut in free_cuts.items() if cut[2] and rules.c2_holds(cut[0], cut[2])]
    total = sum(1 for cut in [*same_cuts.values(), *free_cuts.values()] if cut[2])
    held = len(held_same) + len(held_free)
    if total == 1:
        verdict = f"It is {'at or above' if held else 'below'} {level}."
    elif held == total:
        verdict = f"All {total} cuts are at or above {level}."
    elif held == 0:
        verdict = f"None of them reaches {level}."
    else:
        places = [f"{_words(held_same)} against the same cb-Full"] if held_same else []
        places += [f"{_words(held_free)} against the barrier-free one"] if held_free else []
        verdict = f"{held} of these {total} cuts are at or above {level}: {' and '.join(places)}."
    return (
        text
        + f". {verdict} The all-reduce and the flood pay a control-message delay per message of a recursive doubling "
        "or of a flood over the graph, at every policy's lock-step barrier: a real network never gives the global "
        "maximum for free."
    )


def _number(n: int) -> str:
    return {2: "two", 3: "three", 4: "four", 5: "five"}.get(n, str(n))


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _pairs_at_threshold(frame: pd.DataFrame) -> tuple[int, int, float, float] | None:
    """How many graph/seed pairs of the paper's setting have cb-DyBW's cut at or above C2's threshold, of how
    many, and the smallest and largest cut."""
    if frame.empty:
        return None
    rows = analysis.paired(frame[frame["setting"] == analysis.PAPER_SETTING], "mean_iteration_duration")
    dybw = rows[rows["label"] == DYBW]
    cuts = (1 - dybw["mean_iteration_duration"] / dybw["ref"]).dropna()
    if cuts.empty:
        return None
    return int(sum(rules.c2_holds(float(c), 1) for c in cuts)), len(cuts), float(cuts.min()), float(cuts.max())


def _as_stats(entry: dict) -> tuple:
    return entry.get("mean", math.nan), entry.get("std", math.nan), entry.get("seeds", 0)


def _graphs_and_seeds(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "no runs"
    graphs, seeds = frame["graph"].nunique(), frame["seed"].nunique()
    return f"{graphs} graph{'s' if graphs > 1 else ''} x {seeds} seed{'s' if seeds > 1 else ''}"


def _agreement_break_even(ctx: Context) -> str:
    """Where cb-DyBW's cut falls below C2's threshold as control messages slow down (the ``agreement`` spec)."""
    cuts = frames.agreement_frame(ctx, ctx.completed_jobs(ctx.select(spec="agreement", kind="clock")))
    if cuts.empty:
        return ""
    names = sorted(cuts["agreement"].unique())
    ctx.break_even = {
        f"{name}/{versus}": frames.break_even(cuts, name, versus)
        for name in names
        for versus in ("same agreement", "no barrier")
    }
    level = rules.percent(rules.C2.reproduced)
    parts = []
    for versus, what in (("same agreement", "the same cb-Full"), ("no barrier", "a barrier-free cb-Full")):
        delays = {AGREEMENT_NAMES.get(name, name): ctx.break_even[f"{name}/{versus}"] for name in names}
        it = "it" if parts else "the cut"
        if all(d == -math.inf for d in delays.values()):
            parts.append(
                f"against {what} {it} is below {level} even with free control messages, with {_either(delays)}"
            )
        elif all(math.isnan(d) for d in delays.values()):
            parts.append(f"against {what} {it} stays at or above {level} over the whole range ({_either(delays)})")
        else:
            where = [f"{_delay_words(delay)} ({name})" for name, delay in delays.items()]
            parts.append(f"against {what} {it} falls below {level} {_and(where)}")
    return (
        " As control messages slow down from free to the data links' mean delay (agreement.png): "
        + "; ".join(parts)
        + "."
    )


AGREEMENT_NAMES = {"allreduce": "the all-reduce", "flood": "the flood"}


def _either(delays: dict) -> str:
    return "with either agreement" if len(delays) == 2 else _and(list(delays))


def _delay_words(delay: float) -> str:
    if math.isnan(delay):
        return "nowhere in the range swept"
    if delay == -math.inf:
        return "even with free control messages"
    return f"at a mean control delay of {1000 * delay:.1f} ms"


def _delay_mix(ctx: Context) -> tuple[str, dict]:
    """What the clock sweep of ``ratio`` says about where a cut at C2's threshold appears: the sentence, and
    its numbers for reproduction.json."""
    red = frames.ratio_frame(ctx, ctx.completed_jobs(ctx.select(spec="ratio", kind="clock")))
    if red.empty:
        return "", {}
    means = red[red["label"] == DYBW].groupby("ratio")["reduction"].mean().sort_index()
    if means.empty:
        return "", {}
    level = rules.C2.reproduced
    cross = frames.ratio_crossing(red, DYBW, level)
    where = (
        f"it reaches {rules.percent(level)} once the mean link delay is at least {cross:.2g}x the mean compute time"
        if math.isfinite(cross)
        else f"it stays below {rules.percent(level)} at every ratio swept"
    )
    numbers = {
        "ratio_reaching_threshold": cross,
        "lowest_ratio": float(means.index[0]),
        "cut_at_lowest_ratio": float(means.iloc[0]),
        "highest_ratio": float(means.index[-1]),
        "cut_at_highest_ratio": float(means.iloc[-1]),
        "paper_ratio": paper_ratio(ctx),
    }
    text = (
        f" The cut depends on the delay mix (ratio.png, virtual clock): {where}; with compute-dominated delays "
        f"(ratio {means.index[0]:.2g}) it is {100 * means.iloc[0]:.0f} %, and {100 * means.iloc[-1]:.0f} % at ratio "
        f"{means.index[-1]:.2g}. The 'paper' preset's ratio is "
        f"{paper_ratio(ctx):.2g}."
    )
    return text, numbers


def paper_ratio(ctx: Context) -> float:
    value = frames.paper_ratio(ctx)
    return value if value is not None else math.nan


def _said(ctx: Context, conclusion: str) -> str:
    """The verdict's sentence, unless a dataset is missing (then :func:`_missing_text` explains)."""
    return "" if getattr(ctx, "missing", []) else conclusion


def _missing_text(ctx: Context) -> str:
    """What is missing, in place of the verdict's sentence (:func:`_said`), which ended with a space."""
    missing = getattr(ctx, "missing", [])
    parts = getattr(ctx, "missing_parts", {})  # spec -> "sweep: k of n completed" for its incomplete sweeps
    if not missing:
        return ""
    rerun = f"(run `python -m dybw.figures --only {','.join(missing)}`)."
    if any(parts.get(spec) for spec in missing):
        named = [f"{spec} ({'; '.join(parts[spec])})" if parts.get(spec) else spec for spec in missing]
        return f"Runs missing for {', '.join(named)}: the claim is checked on the completed runs only {rerun}"
    return f"No completed runs for {', '.join(missing)}: the claim is checked on the other datasets only {rerun}"


def claim_c3(ctx: Context, groups=None) -> Claim:
    """``groups``: ``(name, summaries)`` to check (default: one per dataset of the convergence specs)."""
    parts, values, strict, loose = [], {}, [], []
    table = [
        "| dataset | algorithm | iterations to target | runs reaching it | ratio vs cb-Full |",
        "|---|---|---|---|---|",
    ]
    for name, frame in frames.per_dataset(ctx, with_shards=True) if groups is None else groups:
        stats = analysis.ratio(frame, DYBW, "iterations_to_target")
        hit = [analysis.reached(frame, label=who) for who in (DYBW, analysis.REFERENCE)]
        everyone = all(h[0] == h[1] and h[1] > 0 for h in hit)
        target = frame["target_accuracy"].iloc[0]
        values[name] = {
            "mean": stats[0],
            "std": stats[1],
            "seeds": stats[2],
            "all_reached": everyone,
            "target_accuracy": target,
        }
        parts.append(f"{name} {fmt_pm(stats, 2, unit='x')} (target {target:g})")
        if groups is not None or rules.judged(name):
            strict.append(rules.c3_same_order(stats[0], stats[2], everyone))
            loose.append(rules.c3_loose(stats[0], stats[2]))
        for label in style.frame_labels(frame):
            its = analysis.values(frame, "iterations_to_target", label=label)
            r = analysis.reached(frame, label=label)
            rat = (
                "-"
                if label == analysis.REFERENCE
                else fmt_pm(analysis.ratio(frame, label, "iterations_to_target"), 2, unit="x")
            )
            table.append(f"| {name} | {label} | {fmt_pm(its, 0)} | {r[0]}/{r[1]} | {rat} |")
    verdict = rules.over_tasks(strict, loose, not getattr(ctx, "missing", []))
    why = (
        f"Iterations to target, cb-DyBW / cb-Full (paired over graphs and seeds): {'; '.join(parts)}. "
        + (
            "The verdict is decided on the i.i.d. tasks, as in the paper; the label-shards row is a split where "
            "isolated workers miss the target (see 'Does the task need consensus?'). "
            if any("shards" in name for name in values)
            else ""
        )
        + _said(
            ctx,
            {
                "reproduced": "Same order: the dynamic rule drops late messages but the iterates converge "
                "as fast per iteration.",
                "partly": f"Same order of magnitude, but outside a factor {rules.number(rules.C3.factor)} (or some "
                "runs missed the target).",
                "not": "Not the same order, or the target was not reached.",
            }[verdict],
        )
        + _missing_text(ctx)
    )
    return Claim(
        "C3",
        list(frames.CONVERGENCE),
        "; ".join(parts) or "n/a",
        verdict,
        why,
        list(frames.CONVERGENCE),
        table,
        values,
    )


def claim_c5(ctx: Context, groups=None) -> Claim:
    """``groups``: ``(name, summaries)`` to check (default: one per dataset of the convergence specs)."""
    parts, values, strict, loose = [], {}, [], []
    table = [
        "| dataset | algorithm | final test accuracy | final training loss | time to target | accuracy vs "
        "cb-Full | time to target vs cb-Full |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, frame in frames.per_dataset(ctx, with_shards=True) if groups is None else groups:
        acc = analysis.difference(frame, DYBW, "final_test_accuracy")
        loss = analysis.difference(frame, DYBW, "final_train_loss")
        time_saved = analysis.reduction(frame, DYBW, "time_to_target")
        low, high = analysis.interval95(acc)
        values[name] = {
            "accuracy_points": {
                "mean": 100 * acc[0],
                "std": 100 * acc[1],
                "seeds": acc[2],
                "interval95": [100 * low, 100 * high],
            },
            "train_loss_difference": {"mean": loss[0], "std": loss[1]},
            "time_to_target_reduction": {"mean": time_saved[0], "std": time_saved[1], "seeds": time_saved[2]},
        }
        spread = f" (95 % interval {100 * low:+.2f} to {100 * high:+.2f})" if math.isfinite(low) else ""
        parts.append(f"{name} {fmt_pm(acc, 2, 100)} points{spread}, time to target {_pct(time_saved, 0)} shorter")
        if groups is not None or rules.judged(name):
            strict.append(rules.c5_close(acc[0], acc[2]) and rules.c5_faster(time_saved[0], time_saved[2]))
            loose.append(rules.c5_loose(acc[0], acc[2]))
        for label in style.frame_labels(frame):
            a = analysis.values(frame, "final_test_accuracy", label=label)
            loss_stats = analysis.values(frame, "final_train_loss", label=label)
            t = analysis.values(frame, "time_to_target", label=label)
            if label == analysis.REFERENCE:
                da, dt = "-", "-"
            else:
                da = fmt_pm(analysis.difference(frame, label, "final_test_accuracy"), 2, 100) + " points"
                saved = _pct(analysis.reduction(frame, label, "time_to_target"), 0)
                dt = saved if saved == "n/a" else "-" + saved
            table.append(
                f"| {name} | {label} | {fmt_pm(a, 4)} | {fmt_pm(loss_stats, 4)} | "
                f"{fmt_pm(t, 1, 1, ' s')} | {da} | {dt} |"
            )
    verdict = rules.over_tasks(strict, loose, not getattr(ctx, "missing", []))
    why = (
        f"Final test accuracy of cb-DyBW minus cb-Full (paired over graphs and seeds): {'; '.join(parts)}. "
        "The verdict is decided on the i.i.d. tasks; time is the virtual clock's, lock-step with the instant "
        "agreement (C2 says what a paid agreement changes). "
        + _said(
            ctx,
            {
                "reproduced": "Comparable accuracy and loss, reached in a fraction of the virtual time.",
                "partly": "Accuracy within a few points, or no time gain on some dataset.",
                "not": f"Accuracy differs by more than {rules.points(rules.C5.loose)}.",
            }[verdict],
        )
        + _missing_text(ctx)
    )
    return Claim(
        "C5",
        list(frames.CONVERGENCE),
        "; ".join(parts) or "n/a",
        verdict,
        why,
        list(frames.CONVERGENCE),
        table,
        values,
    )


def claim_c4(ctx: Context) -> Claim:
    jobs = ctx.completed_jobs(ctx.select(spec="convergence_mnist"))
    per_seed = []
    for job in jobs:
        if load.algo_label(job.plain) != DYBW:
            continue
        tl = load.timeline(job, ctx.results)
        if tl is not None:
            per_seed.append(analysis.backup_variation(load.backups_matrix(tl)))
    change = analysis.mean_std([p["change_fraction"] for p in per_seed])
    spread = analysis.mean_std([p["std_over_time"] for p in per_seed])
    mean_b = analysis.mean_std([p["mean"] for p in per_seed])
    lo = analysis.mean_std([p["p05"] for p in per_seed])
    hi = analysis.mean_std([p["p95"] for p in per_seed])
    data = " and ".join(dataset_name(d) for d in sorted({j.plain["dataset"]["name"] for j in jobs})) or "MNIST"
    clock = ctx.completed_jobs(ctx.select(spec="backups", kind="clock"))
    variants = list(dict.fromkeys(j.params["variant"] for j in clock))
    usage = analysis.usage_frame(clock, ctx.results, variants[-1]) if clock else pd.DataFrame()
    nan = (math.nan, math.nan, 0)
    slow_u = analysis.usage_stats(usage, variants[-1], "slow workers' messages") if not usage.empty else nan
    other_u = analysis.usage_stats(usage, variants[-1], "other messages") if not usage.empty else nan
    slow_0 = analysis.usage_stats(usage, variants[0], "slow workers' messages") if not usage.empty else nan
    other_0 = analysis.usage_stats(usage, variants[0], "other messages") if not usage.empty else nan
    varies = rules.c4_varies(change[0], change[2])
    adapts = rules.c4_adapts(slow_u[0], slow_u[2], other_u[0], other_u[2])
    verdict = rules.c4_verdict(varies, adapts)
    number = (
        f"b_j(k) changes in {_pct(change)} of steps; slow senders' messages used {_pct(slow_u, 0)} "
        f"vs {_pct(other_u, 0)}"
    )
    slow_ids = usage["slow_ids"].iloc[0] if not usage.empty else []
    why = (
        f"In the {data} training runs, a worker's backup count changes from one iteration to the next in "
        f"{_pct(change)} of (worker, iteration) pairs; its standard deviation over time is {fmt_pm(spread, 2)} "
        f"(mean count {fmt_pm(mean_b, 2)}; the 5-95 % range of the per-iteration mean over workers is "
        f"{fmt_pm(lo, 2)} to {fmt_pm(hi, 2)}). When the links out of workers {slow_ids} are 4x slower (clock "
        f"simulation), their neighbours use their messages in {_pct(slow_u, 0)} of iterations against "
        f"{_pct(other_u, 0)} for everyone else's (without slow links: {_pct(slow_0, 0)} and {_pct(other_0, 0)}): "
        f"the slow workers become the backups. "
        + {
            "reproduced": "The count varies over time and follows worker speed.",
            "partly": "Only one of the two effects is clear.",
            "not": "Neither effect is visible.",
        }[verdict]
    )
    values = {
        "change_fraction": _ms(change),
        "std_over_time": _ms(spread),
        "slow_senders_used": _ms(slow_u),
        "other_senders_used": _ms(other_u),
        "slow_senders_used_without_slow_links": _ms(slow_0),
        "other_senders_used_without_slow_links": _ms(other_0),
        "mean_count": _ms(mean_b),
        "p05_of_the_mean_over_workers": _ms(lo),
        "p95_of_the_mean_over_workers": _ms(hi),
    }
    return Claim("C4", ["backups"], number, verdict, why, ["backups"], [], values)


def _ms(stats) -> dict:
    return {"mean": stats[0], "std": stats[1], "seeds": stats[2]}


def claim_c1(ctx: Context) -> Claim:
    jobs = ctx.select(spec="speedup")
    frame = ctx.summaries(jobs)
    table = [
        "| step rule | algorithm | slope: iterations to target | slope: time to target | runs reaching the target |",
        "|---|---|---|---|---|",
    ]
    values, found = {}, {}
    if not frame.empty:
        its = analysis.slopes(frame, "iterations_to_target", by=("role", "sweep", "label"))
        tts = analysis.slopes(frame, "time_to_target", by=("role", "sweep", "label"))
        for (_, row), (_, trow) in zip(its.iterrows(), tts.iterrows()):
            stats = (row["slope"], row["slope_std"], row["seeds"])
            tstats = (trow["slope"], trow["slope_std"], trow["seeds"])
            table.append(
                f"| {row['sweep']} | {row['label']} | {fmt_pm(stats, 2)} | {fmt_pm(tstats, 2)} | "
                f"{row['points']}/{row['jobs']} |"
            )
            values[f"{row['role']}/{row['label']}"] = {
                "iterations_slope": _ms(stats),
                "time_slope": _ms(tstats),
                "reached": row["points"],
                "jobs": row["jobs"],
            }
            if row["label"] == DYBW:
                found[row["role"]] = (stats, row["sweep"], row["points"] == row["jobs"])
    theorem = found.get("theorem", ((math.nan, math.nan, 0), "theorem", False))
    fixed = found.get("fixed", ((math.nan, math.nan, 0), "fixed", False))
    t_ok = rules.c1_linear(theorem[0][0], theorem[0][2])
    f_ok = rules.c1_linear(fixed[0][0], fixed[0][2])
    verdict = rules.c1_verdict(theorem[0][0], theorem[0][2], fixed[0][0], fixed[0][2])
    number = f"slope {fmt_pm(theorem[0], 2)} ({theorem[1]}); {fmt_pm(fixed[0], 2)} ({fixed[1]})"
    ns = sorted(frame["num_workers"].unique()) if not frame.empty else []
    steps = frame[frame["role"] == "theorem"]["eta0"] if not frame.empty else pd.Series(dtype=float)
    growth = f"{steps.max() / steps.min():g}-fold" if len(steps) and steps.min() > 0 else "with N"
    span = f"N = {ns[0]}..{ns[-1]}" if ns else "N"
    why = (
        f"Log-log slope of cb-DyBW's iterations to target against {span}: {fmt_pm(theorem[0], 2)} when the "
        f"step grows with N as the theorem's step size implies, {fmt_pm(fixed[0], 2)} at a fixed step (-1 is "
        f"linear speed-up). "
        + (
            f"With the theorem's step the iterations fall like 1/N, but that step itself grows {growth} over the "
            f"range; at a fixed step that is stable at every N, adding workers cuts the iterations only like "
            f"N^{fixed[0][0]:.2f}. "
            if t_ok and not f_ok
            else ""
        )
        + ("Iterations fall like 1/N in both settings. " if t_ok and f_ok else "")
        + ("Iterations do not fall like 1/N. " if not t_ok else "")
        + (
            "The O(1/sqrt(NK)) term of the rate is the gradient-noise term that more workers average away; once "
            "the 1/K (optimisation) term dominates, more workers at the same step no longer cut the iterations "
            "(speedup.png: the fixed-step curve flattens at large N)."
            if not f_ok
            else ""
        )
    )
    return Claim("C1", ["speedup"], number, verdict, why, ["speedup"], table, values)


def _noniid_frame(ctx: Context) -> pd.DataFrame:
    """The runs of the ``noniid`` figure: its own (label shards) and the i.i.d. ones it takes from
    ``convergence_mnist``, on the same graphs and seeds."""
    frame = ctx.summaries([j for j in ctx.jobs if j.spec in ("noniid", "convergence_mnist")])
    if frame.empty:
        return frame
    return frame[frame["algo"].isin(["cb_full", "cb_dybw", "isolated"])].drop_duplicates("job")


def claim_c6(ctx: Context) -> Claim:
    frame = _noniid_frame(ctx)
    values, checks, parts, cuts = {}, [], [], []
    table = [
        "| split | reduction of T vs cb-Full | iterations to target, DyBW/Full | accuracy vs cb-Full | final "
        "accuracy cb-DyBW | final accuracy cb-Full |",
        "|---|---|---|---|---|---|",
    ]
    for split in dict.fromkeys(frame["split"]) if not frame.empty else []:
        red = analysis.reduction(frame, DYBW, split=split)
        its = analysis.ratio(frame, DYBW, "iterations_to_target", split=split)
        acc = analysis.difference(frame, DYBW, "final_test_accuracy", split=split)
        a_d = analysis.values(frame, "final_test_accuracy", label=DYBW, split=split)
        a_f = analysis.values(frame, "final_test_accuracy", label=analysis.REFERENCE, split=split)
        hit = [analysis.reached(frame, label=name, split=split) for name in (DYBW, analysis.REFERENCE)]
        table.append(
            f"| {split} | {_pct(red)} | {fmt_pm(its, 2, unit='x')} | {fmt_pm(acc, 2, 100)} points | "
            f"{fmt_pm(a_d, 4)} | {fmt_pm(a_f, 4)} |"
        )
        values[split] = {
            "reduction": _ms(red),
            "iterations_ratio": _ms(its),
            "accuracy_points": {"mean": 100 * acc[0], "std": 100 * acc[1], "seeds": acc[2]},
        }
        if split != "iid":
            everyone = all(h[0] == h[1] and h[1] > 0 for h in hit)
            checks = [rules.c3_same_order(its[0], its[2], everyone), rules.c5_close(acc[0], acc[2])]
            parts.append(f"{split}: iterations {fmt_pm(its, 2, unit='x')}, accuracy {fmt_pm(acc, 2, 100)} points")
            cuts.append(f"{_pct(red)} on {split}")
    verdict = rules.c6_verdict(checks)
    iid = analysis.reduction(frame, DYBW, split="iid") if not frame.empty else (math.nan, math.nan, 0)
    why = (
        f"On the non-i.i.d. split, cb-DyBW vs cb-Full (paired): {'; '.join(parts) or 'no runs'}. "
        + {
            "reproduced": "Both the iterations to target and the accuracy hold as with i.i.d. data.",
            "partly": "One of the iterations to target and the accuracy holds as with i.i.d. data, not both.",
            "not": "Neither the iterations to target nor the accuracy holds as with i.i.d. data.",
        }[verdict]
        + (
            f" The iteration-time cut ({', '.join(cuts)}; {_pct(iid)} on iid) is not judged: the split cannot "
            "change the virtual clock, so it equals the i.i.d. cut by construction."
            if cuts
            else ""
        )
    )
    return Claim("C6", ["noniid"], "; ".join(parts) or "n/a", verdict, why, ["noniid"], table, values)


# --- C3 and C5 beyond the paper: convolutional networks on raw pixels (experiments/deep.yaml) ------------
DEEP = "deep"
PAPER["C3-CNN"] = (
    "Beyond the paper: C3 for convolutional networks on raw pixels (LeNet-5 on MNIST, a GroupNorm CNN on CIFAR-10)."
)
PAPER["C5-CNN"] = "Beyond the paper: C5 for the same convolutional networks."


def _cnn_claim(ctx: Context, check, key: str) -> Claim:
    """``check`` (C3 or C5) on each sweep of the ``deep`` spec: finished runs are read, never run for this table
    (``make figures ONLY=deep`` runs them)."""
    expected = Counter(j.params["sweep"] for j in ctx.select(spec=DEEP))  # runs per sweep, in the spec's order
    frame = frames.spec_summaries(ctx, DEEP) if expected else pd.DataFrame()
    groups = [(sweep, frame[frame["sweep"] == sweep]) for sweep in expected if not frame.empty]
    groups = [(sweep, rows) for sweep, rows in groups if not rows.empty]
    # a deep run stopped part-way leaves fewer seeds: say so, and cap the verdict, rather than judge silently
    # on what happened to finish
    completed = {sweep: len(rows) for sweep, rows in groups}
    short = [
        f"{sweep}: {completed.get(sweep, 0)} of {runs} completed"
        for sweep, runs in expected.items()
        if completed.get(sweep, 0) < runs
    ]
    saved = getattr(ctx, "missing", []), getattr(ctx, "missing_parts", {})
    ctx.missing, ctx.missing_parts = ([DEEP], {DEEP: short}) if short else ([], {})
    try:
        claim = check(ctx, groups)
    finally:
        ctx.missing, ctx.missing_parts = saved
    claim.key, claim.figures, claim.specs = key, [DEEP], [DEEP]
    if not groups:
        claim.number, claim.verdict = "no runs", "not run"
        claim.why = (
            "No completed runs of the CNN presets yet: `make figures ONLY=deep` runs them (they are not part of "
            "`make figures`, whose budget they exceed), then `make figures` adds them here."
        )
    return claim


def claim_c3_cnn(ctx: Context) -> Claim:
    return _cnn_claim(ctx, claim_c3, "C3-CNN")


def claim_c5_cnn(ctx: Context) -> Claim:
    return _cnn_claim(ctx, claim_c5, "C5-CNN")


CLAIMS = [claim_c1, claim_c2, claim_c3, claim_c4, claim_c5, claim_c6, claim_c3_cnn, claim_c5_cnn]
