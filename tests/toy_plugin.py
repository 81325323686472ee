"""A stop policy written the way a user would write one, outside ``src/``: registered by importing this
module (``plugins=[toy_plugin]``), with its config option ``algo=wait_two`` and nothing edited in dybw."""

from __future__ import annotations

import numpy as np

from dybw.algorithms import ALGORITHMS, StopPolicy


@ALGORITHMS.register
class WaitForTwo(StopPolicy):
    """Every worker waits for its two fastest neighbours (all of them if it has fewer):
    ``stop_j = max(ready_j, a_j^(min(2, d_j)))``."""

    name = "wait_two"
    label = "wait for two"
    default_config = {"update": "atc", "mixing": "uniform", "eta0": 1.0, "delta": 1.0}

    def __init__(self, degrees):
        super().__init__(degrees)
        self.waits = np.minimum(2, self.degrees)
