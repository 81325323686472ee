"""The timing core against an independent brute-force event simulation, on thousands of random cases.

Every case draws (seeded numpy RNG, so a failure is reproducible from its printed id):

* a random connected graph on 2..12 workers, from a tree (sparsest) to the complete graph, with its
  directed links in a random order;
* compute times ``C`` and link delays ``D`` from a random family: exponential, Pareto with shape
  alpha < 1 (infinite mean) clipped at 1e12, log-normal with a huge sigma, small integers (exact ties and
  zeros), a constant, all zeros, or a mixture with "near-infinite" 1e12 entries and zeros;
* every policy variant on that graph: ``cb_full``; ``cb_static`` with every ``b`` from 0 to the maximum
  degree (clamped for some workers, or rejected when no worker can honour it); ``cb_dybw`` with several
  ``m`` (1, 2, a random one, the maximum degree, one above it: rejected);
* a random split of the iterations into chunks of ``VirtualClock.advance`` calls (or a single call).

Each test below fixes the sync mode (``lockstep`` | ``free``) and the update order (``atc`` | ``cta``),
so the four of them together run several thousand cases.

The reference is a discrete-event simulator written here from docs/protocol.md; it uses
neither ``dybw.policies`` nor ``dybw.protocol``.  Events (a worker's own message becoming ready, a
neighbour's message arriving) are processed in time order, ties by arrival time then lower worker id;
each worker's stop is the event at which its rule first holds (ready and at least ``q_j`` messages in
the inbox, with ``q_j`` = its degree for cb_full, ``p_j`` for cb_static, ``m_j`` for cb_dybw), and for
cb_dybw in lock-step the event at which the *last* worker becomes eligible (theta).  A worker keeps
receiving messages stamped exactly at its stop time (a message already here is never ignored).

Exact or tolerant comparison: every time the simulator produces is formed with the same floating-point
operations, in the same order, as the formulas of the design: an event time is a sum
``start + C`` / ``ready_i + D_ij`` (or ``0 + D_ij`` for CTA), a stop time is *one of* those event times
(choosing an event never rounds), CTA adds ``C`` after the stop, and ``E(k) = E(k-1) + T(k)`` is
accumulated left to right.  In lock-step the simulator measures iteration k from its common start
``E(k-1)`` (every worker starts there) and places it with ``E(k-1) + t``, which is exactly what a
lock-step clock does.  So the comparison is **exact** (``assert_array_equal``), for chunked and unchunked
advances alike (the clock promises chunk-independent floats, which resume relies on).  The only
tolerant check is the CTA identity ``finish = stop + C`` on the *absolute* lock-step times, where
``E(k-1) + (stop + C)`` and ``(E(k-1) + stop) + C`` legitimately round differently (rtol 1e-12).
"""

from __future__ import annotations

import heapq
import warnings
from collections import Counter

import numpy as np
import pytest

from dybw.algorithms import CbDyBW, CbFull, CbStatic
from dybw.clock import VirtualClock
from dybw.errors import ConfigError

# Each scenario runs ~7.8 valid policy variants (plus the rejected b / m): >= 1000 cases per (sync, update)
# mode, ~4400 in the four tests together, in ~4 s of CPU.
SCENARIOS_PER_MODE = 140
BIG = 1e12  # "near-infinite": the largest delay drawn


# ---------------------------------------------------------------------------------------------------
# Random inputs


