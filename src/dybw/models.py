"""Models as N stacked copies evaluated in one TensorFlow computation.

Worker j's parameters are row j of a flat ``[N, P]`` float32 matrix, so mixing combines rows
(``engine.BatchedTrainer._mixed``) and the local step of all workers is one TF program.  A network with
layer sizes ``s_0 = input_dim, s_1, ..., s_L = classes`` computes, per worker,

    h_0 = x,   h_l = relu(h_{l-1} W_l + b_l)  (l < L),   logits = h_{L-1} W_L + b_L

``logreg`` is the network with no hidden layer (multinomial logistic regression).
"""

from __future__ import annotations

import numpy as np

from .errors import ConfigError
from .rng import stream

MODELS = ("logreg", "mlp")


class StackedNetwork:
    """A fully connected ReLU network whose parameters live in flat rows ``[..., P]``."""

    def __init__(self, input_dim: int, hidden: list[int], num_classes: int):
        self.sizes = [int(input_dim), *[int(h) for h in hidden], int(num_classes)]
        self.layers = []  # (weight offset, bias offset, fan_in, fan_out)
        offset = 0
        for fan_in, fan_out in zip(self.sizes[:-1], self.sizes[1:]):
            self.layers.append((offset, offset + fan_in * fan_out, fan_in, fan_out))
            offset += fan_in * fan_out + fan_out
        self.num_params = offset

    def initial_params(self, seed: int) -> np.ndarray:
        """Glorot-uniform weights, zero biases, from the stream ``(model_seed, "init", layer)``: ``[P]``."""
        flat = np.zeros(self.num_params, dtype=np.float32)
        for layer, (w_off, b_off, fan_in, fan_out) in enumerate(self.layers):
            limit = np.sqrt(6.0 / (fan_in + fan_out))
            flat[w_off:b_off] = stream(seed, "init", layer).uniform(-limit, limit, fan_in * fan_out)
        return flat

    def logits(self, tf, params, x):
        """Logits ``[N, B, classes]`` for params ``[N, P]`` and inputs ``[N or 1, B, input_dim]``."""
        h = x
        for layer, (w_off, b_off, fan_in, fan_out) in enumerate(self.layers):
            weights = tf.reshape(params[:, w_off:b_off], [-1, fan_in, fan_out])
            bias = params[:, b_off : b_off + fan_out][:, None, :]
            h = tf.matmul(h, weights) + bias
            if layer < len(self.layers) - 1:
                h = tf.nn.relu(h)
        return h


def build_network(model_cfg, input_dim: int, num_classes: int) -> StackedNetwork:
    """The network named by ``model.name`` (``logreg`` or ``mlp`` with ``model.hidden``)."""
    if model_cfg.name == "logreg":
        return StackedNetwork(input_dim, [], num_classes)
    if model_cfg.name == "mlp":
        return StackedNetwork(input_dim, list(model_cfg.hidden), num_classes)
    raise ConfigError("model", model_cfg.name, "choose one of: " + ", ".join(MODELS))
