"""Engine time per iteration against the bare batched TF step, and the share of a job's time spent
evaluating, side by side, for N = 8 .. 128 workers.

    python bench/bench_engine.py              # full: N in 8 16 32 64 128, logreg and mlp (~10 minutes)
    python bench/bench_engine.py --quick      # N in 8 16, short measurements (~2 minutes)
    python bench/bench_engine.py --share-only # only (C), the evaluation share

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
(C)  evaluation share: ``IterationEngine.run`` for the job's K' iterations (its ``iterations``, 500 by
     default; when a run without evaluations would take longer than ``--share-seconds``, whole periods of
     full evaluations, eval_every x evaluation.full_every_evals) three ways, alternating: without
     evaluations (``eval_every = K'``, its two evaluations subtracted: T0), with the default evaluations
     (T), and with every evaluation full and no probes (``evaluation.full_every_evals=1
     evaluation.probe_target=false``: the evaluation before light evaluations and probes existed, T1).
     T and T1 are whole jobs: every evaluation from k = 0 to K', probes included.  Share = (T - T0) / T,
     the part of a default job's time that evaluating takes; the goal is <= 25 %.  One more case, the
     speed-up figure's setting (``experiment=fig_speedup``, logreg, batch 16, eval_every 5, 400 iterations,
     N = 64 with its step 1.6; goal <= 35 %), is measured the same way (``--no-speedup`` skips it).

A, A' and B alternate (A A' B, then B A' A, ...) so drift hits all of them; reported values are medians
over repetitions and ratios are medians of the ratios of the measurements taken back to back.  Time per
iteration vs N is summarised by the exponent alpha of a least-squares fit ``t ~ N^alpha``.
Results: markdown tables on stdout and JSON in ``results/bench/engine.json`` (``engine_quick.json`` for
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
SHARE_GOAL = 0.25  # evaluations' share of a default job's time (batch 256, eval_every 10)
SPEEDUP_GOAL = 0.35  # the same in the speed-up figure's setting
SPEEDUP = ["experiment=fig_speedup", "num_workers=64", "algo.eta0=1.6"]  # the figure's N = 64 job (experiments/)
LEGEND = (
    "A = bare StackedTrainer.step, fixed inputs; A′ = the same cycling through a chunk of real, different "
    "inputs converted beforehand; B = IterationEngine.run per iteration, evaluations excluded, split into the "
    "steps it calls / Schedule.next_chunk / the rest of its loop (tf conversion and slicing, checks, "
    "bookkeeping); ratios = medians of the ratios of measurements taken back to back (cpu: the same with "
    "process CPU time); eval = one full evaluation; load = highest 1-min load average seen (this benchmark "
    "alone makes ~2 on 2 cores: more means other processes competed for the CPU). Times in ms per iteration, "
    "medians. Evaluation share (C): T0 = IterationEngine.run without evaluations, T = with the default "
    "evaluations (light ones between full ones, probes), T1 = with every evaluation full and no probes (as "
    "before light evaluations existed); share = (T - T0) / T, median of the shares of runs taken back to back."
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
    p.add_argument("--share-reps", type=int, default=None, help="repetitions of (C) (default 3; --quick: 2)")
    p.add_argument(
        "--share-seconds",
        type=float,
        default=None,
        help="longest (C) run without evaluations: K' is the job's iterations unless that takes longer, then "
        "whole periods of full evaluations (default 20; --quick: 1)",
    )
    p.add_argument("--share-only", action="store_true", help="measure only (C), the evaluation share")
    p.add_argument("--no-speedup", action="store_true", help="skip the speed-up figure's setting in (C)")
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
    args.share_reps = args.share_reps or (2 if args.quick else 3)
    args.share_seconds = args.share_seconds or (1.0 if args.quick else 20.0)
    args.seconds = args.seconds or (0.1 if args.quick else 0.5)
    args.out = args.out or REPO / "results" / "bench" / ("engine_quick.json" if args.quick else "engine.json")
    return args


def now() -> np.ndarray:
    """(wall, process CPU) seconds."""
    return np.array([time.perf_counter(), time.process_time()])


class Case:
    """One job setting: the engine, its compiled trainer, and the measurements A, A', B, C."""

    def __init__(self, overrides: list[str], label: str = ""):
        self.overrides = ["dataset=mnist", "algo=cb_dybw", "straggler=paper", "progress=false", *overrides]
        self.label = label
        self.cfg, self.graph = compose(self.overrides)
        num_workers = self.cfg.num_workers
        self.defaults = (self.cfg.eval_every, self.cfg.evaluation.full_every_evals, self.cfg.evaluation.probe_target)
        self.job_iterations = self.cfg.iterations
        started = time.perf_counter()
        self.dataset = load_dataset(
            self.cfg.dataset, self.cfg.num_workers, self.cfg.data_seed, data_dir=self.cfg.data_dir
        )
        self.network = build_network(self.cfg.model, self.dataset.input_shape, self.dataset.num_classes)
        self.engine = IterationEngine(self.cfg, self.graph, self.dataset, self.network)
        self.setup_seconds = time.perf_counter() - started
        trainer = self.trainer = self.engine.trainer
        self.initial = np.tile(self.network.initial_params(self.cfg.model_seed)[None, :], (num_workers, 1))

        # Time what happens inside (B): evaluations (left out of B), steps and schedule chunks (its split).
        self.evals, self.kinds, self.in_steps, self.in_chunks = [], [], np.zeros(2), np.zeros(2)
        self.bare_step, evaluate = trainer.step, self.engine._evaluate  # (A) calls the method itself, unwrapped

        def timed_step(*args):
            t0 = now()
            try:
                return self.bare_step(*args)
            finally:
                self.in_steps += now() - t0

        def timed_evaluate(kind="full"):
            t0 = now()
            try:
                return evaluate(kind)
            finally:
                self.evals.append(now() - t0)
                self.kinds.append(kind)

        trainer.step, self.engine._evaluate = timed_step, timed_evaluate  # the whole evaluation, counts included

        # (A)'s fixed inputs: the first iteration's indices and W, as the engine would feed them; (A')'s: a
        # chunk of real iterations, converted and split beforehand.
        chunk = Schedule(self.cfg, self.graph, self.dataset.shards).next_chunk(self.cfg.runner.chunk)
        weights = gathered_weights(chunk.weights, self.engine.sources)  # W(k) per row, as the engine feeds it
        self.fixed_inputs = (tf.constant(chunk.batches[0]), chunk.learning_rates[0], tf.constant(weights[0]))
        self.varying_inputs = list(
            zip(tf.unstack(tf.constant(chunk.batches)), chunk.learning_rates, tf.unstack(tf.constant(weights)))
        )

    def reset(self, iterations: int, eval_every: int, full_every_evals: int, probe_target: bool) -> None:
        """A fresh run of ``iterations`` on the same engine (the compiled step and evaluation are kept)."""
        cfg = self.cfg
        cfg.iterations, cfg.eval_every = iterations, eval_every
        cfg.evaluation.full_every_evals, cfg.evaluation.probe_target = full_every_evals, probe_target
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

    def run(self, iterations: int, eval_every: int, full_every_evals: int = 1, probe_target: bool = False) -> dict:
        """One ``IterationEngine.run``: (wall, cpu) seconds in all, in each evaluation (and its kind), in
        steps, in next_chunk; the rows it reported."""
        self.reset(iterations, eval_every, full_every_evals, probe_target)
        self.evals, self.kinds, self.in_steps, self.in_chunks = [], [], np.zeros(2), np.zeros(2)
        rows = []
        started = now()
        outcome = self.engine.run(rows.append)
        total = now() - started
        assert outcome.status == "completed" and self.engine.timeline.done == iterations, outcome
        return {
            "total": total,
            "evals": list(self.evals),
            "kinds": list(self.kinds),
            "steps": self.in_steps.copy(),
            "chunks": self.in_chunks.copy(),
            "rows": rows,
            "cost": self.engine.cost,
        }

    def warm_up(self) -> float:
        started = time.perf_counter()
        self.run(4, 2, 1, False)  # compiles the step and the evaluation
        self.bare(3)
        self.bare(3, varying=True)
        return time.perf_counter() - started

    def tracing_count(self) -> int:
        return self.trainer._step.experimental_get_tracing_count()


