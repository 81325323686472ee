"""Engine time per iteration against the bare batched TF step, side by side, for N = 8 .. 128 workers.

    python bench/bench_engine.py            # full: N in 8 16 32 64 128, logreg and mlp (~5 minutes)
    python bench/bench_engine.py --quick    # N in 8 16, short measurements (< 1 minute)

Setup: MNIST PCA-50 (``dybw.data.load_dataset``, ``$DYBW_DATA_DIR``), ``algo=cb_dybw``, ``straggler=paper``,
the project's default topology (``erdos_renyi``, p = 0.3), ``model=logreg`` and the default ``model=mlp``
([128]), batch 256 per worker for every N (N = 128 shards hold 468 samples, so the paper's 1024 cannot be
used across the range); configs are composed with Hydra exactly as ``tests/helpers.compose`` / run.py do.

For every model and N, in one process, after a warm-up (XLA compilation excluded):

(A)  bare step: ``StackedTrainer.step`` of the engine's own trainer (the same compiled XLA program) called
     K times with one fixed precomputed ``[N, B]`` index tensor, one fixed ``W`` and the learning rate:
     the floor -- the batched TF step and the ``.numpy()`` of its losses, nothing else.
(A') the same, cycling through a chunk of real, different indices and ``W`` converted beforehand: the
     floor that pays the cache misses of gathering different rows every iteration, as a run does.
(B)  engine: ``IterationEngine.run`` for K iterations (K a multiple of ``runner.chunk``) with
     ``eval_every = K``, from a fresh schedule and timeline; the time inside the two evaluations it still
     makes (k = 0 and k = K) is measured by wrapping ``IterationEngine._evaluate`` and subtracted, so B is
     everything the engine does per iteration: delay draws, virtual clock, mixing matrices, batch
     sampling, tf conversion, the step, the divergence check and bookkeeping.  B is also split into the
     steps it calls, ``Schedule.next_chunk`` and the rest of its loop (wrappers around both).
(C)  information: the same run with the default ``eval_every = 10`` (K a multiple of 10), per iteration
     including its K/10 evaluations (the one at k = 0 excluded).

A, A' and B alternate (A A' B, then B A' A, ...) so drift hits all of them; reported values are medians
over repetitions and ratios are medians of the ratios of the measurements taken back to back.  Time per
iteration vs N is summarised by the exponent alpha of a least-squares fit ``t ~ N^alpha``.
Results: a markdown table on stdout and JSON in ``results/bench/engine.json`` (``engine_quick.json`` for
``--quick``); ``results/`` is git-ignored.
"""

from __future__ import annotations

import dybw  # noqa: F401 - first: numpy then loads the CPU kernels dybw pins (src/dybw/numerics.py)

# isort: split
import argparse
import json
import math
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from common import REPO, compose, environment, fmt, med  # bench/common.py; sets DYBW_DATA_DIR
from dybw.tf_setup import import_tensorflow  # noqa: E402  (before any other TF import)

tf = import_tensorflow()

from dybw.data import load_dataset  # noqa: E402
from dybw.engine import IterationEngine, Schedule, Timeline  # noqa: E402
from dybw.mixing import gathered_weights  # noqa: E402
from dybw.models import build_network  # noqa: E402

