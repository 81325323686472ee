"""The ``real_network`` figure and its REPRODUCTION.md section: claim C2 on shaped TCP links.

The runs of ``experiments/real_network.yaml`` are wall-clock runs on emulated hosts (``make real-network``)
on the ``network`` straggler preset: nothing is slept, so a compute time is the step's own and a link delay
is what the link took to carry the model.  Each lock-step run is replayed on the virtual clock
(:func:`dybw.replay.replay`, into ``<job dir>/replay``) with the delays it measured::

    network   the agreement as the virtual clock models it (instant: free) -- the paper's model of this network
    agreed    besides, every worker learns each global maximum as late as it did in the run

``agreed`` checks the clock's equations against the run (mean iteration, used sets); ``network`` against
``agreed`` is what agreeing cost.  Runs without a barrier (``protocol.sync=free``) are shown measured only.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from . import analysis, load, style
from .registry import figure
from .scaffold import Context, Drawn, no_data, no_runs, source_of

SPEC = "real_network"
# Written by `make real-network` beside the runs: the links' rates as tc had them (tests/cluster/hosts.sh).
LINKS_FILE = "links.txt"


def runs(ctx: Context) -> list[dict]:
    """One dict per completed wall run of the spec: its job, label, ``sync``, seed, measured mean iteration,
    each rank's host, the measured link delays and, for lock-step runs, both replays'
    comparisons with the run (:func:`dybw.compare_clocks.compare`)."""
    from ..replay import CENSORED_S, Measured, replay

    found = []
    for job in ctx.completed_jobs(ctx.select(spec=SPEC, role="wall")):
        job_dir = job.job_dir(ctx.results)
        summary = json.loads((job_dir / "summary.json").read_text())
        measured = Measured(job_dir)
        run = {
            "job": job,
            "label": load.algo_label(job.plain),
            "sync": job.plain["protocol"]["sync"],
            "seed": job.plain["seed"],
            "mean": summary["mean_iteration_duration"],
            "hosts": rank_hosts(job_dir),
            "pairs": measured.pairs,
            "link": np.where(measured.link() >= CENSORED_S, np.nan, measured.link()),  # never arrived: no delay
        }
        if run["sync"] == "lockstep":
            try:
                run.update(replay(job_dir))
            except (OSError, ValueError) as error:  # a run the replay does not cover is shown measured only
                run["replay_error"] = str(error)
        found.append(run)
    return found


def rank_hosts(job_dir: Path) -> dict[int, str]:
    """Each rank's host, from the heartbeat files the ranks wrote (``.mpi/rank-<r>.json``)."""
    hosts = {}
    for path in (Path(job_dir) / ".mpi").glob("rank-*.json"):
        beat = json.loads(path.read_text())
        hosts[int(beat["rank"])] = beat["host"]
    return hosts


def shaped_links(ctx: Context, found: list[dict]) -> str:
    """The links' rates as recorded beside the runs when they ran, or '' when nothing recorded them."""
    path = ctx.results / found[0]["job"].experiment / LINKS_FILE
    if not path.is_file():
        return ""
    return "; ".join(line.strip() for line in path.read_text().splitlines() if line.strip())


def _setting(run: dict) -> str:
    return "lock-step" if run["sync"] == "lockstep" else "no barrier"


def _groups(found: list[dict]) -> list[tuple[str, str]]:
    labels = style.ordered([r["label"] for r in found])
    order = {"lock-step": 0, "no barrier": 1}
    keys = {(_setting(r), r["label"]) for r in found}
    return sorted(keys, key=lambda key: (order[key[0]], labels.index(key[1])))


def _stats(found: list[dict], key: tuple[str, str], value) -> tuple[float, float, int]:
    return analysis.mean_std([value(r) for r in found if (_setting(r), r["label"]) == key])


def _replayed(run: dict, name: str, field: str = "mean_duration"):
    result = run.get(name)
    if result is None:
        return None
    return result[field]["virtual"] if field == "mean_duration" else result[field]


