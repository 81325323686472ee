"""The numbers the figures annotate and REPRODUCTION.md reports, computed from results frames.

Every comparison against cb-Full is **paired**: the same seed means the same delays and minibatches
(common random numbers), so e.g. the reduction is ``1 - T_alg(seed) / T_full(seed)`` per seed, then the
mean and standard deviation over seeds.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from . import load

REFERENCE = "cb-Full"
DYBW = "cb-DyBW"


def mean_std(values) -> tuple[float, float, int]:
    """Mean, sample standard deviation (nan for one value) and count of the finite values."""
    array = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if array.size == 0:
        return math.nan, math.nan, 0
    std = float(array.std(ddof=1)) if array.size > 1 else math.nan
    return float(array.mean()), std, int(array.size)


def fmt_pm(stats: tuple[float, float, int], digits: int = 1, scale: float = 1.0, unit: str = "") -> str:
    """``"69.5 ± 0.4 %"`` from ``mean_std`` output (``n/a`` when nothing was measured)."""
    mean, std, count = stats
    if count == 0 or not math.isfinite(mean):
        return "n/a"
    text = f"{mean * scale:.{digits}f}"
    if float(text) == 0:
        text = text.lstrip("-")  # a mean that rounds to zero is "0.00", not "-0.00"
    if count > 1 and math.isfinite(std):
        text += f" ± {std * scale:.{digits}f}"
    return text + unit


# Two-sided 95 % quantiles of Student's t for 1..30 degrees of freedom (beyond: the Cornish-Fisher series).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
    2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_quantile_975(dof: int) -> float:
    """t_{0.975, dof}: the factor of a 95 % interval ``mean ± t * std / sqrt(n)`` with ``dof = n - 1``."""
    if dof < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {dof}")
    if dof <= len(_T975):
        return _T975[dof - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)


def interval95(stats: tuple[float, float, int]) -> tuple[float, float]:
    """The 95 % t-interval of a mean from ``mean_std`` output, ``mean ± t_{0.975, n-1} * std / sqrt(n)``
    (nan, nan for fewer than two values): with a handful of seeds it is several standard errors wide, which
    a paired mean ± standard deviation alone does not show."""
    mean, std, count = stats
    if count < 2 or not math.isfinite(std):
        return math.nan, math.nan
    half = t_quantile_975(count - 1) * std / math.sqrt(count)
    return mean - half, mean + half


PAIRING = ("dataset", "split", "setting", "graph", "seed")  # what makes two runs see the same delays and data


def paired(frame: pd.DataFrame, value: str, keys=PAIRING, reference: str = REFERENCE) -> pd.DataFrame:
    """Rows of every non-reference label with its reference's value of the same ``keys`` in ``ref``."""
    keys = [k for k in keys if k in frame]
    ref = frame[frame["label"] == reference][[*keys, value]].rename(columns={value: "ref"})
    others = frame[frame["label"] != reference]
    return others.merge(ref, on=keys, how="inner")


def reduction(frame: pd.DataFrame, label: str, value: str = "mean_iteration_duration", **where) -> tuple:
    """``mean_std`` of ``1 - value(label) / value(cb-Full)`` over paired seeds."""
    rows = _select(paired(frame, value), label=label, **where)
    return mean_std(1.0 - rows[value] / rows["ref"])


def ratio(frame: pd.DataFrame, label: str, value: str, **where) -> tuple:
    """``mean_std`` of ``value(label) / value(cb-Full)`` over paired seeds (seeds where both are finite)."""
    rows = _select(paired(frame, value), label=label, **where)
    return mean_std(rows[value] / rows["ref"])


def difference(frame: pd.DataFrame, label: str, value: str, **where) -> tuple:
    """``mean_std`` of ``value(label) - value(cb-Full)`` over paired seeds."""
    rows = _select(paired(frame, value), label=label, **where)
    return mean_std(rows[value] - rows["ref"])


def values(frame: pd.DataFrame, value: str, **where) -> tuple:
    return mean_std(_select(frame, **where)[value])


def reached(frame: pd.DataFrame, **where) -> tuple[int, int]:
    """``(jobs that reached the target, jobs)``."""
    rows = _select(frame, **where)
    return int(rows["iterations_to_target"].notna().sum()), len(rows)


def _select(frame: pd.DataFrame, **where) -> pd.DataFrame:
    mask = np.ones(len(frame), dtype=bool)
    for key, value in where.items():
        mask &= (frame[key] == value).to_numpy()
    return frame[mask]


# --- C1: speed-up -------------------------------------------------------------------------------------


