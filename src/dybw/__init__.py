"""dybw: consensus-based distributed training with dynamic backup workers."""

__version__ = "0.1.0"
