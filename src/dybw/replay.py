"""``python -m dybw.replay <wall job dir>``: a wall-clock run's measured delays, replayed on the virtual clock.

A ``runner.clock=wall`` run records, per worker and iteration, when it started, when its local step was
done and when it stopped listening (``timeline.parquet``: ``start``, ``ready``, ``stop``), and per
directed link when the message arrived (``links.parquet``: ``arrival``).  From them, what the run met::

    C_j(k)  = ready_j(k) - start_j(k)               compute: the step, plus any sleep asked for
    D_ij(k) = arrival_{i->j}(k) - ready_i(k)        link: the sleep asked for, the network, the polling

On the ``network`` straggler preset nothing is slept, so these are the machine's and the network's own.
A message that had not arrived when its receiver stopped listening has no arrival: it is replayed as
never arriving (``CENSORED_S``), which no stop rule waits for.

Two replays of the same config on the virtual clock (no training: the clock does not depend on the model):

- **network**: those delays, and the agreement of the config as the virtual clock models it (``instant``:
  free) -- what the paper's model predicts from the links the run met;
- **measured agreement**: besides, each worker learns each global maximum as late after it as it did in
  the run: ``L_j(k) = max_i t_i(k) + A_j(k)``, with ``t_i`` what the worker entered the agreement with
  (its eligible time ``r_i`` for cb-DyBW's threshold, its finish for the iteration's end, both from the
  measured times by the stop rule's own formula) and ``A_j(k)`` the measured lag: ``stop_j(k) - max_i
  r_i(k)``, or ``start_j(k+1) - max_i stop_i(k)``.  With every measured part put back, it checks that the
  clock's equations compose them into the run's iteration times and used sets.

The difference between the two is what agreeing cost on that network.  :func:`replay` writes the trace
CSVs ``straggler=trace`` reads (``compute.csv``: iteration, worker, seconds; ``link.csv``: iteration, src,
dst, seconds; a training run can replay them) and each replay's ``timeline.parquet`` and ``links.parquet``
(``<out>/network``, ``<out>/agreed``), and compares each with the run (:func:`dybw.compare_clocks.compare`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

CENSORED_S = 1.0e6  # the delay replayed for a message its receiver never saw: later than any stop


def job_config(job_dir: Path) -> dict:
    """The resolved config of a job: what its MPI ranks read (``.mpi/job.json``), else Hydra's copy."""
    job_dir = Path(job_dir)
    spec = job_dir / ".mpi" / "job.json"
    if spec.is_file():
        return json.loads(spec.read_text())["config"]
    hydra = job_dir / ".hydra" / "config.yaml"
    if hydra.is_file():
        from omegaconf import OmegaConf

        return OmegaConf.to_container(OmegaConf.load(hydra), resolve=True)
    raise FileNotFoundError(f"{job_dir}: no .mpi/job.json or .hydra/config.yaml to take the job's config from")


class Measured:
    """What a wall run measured, ``[K, N]`` per worker and ``[K, L]`` per directed link ``pairs [L, 2]``."""

    def __init__(self, job_dir: Path):
        import pandas as pd

        job_dir = Path(job_dir)
        timeline = pd.read_parquet(job_dir / "timeline.parquet")
        links = pd.read_parquet(job_dir / "links.parquet")
        if "arrival" not in links:
            raise ValueError(f"{job_dir}: links.parquet has no arrival column (is it a runner.clock=wall run?)")

        def table(name):
            return timeline.pivot(index="iteration", columns="worker", values=name).to_numpy()

        self.start, self.ready, self.stop, self.finish = (table(n) for n in ("start", "ready", "stop", "finish"))
        self.iterations = len(self.start)
        self.pairs = links[links["iteration"] == 0][["src", "dst"]].to_numpy()
        # links.parquet is iteration-major, its links in one order every iteration
        self.arrival = links["arrival"].to_numpy().reshape(self.iterations, len(self.pairs))

    def compute(self) -> np.ndarray:
        return self.ready - self.start

    def link(self) -> np.ndarray:
        delay = self.arrival - self.ready[:, self.pairs[:, 0]]
        return np.where(np.isnan(delay), CENSORED_S, np.maximum(delay, 0.0))

    def lags(self, clock) -> dict[str, np.ndarray]:
        """Per agreement phase the clock needs, ``A_j(k)`` ``[K, N]`` (module docstring), never negative."""
        lags = {}
        if clock.policy.threshold:
            arrivals = np.where(np.isnan(self.arrival), np.inf, self.arrival)
            padded = np.concatenate([arrivals, np.full((self.iterations, 1), np.inf)], axis=1)
            entered = clock.policy.eligible(self.ready, padded[:, clock.incoming])
            lags["threshold"] = self.stop - entered.max(axis=1, keepdims=True)
        if "end" in clock._phases():
            learned = np.concatenate([self.start[1:], self.finish[-1:]])  # the last iteration ends as it is
            lags["end"] = learned - self.stop.max(axis=1, keepdims=True)
        return {phase: np.maximum(lag, 0.0) for phase, lag in lags.items()}


class MeasuredAgreement:
    """``L_j = max_i t_i + A_j``: each worker learns the maximum as late as it did in a measured run (the
    clock's ``control`` hands over ``A [N]`` as the delays of the pairs ``(j, j)``)."""

    name = "measured"

    def __init__(self, num_workers: int):
        self.pairs = np.stack([np.arange(num_workers)] * 2, axis=1)

    def learn(self, entry: np.ndarray, delays: np.ndarray) -> np.ndarray:
        return entry.max() + delays