def random_graph(rng: np.random.Generator) -> tuple[int, np.ndarray, str]:
    """``(n, adjacency, kind)``: a random connected undirected graph, from a tree to complete."""
    n = int(rng.integers(2, 13))
    kind = rng.choice(["tree", "sparse", "medium", "dense", "complete", "path", "star", "cycle"])
    adjacency = np.zeros((n, n), dtype=bool)
    order = rng.permutation(n)
    if kind == "path":
        for a, b in zip(order[:-1], order[1:]):
            adjacency[a, b] = adjacency[b, a] = True
    elif kind == "star":
        adjacency[order[0], order[1:]] = adjacency[order[1:], order[0]] = True
    elif kind == "cycle":
        for a, b in zip(order, np.roll(order, -1)):
            if a != b:
                adjacency[a, b] = adjacency[b, a] = True
    else:
        for i in range(1, n):  # a random spanning tree keeps the graph connected
            a, b = order[i], order[rng.integers(0, i)]
            adjacency[a, b] = adjacency[b, a] = True
        extra = {
            "tree": 0.0,
            "sparse": 0.1,
            "medium": rng.uniform(0.2, 0.6),
            "dense": rng.uniform(0.7, 0.95),
            "complete": 1.0,
        }[str(kind)]
        upper = np.triu(rng.random((n, n)) < extra, k=1)
        adjacency |= upper | upper.T
    np.fill_diagonal(adjacency, False)
    return n, adjacency, str(kind)


def random_links(rng: np.random.Generator, adjacency: np.ndarray) -> np.ndarray:
    """Directed links ``(src, dst)``, both directions of every edge, in a random order."""
    links = np.argwhere(adjacency)  # rows (i, j) with i -- j; as a directed link i -> j
    return links[rng.permutation(len(links))]


FAMILIES = ("exponential", "pareto", "lognormal", "ties", "constant", "zeros", "near_infinite")


def random_delays(rng: np.random.Generator, shape: tuple[int, ...], family: str) -> np.ndarray:
    """Non-negative finite delays (seconds) of one family, at most ``BIG``."""
    scale = float(10.0 ** rng.uniform(-4, 2))
    if family == "exponential":
        values = rng.exponential(scale, size=shape)
    elif family == "pareto":  # shape alpha < 1: infinite mean; draws up to ~1e80 before clipping
        values = (rng.pareto(rng.uniform(0.15, 0.99), size=shape) + 1.0) * scale
    elif family == "lognormal":
        values = np.exp(rng.normal(np.log(scale), rng.uniform(3, 12), size=shape))
    elif family == "ties":  # small integers: exact ties everywhere, zeros included
        values = rng.integers(0, 4, size=shape).astype(np.float64)
    elif family == "constant":
        values = np.full(shape, scale)
    elif family == "zeros":
        values = np.zeros(shape)
    else:  # near_infinite: ordinary delays, some exactly 1e12 (a link or worker that "never" answers), some 0
        values = rng.exponential(scale, size=shape)
        values[rng.random(shape) < rng.uniform(0.05, 0.5)] = BIG
        values[rng.random(shape) < 0.1] = 0.0
    return np.minimum(values, BIG)


def policy_variants(rng: np.random.Generator, degrees: np.ndarray):
    """``(kind, parameter)`` for every variant this case runs."""
    high = int(degrees.max())
    variants = [("cb_full", None)]
    variants += [("cb_static", b) for b in range(0, high + 1)]
    ms = {1, 2, high, high + 1, int(rng.integers(1, high + 1))}
    variants += [("cb_dybw", m) for m in sorted(ms)]
    return variants


