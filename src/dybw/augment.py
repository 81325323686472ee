"""Data augmentation of raw images (``dataset.augment=crop_flip``), drawn from common random numbers.

Each sample of worker j's minibatch at iteration k is shifted and maybe mirrored: with the image zero-padded
by ``PAD`` pixels on every side (zero is the mean after standardisation), the model sees the ``H x W``
window at row offset ``dy`` and column offset ``dx``, flipped left-right if ``flip``::

    x'[r, c] = pad(x)[dy + r, dx + c]               (flip = 0)
    x'[r, c] = pad(x)[dy + r, dx + W - 1 - c]       (flip = 1),      dy, dx in 0..2 PAD, flip in {0, 1}

``(dy, dx, flip)`` of every sample come from worker j's stream ``(seed, "augment", j)``, ``3 B`` uniforms per
iteration (:class:`~dybw.rng.UniformStream`): the same crops for every algorithm and process layout, and
position-addressed, so a resumed run draws what an uninterrupted one would.  The draws are made with the
minibatch indices (``engine.Schedule``); the crop itself is two gathers inside the TF step
(:func:`crop_and_flip`).
"""

from __future__ import annotations

import numpy as np

from .rng import UniformStream

PAD = 4  # pixels of zero padding: crops are shifted by up to 4 pixels each way (the usual CIFAR-10 choice)


class AugmentSampler:
    """Per iteration and hosted worker, ``(dy, dx, flip)`` of each of the ``B`` samples: ``[T, M, B, 3]`` int32."""

    def __init__(self, seed: int, workers, batch_size: int):
        self.batch_size = int(batch_size)
        self._streams = [UniformStream(seed, "augment", int(j), width=3 * self.batch_size) for j in workers]

    def take(self, k0: int, count: int) -> np.ndarray:
        draws = []
        for s in self._streams:
            if s.position != k0:
                s.skip_to(k0)
            draws.append(s.take(count).reshape(count, self.batch_size, 3))
        u = np.stack(draws, axis=1)  # [T, M, B, 3] uniforms in [0, 1)
        offsets = np.floor(u[..., :2] * (2 * PAD + 1)).astype(np.int32)
        flips = (u[..., 2:] < 0.5).astype(np.int32)
        return np.concatenate([offsets, flips], axis=-1)


def crop_and_flip(tf, images, draws):
    """The augmented minibatch: ``images`` ``[B, H, W, C]``, ``draws`` ``[B, 3]`` (dy, dx, flip) -> ``[B, H, W, C]``."""
    height, width = images.shape[1], images.shape[2]
    padded = tf.pad(images, [[0, 0], [PAD, PAD], [PAD, PAD], [0, 0]])
    rows = draws[:, :1] + tf.range(height)[None, :]  # [B, H]
    forward = tf.range(width)[None, :]
    cols = draws[:, 1:2] + tf.where(draws[:, 2:3] > 0, width - 1 - forward, forward)  # [B, W]
    picked = tf.gather(padded, rows, axis=1, batch_dims=1)  # [B, H, W + 2 PAD, C]
    return tf.gather(picked, cols, axis=2, batch_dims=1)
