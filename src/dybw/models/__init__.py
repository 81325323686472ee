"""Models, one class per ``model.name``, found through :data:`MODELS`.

- :mod:`.dense`: ``logreg`` and ``mlp``, fully connected networks written directly over flat rows;
- :mod:`.keras_model`: ``keras``, any Keras model a factory function returns (``model.factory``);
- :mod:`.factories`: the built-in Keras factories ``lenet5`` and ``cnn`` (``conf/model/lenet5.yaml``, ...).

:mod:`.base` holds what they share: the registry, the common config keys and what a network provides.
"""

from __future__ import annotations

from .base import MODELS, Model, ModelConfig, build_network
from .dense import LogisticRegression, Mlp, MlpConfig, StackedNetwork
from .keras_model import KerasConfig, KerasModel, KerasNetwork

__all__ = [
    "MODELS",
    "KerasConfig",
    "KerasModel",
    "KerasNetwork",
    "LogisticRegression",
    "Mlp",
    "MlpConfig",
    "Model",
    "ModelConfig",
    "StackedNetwork",
    "build_network",
]
