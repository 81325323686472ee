"""Import TensorFlow quietly and deterministically (one place, before any other TF import)."""

from __future__ import annotations

import os


def import_tensorflow():
    """TensorFlow with its start-up chatter silenced; oneDNN off so float results are reproducible."""
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    return tf
