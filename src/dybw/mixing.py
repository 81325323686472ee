"""Mixing weights ``W(k)`` from the used sets ``S_j(k)``; every row sums to 1.

- ``uniform``:    ``W_ji = 1 / (|S_j| + 1)`` for ``i in S_j ∪ {j}``, else 0.
- ``metropolis``: ``W_ji = 1 / (1 + max(d_i, d_j))`` for ``i in S_j``; ``W_jj = 1 - sum_{i in S_j} W_ji``
  (the weight of absent neighbours stays with j).  With every neighbour present (cb-Full) this is the
  symmetric, doubly stochastic Metropolis matrix of the graph.

Combine step (ATC): ``x_j(k+1) = sum_i W_ji(k) y_i(k)``, i.e. ``X(k+1) = W(k) Y(k)`` with rows = workers.
"""

from __future__ import annotations

import numpy as np

MIXING_RULES = ("uniform", "metropolis")


def metropolis_base(degrees: np.ndarray) -> np.ndarray:
    """``1 / (1 + max(d_i, d_j))`` for every pair (masked by the used sets later)."""
    d = np.asarray(degrees, dtype=np.float64)
    return 1.0 / (1.0 + np.maximum(d[:, None], d[None, :]))


def mixing_matrices(used: np.ndarray, rule: str, degrees: np.ndarray) -> np.ndarray:
    """``W[..., j, i]`` for boolean ``used[..., j, i]`` (``i in S_j``, diagonal False), float32."""
    n = used.shape[-1]
    eye = np.eye(n, dtype=bool)
    if rule == "uniform":
        members = used | eye
        weights = members / members.sum(axis=-1, keepdims=True)
    elif rule == "metropolis":
        weights = np.where(used & ~eye, metropolis_base(degrees), 0.0)
        weights = weights + eye * (1.0 - weights.sum(axis=-1, keepdims=True))
    else:
        raise ValueError(f"unknown mixing rule {rule!r}; choose one of {MIXING_RULES}")
    return weights.astype(np.float32)