def loglog_slope(x, y) -> float:
    """Least-squares slope of ``log y`` against ``log x`` over the finite points (nan if < 2)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    if ok.sum() < 2 or len(np.unique(x[ok])) < 2:
        return math.nan
    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0])


def slopes(frame: pd.DataFrame, value: str = "iterations_to_target", by=("sweep", "label")) -> pd.DataFrame:
    """Per ``by`` group: the log-log slope of ``value`` against N for every seed, and their mean / std."""
    rows = []
    for key, group in frame.groupby(list(by)):
        per_seed = [loglog_slope(g["num_workers"], g[value]) for _, g in group.groupby("seed")]
        mean, std, count = mean_std(per_seed)
        rows.append(
            {
                **dict(zip(by, key)),
                "slope": mean,
                "slope_std": std,
                "seeds": count,
                "per_seed": per_seed,
                "points": int(group[value].notna().sum()),
                "jobs": len(group),
            }
        )
    return pd.DataFrame(rows)


# --- C4: backups over time ------------------------------------------------------------------------------


def backup_variation(matrix: np.ndarray) -> dict:
    """How much ``b_j(k)`` (``[K, N]``) moves: share of (k, j) whose count differs from iteration k-1,
    mean over workers of the standard deviation over time, and the 5-95 % range of the per-iteration mean."""
    changes = float(np.mean(matrix[1:] != matrix[:-1])) if len(matrix) > 1 else math.nan
    per_iteration = matrix.mean(axis=1)
    return {
        "change_fraction": changes,
        "std_over_time": float(matrix.std(axis=0).mean()),
        "p05": float(np.percentile(per_iteration, 5)),
        "p95": float(np.percentile(per_iteration, 95)),
        "mean": float(matrix.mean()),
    }


def usage_frame(jobs, results, slow_variant: str) -> pd.DataFrame:
    """Per clock job of the adaptation sweep and sender group: the mean share of iterations in which a
    neighbour used a message from that sender (``usage.parquet``).  Senders are split into the slow
    workers of ``slow_variant``'s config (``straggler.link.persistent_ids``) and the others, in every variant."""
    slow_ids = set()
    for job in jobs:
        if job.params.get("variant") == slow_variant:
            slow_ids |= {int(i) for i in job.plain["straggler"]["link"].get("persistent_ids") or []}
    rows = []
    for job in jobs:
        frame = load.usage(job, results)
        if frame is None:
            continue
        frame["sender"] = np.where(frame["src"].isin(slow_ids), "slow workers' messages", "other messages")
        for sender, group in frame.groupby("sender"):
            rows.append(
                {
                    "variant": job.params.get("variant"),
                    "seed": job.plain["seed"],
                    "sender": sender,
                    "used_fraction": float(group["used_fraction"].mean()),
                    "links": len(group),
                    "algo": job.plain["algo"]["name"],
                    "slow_ids": sorted(slow_ids),
                }
            )
    return pd.DataFrame(rows)


def usage_stats(frame: pd.DataFrame, variant: str, sender: str) -> tuple:
    rows = frame[(frame["variant"] == variant) & (frame["sender"] == sender)]
    return mean_std(rows["used_fraction"])


# --- C2 under every way of ending an iteration ---------------------------------------------------------

PAPER_SETTING = "lock-step, instant"
BARRIER_FREE = "free"


def cut_against(
    frame: pd.DataFrame, label: str, setting: str, reference_setting: str, value: str = "mean_iteration_duration"
):
    """``mean_std`` of ``1 - value(label, setting) / value(cb-Full, reference_setting)``, paired by graph and
    seed: e.g. lock-step cb-DyBW against the barrier-free cb-Full that D-PSGD implementations run."""
    keys = [k for k in ("dataset", "split", "graph", "seed") if k in frame]
    mine = frame[(frame["label"] == label) & (frame["setting"] == setting)][[*keys, value]]
    ref = frame[(frame["label"] == REFERENCE) & (frame["setting"] == reference_setting)][[*keys, value]]
    both = mine.merge(ref.rename(columns={value: "ref"}), on=keys, how="inner")
    return mean_std(1.0 - both[value] / both["ref"])


def crossing_below(x, y, level: float) -> float:
    """The smallest ``x`` at which the piecewise-linear curve ``y(x)`` (x increasing) falls below ``level``:
    interpolated between the last point at or above and the first below; nan if it never does, -inf if
    it starts below."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    below = np.flatnonzero(y < level)
    if len(below) == 0:
        return math.nan
    i = int(below[0])
    if i == 0:
        return -math.inf
    x0, x1, y0, y1 = x[i - 1], x[i], y[i - 1], y[i]
    return float(x0 + (y0 - level) / (y0 - y1) * (x1 - x0))