def cuts(found: list[dict]) -> dict[str, tuple[float, float, int]]:
    """cb-DyBW's cut of the mean iteration against cb-Full, paired by seed: measured in each setting, and
    on the ``network`` replay (lock-step)."""
    by = {(_setting(r), r["label"], r["seed"]): r for r in found}
    result = {}
    for setting, clock in (("lock-step", "wall"), ("no barrier", "wall"), ("lock-step", "network")):
        values = []
        for (s, label, seed), run in by.items():
            full = by.get((s, analysis.REFERENCE, seed))
            if s != setting or label != analysis.DYBW or full is None:
                continue
            if clock == "wall":
                values.append(1 - run["mean"] / full["mean"])
            elif run.get("network") and full.get("network"):
                values.append(1 - _replayed(run, "network") / _replayed(full, "network"))
        if values:
            result[f"{setting}, {'measured' if clock == 'wall' else 'replayed, free agreement'}"] = analysis.mean_std(
                values
            )
    return result


# ------------------------------------------------------------------------------------------------------
@figure("real_network")
def real_network(ctx: Context) -> Drawn:
    found = runs(ctx)
    fig, axes = style.figure(2, 2, width=5.2, height=3.4)
    if not found:
        return no_runs(ctx, fig, axes, "training, wall clock on emulated hosts")
    groups = _groups(found)
    labels = style.ordered([r["label"] for r in found])
    colors = style.palette(labels)
    ticks = [f"{label}\n{setting}" for setting, label in groups]

    # (a) mean iteration: measured, and (lock-step) both replays
    ax = axes[0, 0]
    bars = ((None, 1.0, lambda r: r["mean"]),  # measured
            ("//", 0.45, lambda r: _replayed(r, "network")),  # replayed, free agreement
            ("..", 0.7, lambda r: _replayed(r, "agreed")))  # replayed, measured agreement  # fmt: skip
    for i, key in enumerate(groups):
        offsets = (-0.27, 0, 0.27) if key[0] == "lock-step" else (0,)  # no barrier: nothing to replay
        for offset, (hatch, alpha, value) in zip(offsets, bars):
            mean, std, count = _stats(found, key, value)
            if count:
                ax.bar(i + offset, 1000 * mean, 0.26, yerr=1000 * std if count > 1 else None, color=colors[key[1]],
                       hatch=hatch, alpha=alpha, edgecolor="0.2", lw=0.4, capsize=2)  # fmt: skip
    ax.set_xticks(range(len(groups)), ticks, fontsize=7)
    ax.set_ylabel("mean iteration duration (ms)")
    ax.set_title("measured (solid) and replayed on the virtual clock")

    # (b) distribution of T(k), lock-step: measured against the replay with the measured agreement
    ax = axes[0, 1]
    lockstep = [r for r in found if r.get("agreed")]
    for label in labels:
        chosen = [r for r in lockstep if r["label"] == label]
        if not chosen:
            continue
        for clock, source, dash in (("wall", "agreed", "-"), ("virtual", "agreed", ":"), ("virtual", "network", "--")):
            values = np.sort(1000 * np.concatenate([r[source]["durations"][clock] for r in chosen]))
            ax.plot(values, np.arange(1, len(values) + 1) / len(values), color=colors[label], ls=dash, lw=1.3)
    if not lockstep:
        no_data(ax, "no lock-step run replayed")
    ax.set_xscale("log")
    style.plain_log_ticks(ax, "x")
    ax.set_xlabel("iteration duration T(k) (ms, log scale)")
    ax.set_ylabel("share of iterations <= T")
    ax.set_title("lock-step T(k): measured, replayed")

    # (c) each directed link's median measured delay, over every run and iteration
    ax = axes[1, 0]
    hosts = found[0]["hosts"]
    pairs = [tuple(p) for p in found[0]["pairs"]]
    delays = np.concatenate([r["link"] for r in found if [tuple(p) for p in r["pairs"]] == pairs])
    medians = 1000 * np.nanmedian(delays, axis=0)
    host_names = sorted(set(hosts.values()))
    # greys: the algorithms own the colours
    host_colors = {host: str(0.25 + 0.5 * k / max(1, len(host_names) - 1)) for k, host in enumerate(host_names)}
    for i, (src, _) in enumerate(pairs):
        ax.bar(i, medians[i], 0.7, color=host_colors.get(hosts.get(src), "0.5"), edgecolor="0.2", lw=0.4)
    ax.legend([Patch(color=c) for c in host_colors.values()], [f"from {h}" for h in host_colors], fontsize=7)
    ax.set_xticks(range(len(pairs)), [f"{s}>{d}\n{hosts.get(s, '?')}>{hosts.get(d, '?')}" for s, d in pairs],
                  fontsize=6.5)  # fmt: skip
    ax.set_ylabel("median link delay (ms)")
    ax.set_title("each link's measured delay")

    # (d) used sets of the lock-step runs as each replay has them
    ax = axes[1, 1]
    steps = [key for key in groups if key[0] == "lock-step"]
    for i, key in enumerate(steps):
        for offset, replayed, hatch in ((-0.2, "network", "//"), (0.2, "agreed", "..")):
            mean, std, count = _stats(found, key, lambda r, n=replayed: _replayed(r, n, "same_used_set"))
            if count:
                ax.bar(i + offset, 100 * mean, 0.38, color=colors[key[1]], hatch=hatch, alpha=0.6, edgecolor="0.2",
                       lw=0.4)  # fmt: skip
                ax.text(i + offset, 100 * mean, f"{100 * mean:.0f}%", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(steps)), [f"{label}\n{setting}" for setting, label in steps], fontsize=7)
    ax.set_ylim(0, 115)
    ax.set_ylabel("same used set as measured (%)")
    ax.set_title("used sets replayed: free (//) and measured (..) agreement")
    style.panel_letters(axes)

    handles = [Patch(color=colors[label]) for label in labels]
    handles += [Line2D([], [], color="0.3", ls=ls) for ls in ("-", "--", ":")]
    names = labels + ["measured", "replayed, free agreement", "replayed, measured agreement"]
    style.top_legend(fig, handles, names)
    caption = _caption(ctx, found)
    return ctx.finish(fig, caption, "training, wall clock on emulated hosts")  # fmt: skip


