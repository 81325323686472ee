"""The MPI runner's neighbour exchange against a bare mpi4py exchange, and runner=mpi against runner=local.

    python bench/bench_mpi.py            # full: R = 2 4 ranks, P = 510 7818 100000; 2 x 2 MNIST jobs (~5 min)
    python bench/bench_mpi.py --quick    # short measurements, 1 x 2 short jobs (~1.5 min)

The driver (this script without ``--worker``) launches everything itself: ``mpiexec -n R python
bench/bench_mpi.py --worker ...`` for part 1 and ``python run.py ...`` for part 2.

Part 1, exchange cost per iteration.  The project's default graph (``topology=erdos_renyi``, p = 0.3,
N = 16; composed with Hydra as run.py does), workers split over R ranks by ``worker_groups`` and the
``ExchangePlan`` of each rank; P float32 parameters per worker: 510 (logreg on MNIST PCA-50), 7818 (the
default mlp [128]) and 100000 (large).  In one MPI world, after a warm-up, each rank times K iterations of

(A)  bare: for each peer rank one ``Irecv`` and one ``Isend`` of the same number of float32 rows
     ``[rows, P]`` the plan sends and receives, from preallocated contiguous buffers, then
     ``MPI.Request.Waitall`` -- written here with mpi4py directly: the floor for those bytes on that graph.
     Its send buffers never change, so the receiver copies cache lines that are clean and shared.
(A') the same with the send buffers rewritten in place (``*= 1``, in cache) before each exchange: the floor
     for data that changes every iteration, as a run's does.
(B)  ``NeighbourExchange.exchange`` (dybw.mpi.exchange) on the same plan, ``on_wait=None``: sends the rows
     of this rank's ``[M, P]`` array the plan names straight from it (a slice, or an MPI indexed datatype
     when they are not adjacent; no packing), receives the peers' rows into the ``[Q, P]`` buffer the
     mixing reads in place -- everything the mixing needs.
(H)  the same as (B) with ``on_wait=Heartbeat(...).waiting``: the runner as it runs in a job
     (``dybw.mpi.__main__``): a helper thread beats while the main thread blocks in ``Waitall``.
     The goal is on H/A.

All ranks start each measurement after a barrier; a measurement is the slowest rank's time / K.  The
variants alternate (A A' B H, then H B A' A, ...), medians over repetitions; ratios are medians of
the ratios of measurements taken back to back (``cpu``: the same in process CPU time, summed over the ranks).

Part 2, end to end.  The same job -- the default config (MNIST PCA-50, mlp [128], cb_dybw, straggler=paper,
N = 16, batch 1024) with ``logger=none progress=false``, ``iterations`` and ``eval_every`` from the options
-- run by ``python run.py`` with ``runner=local`` and with ``runner=mpi runner.ranks=2 runner.clock=virtual``,
alternating, each in a fresh directory with ``force=true``.  Per job: the process wall time (Python and TF
start-up, mpiexec, data, compilation, run), the job's ``summary.json`` ``wall_seconds`` (from data loading
to the end) and the steady time per iteration from ``metrics.csv`` -- (wall at K - wall at the previous
evaluation) / (K - that iteration), which leaves out start-up and XLA compilation and includes one
evaluation.  The two runs' metrics (without wall_seconds) are compared too: they must be identical.

Output: markdown tables on stdout, JSON with every repetition in ``results/bench/mpi.json``
(``mpi_quick.json`` for ``--quick``); ``results/`` is git-ignored.
"""

from __future__ import annotations

import dybw  # noqa: F401 - first: numpy then loads the CPU kernels dybw pins (src/dybw/numerics.py)

# isort: split
import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from common import REPO, compose, environment, fmt, med  # bench/common.py; sets DYBW_DATA_DIR

