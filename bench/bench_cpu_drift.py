"""How far the numbers drift between CPUs, and what pinning the CPU kernels (src/dybw/numerics.py) removes.

    python bench/bench_cpu_drift.py --part sources   # where drift enters: 100-iteration jobs (~15 min)
    python bench/bench_cpu_drift.py --part spread    # REPRODUCTION numbers on emulated machines (~3-4 h)
    python bench/bench_cpu_drift.py --part speed     # pinned vs unpinned wall time, side by side (~15 min)
    python bench/bench_cpu_drift.py                  # all three

One machine cannot run another CPU, but each library's CPU-dependent choice can be made here as another
CPU would make it, through the variable the library reads (``DYBW_CPU_PINS=0`` first, so dybw pins
nothing and the choice is the library's own):

=================  ===============================================================================
emulated machine   what differs, and how it is made here
=================  ===============================================================================
this CPU           nothing: the kernels this AMD EPYC (AVX2, FMA, 2 cores, 32 KiB L1) picks by itself
1 core             OpenBLAS runs 1 thread, not 2 (the job's affinity mask is one core)
48 KiB L1          Eigen blocks the batch sums by a 48 KiB L1 as on Intel Ice Lake+ / AMD Zen 5
                   (``DYBW_EIGEN_CACHE_SIZES=49152,1048576,33554432``)
other BLAS         other OpenBLAS kernels, as SkylakeX's on AVX-512 CPUs (``OPENBLAS_CORETYPE=Sandybridge``)
other codegen      other XLA and oneDNN code, as on AVX-512 CPUs (``--xla_cpu_max_isa=AVX``,
                   ``ONEDNN_MAX_CPU_ISA=AVX``: no FMA contraction, other sgemm kernels)
pinned             dybw's pins (the default): every machine above then runs these same kernels
=================  ===============================================================================

AVX-512 itself cannot be run here; "other BLAS" and "other codegen" stand in for it: what matters for
the spread is that some kernel rounds differently, since SGD amplifies any last-bit difference.  Each
emulated machine has its own preprocessing cache entry (the cache key holds the BLAS fingerprint), so its
PCA is fitted with its own kernels.

Part ``sources``: one 100-iteration job per dataset (``paper_cifar10`` and ``paper_mnist``, cb-Full,
seed 0) on every emulated machine and on each library choice alone; whether the PCA features (the
preprocessing cache entry's arrays) and the training metrics (metrics.csv without wall times) are
bit-identical to this CPU's unpinned run, and to the pinned run.

Part ``spread``: the REPRODUCTION.md numbers CPU drift moved -- CIFAR-10 C3 (iterations to 0.5,
cb-DyBW / cb-Full), C5 (final accuracy, cb-DyBW - cb-Full, points), cb-Full's final accuracy; MNIST
shards C6 (accuracy points) -- from the full jobs (500 iterations, seeds 0-2, as ``make figures`` runs
them) on each emulated machine; the spread is max - min over the unpinned machines.

Part ``speed``: the default MNIST job (cb-DyBW, 200 iterations, cached PCA) pinned and unpinned,
alternating, 3 each: process wall time and the steady time per iteration (metrics.csv); the PCA fit
(MNIST, CIFAR-10) pinned (1 OpenBLAS thread) and unpinned (one per core), alternating; and the cost of
pinning Eigen's cache sizes at TensorFlow's start.

Output: markdown tables on stdout and JSON in ``results/bench/cpu_drift.json`` (``--out``).
"""

from __future__ import annotations

import dybw  # noqa: F401 - first: numpy then loads the CPU kernels dybw pins (src/dybw/numerics.py)

# isort: split
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from common import REPO, environment, fmt, med
from dybw.numerics import OPT_OUT, pins

