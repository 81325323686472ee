#!/usr/bin/env python
"""dybw entry point: compose the config (Hydra) -> validate every job -> run each -> write results.

python run.py                                   # one job with the paper's defaults
python run.py -m algo=cb_dybw,cb_full dataset=mnist   # a multirun, one job per algorithm
"""

import signal
import sys
from pathlib import Path

import hydra

from dybw.cli import FAILED_JOBS, OUTCOMES, fail, multirun_table, prevalidate, register_resolvers, run_hydra_job
from dybw.errors import Terminated, interruption

CONF_DIR = Path(__file__).resolve().parent / "conf"


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    return run_hydra_job(cfg)


def _terminate(signum, frame):
    raise Terminated  # a cluster scheduler's stop ends a run like Ctrl-C: flushed, 'interrupted'


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminate)
    sys.argv += prevalidate(sys.argv[1:], CONF_DIR)  # + dybw's subclass of a chosen Hydra launcher
    register_resolvers()
    try:
        main()
    except KeyboardInterrupt as stop:
        fail(
            f"{interruption(stop)}: measured results were flushed, status 'interrupted'",
            code=128 + (signal.SIGTERM if isinstance(stop, Terminated) else signal.SIGINT),
        )
    if len(OUTCOMES) > 1:  # a multirun: its jobs side by side
        print("\n" + multirun_table(OUTCOMES))
    if FAILED_JOBS:
        sys.exit(1)
