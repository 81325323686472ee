"""cb-Full: every worker waits for all of its neighbours, every iteration."""

from __future__ import annotations

from .base import ALGORITHMS, StopPolicy


@ALGORITHMS.register
class CbFull(StopPolicy):
    """``stop_j = max(ready_j, a_j^(d_j))``: the slowest neighbour's message ends j's wait."""

    name = "cb_full"
    label = "cb-Full"
    color = "#0173B2"
