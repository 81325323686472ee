"""``runner=mpi`` across emulated hosts (``tests/cluster/hosts.sh``: network namespaces on a bridge, TCP
between them): the virtual clock gives ``runner=local``'s bits, the wall clock runs every agreement on the
cross-host path (polling, MPI's barrier, each host's own clock), and the traffic really crosses the links.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import TINY, compose, run_config  # noqa: E402

pytestmark = pytest.mark.hosts

SCRIPT = Path(__file__).with_name("hosts.sh")
HOSTS = 3


def _script(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=120, check=check)


@pytest.fixture(scope="session")
def hosts():
    """Three emulated hosts (the ones up, else started for this session and removed after it); yields the
    ``runner.launcher`` override that runs a job's ranks on them."""
    started = False
    if _script("launcher", check=False).returncode != 0:
        done = _script("up", str(HOSTS), check=False)
        if done.returncode != 0:
            pytest.fail(f"could not start emulated hosts with `{SCRIPT} up`:\n{done.stdout}{done.stderr}")
        started = True
    yield f"runner.launcher={_script('launcher').stdout.strip()}"
    if started:
        _script("down", check=False)


def traffic() -> dict[str, int]:
    """Bytes each host sent out through its link so far."""
    counters = {}
    for line in _script("status").stdout.splitlines():
        host, rest = line.split(":", 1)
        counters[host] = int(rest.split("out ")[1].split(" B")[0])
    return counters


def sent_since(before: dict[str, int]) -> dict[str, int]:
    return {host: count - before.get(host, 0) for host, count in traffic().items()}


SMALL = [o for o in TINY if not o.startswith(("runner=", "iterations=", "num_workers="))] + [
    "num_workers=6",
    "iterations=12",
    "eval_every=4",
    "straggler=shifted_exp",
    "model=mlp",
    "model.hidden=[16]",
    "topology=ring",
]


def metrics(job_dir: Path) -> pd.DataFrame:
    return pd.read_csv(job_dir / "metrics.csv").drop(columns="wall_seconds")


def parameters() -> int:
    """P, the floats of one worker's model in SMALL (an MLP 20-16-4 on the synthetic task)."""
    from dybw.models import build_network

    cfg = compose(SMALL)[0]
    return build_network(cfg.model, (cfg.dataset.input_dim,), cfg.dataset.num_classes).num_params


def test_the_virtual_clock_across_hosts_gives_runner_local_bits_over_the_links(hosts, tmp_path):
    before = traffic()
    across = run_config([*SMALL, "runner=mpi", "runner.ranks=3", hosts], tmp_path / "hosts")
    sent = sent_since(before)
    local = run_config([*SMALL, "runner=local"], tmp_path / "local")
    assert across["status"] == local["status"] == "completed"
    pd.testing.assert_frame_equal(metrics(tmp_path / "hosts"), metrics(tmp_path / "local"), check_exact=True)
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "hosts" / "timeline.parquet"),
        pd.read_parquet(tmp_path / "local" / "timeline.parquet"),
    )
    # Each rank hosts 2 workers of the ring, one on each side of it, and sends their parameters (float32) to
    # the neighbouring ranks every iteration: every host's link carried at least that.
    assert all(count > 12 * 2 * 4 * parameters() for count in sent.values()), sent


@pytest.mark.parametrize("agreement", ["instant", "allreduce", "flood"])
def test_the_wall_clock_runs_each_agreement_on_the_cross_host_path(hosts, tmp_path, agreement, caplog):
    before = traffic()
    wall = ["runner=mpi", "runner.clock=wall", "num_workers=4", "straggler.time_scale=0.2", hosts]
    with caplog.at_level(logging.INFO, logger="dybw"):
        summary = run_config([*SMALL, *wall, f"protocol.agreement={agreement}"], tmp_path)
    sent = sent_since(before)
    assert summary["status"] == "completed" and summary["iterations"] == 12
    # The path the ranks took, as rank 0 logged it: none of the shortcuts of ranks on one host.
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("wall clock:")]
    assert f"4 ranks on {HOSTS} hosts (h1, h2, h3)" in line, line
    assert "waking by polling" in line and "by MPI's barrier" in line and "each host's clock" in line, line
    assert all(count > 12 * 4 * parameters() for count in sent.values()), sent


