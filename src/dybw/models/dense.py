"""Fully connected networks written directly over flat parameter rows: ``logreg`` and ``mlp``.

Worker j's parameters are row j of a flat ``[N, P]`` float32 matrix, so mixing combines rows
(``trainer.StackedTrainer._mixed``) and the local step of all workers is one TF program.  A network with
layer sizes ``s_0 = input_dim, s_1, ..., s_L = classes`` computes, per worker,

    h_0 = x,   h_l = relu(h_{l-1} W_l + b_l)  (l < L),   logits = h_{L-1} W_L + b_L

``logreg`` is the network with no hidden layer (multinomial logistic regression), ``mlp`` the one with
``model.hidden`` ReLU layers.  Images (``dataset.features=raw``) are flattened row-major first, so
``input_dim = H * W * C``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import numpy as np

from ..rng import stream
from ..schema import AtLeast
from .base import MODELS, Model, ModelConfig


class StackedNetwork:
    """A fully connected ReLU network whose parameters live in flat rows ``[..., P]``."""

    jit_compile = True  # a few matrix products: XLA runs them as fast as TF's kernels, and fuses the rest

    def __init__(self, input_dim: int, hidden: list[int], num_classes: int, input_shape: tuple[int, ...] | None = None):
        # Inputs of more than one axis (images) are flattened first; flat inputs go in as they are.
        self.image_shape = tuple(input_shape) if input_shape is not None and len(input_shape) > 1 else None
        self.sizes = [int(input_dim), *[int(h) for h in hidden], int(num_classes)]
        self.layers = []  # (weight offset, bias offset, fan_in, fan_out)
        offset = 0
        for fan_in, fan_out in zip(self.sizes[:-1], self.sizes[1:]):
            self.layers.append((offset, offset + fan_in * fan_out, fan_in, fan_out))
            offset += fan_in * fan_out + fan_out
        self.num_params = offset
        # What its programs depend on (trainer.stacked_trainer shares compiled programs between equal keys).
        self.program_key = ("dense", tuple(self.sizes), self.image_shape)

    def initial_params(self, seed: int) -> np.ndarray:
        """Glorot-uniform weights, zero biases, from the stream ``(model_seed, "init", layer)``: ``[P]``."""
        flat = np.zeros(self.num_params, dtype=np.float32)
        for layer, (w_off, b_off, fan_in, fan_out) in enumerate(self.layers):
            limit = np.sqrt(6.0 / (fan_in + fan_out))
            flat[w_off:b_off] = stream(seed, "init", layer).uniform(-limit, limit, fan_in * fan_out)
        return flat

    def logits(self, tf, params, x):
        """Logits ``[N, B, classes]`` for params ``[N, P]`` and inputs ``[N or 1, B, input_dim]`` (or ``H, W, C``)."""
        h = x if self.image_shape is None else tf.reshape(x, [x.shape[0], -1, self.sizes[0]])
        for layer, (w_off, b_off, fan_in, fan_out) in enumerate(self.layers):
            weights = tf.reshape(params[:, w_off:b_off], [-1, fan_in, fan_out])
            bias = params[:, b_off : b_off + fan_out][:, None, :]
            h = tf.matmul(h, weights) + bias
            if layer < len(self.layers) - 1:
                h = tf.nn.relu(h)
        return h


@dataclass
class MlpConfig(ModelConfig):
    hidden: list[Annotated[int, AtLeast(1)]]  # hidden layer widths


@MODELS.register
class LogisticRegression(Model):
    """Multinomial logistic regression: softmax of one affine map of the features."""

    name = "logreg"

    @classmethod
    def network(cls, config, input_shape: tuple[int, ...], num_classes: int) -> StackedNetwork:
        return StackedNetwork(math.prod(input_shape), [], num_classes, input_shape)

    @classmethod
    def describe(cls, config: dict) -> str:
        return "logistic regression"


@MODELS.register
class Mlp(Model):
    """A fully connected ReLU network with ``model.hidden`` widths."""

    name = "mlp"
    Config = MlpConfig

    @classmethod
    def network(cls, config, input_shape: tuple[int, ...], num_classes: int) -> StackedNetwork:
        return StackedNetwork(math.prod(input_shape), list(config.hidden), num_classes, input_shape)

    @classmethod
    def describe(cls, config: dict) -> str:
        return f"MLP {config['hidden']}"