def _lags(found: list[dict]) -> dict[str, tuple[float, float, int]]:
    """How late after each global maximum the lock-step runs' workers learned it (mean +- std over runs, in
    seconds), per ``"<algorithm>'s <phase>"``."""
    lags_of = {}
    for label in style.ordered([r["label"] for r in found]):
        lags = [r["agreed"]["agreement_lags"] for r in found if r["label"] == label and r.get("agreed")]
        for phase in sorted({phase for lag in lags for phase in lag}):
            lags_of[f"{label}'s {phase}"] = analysis.mean_std([lag[phase]["mean"] for lag in lags if phase in lag])
    return lags_of


def _lag_text(found: list[dict]) -> str:
    """:func:`_lags` in a sentence."""
    parts = [f"{what} {analysis.fmt_pm(stats, 1, 1000, ' ms')}" for what, stats in _lags(found).items()]
    if not parts:
        return ""
    return (
        " Measured agreement lag (a worker learned the global maximum this long after it, mean over "
        f"iterations): {'; '.join(parts)}."
    )


def _placement(found: list[dict]) -> str:
    hosts = found[0]["hosts"]
    return ", ".join(f"worker {rank} on {hosts[rank]}" for rank in sorted(hosts))


def _caption(ctx: Context, found: list[dict]) -> str:
    plain = found[0]["job"].plain
    topology = load.topology(found[0]["job"], ctx.results)
    links = shaped_links(ctx, found)
    seeds = style.seeds_text(sorted({r["seed"] for r in found}))
    cut_text = "; ".join(f"{name} {analysis.fmt_pm(stats, 1, 100, ' %')}" for name, stats in cuts(found).items())
    return (
        f"{plain['num_workers']} MPI ranks, one worker each, on emulated hosts ({_placement(found)}): network "
        f"namespaces on one bridge, every message a TCP transfer of the model through the links"
        f"{f' ({links})' if links else ''}; nothing slept (straggler=network): a compute time is the step's "
        f"own, a link delay the time from the sender's step to the receiver's arrival. {seeds} per algorithm. "
        f"cb-DyBW's cut of the mean iteration against cb-Full, paired by seed: {cut_text or 'n/a'}."
        f"{_lag_text(found)} (a) Mean iteration duration E(K-1)/K, mean +- std over runs: measured (solid); "
        f"each lock-step run replayed on the virtual clock with its measured compute times and link delays, "
        f"its agreement free as the paper models it (//) or as late as measured (..). (b) Empirical "
        f"distribution of T(k) of the lock-step runs: measured (solid), replayed with free (dashed) and "
        f"measured (dotted) agreement. (c) "
        f"Median measured delay of each directed link, over every run and iteration. (d) Share of (worker, "
        f"iteration) pairs whose used set S_j(k) the replay gives as measured. Setup: "
        f"{style.describe_graph(plain, topology)}; {style.describe_training(plain)}. Replay one run: python -m "
        f"dybw.replay <job dir>. Source: {source_of(ctx, [r['job'] for r in found])}."
    )


