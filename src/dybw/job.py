"""Training one job into its directory, in three steps: :func:`prepare`, the engine's run, :func:`finalize`.

:func:`train` is what a runner calls -- in its own process (``runner=local``) or on every MPI rank, each
with its engine -- once the runner has decided the job must run (:func:`dybw.runners.run_job` skips a
job completed with the same config).  Only the process that ``writes`` touches the job directory and
W&B; the others compute their share.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from .errors import Diverged, interruption
from .models import build_network
from .results import CHECKPOINT, ResultsWriter, Summary, read_checkpoint, write_checkpoint
from .tf_setup import use_threads

log = logging.getLogger("dybw")


class _Progress:
    """A tqdm bar per job: iteration, the job's clock (virtual or measured seconds), latest test accuracy.

    Its rate (and so its ETA) counts training iterations only.  The bar appears when the training loop
    starts, after the data and TensorFlow are loaded; the loop's first iteration still includes the
    evaluation at k=0, compiling the step and, under MPI, waiting for every rank to arrive: seconds,
    hundreds of ordinary iterations.  So the bar's clock and averages restart once that first iteration
    is done (``elapsed`` counts from there), and the first ETA comes from ordinary iterations.
    """

    def __init__(self, cfg, enabled: bool):
        self.cfg, self.enabled = cfg, enabled
        self.bar = None
        self.accuracy = float("nan")
        self.last = 0
        self.warming_up = False

    def start(self, done: int) -> None:
        if self.enabled and self.bar is None:
            from tqdm.auto import tqdm

            cfg = self.cfg
            self.bar = tqdm(
                total=cfg.iterations,
                initial=done,
                desc=f"{cfg.algo.name} {cfg.dataset.name}",
                unit="it",
                mininterval=0.5,
                dynamic_ncols=True,
                leave=True,
            )
            self.last = done
            self.warming_up = True

    def evaluation(self, row):
        self.accuracy = row["test_accuracy"]

    def advance(self, k: int, virtual_time: float):
        if self.bar is None:
            return
        # The job's own clock, not tqdm's: simulated (virtual) or measured (wall) seconds since iteration 0.
        clock = "virtual" if self.cfg.runner.clock == "virtual" else "measured"
        self.bar.set_postfix_str(f"{clock} {virtual_time:.2f} s, acc {self.accuracy:.3f}", refresh=False)
        if self.warming_up:
            # The first iteration was start-up: count the bar (and its rate) from here.
            self.warming_up = False
            self.bar.reset(total=self.cfg.iterations)
            self.bar.initial = self.bar.n = self.bar.last_print_n = k
            self.bar.refresh()
        else:
            self.bar.update(k - self.last)
        self.last = k

    def close(self):
        if self.bar is not None:
            self.bar.close()


class _NoWriter:
    """What processes other than the writing one use: they compute but write nothing."""

    metrics_rows: list = []

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


@dataclass
class JobRun:
    """One job in progress: what :func:`prepare` set up and :func:`finalize` closes."""

    cfg: object
    job_dir: Path
    digest: str
    writes: bool
    writer: object
    progress: _Progress
    tracker: object
    started: float = field(default_factory=time.perf_counter)
    engine: object = None
    resume_from: dict | None = None
    status: str = "failed"
    message: str = ""
    logged: int = 0  # timeline iterations already sent to the tracker


def prepare(cfg, graph, job_dir: Path, resolved: dict, digest: str, make_engine, writes: bool) -> JobRun:
    """The writer, progress bar and tracker, then the data, network, engine and the state to resume from.

    ``make_engine(cfg, graph, dataset, network)`` builds the engine.  The tracker is created first, so
    W&B's start overlaps with loading the data; a failure after that is recorded by :func:`finalize`."""
    from .tracking import make_tracker

    writer = ResultsWriter(job_dir) if writes else _NoWriter()
    writer.write_topology(graph.to_json())
    tracker = make_tracker(cfg, job_dir, resolved) if writes else None  # only the writer talks to W&B
    run = JobRun(cfg, Path(job_dir), digest, writes, writer, _Progress(cfg, cfg.progress and writes), tracker)
    try:
        _build_engine(run, graph, make_engine)
    except BaseException as error:
        finalize(run, error)
        raise
    return run


