"""Which evaluation a job makes at which iteration, and what each kind computes.

Every ``eval_every`` iterations (and at ``k = 0`` and ``k = K``) the engine evaluates; ``metrics.csv``
flags each row in its ``evaluation`` column:

``full``
    at ``k = 0``, ``k = K`` and every ``evaluation.full_every_evals``-th evaluation: the average model
    ``xbar = mean_j x_j`` on every training and test sample (``train_loss``, ``test_loss``,
    ``test_accuracy``), the consensus distance, and every local model ``x_j`` on every test sample
    (``local_test_accuracy``).  The evaluation every row had before light rows existed.
``light``
    the other evaluations: the average model on the test set only (``test_loss``, ``test_accuracy``) and
    the consensus distance; ``train_loss`` only when ``target_loss`` is set (time to target needs it),
    ``local_test_accuracy`` never.
``probe``
    time to target (``evaluation.probe_target``): when an evaluation at ``k_e`` is the first to reach the
    target, the iterations since the evaluation before it, ``k_p``, are replayed from that evaluation's
    parameters (same minibatches and mixing weights, so the same bits) and each of ``k_p+1 .. k_e-1``
    gets a light evaluation, until one reaches the target.

A light or probe row computes its columns with the very programs of a full one (the same chunks of
samples, summed in the same order), so a column present in two kinds of row has the same bits for the
same parameters.  Columns an evaluation does not compute are empty (NaN).
"""

from __future__ import annotations

import math

FULL, LIGHT, PROBE = "full", "light", "probe"
KINDS = (FULL, LIGHT, PROBE)


def evaluation_kind(cfg, iteration: int) -> str | None:
    """``full``, ``light`` or None (no evaluation) at ``iteration`` (iterations done)."""
    if iteration == 0 or iteration == cfg.iterations:
        return FULL
    if iteration % cfg.eval_every:
        return None
    return FULL if (iteration // cfg.eval_every) % cfg.evaluation.full_every_evals == 0 else LIGHT


def needs_train_loss(cfg, kind: str) -> bool:
    """Whether an evaluation of ``kind`` sums the average model's loss over the training set."""
    return kind == FULL or cfg.target_loss is not None


def reaches_target(row: dict, target_accuracy: float, target_loss: float | None) -> bool:
    """Test accuracy ``>= target_accuracy``, or (with a loss target) train loss ``<= target_loss``."""
    if row["test_accuracy"] >= target_accuracy:
        return True
    loss = row.get("train_loss")
    return target_loss is not None and loss is not None and not math.isnan(loss) and loss <= target_loss
