"""What the launcher passes on of the MPI world's output (no MPI)."""

from __future__ import annotations

import io

import pytest

from dybw.mpi.launch import _Forwarder

pytestmark = pytest.mark.unit  # no TensorFlow, MPI or subprocess: make test-fast


def test_restated_lines_are_dropped_whatever_the_chunking_and_progress_passes_at_once():
    stream = [
        b"\rcb_full mnist:  1%",
        b"\rcb_full mnist:  2%\n",
        b"dybw ra",
        b"nk 1: RuntimeError: injected\nAb",
        b"ort(1) on node 1 (rank 1 in comm 0): application called MPI_Abort\n",
        b"a warning\nAbo",
        b"ve all\n",
    ]
    forwarder = _Forwarder(None, io.BytesIO())
    passed = [forwarder.filter(chunk) for chunk in stream]
    assert passed[0] == b"\rcb_full mnist:  1%"  # a progress bar is not held back
    assert b"".join(passed) == b"\rcb_full mnist:  1%\rcb_full mnist:  2%\na warning\nAbove all\n"
