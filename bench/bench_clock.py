"""How the clock-only simulation scales with N: time and peak memory of the virtual clock alone.

    python bench/bench_clock.py                       # N = 256 ... 4096, random_regular d=8, 1000 iterations
    python bench/bench_clock.py --sizes 256,1024 --iterations 200

Each size runs in a fresh process (so its peak resident memory is its own): the config is composed and
validated as ``run.py`` does, then the clock-only job's simulation (``dybw.figures.clock_only.simulate``:
the delay streams, the virtual clock and the per-worker timeline, no training) runs for every iteration.
The clock keeps every per-message quantity per directed link (``[T, L]``), so memory grows with the
number of links ``L = N d``, not with ``N^2``.  Results: ``results/bench/clock.json`` and a table.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

from common import REPO, environment

OUT = REPO / "results" / "bench" / "clock.json"


def measure(size: int, degree: int, iterations: int, algo: str) -> dict:
    """One size, in this process: setup, simulation and peak resident memory."""
    from common import compose

    started = time.perf_counter()
    overrides = [f"num_workers={size}", "topology=random_regular", f"topology.d={degree}",
                 f"iterations={iterations}", f"algo={algo}", "logger=none", "progress=false",
                 "dataset=synthetic", "dataset.batch_size=1"]  # the clock needs no data: any that fits  # fmt: skip
    cfg, graph = compose(overrides)
    setup = time.perf_counter() - started
    from dybw.figures.clock_only import simulate

    started = time.perf_counter()
    timeline, used = simulate(cfg, graph)
    seconds = time.perf_counter() - started
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux: kilobytes
    return {
        "num_workers": size,
        "links": int(len(graph.directed_links())),
        "iterations": iterations,
        "setup_seconds": setup,
        "simulate_seconds": seconds,
        "ms_per_iteration": 1000 * seconds / iterations,
        "peak_rss_mb": peak_kb / 1024,
        "mean_iteration_duration": timeline.mean_duration(),
        "mean_used": float(used.sum() / (iterations * size)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="256,512,1024,2048,4096")
    parser.add_argument("--degree", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--algo", default="cb_dybw")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: measure one size, print JSON
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.degree, args.iterations, args.algo)))
        return 0
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        done = subprocess.run(
            [sys.executable, __file__, "--one", str(size), "--degree", str(args.degree),
             "--iterations", str(args.iterations), "--algo", args.algo],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        row = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"N={row['num_workers']:5d} L={row['links']:6d}: setup {row['setup_seconds']:6.1f} s, "
              f"clock {row['simulate_seconds']:6.1f} s ({row['ms_per_iteration']:.2f} ms/iteration), "
              f"peak {row['peak_rss_mb']:7.0f} MB", flush=True)  # fmt: skip
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"rows": rows, "environment": environment(algo=args.algo)}, indent=2) + "\n")
    print("| N | links | setup s | clock s | ms / iteration | peak MB |")
    print("|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        print(f"| {r['num_workers']} | {r['links']} | {r['setup_seconds']:.1f} | {r['simulate_seconds']:.1f} | "
              f"{r['ms_per_iteration']:.2f} | {r['peak_rss_mb']:.0f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