FULL_WORKERS = (8, 16, 32, 64, 128)
QUICK_WORKERS = (8, 16)
MODELS = ("logreg", "mlp")
GOAL = 1.3
LEGEND = (
    "A = bare StackedTrainer.step, fixed inputs; A′ = the same cycling through a chunk of real, different "
    "inputs converted beforehand; B = IterationEngine.run per iteration, evaluations excluded, split into the "
    "steps it calls / Schedule.next_chunk / the rest of its loop (tf conversion and slicing, checks, "
    "bookkeeping); ratios = medians of the ratios of measurements taken back to back (cpu: the same with "
    "process CPU time); eval = one evaluation; C = IterationEngine.run with eval_every=10, evaluations "
    "included; load = highest 1-min load average seen (this benchmark alone makes ~2 on 2 cores: more means "
    "other processes competed for the CPU). Times in ms per iteration, medians."
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="N in 8 16, short measurements (< 1 minute)")
    p.add_argument(
        "--workers",
        type=lambda s: tuple(int(x) for x in s.split(",")),
        default=None,
        help="comma-separated N values (default 8,16,32,64,128; --quick: 8,16)",
    )
    p.add_argument("--models", type=lambda s: tuple(s.split(",")), default=MODELS, help="default logreg,mlp")
    p.add_argument(
        "--batch",
        type=int,
        default=256,
        help="minibatch per worker, the same for every N (default 256: N=128 shards hold 468)",
    )
    p.add_argument(
        "--reps", type=int, default=None, help="most repetitions of A, A', B (default 7; --quick: 3); at least 3"
    )
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds per case for the repetitions, fewer reps when slower (default 40; --quick: 3)",
    )
    p.add_argument("--eval-reps", type=int, default=None, help="repetitions of (C) (default 2; --quick: 1)")
    p.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="target duration of one A measurement, sets K (default 0.5; --quick: 0.1)",
    )
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Hydra override, e.g. --override topology=random_regular (repeatable)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="JSON output (default results/bench/engine.json; --quick: engine_quick.json)",
    )
    args = p.parse_args(argv)
    args.workers = args.workers or (QUICK_WORKERS if args.quick else FULL_WORKERS)
    args.reps = max(3, args.reps or (3 if args.quick else 7))
    args.budget = args.budget or (3.0 if args.quick else 40.0)
    args.eval_reps = args.eval_reps if args.eval_reps is not None else (1 if args.quick else 2)
    args.seconds = args.seconds or (0.1 if args.quick else 0.5)
    args.out = args.out or REPO / "results" / "bench" / ("engine_quick.json" if args.quick else "engine.json")
    return args


def now() -> np.ndarray:
    """(wall, process CPU) seconds."""
    return np.array([time.perf_counter(), time.process_time()])


