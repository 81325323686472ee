"""cb_timeout: wait for every neighbour, but at most ``timeout`` seconds after one's own update is ready."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from ..schema import NonNegative
from .base import ALGORITHMS, AlgoConfig, StopPolicy


@dataclass
class CbTimeoutConfig(AlgoConfig):
    timeout: Annotated[float, NonNegative(unit="seconds")]  # inf: cb-Full


@ALGORITHMS.register
class CbTimeout(StopPolicy):
    """``stop_j = max(ready_j, min(a_j^(d_j), ready_j + timeout))``: every neighbour, or what arrived by the
    deadline -- possibly nobody (then ``x_j`` is its own step).  The rule decentralised-learning frameworks
    use (a node waits for its neighbours up to a timeout).  ``timeout = inf`` is cb-Full, bit for bit;
    ``timeout = 0`` uses only the messages already there when the worker's own update is ready.
    """

    name = "cb_timeout"
    label = "cb-Timeout"
    Config = CbTimeoutConfig

    def __init__(self, degrees, timeout: float):
        super().__init__(degrees)
        self.timeout = float(timeout)

    @classmethod
    def label_for(cls, params: Mapping) -> str:
        return f"{cls.label} ({1000 * float(params['timeout']):g} ms)"
