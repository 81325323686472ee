"""The wall clock's agreements and inbox without MPI: the rank-side message protocols, run by an event
simulation that delivers each control message exactly ``delay`` after it was sent, learn exactly the
times the virtual clock's agreement computes (``dybw.agreement``); the inbox drops what is too late."""

from __future__ import annotations

import heapq
import secrets
import threading
import time

import numpy as np
import pytest

from dybw.agreement import build_agreement
from dybw.clock import PHASES
from dybw.mpi.agreements import WALL_AGREEMENTS
from dybw.mpi.mailbox import Doorbell, Inbox
from dybw.topology import build_graph
from helpers import topology

pytestmark = pytest.mark.unit  # no TensorFlow, MPI or subprocess: make test-fast


def simulate(name: str, n: int, links: np.ndarray, entries: np.ndarray, delays: dict) -> np.ndarray:
    """``L [K, N]``: when each rank learns each iteration's agreement (phase ``end``), each rank entering
    at ``entries[k, j]``, with a perfect network and instant processing (times as floats, no polling)."""
    virtual = build_agreement(name, n, links)
    events: list = []  # (time, sequence, kind, rank, payload)
    sequence = [0]

    def push(time, kind, rank, payload):
        sequence[0] += 1
        heapq.heappush(events, (time, sequence[0], kind, rank, payload))

    ranks = []
    for j in range(n):

        def send(due, peer, message, sender=j):
            push(due, "message", peer, (sender, message))

        ranks.append(
            WALL_AGREEMENTS[name](rank=j, size=n, agreement=virtual, links=links, delays=delays, send=send, comm=None)
        )
    for k in range(len(entries)):
        for j in range(n):
            push(float(entries[k, j]), "enter", j, k)
    learned = np.full(entries.shape, np.nan)
    while events:
        time, _, kind, j, payload = heapq.heappop(events)
        if kind == "enter":
            ranks[j].enter(payload, "end", time)
        else:
            sender, message = payload
            ranks[j].receive(sender, message, time)
        for k in range(len(entries)):
            if np.isnan(learned[k, j]):
                value = ranks[j].learned(k, "end", time)
                if value is not None:
                    learned[k, j] = value
    return learned


@pytest.mark.parametrize("name", ["allreduce", "flood"])
@pytest.mark.parametrize("n", [2, 5, 8, 11])
def test_the_message_protocols_learn_what_the_virtual_agreement_computes(name, n):
    graph = build_graph(topology("erdos_renyi", p=0.4, seed=n), n)
    links = graph.directed_links()
    virtual = build_agreement(name, n, links)
    rng = np.random.default_rng(n)
    iterations = 6
    entries = np.cumsum(rng.exponential(1.0, size=(iterations, n)), axis=0)  # later iterations enter later
    control = rng.exponential(0.3, size=(iterations, len(virtual.pairs)))
    learned = simulate(name, n, links, entries, {"end": control, "threshold": control})
    for k in range(iterations):
        np.testing.assert_allclose(learned[k], virtual.learn(entries[k], control[k]), rtol=0, atol=1e-12)


def test_a_protocol_one_round_short_is_caught():
    """The check above can fail: recursive doubling that skips its last round learns too early."""
    n = 8
    graph = build_graph(topology("complete"), n)
    links = graph.directed_links()
    virtual = build_agreement("allreduce", n, links)
    entries = np.arange(n, dtype=float)[None, :]
    control = np.ones((1, len(virtual.pairs)))
    short = WALL_AGREEMENTS["allreduce"]
    original = short.__init__

    def without_last_round(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.steps = self.steps[:-2]  # the last round's send and wait

    short.__init__ = without_last_round
    try:
        learned = simulate("allreduce", n, links, entries, {"end": control})
    finally:
        short.__init__ = original
    assert not np.allclose(learned[0], virtual.learn(entries[0], control[0]))


def test_zero_control_delays_learn_the_maximum_at_once():
    n = 6
    graph = build_graph(topology("ring"), n)
    links = graph.directed_links()
    entries = np.array([[3.0, 1.0, 4.0, 1.0, 5.0, 2.0]])
    for name in ("allreduce", "flood"):
        pairs = build_agreement(name, n, links).pairs
        learned = simulate(name, n, links, entries, {"end": np.zeros((1, len(pairs)))})
        assert learned[0].tolist() == [5.0] * n


def test_phases_are_named_as_the_clock_names_them():
    assert PHASES == ("threshold", "end")


def test_the_inbox_keeps_only_what_can_still_be_used():
    inbox = Inbox()
    payload = np.zeros(3, np.float32)
    assert inbox.put(0, 1, payload) and inbox.put(1, 2, payload) and inbox.put(0, 2, payload)
    assert inbox.count(0) == 2 and inbox.messages == 3 and inbox.newest == 1
    assert sorted(inbox.take(0)) == [1, 2]
    assert not inbox.put(0, 3, payload)  # late for an iteration already combined: dropped
    assert inbox.iterations() == [1] and inbox.messages == 1
    inbox.put(3, 1, payload)
    assert inbox.take(2) == {} and inbox.iterations() == [3]  # combining 2 drops what is older
    assert inbox.messages == 1 and inbox.newest == 3


def _hear(bell, rank, seconds: float) -> None:
    """What the wall clock does for a waiting rank: sleep until rung (or ``seconds``), pass on the notes."""
    bell.wait(seconds)
    for note in bell.notes():
        rank.heard(note)


def test_the_one_host_barrier_tells_every_rank_the_last_entry_by_its_doorbell():
    """``instant`` for ranks sharing a host: whichever rank completes the barrier rings the others, and every
    rank learns the moment the last one entered -- not when it heard the ring -- for each (iteration, phase)
    on its own; nothing is left in shared memory."""
    n, token = 4, secrets.token_hex(8)
    bells = [Doorbell(token, j) for j in range(n)]
    try:
        ranks = [
            WALL_AGREEMENTS["instant"](
                rank=j, size=n, agreement=None, links=np.zeros((0, 2)), delays={}, send=None, comm=None, bell=bells[j]
            )
            for j in range(n)
        ]
        entries = {("end", 0): [0.3, 0.1, 0.7, 0.2], ("threshold", 1): [1.5, 1.9, 1.2, 1.4]}
        for (phase, k), times in entries.items():
            for j in (2, 0, 3):  # rank 1 enters last: until then nobody learns anything
                ranks[j].enter(k, phase, times[j])
            for j in range(n):
                _hear(bells[j], ranks[j], 0.05)
                assert ranks[j].learned(k, phase, now=99.0) is None
            ranks[1].enter(k, phase, times[1])
            for j in range(n):
                if j != 1:
                    _hear(bells[j], ranks[j], 1.0)  # rung at once: the test does not wait this long
                assert ranks[j].learned(k, phase, now=99.0) == max(times)
        assert not list(ranks[0]._folder.glob(f"dybw-{token}-*"))
    finally:
        for bell in bells:
            bell.close()


def test_a_doorbell_wakes_a_sleeping_rank_at_once():
    token = secrets.token_hex(8)
    sleeper, ringer = Doorbell(token, 0), Doorbell(token, 1)
    try:
        threading.Timer(0.05, ringer.ring, args=(0, b"why")).start()
        began = time.monotonic()
        sleeper.wait(30.0)
        assert time.monotonic() - began < 10.0  # woken by the ring, not by the 30 s timeout
        assert sleeper.notes() == [b"why"] and sleeper.notes() == []
        ringer.ring(0)  # a ring without a note wakes but tells nothing
        sleeper.wait(30.0)
        assert sleeper.notes() == []
    finally:
        sleeper.close()
        ringer.close()