class Case:
    """One (model, N): the engine, its compiled trainer, and the measurements A, A', B, C."""

    def __init__(self, model: str, num_workers: int, batch: int, extra: list[str]):
        self.overrides = [
            f"model={model}",
            "dataset=mnist",
            "algo=cb_dybw",
            "straggler=paper",
            f"num_workers={num_workers}",
            f"dataset.batch_size={batch}",
            "progress=false",
            *extra,
        ]
        self.cfg, self.graph = compose(self.overrides)
        started = time.perf_counter()
        self.dataset = load_dataset(
            self.cfg.dataset, self.cfg.num_workers, self.cfg.data_seed, data_dir=self.cfg.data_dir
        )
        self.network = build_network(self.cfg.model, self.dataset.input_dim, self.dataset.num_classes)
        self.engine = IterationEngine(self.cfg, self.graph, self.dataset, self.network)
        self.setup_seconds = time.perf_counter() - started
        trainer = self.trainer = self.engine.trainer
        self.initial = np.tile(self.network.initial_params(self.cfg.model_seed)[None, :], (num_workers, 1))

        # Time what happens inside (B): evaluations (left out of B), steps and schedule chunks (its split).
        self.evals, self.in_steps, self.in_chunks = [], np.zeros(2), np.zeros(2)
        self.bare_step, evaluate = trainer.step, self.engine._evaluate  # (A) calls the method itself, unwrapped

        def timed_step(*args):
            t0 = now()
            try:
                return self.bare_step(*args)
            finally:
                self.in_steps += now() - t0

        def timed_evaluate(*args, **kwargs):
            t0 = now()
            try:
                return evaluate(*args, **kwargs)
            finally:
                self.evals.append(now() - t0)

        trainer.step, self.engine._evaluate = timed_step, timed_evaluate  # the whole evaluation, counts included

        # (A)'s fixed inputs: the first iteration's indices and W, as the engine would feed them; (A')'s: a
        # chunk of real iterations, converted and split beforehand.
        chunk = Schedule(self.cfg, self.graph, self.dataset.shards).next_chunk(self.cfg.runner.chunk)
        weights = gathered_weights(chunk.weights, self.engine.sources)  # W(k) per row, as the engine feeds it
        self.fixed_inputs = (tf.constant(chunk.batches[0]), chunk.learning_rates[0], tf.constant(weights[0]))
        self.varying_inputs = list(
            zip(tf.unstack(tf.constant(chunk.batches)), chunk.learning_rates, tf.unstack(tf.constant(weights)))
        )

    def reset(self, iterations: int, eval_every: int) -> None:
        """A fresh run of ``iterations`` on the same engine (the compiled step and evaluation are kept)."""
        cfg = self.cfg
        cfg.iterations, cfg.eval_every = iterations, eval_every
        schedule = Schedule(cfg, self.graph, self.dataset.shards, getattr(self.engine, "workers", None))
        next_chunk = schedule.next_chunk

        def timed_next_chunk(count):
            t0 = now()
            try:
                return next_chunk(count)
            finally:
                self.in_chunks += now() - t0

        schedule.next_chunk = timed_next_chunk
        self.engine.schedule = schedule
        self.engine.timeline = Timeline(iterations, cfg.num_workers, self.graph.degrees)
        self.trainer.params = tf.constant(self.initial)

    def bare(self, iterations: int, varying: bool = False) -> np.ndarray:
        """(A), or (A') if ``varying``: (wall, cpu) seconds per bare step."""
        self.trainer.params = tf.constant(self.initial)
        inputs = self.varying_inputs if varying else [self.fixed_inputs]
        step = self.bare_step
        started = now()
        for k in range(iterations):
            step(*inputs[k % len(inputs)])
        return (now() - started) / iterations

    def run(self, iterations: int, eval_every: int) -> dict:
        """One ``IterationEngine.run``: (wall, cpu) seconds in all, in each evaluation, in steps, in next_chunk."""
        self.reset(iterations, eval_every)
        self.evals, self.in_steps, self.in_chunks = [], np.zeros(2), np.zeros(2)
        started = now()
        outcome = self.engine.run(lambda row: None)
        total = now() - started
        assert outcome.status == "completed" and self.engine.timeline.done == iterations, outcome
        return {
            "total": total,
            "evals": list(self.evals),
            "steps": self.in_steps.copy(),
            "chunks": self.in_chunks.copy(),
        }

    def warm_up(self) -> float:
        started = time.perf_counter()
        self.run(4, 2)  # compiles the step and the evaluation
        self.bare(3)
        self.bare(3, varying=True)
        return time.perf_counter() - started

    def tracing_count(self) -> int:
        return self.trainer._step.experimental_get_tracing_count()


def round_up(x: float, multiple: int) -> int:
    return int(max(1, math.ceil(x / multiple)) * multiple)


