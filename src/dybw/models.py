"""Models as N stacked copies evaluated in one TensorFlow computation.

Worker j's parameters are row j of a flat ``[N, P]`` float32 matrix, so mixing combines rows
(``trainer.StackedTrainer._mixed``) and the local step of all workers is one TF program.  A network with
layer sizes ``s_0 = input_dim, s_1, ..., s_L = classes`` computes, per worker,

    h_0 = x,   h_l = relu(h_{l-1} W_l + b_l)  (l < L),   logits = h_{L-1} W_L + b_L

``logreg`` is the network with no hidden layer (multinomial logistic regression), ``mlp`` the one with
``model.hidden`` ReLU layers.  Each model kind is a class in :data:`MODELS`, found by ``model.name``: it
owns its config keys and builds the network for a dataset's input size and class count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar

import numpy as np

from .registry import Registry
from .rng import stream
from .schema import AtLeast, Finite

MODELS = Registry("model", "model")


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


@dataclass
class ModelConfig:
    """The keys every model has."""

    name: str
    weight_decay: Annotated[float, Finite(0)]  # L2 coefficient on all parameters


@dataclass
class MlpConfig(ModelConfig):
    hidden: list[Annotated[int, AtLeast(1)]]  # hidden layer widths


class Model:
    """A model kind: ``Config`` (its keys, defaults in ``conf/model/<name>.yaml``) and :meth:`network`."""

    name: ClassVar[str]
    Config: ClassVar[type] = ModelConfig
    default_config: ClassVar[dict | None] = None

    @classmethod
    def network(cls, config, input_dim: int, num_classes: int):
        raise NotImplementedError


@MODELS.register
class LogisticRegression(Model):
    """Multinomial logistic regression: softmax of one affine map of the features."""

    name = "logreg"

    @classmethod
    def network(cls, config, input_dim: int, num_classes: int) -> StackedNetwork:
        return StackedNetwork(input_dim, [], num_classes)


@MODELS.register
class Mlp(Model):
    """A fully connected ReLU network with ``model.hidden`` widths."""

    name = "mlp"
    Config = MlpConfig

    @classmethod
    def network(cls, config, input_dim: int, num_classes: int) -> StackedNetwork:
        return StackedNetwork(input_dim, list(config.hidden), num_classes)


def build_network(model_cfg, input_dim: int, num_classes: int) -> StackedNetwork:
    """The network ``model.name`` names, for a dataset's input size and class count."""
    return MODELS[model_cfg.name].network(model_cfg, input_dim, num_classes)
