"""cb-DyBW: dynamic backup workers through a global threshold (our reading of the paper's Algorithm 2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np

from ..errors import ConfigError
from ..schema import AtLeast
from .base import ALGORITHMS, AlgoConfig, StopPolicy, clamp_waits


@dataclass
class CbDyBWConfig(AlgoConfig):
    min_neighbors: Annotated[int, AtLeast(1)]  # m: neighbours a worker needs before it may stop


@ALGORITHMS.register
class CbDyBW(StopPolicy):
    """Worker j becomes eligible at ``r_j = max(ready_j, a_j^(m_j))`` (``m = algo.min_neighbors``).

    In lock-step the iteration cannot end before ``theta = max_j r_j``, so every worker keeps listening
    until then: ``stop_j = theta``.  Without a barrier (``sync=free``) the rule is the local one,
    ``stop_j = r_j``.  The realised backup count ``b_j = d_j - |S_j|`` changes every iteration.
    """

    name = "cb_dybw"
    label = "cb-DyBW"
    color = "#D55E00"
    Config = CbDyBWConfig
    threshold = True

    def __init__(self, degrees, min_neighbors: int):
        super().__init__(degrees)
        self.min_neighbors = min_neighbors
        self.waits = clamp_waits(
            np.full_like(self.degrees, min_neighbors), self.degrees, "algo.min_neighbors", min_neighbors
        )

    @classmethod
    def check(cls, config, graph) -> None:
        low, high = int(graph.degrees.min()), int(graph.degrees.max())
        if config.min_neighbors > high:
            raise ConfigError(
                "algo.min_neighbors",
                config.min_neighbors,
                f"allowed range 1..{high} on this graph (degrees {low}..{high})",
            )
