"""One look for every figure: colours per algorithm, legend on top, PNG + PDF (a caption underneath on request)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

from ..algorithms import ALGORITHMS
from ..models import MODELS

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

# The paper's runs, in its legend order; any other run follows, by label.  Labels and colours are the
# algorithm classes' own (dybw.algorithms); a run of another algorithm adds its colour when it is labelled.
PAPER_RUNS = [("cb_full", {}), ("cb_static", {"b": 1}), ("cb_static", {"b": 2}), ("cb_dybw", {})]
ORDER = [ALGORITHMS[name].label_for(params) for name, params in PAPER_RUNS]
COLORS = {ALGORITHMS[name].label_for(params): ALGORITHMS[name].color_for(params) for name, params in PAPER_RUNS}
EXTRA = ["#CC78BC", "#CA9161", "#949494", "#56B4E9", "#ECE133", "#FBAFE4"]
DASHES = {"iid": "-", "shards": "--", "dirichlet": ":"}


def remember_color(label: str, color: str | None) -> None:
    """The colour an algorithm class gives a label (None: one of EXTRA, by the label's rank)."""
    if color is not None:
        COLORS.setdefault(label, color)


def setup() -> None:
    sns.set_theme(
        context="paper",
        style="whitegrid",
        font_scale=1.15,
        rc={
            "axes.titleweight": "bold",
            "axes.titlesize": 11,
            "legend.frameon": False,
            "savefig.dpi": 150,
            "figure.dpi": 100,
            "pdf.fonttype": 42,
        },
    )


def color(label: str, index: int = 0) -> str:
    return COLORS.get(label, EXTRA[index % len(EXTRA)])


def ordered(labels) -> list[str]:
    labels = list(dict.fromkeys(labels))
    return sorted(labels, key=lambda name: (ORDER.index(name) if name in ORDER else len(ORDER), str(name)))


def frame_labels(frame) -> list[str]:
    """The labels of a results frame's runs, in :func:`ordered`'s order (none for an empty frame)."""
    return ordered(frame["label"]) if not frame.empty else []


def palette(labels) -> dict[str, str]:
    extra = [name for name in ordered(labels) if name not in COLORS]
    return {name: color(name, extra.index(name) if name in extra else 0) for name in ordered(labels)}


def figure(ncols: int, nrows: int = 1, width: float = 4.0, height: float = 3.2, **kwargs):
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(width * ncols, height * nrows), layout="constrained", squeeze=False, **kwargs
    )
    return fig, axes


