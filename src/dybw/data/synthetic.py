"""A small Gaussian-mixture classification task, for tests and quick runs without dataset files."""

from __future__ import annotations

import numpy as np

from dybw.errors import ConfigError

# Mixed into the seed so the synthetic data's random stream differs from the partition's, which
# is drawn from default_rng(data_seed) by load_dataset.
_STREAM_TAG = 0x5EED_DA7A


def make_synthetic(
    num_train: int, num_test: int, input_dim: int, num_classes: int, class_sep: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(x_train, y_train, x_test, y_test)``: float32 features, int64 labels.

    Class means ``mu_c = class_sep * u_c`` with ``u_c`` a uniformly random unit vector in R^d
    (independent Gaussian directions, normalised); samples ``x = mu_{y} + eps``, eps ~ N(0, I_d).
    Labels are balanced (``i mod C`` for sample i, then shuffled). Two means are about
    ``sqrt(2) * class_sep`` apart, so the Bayes accuracy grows with ``class_sep``; with
    class_sep >= 2 a linear classifier is far above chance (1/C). Deterministic in ``seed``.
    """
    for field, value, lo in (
        ("dataset.num_train", num_train, 1),
        ("dataset.num_test", num_test, 1),
        ("dataset.input_dim", input_dim, 1),
        ("dataset.num_classes", num_classes, 2),
    ):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < lo:
            raise ConfigError(field, value, f"must be an integer >= {lo}")
    if (
        isinstance(class_sep, (bool, np.bool_))
        or not isinstance(class_sep, (int, float, np.integer, np.floating))
        or not (np.isfinite(class_sep) and class_sep >= 0)
    ):
        raise ConfigError("dataset.class_sep", class_sep, "must be a finite number >= 0")

    rng = np.random.default_rng([int(seed), _STREAM_TAG])
    directions = rng.standard_normal((num_classes, input_dim))
    means = class_sep * directions / np.linalg.norm(directions, axis=1, keepdims=True)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.permutation(np.arange(n) % num_classes).astype(np.int64)
        x = means[y] + rng.standard_normal((n, input_dim))
        return x.astype(np.float32), y

    x_tr, y_tr = draw(int(num_train))
    x_te, y_te = draw(int(num_test))
    return x_tr, y_tr, x_te, y_te
