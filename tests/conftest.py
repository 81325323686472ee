"""Shared fixtures: the offline datasets, a private cache, and small configs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

os.environ.setdefault("DYBW_DATA_DIR", str(SHARED_DATA))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return Path(os.environ["DYBW_DATA_DIR"])
