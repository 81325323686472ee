"""Common random numbers: counter-based streams keyed by what a draw belongs to.

Every random quantity of a run comes from a stream named by its owner, e.g. ``(seed, "compute", j)``
for worker j's compute times or ``(seed, "link", i, j)`` for link i->j.  The key never mentions the
algorithm, the backend or the process layout, so cb-Full and cb-DyBW see the same delays and the same
minibatches (paired comparisons) and every backend and rank count draws the same numbers.

Streams are Philox generators (counter-based): the key is a 128-bit hash of the name, so creating a
stream is cheap and needs no coordination between processes.
"""

from __future__ import annotations

import hashlib

import numpy as np


def stream_key(seed: int, *name: object) -> int:
    """128-bit Philox key = blake2b(repr((seed, *name))); stable across processes and Python runs."""
    # Normalise numpy integers: repr(np.int64(3)) is "np.int64(3)", which would name another stream.
    parts = tuple(int(p) if isinstance(p, (int, np.integer)) else str(p) for p in (seed, *name))
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=16).digest()
    return int.from_bytes(digest, "little")


def stream(seed: int, *name: object) -> np.random.Generator:
    """A fresh generator at position 0 of the stream ``(seed, *name)``."""
    return np.random.Generator(np.random.Philox(key=stream_key(seed, *name)))


# Philox4x64 makes four 64-bit words per counter step, and a uniform double takes one word.
WORDS_PER_COUNTER = 4


class UniformStream:
    """Rows of ``width`` uniforms per position k, drawn in order from one stream.

    Position k always holds the same ``width`` uniforms whatever chunks they were requested in, because
    the generator emits them row-major and every position consumes exactly ``width`` of them.
    """

    def __init__(self, seed: int, *name: object, width: int = 1):
        self._key = stream_key(seed, *name)
        self._gen = np.random.Generator(np.random.Philox(key=self._key))
        self.width = width
        self.position = 0

    def take(self, count: int) -> np.ndarray:
        """Uniforms of positions ``position .. position+count-1`` as ``[count, width]``."""
        self.position += count
        return self._gen.random((count, self.width))

    def skip_to(self, position: int) -> None:
        """Move forward to ``position`` (used when resuming) in O(1): the counter jumps over the
        ``position * width`` words before it, then the first ``words % 4`` of its block are drawn."""
        if position < self.position:
            raise ValueError(f"stream cannot move back from {self.position} to {position}")
        words = position * self.width
        bit_generator = np.random.Philox(key=self._key)
        bit_generator.advance(words // WORDS_PER_COUNTER)
        self._gen = np.random.Generator(bit_generator)
        self._gen.random(words % WORDS_PER_COUNTER)
        self.position = position
