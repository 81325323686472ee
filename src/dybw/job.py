"""One job end to end: validated config -> data, graph, engine -> result files (DESIGN.md §6)."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

from .engine import Diverged, LocalEngine
from .errors import DataError, interruption
from .models import build_network
from .results import CHECKPOINT, ResultsWriter, read_checkpoint, read_summary, write_checkpoint

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


def _run_mpi(cfg, graph, job_dir: Path, resolved: dict, digest: str) -> dict:
    """``runner=mpi``: use the MPI world run.py was started in, or launch one for this job."""
    from .mpi import world_size_from_environment

    if world_size_from_environment() > 1:
        from mpi4py import MPI

        from .mpi.__main__ import run_in_world

        return run_in_world(MPI.COMM_WORLD, cfg, graph, job_dir, resolved, digest)
    from .mpi.launch import launch_job

    try:
        _fetch_dataset_files(cfg)
    except DataError as error:
        failed_summary(cfg, job_dir, "failed", f"{type(error).__name__}: {error}", digest, 0.0)  # as run_job words it
        raise
    return launch_job(cfg, job_dir, resolved, digest)


def _fetch_dataset_files(cfg) -> None:
    """Verify (and download if missing) the dataset's files once, before the ranks start: R ranks would
    otherwise each try, racing on a download, and a missing file would reach the user through a rank's
    abort instead of as the one line ``runner=local`` gives."""
    if cfg.dataset.name == "synthetic":
        return
    from .data import cache_dir_from_env, data_dir_from_env, ensure_files

    ensure_files(cfg.dataset.name, cfg.data_dir or data_dir_from_env(), cache_dir=cache_dir_from_env())


def failed_summary(cfg, job_dir: Path, status: str, message: str, digest: str, wall: float) -> dict:
    """Summary of a job that ended badly outside the engine (e.g. a dead MPI rank), from metrics.csv."""
    import pandas as pd

    try:
        rows = pd.read_csv(Path(job_dir) / "metrics.csv").to_dict("records")
    except (OSError, ValueError):
        rows = []
    _timeline_from_checkpoint(job_dir, digest)
    summary = _summary(cfg, status, message, rows, None, wall, digest)
    if rows:
        last = rows[-1]
        summary.update(
            iterations=int(last["iteration"]),
            total_time=last["time"],
            mean_iteration_duration=last["mean_iteration_duration"],
            mean_backups=last["mean_backups"],
        )
    ResultsWriter(job_dir).write_summary(summary)
    return summary


def _timeline_from_checkpoint(job_dir: Path, digest: str) -> None:
    """Write ``timeline.parquet`` from the last checkpoint when the job died before writing a newer one.

    Under ``runner=mpi`` a killed or aborting rank takes rank 0 down before it can write its timeline;
    the checkpoint rank 0 wrote at the last evaluation holds the timeline up to the iteration
    ``metrics.csv`` ends at, so what was measured is kept."""
    job_dir = Path(job_dir)
    checkpoint, timeline = job_dir / CHECKPOINT, job_dir / "timeline.parquet"
    if not checkpoint.exists() or (timeline.exists() and timeline.stat().st_mtime >= checkpoint.stat().st_mtime):
        return
    state = read_checkpoint(job_dir, digest)
    if state is not None:
        ResultsWriter(job_dir).write_timeline(
            {
                key[len("timeline_") :]: value
                for key, value in state.items()
                if key.startswith("timeline_") and key != "timeline_end"
            }
        )


class _Progress:
    """A tqdm bar per job: iteration, virtual time, latest test accuracy."""

    def __init__(self, cfg, enabled: bool):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=cfg.iterations,
                desc=f"{cfg.algo.name} {cfg.dataset.name}",
                unit="it",
                mininterval=0.5,
                dynamic_ncols=True,
                leave=True,
            )
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


def completed_before(job_dir: Path, digest: str) -> dict | None:
    """The summary of a completed run of the same config in ``job_dir``, if there is one."""
    previous = read_summary(job_dir)
    if previous and previous.get("status") == "completed" and previous.get("config_hash") == digest:
        return previous
    return None


class _NoWriter:
    """What ranks other than 0 use: they compute but write nothing into the job directory."""

    metrics_rows: list = []

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def run_job(
    cfg, graph, job_dir: Path, resolved: dict, digest: str, make_engine=LocalEngine, writes: bool = True
) -> dict:
    """Train one job into ``job_dir`` unless it already completed with the same config; return its summary.

    ``make_engine(cfg, graph, dataset, network)`` builds the backend; ``writes=False`` on MPI ranks other
    than 0, which take part in the computation but leave the job directory to rank 0.
    """
    from .data import load_dataset

    previous = completed_before(job_dir, digest) if writes else None
    if previous and not cfg.force:
        log.info("%s: already completed (config %s); skipped — pass force=true to rerun", job_dir, digest)
        return previous
    if cfg.runner.name == "mpi" and make_engine is LocalEngine:
        return _run_mpi(cfg, graph, job_dir, resolved, digest)

    from .tracking import make_tracker

    writer = ResultsWriter(job_dir) if writes else _NoWriter()
    writer.write_topology(graph.to_json())
    started = time.perf_counter()
    engine, status, message = None, "failed", ""
    progress = _Progress(cfg, cfg.progress and writes)
    tracker = make_tracker(cfg, job_dir, resolved) if writes else None  # only rank 0 talks to W&B
    try:
        dataset = load_dataset(cfg.dataset, cfg.num_workers, cfg.data_seed, data_dir=cfg.data_dir)
        network = build_network(cfg.model, dataset.input_dim, dataset.num_classes)
        engine = make_engine(cfg, graph, dataset, network)
        logged = 0  # timeline iterations already sent to the tracker

        def on_evaluation(row):
            nonlocal logged
            writer.add_metrics(row)
            if cfg.runner.clock == "wall" and cfg.runner.name == "mpi":
                # Not checkpointed (a measurement), so keep the timeline with each evaluation: a dead rank
                # then loses nothing measured.  The wall clock is paused meanwhile.
                writer.write_timeline(engine.timeline.truncated())
            progress.evaluation(row)
            if tracker is not None:
                done = engine.timeline.done
                tracker.log_iterations(
                    logged, engine.timeline.end[logged:done], engine.timeline.columns["backups"][logged:done]
                )
                logged = done
                tracker.log_evaluation(row)

        # Every MPI rank reads the checkpoint (its rows of the parameters, the clock); only rank 0 writes.
        resume_from = read_checkpoint(job_dir, digest) if cfg.resume and not cfg.force else None
        if resume_from is not None:
            writer.restore_metrics(int(resume_from["iteration"]))
            progress.advance(int(resume_from["iteration"]), float(resume_from["clock_last_end"]))
            log.info("%s: resuming after iteration %d", job_dir, int(resume_from["iteration"]))
        if resume_from is None and writes:
            # A fresh start in a used directory: drop what an earlier, unfinished run left behind.
            for stale in (CHECKPOINT, "timeline.parquet", "metrics.csv"):
                (Path(job_dir) / stale).unlink(missing_ok=True)
        on_checkpoint = (lambda state: write_checkpoint(job_dir, state, digest)) if writes else None
        engine.run(on_evaluation, progress.advance, on_checkpoint=on_checkpoint, resume_from=resume_from)
        status = "completed"
        (Path(job_dir) / CHECKPOINT).unlink(missing_ok=True)  # a completed run needs no checkpoint
    except Diverged as error:
        status, message = "diverged", str(error)
        raise
    except KeyboardInterrupt as error:
        status, message = "interrupted", interruption(error)
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
        if tracker is not None:
            tracker.finish(summary)
    return summary
