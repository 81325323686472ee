"""dybw: consensus-based distributed training with dynamic backup workers."""

# First, before anything imports numpy or TensorFlow: the CPU kernels they load are chosen from the
# environment, and pinned ones give the same bits on every x86-64 CPU with AVX2 and FMA (numerics.py).
from .numerics import pin as _pin

_pin()

__version__ = "0.1.0"
