"""``python -m dybw.compare_clocks <wall job dir> <virtual job dir>``: a measured run against its model.

Both directories hold a run of the same config, one with ``runner.clock=wall`` (real MPI messages, delays
slept, times measured) and one with the virtual clock (the same delays, computed).  Per worker and per
iteration it compares:

- the mean iteration duration ``E(K-1)/K`` of each, and their ratio wall / virtual;
- the ratio of the median iteration durations, which one stall of the machine (a page fault, a busy
  neighbour) barely moves where it adds its length / K to the mean;
- the distribution of the iteration durations ``T(k) = E(k) - E(k-1)`` (quantiles, and the mean of
  ``|T_wall(k) - T_virtual(k)|`` over the paired iterations);
- the share of (worker, iteration) pairs whose used set ``S_j(k)`` is the same in both
  (``links.parquet``: one row per directed link and iteration), overall and per worker;
- the mean number of backups (unused neighbours) of each.

``--json FILE`` also writes the numbers.  :func:`compare` returns them for programs (the figures).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

QUANTILES = (0.1, 0.5, 0.9, 0.99)


def _read(job_dir: Path):
    import pandas as pd

    job_dir = Path(job_dir)
    for name in ("timeline.parquet", "links.parquet"):
        if not (job_dir / name).is_file():
            raise FileNotFoundError(f"{job_dir}: no {name} (a run of this version of dybw writes it)")
    return pd.read_parquet(job_dir / "timeline.parquet"), pd.read_parquet(job_dir / "links.parquet")


def durations(timeline) -> np.ndarray:
    """``T(k) = E(k) - E(k-1)`` with ``E(k) = max_j finish_j(k)`` (running maximum; ``E(-1) = 0``)."""
    finish = timeline.pivot(index="iteration", columns="worker", values="finish").to_numpy()
    end = np.maximum.accumulate(finish.max(axis=1))
    return np.diff(np.concatenate([[0.0], end]))


def used_sets(links, iterations: int, workers: int) -> np.ndarray:
    """The used set ``S_j(k)`` of each iteration and worker as one integer, the bitmask of its senders, ``[K, N]``."""
    used = links[links["used"] & (links["iteration"] < iterations)]
    keys = np.zeros((iterations, workers), dtype=object)
    keys[:] = 0
    for k, src, dst in zip(used["iteration"].to_numpy(), used["src"].to_numpy(), used["dst"].to_numpy()):
        keys[k, dst] |= 1 << int(src)
    return keys


def compare(wall_dir: Path, virtual_dir: Path) -> dict:
    """The comparison's numbers (module docstring) as a dict."""
    wall, wall_links = _read(wall_dir)
    virtual, virtual_links = _read(virtual_dir)
    iterations = int(min(wall["iteration"].max(), virtual["iteration"].max())) + 1
    workers = int(wall["worker"].max()) + 1
    if int(virtual["worker"].max()) + 1 != workers:
        raise ValueError(f"{wall_dir} has {workers} workers, {virtual_dir} {int(virtual['worker'].max()) + 1}")
    wall = wall[wall["iteration"] < iterations]
    virtual = virtual[virtual["iteration"] < iterations]
    t_wall, t_virtual = durations(wall), durations(virtual)
    same = used_sets(wall_links, iterations, workers) == used_sets(virtual_links, iterations, workers)
    backups = {
        "wall": float(wall["backups"].mean()),
        "virtual": float(virtual["backups"].mean()),
    }
    mean = {"wall": float(t_wall.sum() / iterations), "virtual": float(t_virtual.sum() / iterations)}
    result = {
        "wall_dir": str(wall_dir),
        "virtual_dir": str(virtual_dir),
        "iterations": iterations,
        "workers": workers,
        "mean_duration": mean,
        "ratio": mean["wall"] / mean["virtual"],
        "median_ratio": float(np.median(t_wall) / np.median(t_virtual)),
        "quantiles": {
            str(q): {"wall": float(np.quantile(t_wall, q)), "virtual": float(np.quantile(t_virtual, q))}
            for q in QUANTILES
        },
        "std": {"wall": float(t_wall.std()), "virtual": float(t_virtual.std())},
        "mean_abs_difference": float(np.abs(t_wall - t_virtual).mean()),
        "same_used_set": float(same.mean()),
        "same_used_set_per_worker": [float(v) for v in same.mean(axis=0)],
        "mean_backups": backups,
        "durations": {"wall": t_wall.tolist(), "virtual": t_virtual.tolist()},
    }
    if "cpu_seconds" in wall:
        result["wall_cpu_per_iteration"] = float(wall.groupby("iteration")["cpu_seconds"].sum().mean())
        result["wall_load_average"] = float(wall["load_average"].mean())
        result["wall_polls_per_iteration"] = float(wall["polls"].mean())
        if "start_lag" in wall:  # how late a rank began an iteration after its start (waking on a shared core)
            result["wall_start_lag"] = {"mean": float(wall["start_lag"].mean()), "max": float(wall["start_lag"].max())}
        result["wall_inbox_peak"] = {
            "messages": int(wall["inbox_messages"].max()),
            "iterations_ahead": int(wall["inbox_ahead"].max()),
        }
    return result


def report(result: dict) -> str:
    """The comparison as a few lines of text."""
    ms = 1000.0
    mean, quantiles = result["mean_duration"], result["quantiles"]
    lines = [
        f"{result['workers']} workers, {result['iterations']} iterations",
        f"mean iteration   wall {ms * mean['wall']:.2f} ms   virtual {ms * mean['virtual']:.2f} ms   "
        f"wall/virtual {result['ratio']:.3f}   (median iteration: {result['median_ratio']:.3f})",
        "T(k) quantiles   "
        + "   ".join(f"q{float(q):g}: {ms * v['wall']:.1f} / {ms * v['virtual']:.1f} ms" for q, v in quantiles.items())
        + "   (wall / virtual)",
        f"T(k) std         wall {ms * result['std']['wall']:.2f} ms   virtual {ms * result['std']['virtual']:.2f} ms"
        f"   mean |T_wall(k) - T_virtual(k)| {ms * result['mean_abs_difference']:.2f} ms",
        f"same used set    {100 * result['same_used_set']:.1f} % of (worker, iteration) pairs   "
        f"(worst worker {100 * min(result['same_used_set_per_worker']):.1f} %)",
        f"mean backups     wall {result['mean_backups']['wall']:.3f}   virtual {result['mean_backups']['virtual']:.3f}",
    ]
    if "wall_cpu_per_iteration" in result:
        peak = result["wall_inbox_peak"]
        lines.append(
            f"wall clock       {ms * result['wall_cpu_per_iteration']:.2f} ms of CPU per iteration (all ranks); "
            f"inbox peak {peak['messages']} messages, at most {peak['iterations_ahead']} iteration(s) ahead; "
            f"load average {result['wall_load_average']:.1f} (mean of the run); "
            f"{result['wall_polls_per_iteration']:.0f} polls per rank and iteration"
        )
    if "wall_start_lag" in result:
        lag = result["wall_start_lag"]
        lines.append(
            f"start lag        a rank began its iteration {ms * lag['mean']:.2f} ms after the iteration's start on "
            f"average ({ms * lag['max']:.1f} ms at most): the time to wake up and do its bookkeeping"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dybw.compare_clocks", description=__doc__.split("\n\n")[0])
    parser.add_argument("wall", type=Path, help="job directory of the runner.clock=wall run")
    parser.add_argument("virtual", type=Path, help="job directory of the same config on the virtual clock")
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers to this file")
    args = parser.parse_args(argv)
    try:
        result = compare(args.wall, args.virtual)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(report(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