GOAL = 1.2
RANKS = (2, 4)
PARAMS = (510, 7818, 100_000)
PARAM_NAMES = {510: "logreg PCA-50", 7818: "mlp [128]", 100_000: "large"}
LEGEND_EXCHANGE = (
    "A = bare mpi4py Irecv/Isend per peer rank of the plan's rows from preallocated buffers + Waitall; "
    "A′ = the same with the send buffers rewritten in place before each exchange (fresh data, as in a run); "
    "B = NeighbourExchange.exchange without on_wait; H = B with the heartbeat's on_wait, as the runner "
    "calls it in a job (a helper thread beats while Waitall blocks). Times in µs per iteration "
    "(the slowest rank's), medians; ratios = medians of the ratios of measurements taken back to back (cpu: "
    "process CPU time summed over the ranks). rows = rows sent per iteration by all ranks together; "
    "load = highest 1-min load average seen (R ranks busy-poll: R > 2 oversubscribes the 2 cores)."
)
LEGEND_E2E = (
    "process = python run.py from start to exit = start-up (Python, Hydra, TF imports, mpiexec: process − job) "
    "+ setup (data, PCA, model, engine: job − the run's wall at K) + run (metrics.csv wall_seconds at K: "
    "evaluations, XLA compilation, iterations); job = summary.json wall_seconds; per it = steady time per "
    "iteration from metrics.csv (the last evaluation interval, one evaluation included); first interval "
    "= the same for the first one "
    "(XLA compilation of the step included). Medians over repetitions; ratios = medians of mpi/local over "
    "the back-to-back pairs."
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="short measurements, one short pair of jobs")
    p.add_argument(
        "--ranks",
        type=lambda s: tuple(int(x) for x in s.split(",")),
        default=RANKS,
        help="comma-separated rank counts for part 1 (default 2,4)",
    )
    p.add_argument(
        "--params",
        type=lambda s: tuple(int(x) for x in s.split(",")),
        default=PARAMS,
        help="comma-separated parameter counts P (default 510,7818,100000)",
    )
    p.add_argument(
        "--reps", type=int, default=None, help="repetitions of each variant per case (default 15; --quick: 5)"
    )
    p.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="target duration of one measurement of the median variant, sets K (default 0.2; --quick: 0.05)",
    )
    p.add_argument("--e2e-reps", type=int, default=None, help="jobs per runner in part 2 (default 2; --quick: 1)")
    p.add_argument(
        "--iterations", type=int, default=None, help="iterations of the part 2 jobs (default 200; --quick: 60)"
    )
    p.add_argument(
        "--eval-every", type=int, default=None, help="eval_every of the part 2 jobs (default 100; --quick: 30)"
    )
    p.add_argument("--skip-exchange", action="store_true", help="only part 2")
    p.add_argument("--skip-e2e", action="store_true", help="only part 1")
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Hydra override for both parts, e.g. --override topology=ring (repeatable)",
    )
    p.add_argument(
        "--out", type=Path, default=None, help="JSON output (default results/bench/mpi.json; --quick: mpi_quick.json)"
    )
    p.add_argument("--worker", choices=["exchange"], help=argparse.SUPPRESS)  # one rank under mpiexec
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)  # where rank 0 writes part 1's JSON
    args = p.parse_args(argv)
    args.reps = max(3, args.reps or (5 if args.quick else 15))
    args.seconds = args.seconds or (0.05 if args.quick else 0.2)
    args.e2e_reps = args.e2e_reps or (1 if args.quick else 2)
    args.iterations = args.iterations or (60 if args.quick else 200)
    args.eval_every = args.eval_every or (30 if args.quick else 100)
    args.out = args.out or REPO / "results" / "bench" / ("mpi_quick.json" if args.quick else "mpi.json")
    return args


# ---------------------------------------------------------------------------------------------------
# Part 1: one rank under mpiexec
# ---------------------------------------------------------------------------------------------------
class BareExchange:
    """(A): what the plan moves, with nothing around it: Irecv/Isend per peer rank, then Waitall."""

    def __init__(self, comm, plan, num_params: int, rows: np.ndarray):
        self.comm = comm
        self.peers = sorted(plan.recv_workers)
        self.recv = [(p, np.empty((len(plan.recv_workers[p]), num_params), np.float32)) for p in self.peers]
        self.send = [(p, np.ascontiguousarray(rows[plan.send_rows[p]])) for p in sorted(plan.send_rows)]

    def exchange(self, rows, iteration: int) -> None:
        from mpi4py import MPI

        tag = iteration % 32000
        requests = [self.comm.Irecv(buffer, source=p, tag=tag) for p, buffer in self.recv]
        requests += [self.comm.Isend(buffer, dest=p, tag=tag) for p, buffer in self.send]
        MPI.Request.Waitall(requests)