def test_measured_network_delays_replayed_on_the_virtual_clock_give_the_runs_iterations(hosts, tmp_path):
    """cb-DyBW's wall clock on shaped links (h3's five times slower), nothing slept: its link delays are
    the network's.  Replayed with the agreement's measured lags, the virtual clock gives the run's mean
    iteration within 10 % and its used sets; the link delays are what the bandwidths allow."""
    from dybw.replay import Measured, replay

    rates = {"h1": "20mbit", "h2": "20mbit", "h3": "4mbit"}
    job = ["algo=cb_dybw", "dataset=mnist", "model=mlp", "num_workers=4", "topology=ring", "straggler=network"]
    run = ["iterations=60", "eval_every=30", "logger=none", "progress=false", "runner=mpi", "runner.clock=wall"]
    try:
        for host, rate in rates.items():
            _script("shape", host, rate)
        summary = run_config([*job, *run, hosts], tmp_path / "wall")
    finally:
        for host in rates:
            _script("shape", host, "none", check=False)
    assert summary["status"] == "completed"

    results = replay(tmp_path / "wall")
    agreed = results["agreed"]
    assert abs(agreed["ratio"] - 1) <= 0.10 and agreed["same_used_set"] >= 0.90, agreed
    # Worker 2 is alone on h3 (ranks go round-robin over h1, h2, h3): each of its messages, P float32 of the
    # model, goes through 4 Mbit/s, one after the other.
    measured = Measured(tmp_path / "wall")
    params = 50 * 128 + 128 + 128 * 10 + 10  # the MLP 50-128-10 on MNIST's 50 PCA features
    out_of_h3 = measured.link()[:, measured.pairs[:, 0] == 2]
    assert np.median(out_of_h3) >= 0.8 * 4 * params * 8 / 4e6, np.median(out_of_h3)


def test_the_real_network_figure_and_its_section_of_the_reproduction_report(hosts, tmp_path):
    """`make real-network QUICK=1` into a temporary results root: shaped links recorded beside the runs, the
    four wall-clock runs on the emulated hosts, the figure naming where each worker ran and how each link
    was shaped, and REPRODUCTION.md's section with each lock-step run replayed."""
    results, out = tmp_path / "results", tmp_path / "out"
    rates = {"h1": "20mbit", "h2": "20mbit", "h3": "4mbit"}  # the Makefile's LINKS
    links = results / "quick_real_network" / "links.txt"
    links.parent.mkdir(parents=True)
    try:
        for host, rate in rates.items():
            _script("shape", host, rate)
        links.write_text("".join(f"{line.split(': out')[0]}: limit{line.split('limit')[1]}\n" for line in
                                 _script("status").stdout.splitlines()))  # fmt: skip
        drawn = _figures("--quick", "--only", "real_network", "--results", str(results), "--out", str(out))
    finally:
        for host in rates:
            _script("shape", host, "none", check=False)
    assert drawn.returncode == 0, drawn.stdout[-3000:] + drawn.stderr[-3000:]
    assert "[real_network] 4 jobs: 0 already completed, 4 to run" in drawn.stdout, drawn.stdout
    caption = json.loads((out / "figures.json").read_text())["real_network"]["caption"]
    assert "h3: limit rate 4Mbit" in caption and "worker 2 on h3" in caption, caption
    assert re.search(r"lock-step, measured -?\d+\.\d %", caption), caption

    table = _figures("--quick", "--only", "reproduction", "--no-run", "--results", str(results), "--out", str(out))
    assert table.returncode == 0, table.stdout[-3000:] + table.stderr[-3000:]
    report = (out / "REPRODUCTION.md").read_text()
    section = report.split("## C2 on shaped TCP links (emulated hosts)")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| lock-step") or line.startswith("| no barrier")]
    assert len(rows) == 4, section
    for row in rows:
        replayed = row.split("|")[5].strip()
        # lock-step runs are replayed (a mean in ms), runs without a barrier are not
        assert replayed.endswith(" ms") if row.startswith("| lock-step") else replayed == "-", row


def _figures(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dybw.figures", *args], cwd=Path(__file__).resolve().parents[2],
                          capture_output=True, text=True, timeout=900)  # fmt: skip
