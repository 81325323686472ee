"""One job end to end: validated config -> data, graph, engine -> result files (DESIGN.md §6)."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

from .engine import Diverged, LocalEngine
from .models import build_network
from .results import ResultsWriter, read_summary

log = logging.getLogger("dybw")


def first_reaching(rows: list[dict], target_accuracy: float, target_loss: float | None):
    """``(time, iteration)`` of the first evaluation with test accuracy >= target (or train loss <= target)."""
    for row in rows:
        reached = row["test_accuracy"] >= target_accuracy
        if target_loss is not None:
            reached = reached or row["train_loss"] <= target_loss
        if reached:
            return row["time"], row["iteration"]
    return None, None


def _summary(cfg, status: str, message: str, rows: list[dict], engine, wall: float, digest: str) -> dict:
    last = rows[-1] if rows else {}
    finite_acc = [r["test_accuracy"] for r in rows if math.isfinite(r["test_accuracy"])]
    time_to_target, iterations_to_target = first_reaching(rows, cfg.target_accuracy, cfg.target_loss)
    timeline = engine.timeline if engine is not None else None
    done = timeline.done if timeline is not None else 0
    return {
        "status": status,
        "message": message,
        "algo": cfg.algo.name,
        "dataset": cfg.dataset.name,
        "num_workers": cfg.num_workers,
        "iterations": done,
        "total_time": float(timeline.end[done - 1]) if done else 0.0,
        "mean_iteration_duration": timeline.mean_duration() if timeline is not None else None,
        "final_train_loss": last.get("train_loss"),
        "final_test_accuracy": last.get("test_accuracy"),
        "best_test_accuracy": max(finite_acc) if finite_acc else None,
        "target_accuracy": cfg.target_accuracy,
        "time_to_target": time_to_target,
        "iterations_to_target": iterations_to_target,
        "mean_backups": timeline.mean_backups() if timeline is not None else None,
        "wall_seconds": wall,
        "seed": cfg.seed,
        "experiment": cfg.experiment_name,
        "config_hash": digest,
    }


class _Progress:
    """A tqdm bar per job: iteration, virtual time, latest test accuracy."""

    def __init__(self, cfg, enabled: bool):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=cfg.iterations, desc=f"{cfg.algo.name} {cfg.dataset.name}", unit="it",
                            mininterval=0.5, dynamic_ncols=True, leave=True)
        self.accuracy = float("nan")
        self.last = 0

    def evaluation(self, row):
        self.accuracy = row["test_accuracy"]

    def advance(self, k: int, virtual_time: float):
        if self.bar is not None:
            self.bar.update(k - self.last)
            self.last = k
            self.bar.set_postfix_str(f"t={virtual_time:.2f}s acc={self.accuracy:.3f}", refresh=False)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def run_job(cfg, graph, job_dir: Path, resolved: dict, digest: str) -> dict:
    """Train one job into ``job_dir`` unless it already completed with the same config; return its summary."""
    from .data import load_dataset

    previous = read_summary(job_dir)
    if previous and previous.get("status") == "completed" and previous.get("config_hash") == digest and not cfg.force:
        log.info("%s: already completed (config %s); skipped — pass force=true to rerun", job_dir, digest)
        return previous

    writer = ResultsWriter(job_dir)
    writer.write_topology(graph.to_json())
    started = time.perf_counter()
    engine, status, message = None, "failed", ""
    progress = _Progress(cfg, cfg.progress)
    try:
        dataset = load_dataset(cfg.dataset, cfg.num_workers, cfg.data_seed, data_dir=cfg.data_dir)
        network = build_network(cfg.model, dataset.input_dim, dataset.num_classes)
        engine = LocalEngine(cfg, graph, dataset, network)

        def on_evaluation(row):
            writer.add_metrics(row)
            progress.evaluation(row)

        engine.run(on_evaluation, progress.advance)
        status = "completed"
    except Diverged as error:
        status, message = "diverged", str(error)
        raise
    except KeyboardInterrupt:
        status, message = "interrupted", "interrupted by the user (SIGINT)"
        raise
    except BaseException as error:
        message = f"{type(error).__name__}: {error}"
        raise
    finally:
        progress.close()
        if engine is not None and engine.timeline.done:
            writer.write_timeline(engine.timeline.truncated())
        summary = _summary(cfg, status, message, writer.metrics_rows, engine, time.perf_counter() - started, digest)
        writer.write_summary(summary)
    return summary