class FreshBareExchange(BareExchange):
    """(A′): (A) with its send buffers rewritten in place (``*= 1``, in cache) before each
    exchange -- the data a run sends was just written by the sender (so, most likely, the receiver's copy
    pulls cache lines modified on another core); (A) resends untouched buffers."""

    def exchange(self, rows, iteration: int) -> None:
        for _, buffer in self.send:
            np.multiply(buffer, np.float32(1), out=buffer)
        super().exchange(rows, iteration)


KEYS = {"A": "bare", "A′": "bare_fresh", "B": "exchange", "H": "heartbeat"}


def exchange_worker(args) -> int:
    from mpi4py import MPI

    from dybw.mpi.exchange import ExchangePlan, NeighbourExchange, worker_groups
    from dybw.mpi.health import Heartbeat

    comm = MPI.COMM_WORLD
    rank, size = comm.rank, comm.size
    if rank == 0:
        cfg, graph = compose(["dataset=mnist", *args.override])
        setup = {
            "num_workers": cfg.num_workers,
            "topology": cfg.topology.name,
            "adjacency": graph.adjacency,
            "mean_degree": float(graph.degrees.mean()),
        }
    else:
        setup = None
    setup = comm.bcast(setup, root=0)  # setup only: pickled once
    groups = worker_groups(setup["num_workers"], size)
    plan = ExchangePlan.build(np.asarray(setup["adjacency"]), groups, rank)
    heartbeat = Heartbeat(Path(args.result).parent / "heartbeat", rank)  # interval 1 s, as in a job
    rng = np.random.default_rng(rank)
    counter = [0]

    def timed(exchange, rows, iterations):
        comm.Barrier()
        wall, cpu = time.perf_counter(), time.process_time()
        first = counter[0]
        for k in range(first, first + iterations):
            exchange(rows, k)
        counter[0] += iterations
        mine = np.array([time.perf_counter() - wall, time.process_time() - cpu]) / iterations
        everyone = np.empty((size, 2))
        comm.Allgather(mine, everyone)
        return [float(everyone[:, 0].max()), float(everyone[:, 1].sum())]  # slowest rank's wall, total CPU

    cases = []
    for num_params in args.params:
        rows = rng.standard_normal((len(plan.mine), num_params)).astype(np.float32)
        bare = BareExchange(comm, plan, num_params, rows)
        variants = {
            "A": bare.exchange,
            "A′": FreshBareExchange(comm, plan, num_params, rows).exchange,
            "B": NeighbourExchange(comm, plan, num_params).exchange,
            "H": NeighbourExchange(comm, plan, num_params, on_wait=heartbeat.waiting).exchange,
        }
        bare.exchange(rows, 0)  # every variant receives exactly the rows (A) receives
        received = np.concatenate([buffer for _, buffer in bare.recv]) if bare.recv else np.empty((0, num_params))
        for name in ("B", "H"):
            assert np.array_equal(variants[name](rows, 1), received), f"({name}) moved other rows"
        loads = [os.getloadavg()[0]]
        warm = max(5, min(200, int(2e7 / (num_params * 16))))
        for fn in variants.values():
            timed(fn, rows, warm)
        probe = med([timed(fn, rows, warm)[0] for fn in variants.values()])  # the median variant's time
        iterations = comm.bcast(int(min(20000, max(10, args.seconds / max(probe, 1e-7)))), root=0)
        measured = {name: [] for name in variants}
        for rep in range(args.reps):
            order = list(variants) if rep % 2 == 0 else list(variants)[::-1]
            for name in order:
                measured[name].append(timed(variants[name], rows, iterations))
            loads.append(os.getloadavg()[0])
        sent = comm.allreduce(sum(len(r) for r in plan.send_rows.values()))
        messages = comm.allreduce(len(plan.send_rows))
        if rank == 0:
            m = {name: np.asarray(values) for name, values in measured.items()}
            us = lambda x: 1e6 * med(x)  # noqa: E731
            case = {
                "ranks": size,
                "num_params": num_params,
                "model": PARAM_NAMES.get(num_params, ""),
                "rows_sent": int(sent),
                "messages": int(messages),
                "bytes_per_iteration": int(sent * num_params * 4),
                "iterations": iterations,
                "reps": args.reps,
                "bandwidth_gb_s": sent * num_params * 4 / med(m["A"][:, 0]) / 1e9,
                "loadavg_1min": loads,
                "topology": setup["topology"],
                "num_workers": setup["num_workers"],
                "mean_degree": setup["mean_degree"],
            }
            for name, key in KEYS.items():
                if name not in m:
                    continue
                case[f"{key}_us"], case[f"{key}_cpu_us"] = us(m[name][:, 0]), us(m[name][:, 1])
                case[f"{key}_us_min"] = 1e6 * float(m[name][:, 0].min())
                case[f"{key}_us_all"], case[f"{key}_cpu_us_all"] = (
                    (1e6 * m[name][:, 0]).tolist(),
                    (1e6 * m[name][:, 1]).tolist(),
                )
                if name != "A":
                    suffix = "" if name == "B" else "_" + key
                    case[f"ratio{suffix}"] = med(m[name][:, 0] / m["A"][:, 0])
                    case[f"ratio{suffix}_cpu"] = med(m[name][:, 1] / m["A"][:, 1])
                    case[f"ratio{suffix}_of_minima"] = float(m[name][:, 0].min() / m["A"][:, 0].min())
                if name not in ("A", "A′"):
                    case[f"ratio_fresh{suffix}"] = med(m[name][:, 0] / m["A′"][:, 0])
            cases.append(case)
            print(
                f"  R={size} P={num_params:6d}: "
                + "  ".join(f"{n} {1e6 * med(m[n][:, 0]):8.1f}" for n in m)
                + f" us/it  B/A {case['ratio']:.2f}  H/A {case['ratio_heartbeat']:.2f}  "
                f"K={iterations}x{args.reps}  load {max(loads):.1f}",
                flush=True,
            )
    heartbeat.beat(counter[0], finished=True)
    if rank == 0:
        args.result.write_text(
            json.dumps(
                {
                    "cases": cases,
                    "mpi_library": MPI.Get_library_version().strip(),
                    "mpi4py": __import__("mpi4py").__version__,
                }
            )
        )
    comm.Barrier()
    return 0


