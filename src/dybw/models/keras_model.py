"""``model=keras``: any Keras model, from a factory function named in the config.

``model.factory=package.module:function`` names a function ``f(input_shape, num_classes, **model.kwargs)``
that returns an uncompiled ``keras.Model`` taking a batch ``[B, *input_shape]`` to logits
``[B, num_classes]``.  dybw keeps its layout: worker j's trainable weights, flattened in the order of
``model.trainable_variables``, are row j of the ``[N, P]`` matrix that is mixed and exchanged, and the
network unflattens a row inside the step and runs the model on it with Keras' ``stateless_call``::

    logits_j = model(x; W_1 = reshape(x_j[o_1 : o_1 + n_1]), ..., W_L = reshape(x_j[o_L : o_L + n_L]))

so one Keras model object serves every worker, and mixing, the MPI exchange and checkpoints are those of
every other model.

The initial row ``x(0)`` is the model's own initialisation (each layer's initializers) drawn with Python's
``random`` seeded from the stream ``(model_seed, "init", "keras")`` while the factory runs -- Keras draws
the seed of every unseeded initializer from it -- and restored afterwards: the same weights in every
process and for every worker, whatever was built before.

Only trainable weights are mixed, so a layer with non-trainable state (BatchNormalization's moving
statistics, Dropout's random-seed state) is refused in one line that names it; normalise with
GroupNormalization or LayerNormalization, which have none.  The factory is run when the config is
checked, so a bad path, a factory that fails or returns something else than a ``keras.Model``, and a
model whose output is not ``[B, num_classes]`` are one-line errors naming ``model.factory`` before any
work starts.
"""

from __future__ import annotations

import importlib
import json
import math
import random
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..rng import stream
from .base import MODELS, Model, ModelConfig


@dataclass
class KerasConfig(ModelConfig):
    factory: str  # "package.module:function": f(input_shape, num_classes, **kwargs) -> uncompiled keras.Model
    kwargs: dict  # keyword arguments of the factory
    jit_compile: bool  # run the local step and the evaluation as XLA programs (see conf/model/keras.yaml)


def _fail(config, message: str) -> ConfigError:
    return ConfigError("model.factory", config.factory, message)


def _one_line(error: BaseException) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())


def load_factory(config):
    """The function ``model.factory`` names; a bad path is one line naming it."""
    module_name, colon, function_name = str(config.factory).partition(":")
    if not colon or not module_name or not function_name:
        raise _fail(config, "must be 'package.module:function' (e.g. dybw.models.factories:lenet5)")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - any failure of a user's module is reported the same way
        raise _fail(config, f"module {module_name!r} cannot be imported ({_one_line(error)})") from None
    factory = getattr(module, function_name, None)
    if not callable(factory):
        raise _fail(config, f"module {module_name!r} has no function {function_name!r}")
    return factory


def _owner(model, variable) -> str:
    """``'name' (Class)`` of the innermost layer holding ``variable``."""
    owner = model
    for layer in model._flatten_layers(include_self=False, recursive=True):  # parents before their sublayers
        if any(v is variable for v in layer.non_trainable_variables):
            owner = layer
    return f"{owner.name!r} ({type(owner).__name__})"


def build_model(config, input_shape: tuple[int, ...], num_classes: int, seed: int):
    """The factory's model for these inputs, its initializers seeded from ``(seed, "init", "keras")``,
    checked: a ``keras.Model``, no non-trainable state, float32 weights, output ``[B, num_classes]``."""
    from ..tf_setup import import_tensorflow

    import_tensorflow()
    import keras

    factory = load_factory(config)
    saved = random.getstate()
    random.seed(int(stream(seed, "init", "keras").integers(2**63)))
    try:
        model = factory(tuple(input_shape), int(num_classes), **dict(config.kwargs))
        if isinstance(model, keras.Model) and not model.built:
            model(np.zeros((1, *input_shape), np.float32))  # a subclassed model makes its weights on first call
    except ConfigError:
        raise
    except Exception as error:  # noqa: BLE001 - whatever the user's factory raises is one line
        raise _fail(config, f"the factory failed for input shape {tuple(input_shape)}: {_one_line(error)}") from None
    finally:
        random.setstate(saved)
    if not isinstance(model, keras.Model):
        raise _fail(config, f"must return a keras.Model; it returned {type(model).__module__}.{type(model).__name__}")
    if model.non_trainable_variables:
        variable = model.non_trainable_variables[0]
        names = ", ".join(v.path.rsplit("/", 1)[-1] for v in model.non_trainable_variables)
        raise ConfigError(
            "model.factory",
            config.factory,
            f"layer {_owner(model, variable)} keeps non-trainable state ({names}), which dybw does not mix between "
            f"workers: use GroupNormalization or LayerNormalization instead of BatchNormalization, and no Dropout",
        )
    if not model.trainable_variables:
        raise _fail(config, "the model has no trainable weights")
    odd = [v.path for v in model.trainable_variables if v.dtype != "float32"]
    if odd:
        raise _fail(config, f"every trainable weight must be float32 (dybw's rows are); {odd[0]} is not")
    try:
        spec = model.compute_output_spec(keras.KerasTensor((2, *input_shape), "float32"))
    except Exception as error:  # noqa: BLE001
        shape = ", ".join(map(str, input_shape))
        raise _fail(config, f"the model cannot take inputs of shape (B, {shape}): {_one_line(error)}") from None
    if not isinstance(spec, keras.KerasTensor) or tuple(spec.shape) != (2, num_classes):
        shape = tuple(spec.shape) if isinstance(spec, keras.KerasTensor) else type(spec).__name__
        raise _fail(config, f"the model must output logits (B, {num_classes}); for B=2 it outputs {shape}")
    return model


