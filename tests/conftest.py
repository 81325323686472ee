"""Shared fixtures: the offline datasets, a private cache, and small configs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# dybw first, before any test module imports numpy: importing it pins the CPU kernels numpy chooses
# (numerics.py), without which the tests' in-process runs differ in the last bits from the MPI ranks'.
import dybw  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
# The data directory dybw itself would use from the checkout (``make data`` links ./data to an offline
# copy), else the offline copy beside the checkout; subprocesses inherit it.
DATA = REPO / "data" if (REPO / "data").exists() else REPO.parent / "shared" / "data"

os.environ.setdefault("DYBW_DATA_DIR", str(DATA))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


TIERS_BY_PLACE = {
    "mpi": "mpi",
    "test_figures.py": "figures",
    "test_figure_pipeline.py": "figures",
    "test_paper_figures.py": "figures",
}  # tests/cluster/ marks its own (cluster, hosts)
COSTLY = ("mpi", "figures", "cluster", "hosts")

# Modules whose tests share one worker when pytest-xdist spreads the suite (``make test``: ``-n 4 --dist
# loadgroup``), longest chain first: one real Slurm and one set of emulated hosts (whose links a test may
# shape) serve a test at a time, and a module-scoped fixture (the quick figure pipeline, an installed plugin,
# the MPI jobs run in shared worlds) is built once.  The other tests are spread one by one, the
# ``slow`` ones first.
GROUPS = (
    "test_slurm.py",
    "test_hosts.py",
    "test_figures.py",
    "test_wall_clock_policies.py",
    "test_virtual_clock_ranks.py",
    "test_extending.py",
    "test_tracking.py",
)


def pytest_collection_modifyitems(config, items):
    """Every test gets one tier by cost: ``unit`` (marked in the module), else ``cluster``/``hosts`` (marked in
    tests/cluster/), else ``mpi`` (tests/mpi/), ``figures`` (the figure pipeline's modules,
    :data:`TIERS_BY_PLACE`), else ``integration`` (training jobs, run.py in a subprocess).  ``pytest -m
    <tier>`` selects one; ``make test`` runs ``unit`` first, then the rest on four xdist workers, ordered so
    that no long test is left for the end while the others idle: the :data:`GROUPS`, then the ``slow`` tests
    (real datasets, CNNs), then the others."""
    for item in items:
        if any(item.get_closest_marker(tier) for tier in ("unit", *COSTLY)):
            continue
        place = Path(str(item.fspath)).relative_to(REPO / "tests").parts
        tier = next((TIERS_BY_PLACE[part] for part in place if part in TIERS_BY_PLACE), "integration")
        item.add_marker(getattr(pytest.mark, tier))

    def cost_rank(item) -> int:
        name = Path(str(item.fspath)).name
        return GROUPS.index(name) if name in GROUPS else len(GROUPS) + (item.get_closest_marker("slow") is None)

    items.sort(key=cost_rank)  # stable: the collection order within a rank


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: unknown (and never called) without the plugin
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` by module: every test of a module in :data:`GROUPS` goes to one worker as one unit
    of work, the other tests one by one, in collection order.  (xdist's own ``xdist_group`` mark works by
    renaming a test's node id, which pytest 9 no longer lets a plugin do.)"""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if Path(module).name in GROUPS else nodeid

    config.option.loadscopereorder = False  # keep the order set above (xdist's would put big groups first)
    return ModuleGroups(config, log)


@pytest.hookimpl(tryfirst=True)  # before the fixtures of the test are set up: they may run TF too
def pytest_runtest_setup(item):
    """Size TF's thread pools as a job does (runner.threads=1) before a test that may run a TF operation:
    the local jobs tests run in this process must compute the same bits as the MPI ranks they are compared
    with.  ``unit`` tests never import TensorFlow (4-8 s), so a session of them alone does not either."""
    if item.get_closest_marker("unit") is None:
        from dybw.tf_setup import use_threads

        use_threads(1)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return Path(os.environ["DYBW_DATA_DIR"])


def pytest_sessionfinish(session, exitstatus):
    """A session of ``unit`` tests alone (``make test-fast``) must not have imported TensorFlow: a unit test
    that starts doing so fails the session here, naming the rule, instead of slowing the tier silently.  On
    pytest-xdist workers (``make test`` runs the tier on two) each worker reports to the controller, which
    fails the session (:func:`pytest_testnodedown`): a worker's own exit status is not the session's."""
    import sys

    items = getattr(session, "items", [])
    imported = bool(items) and all(item.get_closest_marker("unit") for item in items) and "tensorflow" in sys.modules
    worker_output = getattr(session.config, "workeroutput", None)
    if worker_output is not None:
        worker_output[UNIT_IMPORTED_TENSORFLOW] = imported
    elif imported or session.config.stash.get(_WORKER_IMPORTED_TENSORFLOW, False):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print("\nerror: a session of unit tests imported tensorflow; a test that needs it is not `unit`")


UNIT_IMPORTED_TENSORFLOW = "dybw_unit_session_imported_tensorflow"
_WORKER_IMPORTED_TENSORFLOW = pytest.StashKey[bool]()


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook, on the controller: a worker has finished
def pytest_testnodedown(node, error):
    if getattr(node, "workeroutput", {}).get(UNIT_IMPORTED_TENSORFLOW):
        node.config.stash[_WORKER_IMPORTED_TENSORFLOW] = True
