"""Minibatch indices from the common random stream ``(seed, "batch", j)``.

Worker j walks through its shard in epochs: each epoch is a fresh permutation of the shard drawn from
its stream, consumed ``B`` indices at a time (a batch may straddle two epochs).  The sequence depends
only on ``(seed, j)``, the shard and ``B``: never on the algorithm or on the process layout.
"""

from __future__ import annotations

import numpy as np

from .rng import stream


class WorkerBatches:
    """The index sequence of one worker (global indices into the training set)."""

    def __init__(self, shard: np.ndarray, batch_size: int, seed: int, worker: int):
        self.shard = np.asarray(shard, dtype=np.int64)
        self.batch_size = batch_size
        self._gen = stream(seed, "batch", worker)
        self._buffer = np.empty(0, dtype=np.int64)
        self.position = 0  # batches handed out so far

    def take(self, count: int) -> np.ndarray:
        """The next ``count`` batches, ``[count, B]``."""
        needed = count * self.batch_size
        parts = [self._buffer]
        have = len(self._buffer)
        while have < needed:
            epoch = self.shard[self._gen.permutation(len(self.shard))]
            parts.append(epoch)
            have += len(epoch)
        flat = np.concatenate(parts)
        self._buffer = flat[needed:]
        self.position += count
        return flat[:needed].reshape(count, self.batch_size)

    def skip_to(self, position: int) -> None:
        while self.position < position:
            self.take(min(position - self.position, 256))


class BatchSampler:
    """Batches of all workers: ``take(k0, T)`` gives ``[T, N, B]`` int32 indices of iterations k0..k0+T-1."""

    def __init__(self, shards, batch_size: int, seed: int, workers=None):
        workers = range(len(shards)) if workers is None else workers
        self.workers = list(workers)
        self._per_worker = [WorkerBatches(shards[j], batch_size, seed, j) for j in self.workers]

    def take(self, k0: int, count: int) -> np.ndarray:
        for w in self._per_worker:
            if w.position != k0:
                w.skip_to(k0)
        return np.stack([w.take(count) for w in self._per_worker], axis=1).astype(np.int32)
