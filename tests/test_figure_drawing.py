"""How figures show their data, on small synthetic frames: captions stay out of the images unless asked for,
dot plots show every run and the mean with its spread, counts of runs appear only where some missed the
target, and curves that hide each other are said to.
"""

from __future__ import annotations

import struct
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from dybw.figures import style
from dybw.figures.convergence import _overlap
from dybw.figures.scaffold import Context

pytestmark = pytest.mark.unit  # no TensorFlow, MPI or subprocess: make test-fast

CAPTION = "A caption long enough to wrap over several lines under the panels. " * 8


def _png_height(path) -> int:
    with open(path, "rb") as png:
        header = png.read(24)
    return struct.unpack(">II", header[16:24])[1]


def _context(tmp_path, captions_in_images: bool) -> Context:
    spec = SimpleNamespace(name="demo", title="A figure")
    out = tmp_path / ("with" if captions_in_images else "without")
    return Context(spec, [], tmp_path, out, False, "make figures", tmp_path, captions_in_images)


def test_a_caption_goes_into_the_image_only_when_asked(tmp_path):
    heights = {}
    for embed in (False, True):
        style.setup()
        fig, axes = style.figure(1)
        axes[0, 0].plot([0, 1], [0, 1])
        drawn = _context(tmp_path, embed).finish(fig, CAPTION, "clock")
        assert drawn.caption == CAPTION and drawn.source == "clock" and drawn.title == "A figure"
        assert [p.suffix for p in drawn.files] == [".png", ".pdf"] and all(p.is_file() for p in drawn.files)
        heights[embed] = _png_height(drawn.files[0])
    # The same figure, wrapped caption underneath: several lines of 8.5-point text at 150 dpi.
    assert heights[True] - heights[False] > 60


def test_without_images_a_figure_is_described_and_no_file_is_written(tmp_path):
    style.setup()
    fig, axes = style.figure(1)
    axes[0, 0].plot([0, 1], [0, 1])
    context = _context(tmp_path, False)
    context.images = False
    drawn = context.finish(fig, CAPTION, "clock")
    assert drawn.caption == CAPTION and drawn.title == "A figure" and drawn.files == []
    assert not any(context.out.iterdir())


def test_a_dot_interval_shows_each_run_and_the_mean_with_one_standard_deviation():
    style.setup()
    fig, axes = style.figure(1)
    ax = axes[0, 0]
    mean, std = style.dot_interval(ax, 2.0, [0.90, 0.92, float("nan"), 0.97], "#0173B2")
    assert mean == pytest.approx(0.93) and std == pytest.approx(np.std([0.90, 0.92, 0.97], ddof=1))
    runs = ax.collections[0].get_offsets()
    assert sorted(runs[:, 0].tolist()) == pytest.approx([0.90, 0.92, 0.97]) and set(runs[:, 1]) == {2.0}
    (whisker,) = [c for c in ax.collections[1:] if c.get_segments()]
    (segment,) = whisker.get_segments()
    assert segment[:, 0].tolist() == pytest.approx([mean - std, mean + std]) and set(segment[:, 1]) == {2.0}
    one = style.dot_interval(ax, 3.0, [0.5], "#0173B2", horizontal=False)
    assert one[0] == 0.5 and np.isnan(one[1])
    assert np.isnan(style.dot_interval(ax, 4.0, [], "#0173B2")[0])


def test_a_count_of_runs_is_shown_only_where_some_missed_the_target():
    assert style.reach_note(3, 3) == ""
    assert style.reach_note(2, 3) == "2/3 reached"
    assert style.reach_note(0, 3) == "target not reached (0/3)"


def _curves(gap: float) -> pd.DataFrame:
    """Two averaging algorithms (cb-Full, cb-DyBW) ``gap`` apart in accuracy and isolated workers far below,
    over 3 seeds and 100 iterations."""
    rows = []
    for algo, label, offset in [("cb_full", "cb-Full", 0.0), ("cb_dybw", "cb-DyBW", gap), ("isolated", "iso", -0.1)]:
        for seed in range(3):
            for iteration in range(0, 101, 10):
                accuracy = 0.5 + 0.004 * iteration + offset + 0.001 * seed
                loss = 1.0 / (1 + iteration) * (1 + offset)
                rows.append((algo, label, seed, iteration, accuracy, loss))
    return pd.DataFrame(rows, columns=["algo", "label", "seed", "iteration", "test_accuracy", "train_loss"])


def test_curves_that_hide_each_other_are_said_to_and_workers_that_never_average_do_not_count():
    said = _overlap(_curves(gap=0.002), iterations=100)
    assert "cb-Full and cb-DyBW" in said["caption"] and "iso" not in said["caption"]
    assert "at most 0.20 points" in said["caption"] and "after the first 10 iterations" in said["caption"]
    assert "seeds' spread (1 std) at most 0.10 points" in said["caption"]
    assert "lie on one line" in said["accuracy_note"] and "losses within 0.2 %" in said["loss_note"]
    assert _overlap(_curves(gap=0.01), iterations=100) == {}  # a point apart: the lines can be told apart
