"""Clock-only jobs: the virtual clock of a config without any training.

The clock never depends on the model (docs/protocol.md): the delays come from their own streams and the
stop rules only see arrival times.  So the iteration durations, the used sets and the backup counts of a
config are computed here with the same delays and clock the training engine uses
(:func:`dybw.engine.delays_and_clock`), for thousands of iterations in milliseconds.  A clock job writes
``topology.json``, ``timeline.parquet``, ``usage.parquet`` (per directed link i -> j, the share of
iterations in which j used i's message) and a
``summary.json`` with ``mode: clock`` (training fields null) into its directory.  Its ``config_hash`` is
the config's hash with a ``clock_only`` marker, so ``run.py`` never mistakes it for a trained job.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np

from ..engine import Timeline, delays_and_clock
from ..results import ResultsWriter, Summary

CHUNK = 256
VERSION = 3  # part of a clock job's config hash: bump when what a clock job writes changes


def simulate(cfg, graph, per_link: bool = False) -> tuple[Timeline, np.ndarray]:
    """The timeline of ``cfg.iterations`` iterations of ``cfg``'s clock, and per directed link of
    ``graph.directed_links()`` in how many iterations its receiver used its sender's message.  With
    ``per_link`` the timeline also records each link's use per iteration, as a training job's does."""
    with warnings.catch_warnings():  # a clamped algo.b was already reported when the spec was checked
        warnings.simplefilter("ignore")
        delays, clock = delays_and_clock(cfg, graph)
    timeline = Timeline(cfg.iterations, cfg.num_workers, graph.degrees, graph.directed_links() if per_link else None)
    used = np.zeros(len(clock.links), dtype=np.int64)
    k = 0
    while k < cfg.iterations:
        count = min(CHUNK, cfg.iterations - k)
        chunk = clock.advance(delays.compute(k, count), delays.link(k, count))
        timeline.record(chunk, count)
        used += chunk.used[:count].sum(axis=0)
        k += count
    return timeline, used


def _write_usage(path: Path, graph, used: np.ndarray, iterations: int) -> None:
    """``usage.parquet``: per directed link i -> j, the share of iterations in which j used i's message."""
    import os
    import tempfile

    import pandas as pd

    links = graph.directed_links()
    frame = pd.DataFrame({"src": links[:, 0], "dst": links[:, 1], "used_fraction": used / iterations})
    fd, tmp = tempfile.mkstemp(prefix=".usage.", dir=path.parent)
    os.close(fd)
    try:
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run_clock_job(cfg, graph, job_dir: Path, digest: str) -> dict:
    """Simulate the clock of ``cfg`` and write its results into ``job_dir``; returns the summary."""
    started = time.perf_counter()
    timeline, used = simulate(cfg, graph)
    writer = ResultsWriter(job_dir)
    writer.write_topology(graph.to_json())
    writer.write_timeline(timeline.truncated())
    _write_usage(Path(job_dir) / "usage.parquet", graph, used, timeline.done)
    done = timeline.done
    summary = Summary(
        status="completed",
        message="virtual clock only (no training)",
        mode="clock",
        algo=cfg.algo.name,
        dataset=None,
        num_workers=cfg.num_workers,
        iterations=done,
        total_time=float(timeline.end[done - 1]),
        mean_iteration_duration=timeline.mean_duration(),
        final_train_loss=None,
        final_test_accuracy=None,
        best_test_accuracy=None,
        target_accuracy=None,
        time_to_target=None,
        iterations_to_target=None,
        mean_backups=timeline.mean_backups(),
        mean_used=float(np.mean(timeline.columns["used"][:done])),
        wall_seconds=time.perf_counter() - started,
        seed=cfg.seed,
        experiment=cfg.experiment_name,
        config_hash=digest,
    )
    return summary.write(job_dir)