# ---------------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------------
from dybw.mpi.launch import _descendants  # noqa: E402 - the launcher's process-tree walk


def run_child(command: list[str], cwd: Path, timeout: float) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``command``; on timeout or Ctrl-C kill it and everything below it (mpiexec's proxies and ranks
    live in sessions of their own).  Returns (completed process, wall seconds)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except BaseException:
        for pid in [*_descendants(process.pid), process.pid]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        process.wait()
        raise
    return subprocess.CompletedProcess(command, process.returncode, output, ""), time.perf_counter() - started


def part_exchange(args, scratch: Path) -> tuple[list[dict], dict]:
    cases, info = [], {}
    for ranks in args.ranks:
        result = scratch / f"exchange-{ranks}" / "result.json"
        result.parent.mkdir(parents=True)
        command = [
            "mpiexec",
            "-n",
            str(ranks),
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            "exchange",
            "--result",
            str(result),
            "--params",
            ",".join(map(str, args.params)),
            "--reps",
            str(args.reps),
            "--seconds",
            str(args.seconds),
        ]
        command += [f"--override={o}" for o in args.override]
        print(f"$ {shlex.join(command[:4])} bench/bench_mpi.py --worker exchange ...", flush=True)
        done, seconds = run_child(command, REPO, timeout=1800)
        if done.returncode != 0 or not result.exists():
            print(done.stdout[-4000:])
            raise SystemExit(f"part 1 with {ranks} ranks failed (exit code {done.returncode})")
        sys.stdout.write(done.stdout)
        data = json.loads(result.read_text())
        cases += data["cases"]
        info = {k: v for k, v in data.items() if k != "cases"}
        print(f"  [{seconds:.0f} s]", flush=True)
    return cases, info


RUNNERS = {"local": ["runner=local"], "mpi": ["runner=mpi", "runner.ranks=2", "runner.clock=virtual"]}


