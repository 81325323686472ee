"""Shared fixtures: the offline datasets, a private cache, and small configs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The data directory dybw itself would use from the checkout (``make data`` links ./data to an offline
# copy), else the offline copy beside the checkout; subprocesses inherit it.
DATA = REPO / "data" if (REPO / "data").exists() else REPO.parent / "shared" / "data"

os.environ.setdefault("DYBW_DATA_DIR", str(DATA))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Size TF's thread pools as a job does (runner.threads=1) before any test runs a TF operation: the local
# jobs tests run in this process must compute the same bits as the MPI ranks they are compared with.
from dybw.tf_setup import use_threads  # noqa: E402

use_threads(1)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return Path(os.environ["DYBW_DATA_DIR"])
