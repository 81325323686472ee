"""What every model is: a registered class that owns its config keys and builds the network of a job.

A model kind is chosen by ``model.name``; :data:`MODELS` finds its class.  The class declares ``Config``
(its keys; defaults in ``conf/model/<name>.yaml``), :meth:`Model.network`, which builds the network for
a dataset's input shape and class count, and :meth:`Model.check`, the checks that need the dataset's
shape (run with the config's other checks, before any work starts).

A network is any object with

- ``num_params``: ``P``, the length of a worker's flat parameter row;
- ``initial_params(seed)``: the common initial row ``x(0)`` ``[P]`` float32, a function of ``seed`` alone;
- ``logits(tf, params, x)``: logits ``[M, B, classes]`` for rows ``[M, P]`` and inputs ``[M or 1, B, *shape]``;
  traced without AutoGraph (as Keras 3 traces its own steps), so control flow on tensors is ``tf.cond`` or
  ``tf.while_loop``, not a Python ``if`` or ``for``;
- ``jit_compile``: whether its local step and evaluation run as XLA programs (``trainer.StackedTrainer``).

Worker j's parameters are row j of a flat ``[N, P]`` float32 matrix, so mixing combines rows and
exchanging a worker's model is sending one row, whatever the network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar

from ..registry import Registry
from ..schema import Finite

MODELS = Registry("model", "model")


@dataclass
class ModelConfig:
    """The keys every model has."""

    name: str
    weight_decay: Annotated[float, Finite(0)]  # L2 coefficient on all parameters


class Model:
    """A model kind: ``Config`` (its keys, defaults in ``conf/model/<name>.yaml``), :meth:`network`, :meth:`check`."""

    name: ClassVar[str]
    Config: ClassVar[type] = ModelConfig
    default_config: ClassVar[dict | None] = None

    @classmethod
    def network(cls, config, input_shape: tuple[int, ...], num_classes: int):
        raise NotImplementedError

    @classmethod
    def check(cls, cfg) -> None:
        """Refuse a job (``cfg``: its whole config) this model cannot train, in one line; nothing by default."""

    @classmethod
    def describe(cls, config: dict) -> str:
        """How figure captions name the model (``config``: the plain ``model`` section)."""
        return str(config["name"])


def build_network(model_cfg, input_shape, num_classes: int):
    """The network ``model.name`` names, for a dataset's input shape (``(d,)`` or ``(H, W, C)``; an int ``d``
    means ``(d,)``) and class count."""
    shape = (input_shape,) if isinstance(input_shape, int) else input_shape
    return MODELS[model_cfg.name].network(model_cfg, tuple(int(s) for s in shape), num_classes)