def one_job(args, scratch: Path, runner: str, rep: int) -> dict:
    cwd = scratch / f"e2e-{runner}-{rep}"
    cwd.mkdir(parents=True)
    overrides = [
        "dataset=mnist",
        "logger=none",
        "progress=false",
        f"iterations={args.iterations}",
        f"eval_every={args.eval_every}",
        "force=true",
        "experiment_name=bench_mpi",
        *RUNNERS[runner],
        *args.override,
    ]
    load_before = os.getloadavg()[0]
    done, seconds = run_child([sys.executable, str(REPO / "run.py"), *overrides], cwd, timeout=3600)
    summaries = list((cwd / "results").glob("*/*/summary.json"))
    if done.returncode != 0 or len(summaries) != 1:
        print(done.stdout[-4000:])
        raise SystemExit(f"the {runner} job failed (exit code {done.returncode})")
    job_dir = summaries[0].parent
    summary = json.loads(summaries[0].read_text())
    assert summary["status"] == "completed", summary
    import pandas as pd

    metrics = pd.read_csv(job_dir / "metrics.csv")
    it, wall = metrics["iteration"].to_numpy(), metrics["wall_seconds"].to_numpy()
    steady = (wall[-1] - wall[-2]) / (it[-1] - it[-2])
    row = {
        "runner": runner,
        "rep": rep,
        "process_seconds": seconds,
        "job_seconds": summary["wall_seconds"],
        "per_iteration_ms": 1e3 * steady,
        "first_interval_ms": 1e3 * (wall[1] - wall[0]) / (it[1] - it[0]),
        "startup_seconds": seconds - summary["wall_seconds"],
        "setup_seconds": summary["wall_seconds"] - wall[-1],
        "run_seconds": wall[-1],
        "eval0_seconds": wall[0],
        "steady_from": int(it[-2]),
        "iterations": int(it[-1]),
        "final_test_accuracy": summary["final_test_accuracy"],
        "loadavg_1min": [load_before, os.getloadavg()[0]],
        "overrides": overrides,
    }
    row["metrics"] = metrics.drop(columns="wall_seconds").to_dict("list")
    print(
        f"  {runner:5s} #{rep}: process {seconds:6.1f} s  job {row['job_seconds']:6.1f} s  "
        f"{row['per_iteration_ms']:7.2f} ms/it (steady)  acc {row['final_test_accuracy']:.4f}  "
        f"load {max(row['loadavg_1min']):.1f}",
        flush=True,
    )
    return row


def compare_metrics(a: dict, b: dict) -> tuple[float, str, bool]:
    """Largest relative difference over the columns (and which), and whether every value is identical,
    as the MPI tests require (NaN equal to NaN)."""
    worst, column, identical = 0.0, "", True
    for key in a:
        x, y = np.asarray(a[key], float), np.asarray(b[key], float)
        both_nan = np.isnan(x) & np.isnan(y)
        x, y = x[~both_nan], y[~both_nan]
        identical = identical and bool(np.array_equal(x, y))
        diff = np.abs(x - y)
        scale = np.maximum(np.abs(x), np.abs(y))
        relative = float(np.max(np.where(scale > 0, diff / np.where(scale > 0, scale, 1), 0.0))) if x.size else 0.0
        if relative > worst or not column:
            worst, column = relative, key
    return worst, column, identical


def part_e2e(args, scratch: Path) -> tuple[list[dict], dict]:
    jobs = []
    for rep in range(args.e2e_reps):
        order = ("local", "mpi") if rep % 2 == 0 else ("mpi", "local")
        for runner in order:
            jobs.append(one_job(args, scratch, runner, rep))
    by = {r: [j for j in jobs if j["runner"] == r] for r in RUNNERS}
    pairs = list(zip(by["local"], by["mpi"]))
    summary = {"reps": args.e2e_reps, "iterations": args.iterations, "eval_every": args.eval_every}
    for key in (
        "process_seconds",
        "job_seconds",
        "startup_seconds",
        "setup_seconds",
        "run_seconds",
        "per_iteration_ms",
        "first_interval_ms",
    ):
        for runner in RUNNERS:
            summary[f"{runner}_{key}"] = med([j[key] for j in by[runner]])
        summary[f"ratio_{key}"] = med([m[key] / loc[key] for loc, m in pairs])
    compared = [compare_metrics(loc["metrics"], m["metrics"]) for loc, m in pairs]
    worst = max(compared)
    summary.update(
        same_numbers_max_rel_diff=worst[0],
        same_numbers_worst_column=worst[1],
        same_numbers_identical=all(c[2] for c in compared),
    )
    summary["loadavg_max"] = max(max(j["loadavg_1min"]) for j in jobs)
    return jobs, summary


