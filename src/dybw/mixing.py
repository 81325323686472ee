"""Mixing weights ``W(k)`` from the used sets ``S_j(k)``; every row sums to 1.

- ``uniform``:    ``W_ji = 1 / (|S_j| + 1)`` for ``i in S_j ∪ {j}``, else 0.
- ``metropolis``: ``W_ji = 1 / (1 + max(d_i, d_j))`` for ``i in S_j``; ``W_jj = 1 - sum_{i in S_j} W_ji``
  (the weight of absent neighbours stays with j).  With every neighbour present (cb-Full) this is the
  symmetric, doubly stochastic Metropolis matrix of the graph.

Combine step (ATC): ``x_j(k+1) = sum_i W_ji(k) y_i(k)``, i.e. ``X(k+1) = W(k) Y(k)`` with rows = workers.

The sum runs over ``i in N_j ∪ {j}`` only, in ascending ``i`` (:func:`mixing_sources`,
:func:`gathered_weights`; ``trainer.StackedTrainer.mix``): one fixed order of float additions per row,
which any process holding ``y_j`` and its neighbours' rows can follow, wherever those rows live.
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


def mixing_sources(adjacency: np.ndarray) -> np.ndarray:
    """``sources[j] = N_j ∪ {j}`` in ascending order, padded with ``j`` to ``S = max degree + 1``: ``[N, S]``.

    The padding's weight is 0 (:func:`gathered_weights`), so a padded slot adds ``0 * y_j``.
    """
    adjacency = np.asarray(adjacency, dtype=bool)
    members = adjacency | np.eye(len(adjacency), dtype=bool)
    width = int(members.sum(axis=1).max())
    sources = np.repeat(np.arange(len(adjacency))[:, None], width, axis=1)
    for j, row in enumerate(members):
        present = np.flatnonzero(row)
        sources[j, : len(present)] = present
    return sources.astype(np.int64)


def gathered_weights(weights: np.ndarray, sources: np.ndarray, workers: np.ndarray | None = None) -> np.ndarray:
    """``w[..., a, s] = W[..., j, sources[a, s]]`` for the workers ``j = workers[a]`` (default all) and their
    ``sources`` rows, 0 in the padded slots: ``[..., M, S]`` float32, so that
    ``x_j = sum_s w[a, s] y_{sources[a, s]}`` is row ``j`` of ``W @ Y``."""
    rows = (np.arange(sources.shape[0]) if workers is None else np.asarray(workers))[:, None]
    gathered = np.asarray(weights)[..., rows, sources]
    own = sources == rows
    first = np.argmax(own, axis=1)  # the row's own slot; the padding repeats j after it
    padded = own & (np.arange(sources.shape[1])[None, :] > first[:, None])
    return np.where(padded, 0.0, gathered).astype(np.float32)