class KerasNetwork:
    """A Keras model over flat parameter rows: ``logits`` unflattens a row and runs ``stateless_call``."""

    def __init__(self, config, input_shape: tuple[int, ...], num_classes: int):
        self.config = config
        self.input_shape = tuple(input_shape)
        self.num_classes = int(num_classes)
        self.jit_compile = bool(config.jit_compile)
        self.model = build_model(config, self.input_shape, self.num_classes, seed=0)
        self.shapes = [tuple(int(d) for d in v.shape) for v in self.model.trainable_variables]
        self.sizes = [math.prod(shape) for shape in self.shapes]
        self.num_params = int(sum(self.sizes))

    def initial_params(self, seed: int) -> np.ndarray:
        """The model's own initial weights, initializers seeded from ``(seed, "init", "keras")``: ``[P]``."""
        model = build_model(self.config, self.input_shape, self.num_classes, seed)
        return np.concatenate([np.asarray(v.numpy(), np.float32).ravel() for v in model.trainable_variables])

    def weights(self, tf, row):
        """The trainable weights of one row ``[P]``, in ``model.trainable_variables`` order."""
        return [tf.reshape(part, shape) for part, shape in zip(tf.split(row, self.sizes), self.shapes)]

    def logits(self, tf, params, x):
        """Logits ``[M, B, classes]`` for rows ``[M, P]`` and inputs ``[M or 1, B, *input_shape]``: one
        ``stateless_call`` per row (the trainer passes one row at a time).  Layers run in inference mode;
        with no state or randomness allowed, the two modes compute the same."""
        outputs = []
        for m in range(params.shape[0]):
            out, _ = self.model.stateless_call(self.weights(tf, params[m]), [], x[m if x.shape[0] > 1 else 0])
            outputs.append(tf.cast(out, tf.float32))
        return tf.stack(outputs)


_CHECKED: dict[str, None] = {}  # configs already checked in this process (validating a sweep builds each once)


@MODELS.register
class KerasModel(Model):
    """Any Keras model: ``model.factory`` builds it, ``model.kwargs`` are the factory's own arguments."""

    name = "keras"
    Config = KerasConfig

    @classmethod
    def network(cls, config, input_shape: tuple[int, ...], num_classes: int) -> KerasNetwork:
        return KerasNetwork(config, input_shape, num_classes)

    @classmethod
    def check(cls, cfg) -> None:
        """Build the model once for the dataset's input shape (after sizing TF's threads as the job will)."""
        from ..data import input_shape_of, num_classes_of
        from ..tf_setup import use_threads

        shape, classes = input_shape_of(cfg.dataset), num_classes_of(cfg.dataset)
        key = json.dumps([cfg.model.factory, cfg.model.kwargs, shape, classes], sort_keys=True, default=str)
        if key not in _CHECKED:
            use_threads(cfg.runner.threads)
            build_model(cfg.model, shape, classes, cfg.model_seed)
            _CHECKED[key] = None

    @classmethod
    def describe(cls, config: dict) -> str:
        function = str(config["factory"]).rpartition(":")[2]
        arguments = ", ".join(f"{k}={v}" for k, v in (config.get("kwargs") or {}).items())
        return f"Keras {function}({arguments})"
