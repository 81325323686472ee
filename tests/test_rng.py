"""The common-random-number streams: keyed by owner, positions addressable, skipping is exact and O(1)."""

from __future__ import annotations

import numpy as np
import pytest

from dybw.rng import UniformStream, stream, stream_key

pytestmark = pytest.mark.unit  # no TensorFlow, MPI or subprocess: make test-fast


@pytest.mark.parametrize("width", [1, 3, 5])
@pytest.mark.parametrize("position", [0, 1, 3, 4, 7, 1000, 123457])
def test_skipping_gives_the_bits_of_drawing(width, position):
    drawn = UniformStream(0, "link", 2, 5, width=width)
    drawn.take(position)
    skipped = UniformStream(0, "link", 2, 5, width=width)
    skipped.skip_to(position)
    assert skipped.position == position
    np.testing.assert_array_equal(skipped.take(9), drawn.take(9))


def test_skipping_from_the_middle_of_a_counter_block():
    a, b = UniformStream(3, "compute", 1, width=3), UniformStream(3, "compute", 1, width=3)
    a.take(5)  # 15 words: three short of a whole block
    a.skip_to(11)
    b.take(11)
    np.testing.assert_array_equal(a.take(4), b.take(4))
    with pytest.raises(ValueError, match="cannot move back"):
        a.skip_to(2)


def test_streams_are_keyed_by_owner_not_by_process():
    assert stream_key(0, "batch", np.int64(3)) == stream_key(0, "batch", 3)
    assert stream_key(0, "batch", 3) != stream_key(1, "batch", 3) != stream_key(0, "batch", 4)
    np.testing.assert_array_equal(stream(7, "init", 0).random(4), stream(7, "init", 0).random(4))