SCRATCH = REPO / "results" / "bench" / "cpu_drift"
UNPINNED = {OPT_OUT: "0"}
MACHINES = {
    "this CPU": {"env": UNPINNED},
    "1 core": {"env": UNPINNED, "cores": 1},
    "48 KiB L1": {"env": {**UNPINNED, "DYBW_EIGEN_CACHE_SIZES": "49152,1048576,33554432"}},
    "other BLAS": {"env": {**UNPINNED, "OPENBLAS_CORETYPE": "Sandybridge"}},
    "other codegen": {"env": {**UNPINNED, "XLA_FLAGS": "--xla_cpu_max_isa=AVX", "ONEDNN_MAX_CPU_ISA": "AVX"}},
    "pinned": {"env": {}},
}
# Each library's choice alone (part sources), on top of this CPU's unpinned run.
SINGLE = {
    "OpenBLAS threads 1": {"env": {**UNPINNED, "OPENBLAS_NUM_THREADS": "1"}},
    "OpenBLAS Sandybridge": MACHINES["other BLAS"],
    "XLA max ISA AVX": {"env": {**UNPINNED, "XLA_FLAGS": "--xla_cpu_max_isa=AVX"}},
    "XLA max ISA AVX2": {"env": {**UNPINNED, "XLA_FLAGS": "--xla_cpu_max_isa=AVX2"}},
    "YNNPACK consistent": {"env": {**UNPINNED, "XLA_FLAGS": "--xla_cpu_enable_platform_dependent_math=false"}},
    "oneDNN AVX": {"env": {**UNPINNED, "ONEDNN_MAX_CPU_ISA": "AVX"}},
    "Eigen 48 KiB L1": MACHINES["48 KiB L1"],
    "numpy without AVX2": {"env": {**UNPINNED, "NPY_DISABLE_CPU_FEATURES": "X86_V3"}},
}
PIN_VARIABLES = {item.variable for item in pins()} | {"DYBW_EIGEN_CACHE_SIZES", OPT_OUT}


def child_env(machine: dict) -> dict:
    """This environment without any pin, plus the machine's variables (none: dybw pins them)."""
    env = {key: value for key, value in os.environ.items() if key not in PIN_VARIABLES}
    env.update(machine["env"])
    env["DYBW_CACHE_DIR"] = str(SCRATCH / "cache")  # one entry per BLAS fingerprint: each machine's own PCA
    return env