def write_traces(folder: Path, measured: Measured) -> tuple[Path, Path]:
    """``compute.csv`` and ``link.csv`` in ``folder`` (the columns ``straggler=trace`` reads)."""
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    compute, link, pairs = measured.compute(), measured.link(), measured.pairs
    iterations, workers = compute.shape
    pd.DataFrame(
        {
            "iteration": np.repeat(np.arange(iterations), workers),
            "worker": np.tile(np.arange(workers), iterations),
            "seconds": compute.reshape(-1),
        }
    ).to_csv(folder / "compute.csv", index=False)
    pd.DataFrame(
        {
            "iteration": np.repeat(np.arange(iterations), len(pairs)),
            "src": np.tile(pairs[:, 0], iterations),
            "dst": np.tile(pairs[:, 1], iterations),
            "seconds": link.reshape(-1),
        }
    ).to_csv(folder / "link.csv", index=False)
    return folder / "compute.csv", folder / "link.csv"


def replay_config(config: dict, compute_csv: Path, link_csv: Path, iterations: int) -> dict:
    """The wall run's config on the virtual clock, its delays the traces and nothing scaled or slept."""
    trace = {"dist": "trace", "shift": 0.0, "scale": 0.0, "slow_prob": 0.0, "persistent_fraction": 0.0}
    straggler = dict(config["straggler"])
    straggler.update(
        name="trace",
        time_scale=1.0,
        compute={**straggler["compute"], **trace, "path": str(compute_csv), "persistent_ids": []},
        link={**straggler["link"], **trace, "path": str(link_csv), "persistent_ids": []},
        control={**straggler["control"], "dist": "constant", "shift": 0.0, "scale": 0.0, "persistent_ids": []},
    )
    return {
        **config,
        "straggler": straggler,
        "runner": {**config["runner"], "clock": "virtual"},
        "iterations": iterations,
    }


def replay(wall_dir: Path, out_dir: Path | None = None) -> dict:
    """Both replays of ``wall_dir`` (module docstring) into ``out_dir`` (default ``<wall_dir>/replay``);
    returns ``{"network": comparison, "agreed": comparison}``, the latter with ``agreement_lags``: per
    agreement phase, the mean and median measured ``A_j(k)``."""
    from .compare_clocks import compare
    from .config import load, validate
    from .engine import Timeline, delays_and_clock
    from .results import ResultsWriter

    wall_dir = Path(wall_dir)
    out_dir = Path(out_dir) if out_dir is not None else wall_dir / "replay"
    measured = Measured(wall_dir)
    compute_csv, link_csv = write_traces(out_dir, measured)
    cfg = load(replay_config(job_config(wall_dir), compute_csv, link_csv, measured.iterations))
    if cfg.protocol.sync != "lockstep" or cfg.algo.update != "atc" or cfg.algo.name in ("cb_adaptive", "ad_psgd"):
        raise ValueError(f"{wall_dir}: the replay covers lock-step ATC runs of a stop rule without memory")
    graph = validate(cfg)
    results = {}
    for name in ("network", "agreed"):
        delays, clock = delays_and_clock(cfg, graph)
        if not np.array_equal(np.asarray(clock.links), measured.pairs):
            raise ValueError(f"{wall_dir}: links.parquet lists the links in another order than the graph")
        if name == "agreed":
            lags = measured.lags(clock)
            agreement_lags = {phase: {"mean": float(lag.mean()), "median": float(np.median(lag))}
                              for phase, lag in lags.items()}  # fmt: skip
            clock.agreement = MeasuredAgreement(cfg.num_workers)
            clock.control = lambda first, count, phase, pairs, lags=lags: lags[phase][first : first + count]
        timeline = Timeline(cfg.iterations, cfg.num_workers, graph.degrees, links=clock.links)
        k = delays.compute(0, cfg.iterations), delays.link(0, cfg.iterations)
        timeline.record(clock.advance(*k), cfg.iterations)
        timeline.write(ResultsWriter(out_dir / name))
        results[name] = compare(wall_dir, out_dir / name)
    results["agreed"]["agreement_lags"] = agreement_lags
    return results


def main(argv: list[str] | None = None) -> int:
    from .compare_clocks import report

    parser = argparse.ArgumentParser(prog="python -m dybw.replay", description=__doc__.split("\n\n")[0])
    parser.add_argument("wall", type=Path, help="job directory of a runner.clock=wall run")
    parser.add_argument("--out", type=Path, default=None, help="where the replays go (default: <wall>/replay)")
    parser.add_argument("--json", type=Path, default=None, help="also write the comparisons' numbers to this file")
    args = parser.parse_args(argv)
    try:
        results = replay(args.wall, args.out)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for name, title in (("network", "measured delays, agreement as modelled"), ("agreed", "and measured agreement")):
        print(f"== replayed: {title}\n{report(results[name])}")
    for phase, lag in results["agreed"]["agreement_lags"].items():
        # how long after the global maximum a worker learned it: what agreeing cost in the run
        print(f"agreement lag    {phase}: mean {1000 * lag['mean']:.1f} ms, median {1000 * lag['median']:.1f} ms")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
