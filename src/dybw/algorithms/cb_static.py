"""cb-Static(b): every worker waits for its fastest ``d_j - b`` neighbours (``b`` backup workers, fixed)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from ..errors import ConfigError
from ..schema import AtLeast
from .base import ALGORITHMS, AlgoConfig, StopPolicy, clamp_waits

# One colour per b the paper draws; other b get the figures' extra palette.
COLORS = {1: "#DE8F05", 2: "#029E73"}


@dataclass
class CbStaticConfig(AlgoConfig):
    b: Annotated[int, AtLeast(0)]  # backup workers per worker


@ALGORITHMS.register
class CbStatic(StopPolicy):
    """``stop_j = max(ready_j, a_j^(p_j))`` with ``p_j = d_j - b`` clamped to ``[1, d_j]``."""

    name = "cb_static"
    label = "cb-Static"
    Config = CbStaticConfig

    def __init__(self, degrees, b: int):
        super().__init__(degrees)
        self.b = b
        self.waits = clamp_waits(self.degrees - b, self.degrees, "algo.b", b)

    @classmethod
    def check(cls, config, graph) -> None:
        low, high = int(graph.degrees.min()), int(graph.degrees.max())
        if config.b > high - 1:
            raise ConfigError(
                "algo.b",
                config.b,
                f"allowed range 0..{high - 1} on this graph (degrees {low}..{high}): "
                "worker j waits for d_j - b >= 1 neighbours",
            )

    @classmethod
    def label_for(cls, params: Mapping) -> str:
        return f"{cls.label} (b={params['b']})"

    @classmethod
    def color_for(cls, params: Mapping) -> str | None:
        return COLORS.get(params["b"])
