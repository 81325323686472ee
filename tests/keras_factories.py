"""Keras factories written the way a user writes one, outside ``src/``: ``model=keras
model.factory=keras_factories:small_net`` with this directory on ``PYTHONPATH``; and three that dybw must refuse."""

from __future__ import annotations

import keras
from keras import layers


def small_net(input_shape, num_classes, width=16):
    """Dense -> LayerNorm -> ReLU -> Dense: flat features (or images, flattened first)."""
    return keras.Sequential(
        [
            keras.Input(input_shape),
            layers.Flatten(),
            layers.Dense(width),
            layers.LayerNormalization(),
            layers.ReLU(),
            layers.Dense(num_classes),
        ]
    )


def tiny_convnet(input_shape, num_classes, channels=4):
    """One 3x3 convolution with GroupNorm, pooled to logits: for raw images."""
    inputs = keras.Input(input_shape)
    h = layers.Conv2D(channels, 3, strides=2, padding="same")(inputs)
    h = layers.GroupNormalization(groups=2)(h)
    h = layers.ReLU()(h)
    h = layers.GlobalAveragePooling2D()(h)
    return keras.Model(inputs, layers.Dense(num_classes)(h))


def not_a_model(input_shape, num_classes):
    return [layers.Dense(num_classes)]


def with_batchnorm(input_shape, num_classes):
    return keras.Sequential(
        [keras.Input(input_shape), layers.Dense(8), layers.BatchNormalization(), layers.Dense(num_classes)]
    )


def wrong_output(input_shape, num_classes):
    return keras.Sequential([keras.Input(input_shape), layers.Dense(num_classes + 1)])
