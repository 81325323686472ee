"""A plugin (``plugins=[pin_probe]``) that records, when its process exits, which CPU kernels the process ran
with (``dybw.numerics.status()``): one JSON file per process in ``$DYBW_PIN_PROBE_DIR``.  Imported in every
process of a job (run.py, each MPI rank, the figure pipeline), it shows the pins reached each of them."""

from __future__ import annotations

import atexit
import json
import os
import sys
from pathlib import Path

from dybw import numerics


def _record() -> None:
    folder = Path(os.environ["DYBW_PIN_PROBE_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "pid": os.getpid(),
        "argv": sys.argv,
        "rank": os.environ.get("PMI_RANK"),
        "tensorflow": "tensorflow" in sys.modules,
        **numerics.status(),
    }
    (folder / f"{os.getpid()}.json").write_text(json.dumps(record))


if "DYBW_PIN_PROBE_DIR" in os.environ:
    atexit.register(_record)