def markdown(cases: list[dict], e2e: dict | None) -> str:
    lines = []
    if cases:
        lines += [
            "| R | P | model | rows / msgs | KiB / it | K × reps | A bare | A′ fresh | B exchange | H runner | "
            "B/A | **H/A** | H/A′ | B/A′ | H/A cpu | load |",
            "|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for c in cases:
            flag = "" if c["ratio_heartbeat"] <= GOAL else " ✗"
            lines.append(
                f"| {c['ranks']} | {c['num_params']} | {c['model']} | {c['rows_sent']} / {c['messages']} | "
                f"{c['bytes_per_iteration'] / 1024:.0f} | {c['iterations']} × {c['reps']} | "
                f"{fmt(c['bare_us'], 1)} | "
                f"{fmt(c['bare_fresh_us'], 1)} | {fmt(c['exchange_us'], 1)} | {fmt(c['heartbeat_us'], 1)} | "
                f"{fmt(c['ratio'])} | **{fmt(c['ratio_heartbeat'])}**{flag} | "
                f"{fmt(c['ratio_fresh_heartbeat'])} | "
                f"{fmt(c['ratio_fresh'])} | {fmt(c['ratio_heartbeat_cpu'])} | {fmt(max(c['loadavg_1min']), 1)} |"
            )
    if e2e:
        if lines:
            lines.append("")
        lines += [
            "| runner | jobs | process s | = start-up | + setup | + run | job s (setup + run) | "
            "per it ms (steady) | first interval ms/it | load |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for runner, label in (("local", "local"), ("mpi", "mpi, 2 ranks, virtual")):
            v = lambda key, digits=1, runner=runner: fmt(e2e[f"{runner}_{key}"], digits)  # noqa: E731
            lines.append(
                f"| {label} | {e2e['reps']} | {v('process_seconds')} | {v('startup_seconds')} | "
                f"{v('setup_seconds')} | {v('run_seconds')} | {v('job_seconds')} | "
                f"{v('per_iteration_ms', 2)} | {v('first_interval_ms', 2)} | {fmt(e2e['loadavg_max'], 1)} |"
            )
        r = lambda key: fmt(e2e[f"ratio_{key}"])  # noqa: E731
        lines.append(
            f"| **mpi / local** | | **{r('process_seconds')}** | {r('startup_seconds')} | "
            f"{r('setup_seconds')} | {r('run_seconds')} | **{r('job_seconds')}** | "
            f"**{r('per_iteration_ms')}** | {r('first_interval_ms')} | |"
        )
        lines.append(
            f"\nSame numbers: largest relative difference between the runners' metrics.csv "
            f"{e2e['same_numbers_max_rel_diff']:.1e} ({e2e['same_numbers_worst_column']}); identical, as the tests "
            f"require: {'yes' if e2e['same_numbers_identical'] else 'no'}. "
            f"{e2e['iterations']} iterations, eval_every={e2e['eval_every']}."
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker == "exchange":
        return exchange_worker(args)
    command = shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv]))
    print(f"$ {command}", flush=True)
    env = environment(mpiexec=shutil.which("mpiexec"), DYBW_DATA_DIR=os.environ.get("DYBW_DATA_DIR"))
    print("# " + ", ".join(f"{k}={v}" for k, v in env.items()), flush=True)
    print(f"# uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}", flush=True)
    started = time.perf_counter()
    cases, info, jobs, e2e = [], {}, [], None
    with tempfile.TemporaryDirectory(prefix="bench_mpi_") as scratch:
        if not args.skip_exchange:
            print(
                f"# part 1: exchange per iteration, default graph (N=16) {args.override}, R in {args.ranks}, "
                f"P in {args.params}",
                flush=True,
            )
            cases, info = part_exchange(args, Path(scratch))
        if not args.skip_e2e:
            print(
                f"# part 2: runner=local vs runner=mpi runner.ranks=2 runner.clock=virtual, {args.e2e_reps} "
                f"job(s) each, {args.iterations} iterations, eval_every={args.eval_every}",
                flush=True,
            )
            jobs, e2e = part_e2e(args, Path(scratch))
    total = time.perf_counter() - started
    table = markdown(cases, e2e)
    print()
    print(table)
    if cases:
        print(f"\n{LEGEND_EXCHANGE} Goal: H/A <= {GOAL}.")
    if e2e:
        print(f"\n{LEGEND_E2E}")
    print(f"\nTotal {total:.0f} s. uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "command": command,
                "environment": {**env, **info},
                "goal_ratio": GOAL,
                "total_seconds": total,
                "legend": [LEGEND_EXCHANGE, LEGEND_E2E],
                "exchange": cases,
                "e2e_jobs": jobs,
                "e2e": e2e,
                "markdown": table,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"JSON: {args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