def run_job(name: str, overrides: list[str], machine: dict) -> dict:
    """``python run.py`` one job (runner=local) on an emulated machine; its summary, hashes and wall time."""
    job_dir = SCRATCH / "jobs" / name
    shutil.rmtree(job_dir, ignore_errors=True)
    command = [
        sys.executable,
        str(REPO / "run.py"),
        *overrides,
        "runner=local",
        "logger=none",
        "progress=false",
        "force=true",
        f"hydra.run.dir={job_dir}",
    ]
    cores = machine.get("cores")
    preexec = (lambda: os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:cores]))) if cores else None
    started = time.perf_counter()
    done = subprocess.run(
        ["nice", "-n", "10", *command],
        cwd=REPO,
        env=child_env(machine),
        capture_output=True,
        text=True,
        preexec_fn=preexec,
        timeout=7200,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{name}: run.py failed:\n{done.stderr[-3000:]}")
    metrics = pd.read_csv(job_dir / "metrics.csv")
    summary = json.loads((job_dir / "summary.json").read_text())
    steady = metrics.iloc[-1]
    previous = metrics.iloc[-2]
    return {
        "name": name,
        "overrides": overrides,
        "summary": {k: summary[k] for k in ("final_test_accuracy", "final_train_loss", "iterations_to_target")},
        "metrics": _hash(metrics.drop(columns=["wall_seconds"])),
        "timeline": _hash(pd.read_parquet(job_dir / "timeline.parquet")),
        "wall": wall,
        "per_iteration": (steady.wall_seconds - previous.wall_seconds) / (steady.iteration - previous.iteration),
    }


def _hash(frame: pd.DataFrame) -> str:
    return hashlib.sha256(pd.util.hash_pandas_object(frame, index=False).values.tobytes()).hexdigest()[:12]


def features_hash(dataset: str, machine: dict) -> str:
    """The PCA features the machine's preprocessing computes (fitted in a child on that machine)."""
    code = (
        "import dybw, hashlib\n"  # dybw first, as every entry point: numpy then loads pinned
        "from omegaconf import OmegaConf\n"
        "from dybw.data import load_dataset\n"
        f"cfg = OmegaConf.load('{REPO}/conf/dataset/{dataset}.yaml')\n"
        "d = load_dataset(cfg, 16, 0)\n"
        "print(hashlib.sha256(d.x_train.tobytes() + d.x_test.tobytes()).hexdigest()[:12])\n"
    )
    cores = machine.get("cores")
    preexec = (lambda: os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:cores]))) if cores else None
    done = subprocess.run(
        ["nice", "-n", "10", sys.executable, "-c", code],
        cwd=REPO,
        env=child_env(machine),
        capture_output=True,
        text=True,
        preexec_fn=preexec,
        timeout=3600,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return done.stdout.strip()


# ---------------------------------------------------------------------------------------------------


def part_sources(iterations: int) -> list[dict]:
    rows = []
    cases = {**{f"machine: {k}": v for k, v in MACHINES.items()}, **{f"alone: {k}": v for k, v in SINGLE.items()}}
    for dataset, experiment in (("cifar10", "paper_cifar10"), ("mnist", "paper_mnist")):
        overrides = [f"experiment={experiment}", "algo=cb_full", "seed=0", f"iterations={iterations}"]
        for label, machine in cases.items():
            features = features_hash(dataset, machine)
            job = run_job(f"sources-{dataset}-{label}".replace(" ", "_").replace(":", ""), overrides, machine)
            rows.append({"dataset": dataset, "case": label, "features": features, **job})
            print(f"  {dataset:8s} {label:32s} features {features} metrics {job['metrics']} ({job['wall']:.0f} s)")
    print("\n| dataset | case | PCA features | training metrics | clock | final accuracy |\n|---|---|---|---|---|---|")
    for dataset in ("cifar10", "mnist"):
        mine = [r for r in rows if r["dataset"] == dataset]
        unpinned = next(r for r in mine if r["case"] == "machine: this CPU")
        pinned = next(r for r in mine if r["case"] == "machine: pinned")
        for r in mine:
            same = [_same(r[key], unpinned[key], pinned[key]) for key in ("features", "metrics", "timeline")]
            accuracy = r["summary"]["final_test_accuracy"]
            print(f"| {dataset} | {r['case']} | {' | '.join(same)} | {accuracy:.4f} |")
    return rows


def _same(value: str, unpinned: str, pinned: str) -> str:
    return " = ".join(["unpinned"] * (value == unpinned) + ["pinned"] * (value == pinned)) or "differs"


def _paired(runs: pd.DataFrame, value: str, how: str) -> tuple[float, float]:
    wide = runs.pivot(index="seed", columns="algo", values=value)
    per_seed = wide["cb_dybw"] / wide["cb_full"] if how == "ratio" else 100 * (wide["cb_dybw"] - wide["cb_full"])
    return float(per_seed.mean()), float(per_seed.std(ddof=1))


SPREAD_SETTINGS = {
    "CIFAR-10": ["experiment=paper_cifar10", "target_accuracy=0.5"],
    "MNIST shards": ["experiment=paper_mnist", "dataset.split=shards"],
}
# C1: cb-DyBW's iterations to target against N, with the theorem's step (eta0 = 0.025 N) and a fixed one.
SPEEDUP = {
    "theorem": [[f"num_workers={n}", f"algo.eta0={0.025 * n:g}"] for n in (4, 8, 16, 32, 64)],
    "fixed": [[f"num_workers={n}", "algo.eta0=1.6"] for n in (4, 8, 16, 32, 64)],
}


def part_spread(seeds: list[int], machines: list[str], settings: list[str], done: list[dict], save) -> list[dict]:
    """Every (setting, machine, job, seed) not in ``done`` (rows of an earlier, interrupted run), saving after
    each job; settings first, so that the first setting is complete on every machine before the next."""
    rows = list(done)
    finished = {(r["machine"], r["setting"], r["label"], r["seed"]) for r in done if "label" in r}
    for setting in settings:
        for machine_name in machines:
            for label, overrides, algo in _spread_jobs(setting):
                for seed in seeds:
                    if (machine_name, setting, label, seed) in finished:
                        continue
                    name = f"spread-{machine_name}-{setting}-{label}-{seed}".replace(" ", "_")
                    job = run_job(name, [*overrides, f"seed={seed}"], MACHINES[machine_name])
                    workers = next((int(o.split("=")[1]) for o in overrides if o.startswith("num_workers=")), 16)
                    rows.append(
                        {
                            "machine": machine_name,
                            "setting": setting,
                            "label": label,
                            "algo": algo,
                            "seed": seed,
                            "workers": workers,
                            **job,
                        }
                    )
                    save(rows)
                    print(
                        f"  {machine_name:14s} {setting:12s} {label:12s} seed {seed}: accuracy "
                        f"{job['summary']['final_test_accuracy']:.4f}, iterations to target "
                        f"{job['summary']['iterations_to_target']} ({job['wall']:.0f} s)",
                        flush=True,
                    )
    print_spread(rows)
    return rows


def _spread_jobs(setting: str) -> list[tuple[str, list[str], str]]:
    """(label, overrides, algo or step rule) of one seed's jobs in a setting."""
    if setting == "C1 speed-up":
        return [
            (f"{rule} {point[0]}", ["experiment=fig_speedup", "algo=cb_dybw", *point], rule)
            for rule, points in SPEEDUP.items()
            for point in points
        ]
    return [(algo, [*SPREAD_SETTINGS[setting], f"algo={algo}"], algo) for algo in ("cb_full", "cb_dybw")]


def print_spread(rows: list[dict]) -> None:
    """The REPRODUCTION numbers per emulated machine, and their spread (max - min) over the unpinned ones."""
    from dybw.figures.analysis import loglog_slope, mean_std

    frame = pd.DataFrame(
        [
            {
                **{k: r[k] for k in ("machine", "setting", "algo", "seed")},
                "workers": r.get("workers", 16),
                "accuracy": r["summary"]["final_test_accuracy"],
                "iterations": r["summary"]["iterations_to_target"],
            }
            for r in rows
        ]
    )
    numbers = []
    for machine_name in dict.fromkeys(frame.machine):
        mine = frame[frame.machine == machine_name]
        cifar, shards = mine[mine.setting == "CIFAR-10"], mine[mine.setting == "MNIST shards"]
        speedup = mine[mine.setting == "C1 speed-up"]
        entry = {"machine": machine_name}
        if len(cifar):
            entry["C3 CIFAR-10 ratio"] = _paired(cifar, "iterations", "ratio")
            entry["C5 CIFAR-10 points"] = _paired(cifar, "accuracy", "points")
            entry["cb-Full CIFAR-10 accuracy"] = mean_std(cifar[cifar.algo == "cb_full"].accuracy)[:2]
        if len(shards):
            entry["C6 shards points"] = _paired(shards, "accuracy", "points")
        for rule in ("theorem", "fixed"):
            points = speedup[speedup.algo == rule]
            if len(points):
                per_seed = [loglog_slope(g.workers, g.iterations) for _, g in points.groupby("seed")]
                entry[f"C1 slope, {rule} step"] = mean_std(per_seed)[:2]
        numbers.append(entry)
    keys = list(dict.fromkeys(k for n in numbers for k in n if k != "machine"))
    print("\n| machine | " + " | ".join(keys) + " |\n|---|" + "---|" * len(keys))
    for n in numbers:
        print(
            f"| {n['machine']} | "
            + " | ".join(f"{n[k][0]:.4f} ± {n[k][1]:.4f}" if k in n else "-" for k in keys)
            + " |"
        )
    unpinned = [n for n in numbers if n["machine"] != "pinned"]
    print("| spread (max - min, unpinned) | " + " | ".join(_spread(unpinned, k) for k in keys) + " |")


def _spread(numbers: list[dict], key: str) -> str:
    means = [n[key][0] for n in numbers if key in n]
    return f"{max(means) - min(means):.4f}" if len(means) > 1 else "-"


def part_speed(reps: int) -> dict:
    overrides = ["experiment=paper_mnist", "algo=cb_dybw", "iterations=200", "eval_every=100"]
    runs = {"pinned": [], "unpinned": []}
    run_job("speed-warm", overrides, MACHINES["pinned"])  # fills the pinned PCA cache entry
    run_job("speed-warm", overrides, MACHINES["this CPU"])
    for rep in range(reps):
        for label in ("pinned", "unpinned") if rep % 2 == 0 else ("unpinned", "pinned"):
            machine = MACHINES["pinned" if label == "pinned" else "this CPU"]
            runs[label].append(run_job(f"speed-{label}-{rep}", overrides, machine))
            last = runs[label][-1]
            print(f"  {label:9s} rep {rep}: {last['wall']:.1f} s, {1000 * last['per_iteration']:.1f} ms/it", flush=True)
    fits = {"pinned": {}, "unpinned": {}}
    for dataset in ("mnist", "cifar10"):
        for rep in range(reps):
            for label in ("pinned", "unpinned") if rep % 2 == 0 else ("unpinned", "pinned"):
                machine = MACHINES["pinned" if label == "pinned" else "this CPU"]
                fits[label].setdefault(dataset, []).append(fit_seconds(dataset, machine))
    eigen = eigen_pin_seconds()
    wall = {k: [r["wall"] for r in v] for k, v in runs.items()}
    per_it = {k: [r["per_iteration"] for r in v] for k, v in runs.items()}
    print("\n| measure | pinned | unpinned | pinned / unpinned |\n|---|---|---|---|")
    print(
        f"| run.py process wall, s (median of {reps}) | {fmt(med(wall['pinned']), 1)} | "
        f"{fmt(med(wall['unpinned']), 1)} | {med(wall['pinned']) / med(wall['unpinned']):.2f} |"
    )
    print(
        f"| steady time per iteration, ms | {fmt(1000 * med(per_it['pinned']), 1)} | "
        f"{fmt(1000 * med(per_it['unpinned']), 1)} | {med(per_it['pinned']) / med(per_it['unpinned']):.2f} |"
    )
    for dataset in ("mnist", "cifar10"):
        p, u = med(fits["pinned"][dataset]), med(fits["unpinned"][dataset])
        print(f"| PCA fit {dataset} (uncached), s | {p:.1f} | {u:.1f} | {p / u:.2f} |")
    print(f"| pinning Eigen's cache sizes at TF start, s | {eigen:.2f} | - | - |")
    return {"runs": runs, "fits": fits, "eigen_pin_seconds": eigen}


def fit_seconds(dataset: str, machine: dict) -> float:
    """Seconds of ``fit_transform`` (no cache) in a child process on the machine."""
    k = {"mnist": 50, "cifar10": 100}[dataset]
    code = (
        "import dybw, time\n"
        "from dybw.data import load_raw, data_dir_from_env\n"
        "from dybw.data.preprocess import fit_transform\n"
        f"x = load_raw('{dataset}', data_dir_from_env())[0]\n"
        "x = x.reshape(len(x), -1)\n"
        "t = time.perf_counter()\n"
        f"fit_transform(x, normalize='standard', pca_dim={k}, whiten=True)\n"
        "print(time.perf_counter() - t)\n"
    )
    done = subprocess.run(
        ["nice", "-n", "10", sys.executable, "-c", code], env=child_env(machine), capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return float(done.stdout.strip())


def eigen_pin_seconds() -> float:
    code = (
        "import time\nfrom dybw import numerics\nimport tensorflow\n"
        "t = time.perf_counter(); assert numerics.pin_eigen_cache_sizes(); print(time.perf_counter() - t)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=child_env(MACHINES["pinned"]), capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return float(done.stdout.strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("sources", "spread", "speed", "all"), default="all")
    parser.add_argument("--iterations", type=int, default=100, help="part sources: iterations per job")
    parser.add_argument("--seeds", default="0,1,2", help="part spread: seeds")
    # "1 core" is left out by default: here it computes the pinned bits (only OpenBLAS's threads differ).
    spread_machines = ",".join(m for m in MACHINES if m != "1 core")
    parser.add_argument("--machines", default=spread_machines, help="part spread: emulated machines")
    parser.add_argument(
        "--settings",
        default=",".join(SPREAD_SETTINGS),
        help=f"part spread: of {', '.join([*SPREAD_SETTINGS, 'C1 speed-up'])} (C1: 30 more jobs per machine)",
    )
    parser.add_argument("--table", type=Path, help="print the spread table of a JSON this script wrote, and exit")
    parser.add_argument("--reps", type=int, default=3, help="part speed: repetitions of each side")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "bench" / "cpu_drift.json")
    args = parser.parse_args()
    if args.table:
        print_spread(json.loads(args.table.read_text())["spread"])
        return 0
    started = time.perf_counter()
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"# {' '.join(sys.argv)}\n# uptime: {uptime}", flush=True)
    out = {"environment": environment(command=" ".join(sys.argv), uptime_before=uptime)}
    if os.path.exists(args.out):
        out = {**json.loads(Path(args.out).read_text()), **out}
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def save(spread_rows=None):
        if spread_rows is not None:
            out["spread"] = spread_rows
        args.out.write_text(json.dumps(out, indent=1, default=str))

    if args.part in ("sources", "all"):
        out["sources"] = part_sources(args.iterations)
        save()
    if args.part in ("spread", "all"):
        seeds = [int(s) for s in args.seeds.split(",")]
        part_spread(seeds, args.machines.split(","), args.settings.split(","), out.get("spread", []), save)
    if args.part in ("speed", "all"):
        out["speed"] = part_speed(args.reps)
        save()
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"\nTotal {time.perf_counter() - started:.0f} s. uptime: {uptime}. JSON: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