def measure(case: Case, args) -> dict:
    cfg = case.cfg
    loads = [os.getloadavg()[0]]
    warmup_seconds = case.warm_up()
    traced = case.tracing_count()
    probe = case.bare(max(3, int(0.1 / max(case.bare(3)[0], 1e-6))))[0]  # ~0.1 s estimate of one step
    chunk = cfg.runner.chunk
    k_ab = min(max(round_up(args.seconds / probe, chunk), chunk), 16 * chunk)
    k_c = min(max(round_up(args.seconds / probe, 10), 20), 2000)
    reps = int(min(args.reps, max(3, args.budget // (3.3 * k_ab * probe))))

    bare, varying, engine, steps, chunks, evals, with_eval = [], [], [], [], [], [], []

    def measure_b():
        run = case.run(k_ab, k_ab)
        assert len(run["evals"]) == 2, run
        engine.append((run["total"] - sum(run["evals"])) / k_ab)
        steps.append(run["steps"] / k_ab)
        chunks.append(run["chunks"] / k_ab)
        evals.extend(run["evals"])

    for rep in range(reps):
        if rep % 2 == 0:
            bare.append(case.bare(k_ab))
            varying.append(case.bare(k_ab, varying=True))
            measure_b()
        else:
            measure_b()
            varying.append(case.bare(k_ab, varying=True))
            bare.append(case.bare(k_ab))
        if rep < args.eval_reps:  # C
            run = case.run(k_c, 10)
            assert len(run["evals"]) == k_c // 10 + 1, run
            with_eval.append((run["total"] - run["evals"][0]) / k_c)
            evals.extend(run["evals"])
        loads.append(os.getloadavg()[0])
    retraced = case.tracing_count() - traced

    # arrays [reps, 2]: column 0 wall, column 1 process CPU
    bare, varying, engine, steps, chunks = map(np.asarray, (bare, varying, engine, steps, chunks))
    ms = lambda x: 1e3 * med(x)  # noqa: E731
    w = 0
    graph = case.graph
    return {
        "model": cfg.model.name,
        "hidden": list(cfg.model.hidden) if cfg.model.name == "mlp" else [],
        "num_workers": cfg.num_workers,
        "batch_size": cfg.dataset.batch_size,
        "num_params": case.network.num_params,
        "topology": cfg.topology.name,
        "mean_degree": float(graph.degrees.mean()),
        "directed_links": int(len(graph.directed_links())),
        "chunk": chunk,
        "iterations_ab": k_ab,
        "iterations_c": k_c,
        "reps": reps,
        "eval_reps": len(with_eval),
        "bare_ms": ms(bare[:, w]),
        "bare_varying_ms": ms(varying[:, w]),
        "engine_ms": ms(engine[:, w]),
        "ratio": med(engine[:, w] / bare[:, w]),
        "ratio_varying": med(engine[:, w] / varying[:, w]),
        "ratio_of_medians": med(engine[:, w]) / med(bare[:, w]),
        "ratio_cpu": med(engine[:, 1] / bare[:, 1]),
        "overhead_ms": ms(engine[:, w] - bare[:, w]),
        "overhead_varying_ms": ms(engine[:, w] - varying[:, w]),
        "engine_step_ms": ms(steps[:, w]),
        "engine_schedule_ms": ms(chunks[:, w]),
        "engine_rest_ms": ms(engine[:, w] - steps[:, w] - chunks[:, w]),
        "engine_eval10_ms": 1e3 * med([x[w] for x in with_eval]) if with_eval else None,
        "evaluation_ms": 1e3 * med([x[w] for x in evals]),
        "bare_ms_all": (1e3 * bare[:, w]).tolist(),
        "bare_varying_ms_all": (1e3 * varying[:, w]).tolist(),
        "engine_ms_all": (1e3 * engine[:, w]).tolist(),
        "engine_eval10_ms_all": [1e3 * x[w] for x in with_eval],
        "bare_cpu_ms_all": (1e3 * bare[:, 1]).tolist(),
        "engine_cpu_ms_all": (1e3 * engine[:, 1]).tolist(),
        "setup_seconds": case.setup_seconds,
        "warmup_seconds": warmup_seconds,
        "retraced": retraced,
        "loadavg_1min": loads,
        "overrides": case.overrides,
    }


def fit_exponent(ns, ts) -> float | None:
    """alpha of the least-squares fit log t = c + alpha log N."""
    if len(ns) < 2:
        return None
    return float(np.polyfit(np.log(ns), np.log(ts), 1)[0])


def growth(rows) -> list[dict]:
    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = sorted((r for r in rows if r["model"] == model), key=lambda r: r["num_workers"])
        ns = [r["num_workers"] for r in mine]
        entry = {"model": model, "workers": ns}
        for key in ("bare_ms", "engine_ms", "engine_schedule_ms", "engine_eval10_ms"):
            ts = [r[key] for r in mine]
            if all(t is not None and t > 0 for t in ts):
                entry[key.replace("_ms", "_exponent")] = fit_exponent(ns, ts)
                entry[key.replace("_ms", "_growth")] = ts[-1] / ts[0] if len(ts) > 1 else None
        big = [r for r in mine if r["num_workers"] >= 32]  # where the N-proportional work dominates
        if len(big) >= 2:
            entry["engine_exponent_n32_up"] = fit_exponent(
                [r["num_workers"] for r in big], [r["engine_ms"] for r in big]
            )
        out.append(entry)
    return out


def markdown(rows, trends) -> str:
    lines = [
        "| model | N | B | P | deg | K × reps | A bare | A′ varying | B engine | **B/A** | B/A′ | B/A cpu | "
        "B−A | B: step / schedule / rest | eval | C eval_every=10 | load |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        flag = "" if r["ratio"] <= GOAL else " ✗"
        lines.append(
            f"| {r['model']} | {r['num_workers']} | {r['batch_size']} | {r['num_params']} | {r['mean_degree']:.1f} | "
            f"{r['iterations_ab']} × {r['reps']} | {fmt(r['bare_ms'], 3)} | {fmt(r['bare_varying_ms'], 3)} | "
            f"{fmt(r['engine_ms'], 3)} | **{fmt(r['ratio'])}**{flag} | {fmt(r['ratio_varying'])} | "
            f"{fmt(r['ratio_cpu'])} | {fmt(r['overhead_ms'], 3)} | {fmt(r['engine_step_ms'], 3)} / "
            f"{fmt(r['engine_schedule_ms'], 3)} / {fmt(r['engine_rest_ms'], 3)} | {fmt(r['evaluation_ms'], 1)} | "
            f"{fmt(r['engine_eval10_ms'], 2)} | {fmt(max(r['loadavg_1min']), 1)} |"
        )
    lines += [
        "",
        "| model | N range | A: alpha (t ~ N^alpha) | A: t(N max)/t(N min) | B: alpha | "
        "B: t(N max)/t(N min) | B: alpha, N >= 32 | schedule: alpha | C: alpha |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for g in trends:
        lines.append(
            f"| {g['model']} | {g['workers'][0]}..{g['workers'][-1]} | {fmt(g.get('bare_exponent'))} | "
            f"{fmt(g.get('bare_growth'), 1)} | {fmt(g.get('engine_exponent'))} | "
            f"{fmt(g.get('engine_growth'), 1)} | {fmt(g.get('engine_exponent_n32_up'))} | "
            f"{fmt(g.get('engine_schedule_exponent'))} | {fmt(g.get('engine_eval10_exponent'))} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    command = shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv]))
    print(f"$ {command}", flush=True)
    env = environment(
        tensorflow=tf.__version__,
        TF_ENABLE_ONEDNN_OPTS=os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
        DYBW_DATA_DIR=os.environ.get("DYBW_DATA_DIR"),
    )
    print("# " + ", ".join(f"{k}={v}" for k, v in env.items()), flush=True)
    print(
        f"# dataset=mnist (PCA-50), algo=cb_dybw, straggler=paper, topology=erdos_renyi (p=0.3) unless "
        f"overridden {args.override}; batch {args.batch} per worker for every N; at most {args.reps} reps "
        f"within {args.budget:.0f} s per case",
        flush=True,
    )

    started = time.perf_counter()
    rows = []
    for model in args.models:
        for n in args.workers:
            t0 = time.perf_counter()
            case = Case(model, n, args.batch, args.override)
            row = measure(case, args)
            rows.append(row)
            print(
                f"  {model:6s} N={n:3d} ({row['topology']}, deg {row['mean_degree']:.1f}): "
                f"A {row['bare_ms']:.3f}  A' {row['bare_varying_ms']:.3f}  B {row['engine_ms']:.3f} ms/it  "
                f"B/A {row['ratio']:.2f}  C {fmt(row['engine_eval10_ms'], 2)} ms/it  "
                f"K={row['iterations_ab']}x{row['reps']}  [{time.perf_counter() - t0:.0f} s]",
                flush=True,
            )
            if row["retraced"]:
                print(f"  warning: the step was traced again {row['retraced']} time(s) during measurement", flush=True)
            del case
    trends = growth(rows)
    table = markdown(rows, trends)
    total = time.perf_counter() - started
    print()
    print(table)
    print(f"\n{LEGEND} Goal: B/A <= {GOAL}. Total {total:.0f} s.")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "command": command,
                "environment": env,
                "goal_ratio": GOAL,
                "total_seconds": total,
                "legend": LEGEND,
                "rows": rows,
                "growth": trends,
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