def expected_waits(kind: str, parameter, degrees: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(wanted, q)``: what the rule asks each worker to wait for, and that clamped to ``1..d_j``."""
    if kind == "cb_full":
        wanted = degrees.copy()
    elif kind == "cb_static":
        wanted = degrees - parameter
    else:
        wanted = np.full_like(degrees, parameter)
    return wanted, np.minimum(np.maximum(wanted, 1), degrees)


def make(kind: str, parameter, degrees: np.ndarray):
    if kind == "cb_full":
        return CbFull(degrees)
    if kind == "cb_static":
        return CbStatic(degrees, parameter)
    return CbDyBW(degrees, parameter)


def random_chunks(rng: np.random.Generator, iterations: int) -> list[int]:
    """Sizes of consecutive ``advance`` calls: one call, one per iteration, or a random split."""
    style = rng.integers(0, 3)
    if style == 0 or iterations == 1:
        return [iterations]
    if style == 1:
        return [1] * iterations
    cuts = np.sort(rng.choice(np.arange(1, iterations), size=rng.integers(1, iterations), replace=False))
    return np.diff(np.concatenate([[0], cuts, [iterations]])).tolist()


# ---------------------------------------------------------------------------------------------------
# The reference: a brute-force discrete-event simulation


READY, ARRIVAL, FINISH = 0, 1, 2  # event kinds (only an ordering aid among equal (time, worker) keys)


def simulate_lockstep(n, links, compute, delays, q, atc: bool, threshold: bool):
    """Lock-step: iteration by iteration, every worker starting at ``E(k-1)``.

    ``q[j]`` is how many neighbours' messages worker j needs (with its own ready) before its rule holds;
    ``threshold`` (cb_dybw) makes everyone listen until the last worker's rule holds (theta).
    Returns start, ready, stop, finish ``[T, N]``, used ``[T, N, N]`` and end ``[T]``.
    """
    iterations = len(compute)
    compute, delays, links = compute.tolist(), delays.tolist(), links.tolist()  # Python floats are IEEE doubles
    out = {name: np.zeros((iterations, n)) for name in ("start", "ready", "stop", "finish")}
    used = np.zeros((iterations, n, n), dtype=bool)
    end = np.zeros(iterations)
    last_end = 0.0
    for k in range(iterations):
        # Times relative to this iteration's common start E(k-1).
        ready = [(0.0 + compute[k][j]) if atc else 0.0 for j in range(n)]
        events = [(ready[j], j, READY, j) for j in range(n)]
        for (i, j), d in zip(links, delays[k]):
            events.append((ready[i] + d, int(i), ARRIVAL, int(j)))  # i's message reaches j
        events.sort()  # by time, then the sender's (lower) id
        is_ready = [False] * n
        inbox = [[] for _ in range(n)]  # (sender, time) of messages received while listening
        rule_time = [None] * n  # when j's own rule first holds (its eligibility r_j for cb_dybw)
        stop = [None] * n
        for time, sender, kind, j in events:
            if all(s is not None and time > s for s in stop):
                break  # everyone has stopped listening: later arrivals are dropped
            if kind == READY:
                is_ready[j] = True
            elif stop[j] is None or time <= stop[j]:  # still listening (or a tie with its stop instant)
                inbox[j].append((sender, time))
            if rule_time[j] is None and is_ready[j] and len(inbox[j]) >= q[j]:
                rule_time[j] = time
                if not threshold:
                    stop[j] = time
                elif all(r is not None for r in rule_time):  # the last worker became eligible: theta
                    stop = [time] * n
        assert all(s is not None for s in stop), "every worker's rule must hold once all messages are in"
        for j in range(n):
            finish = stop[j] if atc else stop[j] + compute[k][j]
            out["start"][k, j] = last_end
            out["ready"][k, j] = last_end + ready[j]
            out["stop"][k, j] = last_end + stop[j]
            out["finish"][k, j] = last_end + finish
            for sender, time in inbox[j]:
                used[k, j, sender] = time <= stop[j]
        duration = max(stop[j] if atc else stop[j] + compute[k][j] for j in range(n))
        last_end = last_end + duration
        end[k] = last_end
    return out["start"], out["ready"], out["stop"], out["finish"], used, end


def simulate_free(n, links, compute, delays, q, atc: bool):
    """No barrier: one event queue over all iterations, in absolute time.

    Worker j starts iteration k+1 when it finishes iteration k.  ATC: its message leaves at
    ``ready = start + C``; CTA: at ``start``, and it finishes at ``stop + C``.  Messages carry their
    iteration: an early one waits in the inbox, a late one (after the receiver's stop) is dropped.
    """
    iterations = len(compute)
    compute, delays, links = compute.tolist(), delays.tolist(), links.tolist()  # Python floats are IEEE doubles
    out = {name: np.full((iterations, n), np.nan) for name in ("start", "ready", "stop", "finish")}
    used = np.zeros((iterations, n, n), dtype=bool)
    out_links = [[] for _ in range(n)]
    for index, (i, j) in enumerate(links):
        out_links[int(i)].append((int(j), index))
    queue: list = []
    iteration = [0] * n
    is_ready = [False] * n
    stopped = [False] * n
    inbox = [dict() for _ in range(n)]  # inbox[j][k] = list of (sender, time)

    def start(j, time):
        k = iteration[j]
        out["start"][k, j] = time
        is_ready[j], stopped[j] = False, False
        if atc:
            heapq.heappush(queue, (time + compute[k][j], j, READY, j, k))
        else:
            begin(j, time)

    def begin(j, ready_time):  # j's message of its current iteration leaves now
        k = iteration[j]
        is_ready[j] = True
        out["ready"][k, j] = ready_time
        for receiver, index in out_links[j]:
            heapq.heappush(queue, (ready_time + delays[k][index], j, ARRIVAL, receiver, k))
        check(j, ready_time)

    def check(j, time):
        k = iteration[j]
        if not stopped[j] and is_ready[j] and len(inbox[j].get(k, [])) >= q[j]:
            stopped[j] = True
            out["stop"][k, j] = time
            if atc:
                finish(j, time)
            else:
                heapq.heappush(queue, (time + compute[k][j], j, FINISH, j, k))

    def finish(j, time):
        k = iteration[j]
        out["finish"][k, j] = time
        iteration[j] += 1
        if iteration[j] < iterations:
            start(j, time)

    for j in range(n):
        start(j, 0.0)
    while queue:
        time, sender, kind, j, k = heapq.heappop(queue)
        if kind == READY:
            begin(j, time)
        elif kind == FINISH:
            finish(j, time)
        else:  # an arrival of sender's iteration-k message at j
            if k > iteration[j] or (k == iteration[j] and not stopped[j]):
                inbox[j].setdefault(k, []).append((sender, time))  # early: kept; current: counted
                if k == iteration[j]:
                    check(j, time)
            elif k < iterations and time <= out["stop"][k, j]:
                inbox[j].setdefault(k, []).append((sender, time))  # a tie with j's stop instant: used
            # else: arrived after j stopped listening for iteration k: dropped
    for k in range(iterations):
        for j in range(n):
            for sender, time in inbox[j].get(k, []):
                used[k, j, sender] = time <= out["stop"][k, j]
    end = np.maximum.accumulate(out["finish"].max(axis=1))
    return out["start"], out["ready"], out["stop"], out["finish"], used, end


# ---------------------------------------------------------------------------------------------------
# The test


def advance_in_chunks(protocol: VirtualClock, compute, delays, chunks):
    parts, first = [], 0
    for size in chunks:
        parts.append(protocol.advance(compute[first : first + size], delays[first : first + size]))
        first += size
    assert [p.first for p in parts] == np.cumsum([0] + chunks[:-1]).tolist()
    names = ("start", "ready", "stop", "finish", "used", "end")
    return {name: np.concatenate([getattr(p, name) for p in parts]) for name in names}


def equal(actual, expected, message) -> None:
    """Bit-for-bit equality (NaN nowhere expected); numpy's report only when it fails (it is slow)."""
    if not np.array_equal(actual, expected):
        np.testing.assert_array_equal(actual, expected, err_msg=str(message))


def check_case(case_id, rng, n, adjacency, links, compute, delays, kind, parameter, sync, update, stats):
    degrees = adjacency.sum(axis=1)
    wanted, q = expected_waits(kind, parameter, degrees)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if np.all(q != wanted):  # no worker can honour b / m: a configuration error, not a clamp
            with pytest.raises(ConfigError):
                make(kind, parameter, degrees)
            stats["rejected", kind] += 1
            return
        policy = make(kind, parameter, degrees)
    clamps = [w for w in caught if "clamped" in str(w.message)]
    assert len(clamps) == (1 if np.any(q != wanted) else 0), case_id
    stats["clamped" if clamps else "exact", kind] += 1

    atc, lockstep = update == "atc", sync == "lockstep"
    chunks = random_chunks(rng, len(compute))
    stats["chunked" if len(chunks) > 1 else "unchunked"] += 1
    got = advance_in_chunks(VirtualClock(n, links, policy, sync, update), compute, delays, chunks)
    start, ready, stop, finish, used, end = (got[k] for k in ("start", "ready", "stop", "finish", "used", "end"))

    # terminates with finite times
    for name in ("start", "ready", "stop", "finish", "end"):
        assert np.isfinite(got[name]).all(), (case_id, name)
    # stop >= ready >= start, finish as documented (docs/protocol.md: ATC finish = stop; CTA stop + C)
    assert (ready >= start).all() and (stop >= ready).all(), case_id
    if atc:
        equal(ready, start + compute, case_id)
        equal(finish, stop, case_id)
    else:
        equal(ready, start, case_id)
        if lockstep:  # absolute times are E(k-1) + (stop + C): one rounding apart from (E(k-1) + stop) + C
            np.testing.assert_allclose(finish, stop + compute, rtol=1e-12, atol=0, err_msg=case_id)
        else:
            equal(finish, stop + compute, case_id)
    # E(k) = max_j finish_j(k), nondecreasing; the next iteration starts at E(k) (lock-step) / finish (free)
    assert (np.diff(end) >= 0).all(), case_id
    equal(end, finish.max(axis=1), case_id)
    if lockstep:
        equal(start[1:], np.repeat(end[:-1, None], n, axis=1), case_id)
        assert (start[0] == 0).all()
    else:
        equal(start[1:], finish[:-1], case_id)
    # used sets: neighbours only, at least q_j of them (all for cb_full), and in cb_dybw lock-step one stop
    assert not (used & ~adjacency[None]).any(), case_id
    counts = used.sum(axis=-1)
    assert (counts >= q[None]).all(), (case_id, counts.tolist(), q.tolist())
    if kind == "cb_full":
        assert (counts == degrees[None]).all(), case_id
    if kind == "cb_dybw" and lockstep:
        assert (stop == stop[:, :1]).all(), case_id
    # used sets are exactly "every neighbour whose message arrived by the stop time" (free: the absolute
    # arrival times ready_i + D_ij are reported, so this is checkable on the protocol's own output)
    if not lockstep:
        arrivals = np.full(used.shape, np.inf)
        src, dst = links.T
        arrivals[:, dst, src] = ready[:, src] + delays
        equal(used, arrivals <= stop[:, :, None], case_id)

    # the core: equal to the brute-force event simulation, exactly (see the module docstring)
    if lockstep:
        expected = simulate_lockstep(n, links, compute, delays, q, atc, threshold=kind == "cb_dybw")
    else:
        expected = simulate_free(n, links, compute, delays, q, atc)
    for name, value in zip(("start", "ready", "stop", "finish", "used", "end"), expected):
        equal(got[name], value, f"{case_id}: {name}")

    # chunk boundaries do not change a single bit
    if len(chunks) > 1:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the clamp warning was checked above
            again = make(kind, parameter, degrees)
        whole = advance_in_chunks(VirtualClock(n, links, again, sync, update), compute, delays, [len(compute)])
        for name in whole:
            equal(got[name], whole[name], f"{case_id}: chunked {name}")
    stats["cases"] += 1


@pytest.mark.parametrize("update", ["atc", "cta"])
@pytest.mark.parametrize("sync", ["lockstep", "free"])
def test_timing_core_equals_brute_force_event_simulation(sync, update):
    rng = np.random.default_rng([2024, ("lockstep", "free").index(sync), ("atc", "cta").index(update)])
    stats: Counter = Counter()
    for scenario in range(SCENARIOS_PER_MODE):
        n, adjacency, graph_kind = random_graph(rng)
        links = random_links(rng, adjacency)
        iterations = int(rng.integers(1, 13))
        compute_family, link_family = rng.choice(FAMILIES), rng.choice(FAMILIES)
        compute = random_delays(rng, (iterations, n), str(compute_family))
        delays = random_delays(rng, (iterations, len(links)), str(link_family))
        stats["graph", graph_kind] += 1
        stats["family", str(compute_family)] += 1
        stats["family", str(link_family)] += 1
        stats["n", n] += 1
        degrees = adjacency.sum(axis=1)
        for kind, parameter in policy_variants(rng, degrees):
            case_id = (
                f"{sync}/{update} scenario {scenario} n={n} {graph_kind} degrees={degrees.tolist()} "
                f"C~{compute_family} D~{link_family} {kind}({parameter}) T={iterations}"
            )
            check_case(case_id, rng, n, adjacency, links, compute, delays, kind, parameter, sync, update, stats)

    # the random cases covered what they are meant to cover
    assert stats["cases"] >= 1000, stats["cases"]
    for kind in ("cb_full", "cb_static", "cb_dybw"):
        assert stats["exact", kind] > 0, kind
    for kind in ("cb_static", "cb_dybw"):
        assert stats["clamped", kind] > 0 and stats["rejected", kind] > 0, kind
    assert stats["chunked"] > 0 and stats["unchunked"] > 0
    assert all(stats["family", f] > 0 for f in FAMILIES)
    assert all(stats["graph", g] > 0 for g in ("tree", "sparse", "complete", "path", "star", "cycle"))
    assert stats["n", 2] > 0 and stats["n", 12] > 0


def test_brute_force_reproduces_the_hand_worked_example():
    """The simulator itself, on the four-worker ring worked by hand in tests/test_protocol.py."""
    links = np.array([(0, 1), (0, 3), (1, 0), (1, 2), (2, 1), (2, 3), (3, 0), (3, 2)])
    compute = np.array([[1.0, 2.0, 1.0, 5.0]])
    delays = np.array([[1.0, 4.0, 1.0, 6.0, 3.0, 1.0, 2.0, 1.0]])

    def sets(used):
        return [set(np.flatnonzero(row).tolist()) for row in used[0]]

    _, _, stop, _, used, end = simulate_lockstep(4, links, compute, delays, [2, 2, 2, 2], True, False)
    assert stop[0].tolist() == [7, 4, 8, 5] and end.tolist() == [8]
    _, _, stop, _, used, end = simulate_lockstep(4, links, compute, delays, [1, 1, 1, 1], True, False)
    assert stop[0].tolist() == [3, 2, 6, 5] and sets(used) == [{1}, {0}, {3}, {0, 2}]
    _, _, stop, _, used, end = simulate_lockstep(4, links, compute, delays, [1, 1, 1, 1], True, True)
    assert stop[0].tolist() == [6, 6, 6, 6] and sets(used) == [{1}, {0, 2}, {3}, {0, 2}]
    # free, cb_dybw m=1: worker 3 is ready at 5 and already holds 0's (5) and 2's (2) messages
    _, _, stop, _, used, end = simulate_free(4, links, compute, delays, [1, 1, 1, 1], True)
    assert stop[0].tolist() == [3, 2, 6, 5] and sets(used) == [{1}, {0}, {3}, {0, 2}]


@pytest.mark.parametrize("sync", ["lockstep", "free"])
@pytest.mark.parametrize("kind, parameter", [("cb_full", None), ("cb_static", 0), ("cb_dybw", 1)])
def test_an_infinite_delay_never_makes_a_non_neighbour_used(kind, parameter, sync):
    """Beyond "near-infinite": a delay that overflowed to inf.

    Valid configs produce them (``straggler=pareto straggler.link.alpha=0.001``: ``(1-u)^(-1000)`` overflows;
    a log-normal ``sigma`` of 1e300).  The stop time may then be inf, but S_j must stay within N_j: the
    used set is "every *neighbour* that arrived by stop_j", never a non-neighbour or the worker itself.
    """
    links = np.array([(0, 1), (1, 0), (1, 2), (2, 1)])  # path 0 - 1 - 2: 0 and 2 are not neighbours
    adjacency = np.zeros((3, 3), dtype=bool)
    adjacency[links[:, 1], links[:, 0]] = True
    degrees = adjacency.sum(axis=1)
    chunk = VirtualClock(3, links, make(kind, parameter, degrees), sync, "atc").advance(
        np.zeros((1, 3)), np.array([[1.0, np.inf, 1.0, 1.0]])
    )  # 1 -> 0 never arrives
    assert not (chunk.used & ~adjacency[None]).any(), chunk.used[0].astype(int).tolist()
    assert (chunk.used_count <= degrees[None]).all(), chunk.used_count.tolist()