def round_up(x: float, multiple: int) -> int:
    return int(max(1, math.ceil(x / multiple)) * multiple)


def describe(case: Case) -> dict:
    cfg, graph = case.cfg, case.graph
    return {
        "label": case.label,
        "model": cfg.model.name,
        "hidden": list(cfg.model.hidden) if cfg.model.name == "mlp" else [],
        "num_workers": cfg.num_workers,
        "batch_size": cfg.dataset.batch_size,
        "num_params": case.network.num_params,
        "topology": cfg.topology.name,
        "mean_degree": float(graph.degrees.mean()),
        "directed_links": int(len(graph.directed_links())),
        "chunk": cfg.runner.chunk,
        "setup_seconds": case.setup_seconds,
        "overrides": case.overrides,
    }


def step_estimate(case: Case) -> float:
    """Seconds per bare step, from ~0.1 s of them."""
    return case.bare(max(3, int(0.1 / max(case.bare(3)[0], 1e-6))))[0]


def measure(case: Case, args) -> dict:
    """A, A', B (and one full evaluation's time) for one case."""
    cfg = case.cfg
    loads = [os.getloadavg()[0]]
    traced = case.tracing_count()
    probe = step_estimate(case)
    chunk = cfg.runner.chunk
    k_ab = min(max(round_up(args.seconds / probe, chunk), chunk), 16 * chunk)
    reps = int(min(args.reps, max(3, args.budget // (3.3 * k_ab * probe))))

    bare, varying, engine, steps, chunks, evals = [], [], [], [], [], []

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
        loads.append(os.getloadavg()[0])
    retraced = case.tracing_count() - traced

    # arrays [reps, 2]: column 0 wall, column 1 process CPU
    bare, varying, engine, steps, chunks = map(np.asarray, (bare, varying, engine, steps, chunks))
    ms = lambda x: 1e3 * med(x)  # noqa: E731
    w = 0
    return {
        "iterations_ab": k_ab,
        "reps": reps,
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
        "evaluation_ms": 1e3 * med([x[w] for x in evals]),
        "bare_ms_all": (1e3 * bare[:, w]).tolist(),
        "bare_varying_ms_all": (1e3 * varying[:, w]).tolist(),
        "engine_ms_all": (1e3 * engine[:, w]).tolist(),
        "bare_cpu_ms_all": (1e3 * bare[:, 1]).tolist(),
        "engine_cpu_ms_all": (1e3 * engine[:, 1]).tolist(),
        "retraced": retraced,
        "loadavg_1min": loads,
    }


def measure_share(case: Case, args, goal: float) -> dict:
    """(C): a run without evaluations, with the default ones, and with every one full, alternating."""
    eval_every, full_every_evals, probe_target = case.defaults
    # K' = the job's own length; when that would take too long, whole periods of full evaluations.
    period = eval_every * full_every_evals
    k = case.job_iterations
    longest = max(period, period * int(args.share_seconds / (step_estimate(case) * period)))
    if k > longest:
        k = longest
    loads = [os.getloadavg()[0]]
    runs = {"none": [], "default": [], "all_full": []}
    settings = {
        "none": (k, 1, False),
        "default": (eval_every, full_every_evals, probe_target),
        "all_full": (eval_every, 1, False),
    }
    order = list(runs)
    kinds, probes, inside = {}, {}, {"full": [], "light": [], "probe": []}
    for rep in range(args.share_reps):
        for name in order if rep % 2 == 0 else order[::-1]:
            run = case.run(k, *settings[name])
            evals = run["evals"]
            if name == "none":
                assert len(evals) == 2, run["kinds"]
                runs[name].append(run["total"] - sum(evals))  # T0: no evaluation at all
            else:
                runs[name].append(run["total"])  # T: the whole job, its evaluation at k = 0 included
                kinds[name] = {kind: run["kinds"].count(kind) for kind in ("full", "light", "probe")}
                if name == "default":
                    for kind, seconds in zip(run["kinds"], evals):
                        inside[kind].append(seconds[0])
                    cost = run["cost"]
                    probes = {
                        "probe_rows": sum(r.get("evaluation") == "probe" for r in run["rows"]),
                        "replayed_iterations": cost.target_replayed_iterations,
                        "probe_seconds": cost.target_probe_seconds,
                    }
        loads.append(os.getloadavg()[0])
    none, default, all_full = (np.asarray(runs[name]) for name in order)  # [reps, 2]: wall, process CPU

    def share(t, column=0):  # medians of the shares of runs taken back to back
        return med((t[:, column] - none[:, column]) / t[:, column])

    return {
        "iterations_share": k,
        "share_reps": args.share_reps,
        "eval_every": eval_every,
        "full_every_evals": full_every_evals,
        "probe_target": probe_target,
        "no_eval_ms": 1e3 * med(none[:, 0]) / k,
        "default_ms": 1e3 * med(default[:, 0]) / k,
        "all_full_ms": 1e3 * med(all_full[:, 0]) / k,
        "share_default": share(default),
        "share_all_full": share(all_full),
        "share_default_cpu": share(default, 1),
        "share_all_full_cpu": share(all_full, 1),
        "share_goal": goal,
        "share_met": bool(share(default) <= goal),
        "evaluations": kinds,
        "evaluation_ms_by_kind": {kind: 1e3 * med(v) if v else None for kind, v in inside.items()},
        **probes,
        "no_eval_ms_all": (1e3 * none[:, 0] / k).tolist(),
        "default_ms_all": (1e3 * default[:, 0] / k).tolist(),
        "all_full_ms_all": (1e3 * all_full[:, 0] / k).tolist(),
        "no_eval_cpu_ms_all": (1e3 * none[:, 1] / k).tolist(),
        "default_cpu_ms_all": (1e3 * default[:, 1] / k).tolist(),
        "all_full_cpu_ms_all": (1e3 * all_full[:, 1] / k).tolist(),
        "share_loadavg_1min": loads,
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
        for key in ("bare_ms", "engine_ms", "engine_schedule_ms", "default_ms"):
            ts = [r.get(key) for r in mine]
            if all(t is not None and t > 0 for t in ts):
                entry[key.replace("_ms", "_exponent")] = fit_exponent(ns, ts)
                entry[key.replace("_ms", "_growth")] = ts[-1] / ts[0] if len(ts) > 1 else None
        big = [r for r in mine if r["num_workers"] >= 32 and r.get("engine_ms")]  # N-proportional work dominates
        if len(big) >= 2:
            entry["engine_exponent_n32_up"] = fit_exponent(
                [r["num_workers"] for r in big], [r["engine_ms"] for r in big]
            )
        out.append(entry)
    return out


def pct(x) -> str:
    return "—" if x is None else f"{100 * x:.0f} %"


def markdown(rows, trends, speedup=None) -> str:
    lines = []
    engine_rows = [r for r in rows if "ratio" in r]
    if engine_rows:
        lines += [
            "| model | N | B | P | deg | K × reps | A bare | A′ varying | B engine | **B/A** | B/A′ | B/A cpu | "
            "B−A | B: step / schedule / rest | eval | load |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for r in engine_rows:
            flag = "" if r["ratio"] <= GOAL else " ✗"
            lines.append(
                f"| {r['model']} | {r['num_workers']} | {r['batch_size']} | {r['num_params']} | "
                f"{r['mean_degree']:.1f} | {r['iterations_ab']} × {r['reps']} | {fmt(r['bare_ms'], 3)} | "
                f"{fmt(r['bare_varying_ms'], 3)} | {fmt(r['engine_ms'], 3)} | **{fmt(r['ratio'])}**{flag} | "
                f"{fmt(r['ratio_varying'])} | {fmt(r['ratio_cpu'])} | {fmt(r['overhead_ms'], 3)} | "
                f"{fmt(r['engine_step_ms'], 3)} / {fmt(r['engine_schedule_ms'], 3)} / {fmt(r['engine_rest_ms'], 3)} | "
                f"{fmt(r['evaluation_ms'], 1)} | {fmt(max(r['loadavg_1min']), 1)} |"
            )
        lines += [
            "",
            "| model | N range | A: alpha (t ~ N^alpha) | A: t(N max)/t(N min) | B: alpha | "
            "B: t(N max)/t(N min) | B: alpha, N >= 32 | schedule: alpha |",
            "|---|---|--:|--:|--:|--:|--:|--:|",
        ]
        for g in trends:
            lines.append(
                f"| {g['model']} | {g['workers'][0]}..{g['workers'][-1]} | {fmt(g.get('bare_exponent'))} | "
                f"{fmt(g.get('bare_growth'), 1)} | {fmt(g.get('engine_exponent'))} | "
                f"{fmt(g.get('engine_growth'), 1)} | {fmt(g.get('engine_exponent_n32_up'))} | "
                f"{fmt(g.get('engine_schedule_exponent'))} |"
            )
        lines.append("")
    share_rows = [r for r in rows if "share_default" in r] + ([speedup] if speedup else [])
    lines += [
        "Evaluation share of a job (C), ms per iteration:",
        "",
        "| setting | N | batch | eval_every | K' × reps | T0 no evaluations | T1 every evaluation full | "
        "share before (cpu) | T default | **share** (cpu) | goal | one full / light evaluation | load |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in share_rows:
        verdict = "met" if r["share_met"] else "**missed**"
        by_kind = r["evaluation_ms_by_kind"]
        lines.append(
            f"| {r['label'] or r['model']} | {r['num_workers']} | {r['batch_size']} | {r['eval_every']} | "
            f"{r['iterations_share']} × {r['share_reps']} | {fmt(r['no_eval_ms'], 2)} | {fmt(r['all_full_ms'], 2)} | "
            f"{pct(r['share_all_full'])} ({pct(r['share_all_full_cpu'])}) | {fmt(r['default_ms'], 2)} | "
            f"**{pct(r['share_default'])}** ({pct(r['share_default_cpu'])}) | ≤ {pct(r['share_goal'])}: {verdict} | "
            f"{fmt(by_kind['full'], 1)} / {fmt(by_kind['light'], 2)} ms | {fmt(max(r['share_loadavg_1min']), 1)} |"
        )
    return "\n".join(lines)


def verdict_line(rows, speedup) -> str:
    shares = [r for r in rows if "share_default" in r]
    parts = []
    if shares:
        met = sum(r["share_met"] for r in shares)
        worst = max(shares, key=lambda r: r["share_default"])
        parts.append(
            f"Evaluation share goal (<= {pct(SHARE_GOAL)} of a default job, batch 256): met in {met} of {len(shares)} "
            f"cases (largest {pct(worst['share_default'])}: {worst['model']}, N={worst['num_workers']})."
        )
    if speedup:
        parts.append(
            f"Speed-up figure's setting: {pct(speedup['share_default'])} (goal <= {pct(SPEEDUP_GOAL)}: "
            f"{'met' if speedup['share_met'] else 'missed'})."
        )
    return " ".join(parts)


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
            overrides = [f"model={model}", f"num_workers={n}", f"dataset.batch_size={args.batch}", *args.override]
            case = Case(overrides, label=model)
            row = describe(case)
            row["warmup_seconds"] = case.warm_up()
            if not args.share_only:
                row.update(measure(case, args))
            row.update(measure_share(case, args, SHARE_GOAL))
            rows.append(row)
            engine = (
                ""
                if args.share_only
                else f"A {row['bare_ms']:.3f}  A' {row['bare_varying_ms']:.3f}  B {row['engine_ms']:.3f} ms/it  "
                f"B/A {row['ratio']:.2f}  "
            )
            print(
                f"  {model:6s} N={n:3d} ({row['topology']}, deg {row['mean_degree']:.1f}): {engine}"
                f"share {pct(row['share_all_full'])} -> {pct(row['share_default'])} "
                f"(T0 {row['no_eval_ms']:.2f}, T1 {row['all_full_ms']:.2f}, T {row['default_ms']:.2f} ms/it)  "
                f"[{time.perf_counter() - t0:.0f} s]",
                flush=True,
            )
            if row.get("retraced"):
                print(f"  warning: the step was traced again {row['retraced']} time(s) during measurement", flush=True)
            del case
    speedup = None
    if not args.no_speedup:
        t0 = time.perf_counter()
        case = Case([*SPEEDUP, *args.override], label="speed-up figure (logreg)")
        speedup = describe(case)
        speedup["warmup_seconds"] = case.warm_up()
        speedup.update(measure_share(case, args, SPEEDUP_GOAL))
        print(
            f"  speed-up setting N={case.cfg.num_workers}: share {pct(speedup['share_all_full'])} -> "
            f"{pct(speedup['share_default'])} (T0 {speedup['no_eval_ms']:.2f}, T1 {speedup['all_full_ms']:.2f}, "
            f"T {speedup['default_ms']:.2f} ms/it; probes {speedup.get('probe_rows')})  "
            f"[{time.perf_counter() - t0:.0f} s]",
            flush=True,
        )
        del case
    trends = growth(rows)
    table = markdown(rows, trends, speedup)
    verdict = verdict_line(rows, speedup)
    total = time.perf_counter() - started
    print()
    print(table)
    print(f"\n{LEGEND} Goal: B/A <= {GOAL}. {verdict} Total {total:.0f} s.")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "command": command,
                "environment": env,
                "goal_ratio": GOAL,
                "share_goal": SHARE_GOAL,
                "speedup_share_goal": SPEEDUP_GOAL,
                "verdict": verdict,
                "total_seconds": total,
                "legend": LEGEND,
                "rows": rows,
                "speedup": speedup,
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