def plain_log_ticks(ax, axis: str = "y") -> None:
    """Readable labels on a log axis, as plain numbers: ticks at 1, 2, 5 x 10^k (more within two decades or
    less, and every 0.2 x 10^k within a factor of 3)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    target = ax.yaxis if axis == "y" else ax.xaxis
    low, high = ax.get_ylim() if axis == "y" else ax.get_xlim()
    span = high / max(low, 1e-12)
    subs = (
        (1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)
        if span < 3
        else (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)
        if span < 12
        else (1.0, 2.0, 3.0, 5.0)
        if span < 120
        else (1.0, 2.0, 5.0)
    )
    target.set_major_locator(LogLocator(base=10, subs=subs))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_formatter(NullFormatter())


def panel_letters(axes) -> None:
    """Titles as ``(a) ...`` on the left of each panel."""
    for i, ax in enumerate(axes.flat):
        title = ax.get_title()
        ax.set_title("")
        ax.set_title(f"({chr(97 + i)}) {title}", loc="left")


def dot_interval(ax, position: float, values, color: str, horizontal: bool = True) -> tuple[float, float]:
    """One category of a dot plot at ``position``: each value (a run) as a faint dot, their mean as a large dot
    with whiskers of +-1 sample standard deviation (none for one value). Returns (mean, std); nan if empty."""
    import numpy as np

    values = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if values.size == 0:
        return float("nan"), float("nan")
    mean, std = float(values.mean()), float(values.std(ddof=1)) if values.size > 1 else float("nan")
    spread = std if values.size > 1 else None
    at = np.full(values.size, position)
    xs, ys = (values, at) if horizontal else (at, values)
    ax.scatter(xs, ys, s=14, color=color, alpha=0.35, linewidths=0, zorder=2)
    point = {"xerr": spread} if horizontal else {"yerr": spread}
    x, y = (mean, position) if horizontal else (position, mean)
    ax.errorbar(x, y, fmt="o", color=color, markersize=6, capsize=2.5, elinewidth=1.2, zorder=3, **point)
    return mean, std


def reach_note(reached: int, total: int) -> str:
    """What a time-to-target mark says about the runs behind it: nothing when all reached the target."""
    if reached == total:
        return ""
    return f"{reached}/{total} reached" if reached else f"target not reached (0/{total})"


def top_legend(fig, handles, labels, ncol: int | None = None) -> None:
    """The single legend of a figure: centred above the panels (the title goes above it in :func:`finish`)."""
    fig.legend(
        handles,
        labels,
        loc="lower center",
        bbox_to_anchor=(0.5, 1.0),
        ncol=ncol or len(labels),
        frameon=False,
        bbox_transform=fig.transFigure,
    )


def finish(fig, out: Path, name: str, title: str, caption: str | None = None, save: bool = True) -> list[Path]:
    """Title above the legend, the caption (if any) wrapped underneath, then ``<name>.png`` and ``<name>.pdf``
    in ``out`` (nothing written with ``save=False``: rendering is most of a figure's cost)."""
    renderer = fig.canvas.get_renderer()  # the legend's size does not depend on the layout: no draw needed
    top = 1.0
    for legend in fig.legends:
        top = max(top, 1.0 + legend.get_window_extent(renderer).height / fig.bbox.height)
    fig.suptitle(title, fontweight="bold", fontsize=13, y=top + 0.01, va="bottom")
    if caption:
        width_chars = int(fig.get_figwidth() * 15.5)
        fig.text(0.005, -0.01, textwrap.fill(caption, width_chars), ha="left", va="top", fontsize=8.5)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for suffix in ("png", "pdf") if save else ():
        path = out / f"{name}.{suffix}"
        # no creation date in a PDF: the same figure gives the same bytes, and a redraw no git change
        metadata = {"CreationDate": None} if suffix == "pdf" else None
        fig.savefig(path, bbox_inches="tight", pad_inches=0.15, metadata=metadata)
        paths.append(path)
    plt.close(fig)
    return paths


# --- setup text for captions, from a composed config -----------------------------------------------------


def describe_delay(spec: dict) -> str:
    """``"2 ms + Exp(mean 30 ms)"`` and friends, from a straggler.compute / straggler.link config: the
    distribution's own text, then the slow-downs."""
    from ..distributions import DISTRIBUTIONS

    text = DISTRIBUTIONS[spec["dist"]]().describe(spec)
    if spec.get("slow_prob", 0):
        text += f", x{spec.get('slow_factor', 1):g} w.p. {spec['slow_prob']:g}"
    if spec.get("persistent_ids") or spec.get("persistent_fraction", 0):
        who = (
            f"workers {spec['persistent_ids']}"
            if spec.get("persistent_ids")
            else f"{spec['persistent_fraction']:.0%} of links"
        )
        text += f", x{spec.get('persistent_factor', 1):g} for {who}"
    return text


def describe_graph(plain: dict, topology: dict | None) -> str:
    topo = plain["topology"]
    name = {
        "erdos_renyi": f"Erdos-Renyi graph (p={topo.get('p')})",
        "random_regular": f"random {topo.get('d')}-regular graph",
    }
    text = name.get(topo["name"], f"{topo['name']} graph")
    if topology and topology.get("degrees"):
        text += f", degrees {min(topology['degrees'])}-{max(topology['degrees'])}"
    return text


def step_rule(algo: dict) -> str:
    """The step size of an ``algo`` config: ``eta0`` or ``eta0 x delta^k``."""
    return f"{algo['eta0']:g}" + ("" if algo["delta"] == 1 else f" x {algo['delta']:g}^k")


def describe_steps(steps: dict[str, str]) -> str:
    """``steps``: each algorithm's label -> its step rule; one rule for all, or which algorithm has which."""
    rules = list(dict.fromkeys(steps.values()))
    if len(rules) == 1:
        return f"step {rules[0]}"
    return "steps " + ", ".join(
        f"{rule} ({', '.join(label for label, r in steps.items() if r == rule)})" for rule in rules
    )


def describe_training(plain: dict, step: bool = True, splits=None) -> str:
    """The task of a job's config; ``splits``: the data splits the figure's panels use, if several."""
    data, model, algo = plain["dataset"], plain["model"], plain["algo"]
    if data.get("features") == "raw":
        features = "raw pixels" + (", random crops and flips" if data.get("augment", "none") != "none" else "")
    else:
        features = f"PCA-{data['pca_dim']}" if data.get("pca_dim") else f"{data.get('input_dim', '')}-d"
    model_text = MODELS[model["name"]].describe(model)
    split_names = {
        "iid": "i.i.d. split",
        "shards": f"label shards ({data['shards_per_worker']} per worker)",
        "dirichlet": f"Dirichlet(alpha={data['dirichlet_alpha']}) split",
    }
    split = " or ".join(split_names[name] for name in (splits or [data["split"]]))
    name = {"mnist": "MNIST", "cifar10": "CIFAR-10", "synthetic": "synthetic Gaussian mixture"}[data["name"]]
    if data.get("holdout", 0):  # old results have no holdout key
        split += f"; evaluated on {data['holdout']} held-out training samples, not the test set"
    return (
        f"{name} ({features}, {split}), {model_text}, batch {data['batch_size']} per worker, "
        + (f"step {step_rule(algo)}, " if step else "")
        + f"{plain['iterations']} iterations"
    )


def describe_evaluation(plain: dict) -> str:
    """When the average model is scored, from a job's config (dybw.evaluation)."""
    every, nth = plain["eval_every"], plain["evaluation"]["full_every_evals"]
    if nth == 1:
        return f"xbar = mean_j x_j is evaluated every {every} iterations"
    return (
        f"xbar = mean_j x_j is evaluated on the test set every {every} iterations and on the training set "
        f"too every {every * nth} (and at the last iteration)"
    )


def describe_resolution(resolutions) -> str:
    """How finely time to target was resolved over some runs (summary.json's ``target_resolution``)."""
    values = sorted({int(r) for r in resolutions if r == r and r is not None})
    if not values:
        return "no run reached it"
    if values == [1]:
        return "resolved to the iteration"
    return f"resolved to {values[-1]} iterations or better"


def describe_clock(plain: dict, topology: dict | None = None) -> str:
    s, protocol = plain["straggler"], plain["protocol"]
    if protocol["sync"] == "free":
        ending = "no barrier (free)"
    elif protocol["agreement"] == "instant":
        ending = "lock-step with an instant agreement"
    else:
        ending = f"lock-step agreed by {protocol['agreement']} (control messages {describe_delay(s['control'])})"
    scale = f", all delays x{s['time_scale']:g}" if s.get("time_scale", 1) != 1 else ""
    return (
        f"N={plain['num_workers']} workers on an {describe_graph(plain, topology)}; delays '{s['name']}': "
        f"compute {describe_delay(s['compute'])}, links {describe_delay(s['link'])}{scale}; "
        f"{ending}, {plain['algo']['update'].upper()}"
    )


def seeds_text(seeds) -> str:
    seeds = sorted({int(s) for s in seeds})
    if not seeds:
        return "no seeds"
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{len(seeds)} seeds ({seeds[0]}-{seeds[-1]})"
    return f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''} ({', '.join(map(str, seeds))})"
