"""A test-only model whose loss has an exactly zero gradient (``plugins=[zero_gradient_model]
model=zero_gradient``): what "eta0 = 0" means for a config that requires eta0 > 0.

Its logits are logistic regression's, so its losses and accuracies are real numbers that change when the
parameters do; but they are cut from the gradient (``stop_gradient``), and the loss is tied to the
parameters only through ``0 * sum(params)``, so ``grad f = 0`` exactly and a local step ``x - eta * 0``
returns ``x`` bit for bit: the only thing that moves the parameters is the averaging.
"""

from __future__ import annotations

import math

from dybw.models import MODELS, Model, StackedNetwork


class ZeroGradientNetwork(StackedNetwork):
    def logits(self, tf, params, x):
        return tf.stop_gradient(super().logits(tf, params, x)) + 0.0 * tf.reduce_sum(params)


@MODELS.register
class ZeroGradient(Model):
    """Logistic regression's logits with an exactly zero gradient."""

    name = "zero_gradient"
    default_config = {"weight_decay": 0.0}

    @classmethod
    def network(cls, config, input_shape: tuple[int, ...], num_classes: int) -> StackedNetwork:
        return ZeroGradientNetwork(math.prod(input_shape), [], num_classes, input_shape)
