"""The training algorithms, one module each, found by ``algo.name`` (:data:`ALGORITHMS`).

- :mod:`.cb_full`   wait for every neighbour;
- :mod:`.cb_static` wait for the fastest ``d_j - b`` neighbours;
- :mod:`.cb_dybw`   dynamic backup workers: listen until the last worker could stop;
- :mod:`.cb_timeout` every neighbour, or what arrived by a deadline after one's own update;
- :mod:`.cb_adaptive` per worker and iteration, the wait that maximises estimated progress per second;
- :mod:`.isolated`  no communication at all (``W = I``): the floor that shows whether consensus matters;
- :mod:`.ad_psgd`   asynchronous pairwise gossip (no iterations): runs on the event engine.

:mod:`.base` holds what they share: the registry, the common config keys, :class:`StopPolicy`.
"""

from __future__ import annotations

from .ad_psgd import AdPsgd
from .base import (
    ALGORITHMS,
    ENGINES,
    AlgoConfig,
    Algorithm,
    StopPolicy,
    build_algorithm,
    clamp_waits,
    order_statistic,
)
from .cb_adaptive import CbAdaptive
from .cb_dybw import CbDyBW
from .cb_full import CbFull
from .cb_static import CbStatic
from .cb_timeout import CbTimeout
from .isolated import Isolated

__all__ = [
    "ALGORITHMS",
    "ENGINES",
    "AdPsgd",
    "CbAdaptive",
    "CbDyBW",
    "CbFull",
    "CbStatic",
    "CbTimeout",
    "Isolated",
    "AlgoConfig",
    "Algorithm",
    "StopPolicy",
    "build_algorithm",
    "clamp_waits",
    "order_statistic",
]