def _build_engine(run: JobRun, graph, make_engine) -> None:
    from .data import load_dataset
    from .engine import resumed_measurements

    cfg = run.cfg
    dataset = load_dataset(cfg.dataset, cfg.num_workers, cfg.data_seed, data_dir=cfg.data_dir)
    use_threads(cfg.runner.threads)  # before a network that runs TF operations to build itself (Keras)
    network = build_network(cfg.model, dataset.input_shape, dataset.num_classes)
    run.engine = make_engine(cfg, graph, dataset, network)
    # Every MPI rank reads the checkpoint (its rows of the parameters, the clock); only the writer writes.
    run.resume_from = read_checkpoint(run.job_dir, run.digest) if cfg.resume and not cfg.force else None
    if run.resume_from is not None:
        done = int(run.resume_from["iteration"])
        run.writer.restore_metrics(done)
        # The summary's wall time goes on from the checkpoint's, as the engine's wall_seconds column does.
        run.started -= resumed_measurements(run.resume_from)[0]
        log.info("%s: resuming after iteration %d", run.job_dir, done)
    elif run.writes:
        # A fresh start in a used directory: drop what an earlier, unfinished run left behind.
        for stale in (CHECKPOINT, "timeline.parquet", "links.parquet", "metrics.csv"):
            (run.job_dir / stale).unlink(missing_ok=True)


def _on_evaluation(run: JobRun, row: dict) -> None:
    run.writer.add_metrics(row)
    engine = run.engine
    if not engine.checkpointed:
        # No checkpoint (a wall-clock measurement): keep the timeline with each evaluation instead, so a
        # dead rank loses nothing measured.  The wall clock is paused meanwhile.
        engine.timeline.write(run.writer)
    run.progress.evaluation(row)
    if run.tracker is not None:
        done = engine.timeline.done
        run.tracker.log_iterations(
            run.logged, engine.timeline.end[run.logged : done], engine.timeline.iteration_backups(run.logged, done)
        )
        run.logged = done
        run.tracker.log_evaluation(row)


def finalize(run: JobRun, error: BaseException | None = None) -> dict:
    """Record how the job ended (from ``error``, None if it completed): timeline, summary, tracker."""
    if error is None:
        run.status, run.message = "completed", ""
    elif isinstance(error, Diverged):
        run.status, run.message = "diverged", str(error)
    elif isinstance(error, KeyboardInterrupt):
        run.status, run.message = "interrupted", interruption(error)
    else:
        run.status, run.message = "failed", f"{type(error).__name__}: {error}"
    run.progress.close()
    engine = run.engine
    if engine is not None and engine.timeline.done:
        engine.timeline.write(run.writer)
    timeline = engine.timeline if engine is not None else None
    wall = time.perf_counter() - run.started
    cost = getattr(engine, "cost", None)
    summary = Summary.from_rows(
        run.cfg, run.status, run.message, run.writer.metrics_rows, timeline, wall, run.digest, cost
    ).to_dict()
    run.writer.write_summary(summary)
    if run.writes and run.status == "completed":
        # Only now: a job stopped before its summary was written can still resume from the checkpoint.
        (run.job_dir / CHECKPOINT).unlink(missing_ok=True)
    if run.tracker is not None:
        run.tracker.finish(summary)
    return summary


def train(cfg, graph, job_dir: Path, resolved: dict, digest: str, make_engine, writes: bool = True) -> dict:
    """Train one job into ``job_dir``; returns its summary.  ``writes=False`` on MPI ranks other than 0,
    which take part in the computation but leave the job directory to rank 0."""
    run = prepare(cfg, graph, job_dir, resolved, digest, make_engine, writes)
    on_checkpoint = (lambda state: write_checkpoint(run.job_dir, state, digest)) if writes else None
    run.progress.start(int(run.resume_from["iteration"]) if run.resume_from is not None else 0)
    try:
        run.engine.run(
            lambda row: _on_evaluation(run, row),
            run.progress.advance,
            on_checkpoint=on_checkpoint,
            resume_from=run.resume_from,
        )
    except BaseException as error:
        finalize(run, error)
        raise
    else:
        return finalize(run)
    finally:
        release = getattr(run.engine, "release", None)  # an engine of a plugin's may not subclass Engine
        if release is not None:
            release()
