"""isolated: workers that never communicate (``W = I``) -- the floor that shows whether a task needs consensus."""

from __future__ import annotations

import numpy as np

from .base import ALGORITHMS, StopPolicy


@ALGORITHMS.register
class Isolated(StopPolicy):
    """Every worker takes the same local steps on the same minibatches and delays as the other algorithms,
    but sends nothing and averages with nobody: ``S_j = {}``, ``x_j(k+1) = y_j(k)``, ``stop_j = ready_j``.

    In lock-step its iterations still end together (it pays the same barrier as the others), so its
    curves are comparable per iteration and per unit of time; its accuracy is the point.
    """

    name = "isolated"
    label = "isolated (W = I)"
    color = "#949494"
    sends = False

    def __init__(self, degrees):
        super().__init__(degrees)
        self.waits = np.zeros_like(self.degrees)

    def eligible(self, ready, arrivals):
        return ready.copy()
