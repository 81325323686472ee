"""Built-in Keras factories for ``model=keras`` (``conf/model/lenet5.yaml``, ``conf/model/cnn.yaml``).

Each is ``f(input_shape, num_classes, **kwargs) -> keras.Model``, exactly what a user's own factory is,
and returns logits (no softmax: the trainer's loss takes logits).  No layer keeps non-trainable state,
so every weight is a trainable one that workers mix.
"""

from __future__ import annotations


def _expect_image(name: str, input_shape, what: str, preset: str) -> None:
    if len(input_shape) != 3:
        # The preset sets what the model needs beyond its inputs too: the default step (1.0, tuned for the
        # MLP on PCA features) leaves a CNN at chance.
        raise ValueError(
            f"{name} takes images {what} (dataset.features=raw); got inputs of shape {tuple(input_shape)}: "
            f"use the preset experiment={preset}, which sets raw features and a step that trains"
        )


def lenet5(input_shape, num_classes):
    """LeNet-5 (LeCun et al. 1998) with ReLU and max pooling, for 28x28x1 MNIST digits (61,706 weights)::

    conv 5x5, 6, same -> relu -> maxpool 2      28x28x6 -> 14x14x6
    conv 5x5, 16, valid -> relu -> maxpool 2    10x10x16 -> 5x5x16
    dense 120 -> relu -> dense 84 -> relu -> dense num_classes
    """
    import keras
    from keras import layers

    _expect_image("lenet5", input_shape, "such as MNIST's 28x28x1", "cnn_mnist")
    return keras.Sequential(
        [
            keras.Input(tuple(input_shape)),
            layers.Conv2D(6, 5, padding="same", activation="relu"),
            layers.MaxPooling2D(2),
            layers.Conv2D(16, 5, activation="relu"),
            layers.MaxPooling2D(2),
            layers.Flatten(),
            layers.Dense(120, activation="relu"),
            layers.Dense(84, activation="relu"),
            layers.Dense(num_classes),
        ],
        name="lenet5",
    )


def cnn(input_shape, num_classes, widths=(32, 64, 128), convs_per_block=1, groups=8):
    """A small VGG-style network for 32x32x3 CIFAR-10 images.

    One block per entry of ``widths``: ``convs_per_block`` times (3x3 convolution without bias -> group
    normalisation over ``groups`` channel groups, with its own scale and shift -> relu), then 2x2 max
    pooling.  Then flatten and one dense layer to the logits.  Group normalisation instead of batch
    normalisation: it normalises each sample on its own, so it keeps no running statistics that the
    workers would have to mix, and it lets plain SGD take large steps.  The defaults (32, 64, 128 and one
    convolution per block: 32x32 -> 16x16 -> 8x8 -> 4x4x128 -> 10, 113,962 weights) are chosen for a
    2-core CPU: about 11 M multiply-adds per image.
    """
    import keras
    from keras import layers

    _expect_image("cnn", input_shape, "such as CIFAR-10's 32x32x3", "cnn_cifar10")
    stack = [keras.Input(tuple(input_shape))]
    for width in widths:
        for _ in range(int(convs_per_block)):
            stack += [
                layers.Conv2D(int(width), 3, padding="same", use_bias=False),
                layers.GroupNormalization(groups=min(int(groups), int(width))),
                layers.ReLU(),
            ]
        stack.append(layers.MaxPooling2D(2))
    stack += [layers.Flatten(), layers.Dense(num_classes)]
    return keras.Sequential(stack, name="cnn")
