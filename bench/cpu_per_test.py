"""A pytest plugin: the wall time and CPU time of every test, one tab-separated line per test.

The suite is bound by CPU, so a test's cost is its CPU seconds: its own process's (``RUSAGE_SELF``, every
thread) and its children's (``RUSAGE_CHILDREN``: the ``run.py`` processes, ``mpiexec`` and the MPI ranks it
waited for).  Not counted: processes nobody waits for (the Slurm jobs, run by slurmd; ranks killed with
their launcher), so the sums are lower bounds.  Use it as the whole suite runs::

    PYTHONPATH=bench .venv/bin/python -m pytest -p cpu_per_test -m "not unit" -n 4 --dist loadgroup
    python bench/cpu_per_test.py                        # the summary: per file, and the 25 costliest tests

Lines (node id, wall s, own CPU s, children's CPU s, start as a Unix time) go to ``$CPU_PER_TEST_DIR``
(default ``/tmp/cpu_per_test``), one file per xdist worker.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

import pytest

OUT = Path(os.environ.get("CPU_PER_TEST_DIR", "/tmp/cpu_per_test"))


def _cpu_seconds() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Setup, call and teardown of one test (a module fixture's cost lands on the first test that uses it)."""
    started = time.time()
    own, children = _cpu_seconds()
    yield
    own_after, children_after = _cpu_seconds()
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.tsv", "a") as lines:
        wall = time.time() - started
        cpu = f"{own_after - own:.1f}\t{children_after - children:.1f}"
        lines.write(f"{item.nodeid}\t{wall:.1f}\t{cpu}\t{started:.1f}\n")


def summary(folder: Path = OUT, top: int = 25) -> str:
    rows = []
    for path in sorted(folder.glob("*.tsv")):
        for line in path.read_text().splitlines():
            nodeid, wall, own, children = line.split("\t")[:4]
            rows.append((nodeid, float(wall), float(own) + float(children)))
    by_file: dict[str, list[float]] = {}
    for nodeid, wall, cpu in rows:
        totals = by_file.setdefault(nodeid.split("::")[0], [0, 0.0, 0.0])
        totals[0] += 1
        totals[1] += wall
        totals[2] += cpu
    out = [f"{len(rows)} tests, {sum(r[2] for r in rows) / 60:.1f} CPU-minutes (a lower bound), per file:"]
    out += [
        f"{cpu:8.1f} CPU-s {wall:8.1f} s {count:4d} tests  {name}"
        for name, (count, wall, cpu) in sorted(by_file.items(), key=lambda kv: -kv[1][2])
    ]
    out += [f"the {top} costliest tests:"]
    out += [
        f"{cpu:8.1f} CPU-s {wall:8.1f} s  {nodeid}" for nodeid, wall, cpu in sorted(rows, key=lambda r: -r[2])[:top]
    ]
    return "\n".join(out)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT))