def _cell(chosen: list[dict], value, digits: int = 1, scale: float = 1000.0, unit: str = " ms") -> str:
    """Mean ± std of ``value`` over the runs ``chosen``, as the table prints it (ms by default)."""
    return analysis.fmt_pm(analysis.mean_std([value(r) for r in chosen]), digits, scale, unit)


def real_network_section(ctx: Context) -> tuple[list[str], dict]:
    """REPRODUCTION.md: C2 on shaped TCP links, when the runs of ``real_network`` exist (its lines and the
    numbers they print)."""
    found = runs(ctx)
    if not found:
        return [], {}
    rows = ["| setting | algorithm | runs | measured | replayed, free agreement | replayed, measured agreement "
            "| measured / replayed (measured agreement) | same used set (free / measured agreement) |",
            "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for key in _groups(found):
        chosen = [r for r in found if (_setting(r), r["label"]) == key]
        if key[0] == "lock-step" and all(r.get("agreed") for r in chosen):
            replayed = [
                _cell(chosen, lambda r: _replayed(r, "network")),
                _cell(chosen, lambda r: _replayed(r, "agreed")),
                _cell(chosen, lambda r: r["agreed"]["ratio"], 3, 1.0, ""),
                f"{_cell(chosen, lambda r: r['network']['same_used_set'], 1, 100, ' %')} / "
                f"{_cell(chosen, lambda r: r['agreed']['same_used_set'], 1, 100, ' %')}",
            ]
        else:
            replayed = ["-"] * 4
        measured = _cell(chosen, lambda r: r["mean"])
        rows.append(f"| {key[0]} | {key[1]} | {len(chosen)} | {measured} | " + " | ".join(replayed) + " |")
    cut_text = "; ".join(f"{name}: {analysis.fmt_pm(stats, 1, 100, ' %')}" for name, stats in cuts(found).items())
    links = shaped_links(ctx, found)
    plain = found[0]["job"].plain
    return [
        "## C2 on shaped TCP links (emulated hosts)",
        "",
        f"Wall-clock runs with {plain['num_workers']} MPI ranks on emulated hosts ({_placement(found)}), every "
        f"message a TCP transfer through links shaped by tc{f' ({links})' if links else ''}, nothing slept "
        f"(`straggler=network`), {plain['iterations']} iterations; each lock-step run replayed on the virtual "
        f"clock with the compute times and link delays it measured (`python -m dybw.replay`). cb-DyBW's cut of "
        f"the mean iteration against cb-Full, paired by seed (mean ± std): {cut_text or 'n/a'}.{_lag_text(found)} "
        f"Beyond the paper, not a verdict: one graph, and the network of one machine.",
        "",
        *rows,
        "",
        "Figures: [real_network.png](real_network.png). Produced by `make real-network` (root: it brings the "
        "emulated hosts up and shapes their links).",
    ], {"cb_dybw_cut": _as_dicts(cuts(found)), "agreement_lag_s": _as_dicts(_lags(found))}  # fmt: skip


def _as_dicts(stats_of: dict[str, tuple]) -> dict[str, dict]:
    return {name: {"mean": s[0], "std": s[1], "runs": s[2]} for name, s in stats_of.items()}
