"""The timing core against an independent brute-force event simulation, on thousands of random cases.

Every case draws (seeded numpy RNG, so a failure is reproducible from its printed id):

* a random connected graph on 2..12 workers, from a tree (sparsest) to the complete graph, with its
  directed links in a random order;
* compute times ``C`` and link delays ``D`` from a random family: exponential, Pareto with shape
  alpha < 1 (infinite mean) clipped at 1e12, log-normal with a huge sigma, small integers (exact ties and
  zeros), a constant, all zeros, or a mixture with "near-infinite" 1e12 entries and zeros;
* every policy variant on that graph: ``cb_full``; ``cb_static`` with every ``b`` from 0 to the maximum
  degree (clamped for some workers, or rejected when no worker can honour it); ``cb_dybw`` with several
  ``m`` (1, 2, a random one, the maximum degree, one above it: rejected); ``isolated``;
* in lock-step, every agreement (``instant``, ``allreduce``, ``flood``) with control-message delays of a
  random family (zeros included);
* a random split of the iterations into chunks of ``VirtualClock.advance`` calls (or a single call).

Each test below fixes the sync mode (``lockstep`` | ``free``) and the update order (``atc`` | ``cta``),
so the four of them together run several thousand cases.

The reference is a discrete-event simulator written here from docs/protocol.md; it uses
neither ``dybw.policies`` nor ``dybw.protocol``.  Events (a worker's own message becoming ready, a
neighbour's message arriving) are processed in time order, ties by arrival time then lower worker id;
each worker's stop is the event at which its rule first holds (ready and at least ``q_j`` messages in
the inbox, with ``q_j`` = its degree for cb_full, ``p_j`` for cb_static, ``m_j`` for cb_dybw, 0 for
isolated, which sends nothing), and for cb_dybw in lock-step the moment the worker learns that the
*last* worker became eligible (theta).  A worker keeps receiving messages stamped exactly at its stop
time (a message already here is never ignored).  Agreements are simulated as the control messages they
are: the recursive doubling's rounds (extra workers folding in and out), or a flood in which every
worker forwards what it newly learns to its neighbours; each message adds its control delay.

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

from dybw.agreement import AGREEMENTS, AllReduce, Flood
from dybw.algorithms import CbAdaptive, CbDyBW, CbFull, CbStatic, CbTimeout, Isolated
from dybw.algorithms.cb_adaptive import choose_waits
from dybw.clock import VirtualClock
from dybw.errors import ConfigError

pytestmark = pytest.mark.unit  # no TensorFlow, MPI or subprocess: make test-fast

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
    variants.append(("isolated", None))
    # a deadline of 0 (messages already in), one of the delays' own scale, and none (cb_full's bits)
    variants += [("cb_timeout", t) for t in (0.0, float(10.0 ** rng.uniform(-4, 2)), np.inf)]
    variants.append(("cb_adaptive", (int(rng.integers(1, 6)), float(rng.uniform(0, 0.95)))))
    return variants


def expected_waits(kind: str, parameter, degrees: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(wanted, q)``: what the rule asks each worker to wait for, and that clamped to ``1..d_j``."""
    if kind in ("cb_full", "cb_timeout", "cb_adaptive"):  # cb_adaptive: its first iteration; later it decides
        wanted = degrees.copy()
    elif kind == "isolated":
        return np.zeros_like(degrees), np.zeros_like(degrees)
    elif kind == "cb_static":
        wanted = degrees - parameter
    else:
        wanted = np.full_like(degrees, parameter)
    return wanted, np.minimum(np.maximum(wanted, 1), degrees)


def make(kind: str, parameter, degrees: np.ndarray):
    if kind == "cb_full":
        return CbFull(degrees)
    if kind == "isolated":
        return Isolated(degrees)
    if kind == "cb_static":
        return CbStatic(degrees, parameter)
    if kind == "cb_timeout":
        return CbTimeout(degrees, parameter)
    if kind == "cb_adaptive":
        return CbAdaptive(degrees, *parameter)
    return CbDyBW(degrees, parameter)


class AdaptiveOracle:
    """cb_adaptive's bookkeeping, written again from its docstring: per worker, the start, ``ready - start``,
    ``finish - stop`` and the neighbours' arrival times of its last ``window`` iterations; a message not
    seen by the decision counts as arriving at it.  The argmax itself is ``choose_waits``."""

    def __init__(self, n, links, window: int, noise: float):
        self.n, self.window, self.noise = n, window, noise
        self.neighbours = [[int(i) for i, j in links if int(j) == w] for w in range(n)]
        self.degrees = np.array([len(nb) for nb in self.neighbours])
        self.rows = [[] for _ in range(n)]  # per worker: (start, waited, tail) of each iteration it finished
        self.heard_at = {}  # (worker, iteration) -> {sender: when its message arrived}

    def start(self, j: int, k: int, now: float) -> int:
        first = max(0, k - self.window)
        rows = self.rows[j][first:k]
        if not rows:
            return int(self.degrees[j])
        width = max(int(self.degrees.max()), 1)
        offsets = np.full((len(rows), 1, width), np.inf)
        for w, (start, _, _) in enumerate(rows):
            heard = self.heard_at.get((j, first + w), {})
            for s, sender in enumerate(sorted(self.neighbours[j])):
                offsets[w, 0, s] = min(heard.get(sender, np.inf), now) - start
        waited = np.array([[row[1]] for row in rows])
        tail = np.array([[row[2]] for row in rows])
        return int(choose_waits(waited, tail, offsets, self.degrees[[j]], self.noise)[0])

    def finish(self, j: int, start: float, ready: float, stop: float, finish: float) -> None:
        self.rows[j].append((start, ready - start, finish - stop))

    def heard(self, j: int, k: int, sender: int, time: float) -> None:
        self.heard_at.setdefault((j, k), {})[sender] = time


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


READY, ARRIVAL, FINISH, TIMEOUT = 0, 1, 2, 3  # event kinds (an ordering aid among equal (time, worker) keys)


def agree_by_messages(name: str, n: int, links, entry: list[float], delay) -> list[float]:
    """When each worker learns that every worker has entered (entry times ``entry``), by exchanging control
    messages; ``delay(i, j)`` is the control delay of a message i -> j in this iteration and phase."""
    if name == "instant":
        return [max(entry)] * n
    if name == "allreduce":
        core = 1
        while core * 2 <= n:
            core *= 2
        start = list(entry[:core])
        for extra in range(core, n):  # the extra worker's value reaches its partner in the core
            start[extra - core] = max(start[extra - core], entry[extra] + delay(extra, extra - core))
        rounds, bit = [], 1
        while bit < core:
            rounds.append(bit)
            bit *= 2
        for bit in rounds:  # everyone sends its round message at the time it begins the round
            start = [max(start[j], start[j ^ bit] + delay(j ^ bit, j)) for j in range(core)]
        learned = start + [0.0] * (n - core)
        for extra in range(core, n):
            learned[extra] = start[extra - core] + delay(extra - core, extra)
        return learned
    # flood: a worker forwards each origin's news to its neighbours when it first hears it
    neighbours = [[] for _ in range(n)]
    for i, j in links:
        neighbours[int(i)].append(int(j))
    heard = [dict() for _ in range(n)]  # heard[j][origin] = when j first heard origin's news
    queue = [(entry[i], i, i) for i in range(n)]  # (time, receiver, origin)
    heapq.heapify(queue)
    while queue:
        time, j, origin = heapq.heappop(queue)
        if origin in heard[j]:
            continue
        heard[j][origin] = time
        for k in neighbours[j]:
            heapq.heappush(queue, (time + delay(j, k), k, origin))
    assert all(len(h) == n for h in heard), "a connected graph floods everyone"
    return [max(h.values()) for h in heard]


def simulate_lockstep(n, links, compute, delays, q, atc: bool, threshold: bool, sends=True, agreement="instant",
                      control=None, timeout=np.inf, adaptive=None):  # fmt: skip
    """Lock-step: iteration by iteration, in times relative to the iteration's reference start ``E(k-1)``.

    ``q[j]`` is how many neighbours' messages worker j needs (with its own ready) before its rule holds;
    ``threshold`` (cb_dybw) makes everyone listen until it learns that the last worker's rule holds
    (theta), through the ``agreement``; ``control[phase](k, i, j)`` is a control message's delay.  Worker j
    starts iteration k+1 when it learns that everyone finished k (for cb_dybw under ATC: when it learns
    theta).  Returns start, ready, stop, finish ``[T, N]``, used ``[T, N, N]`` and end ``[T]``.
    """
    iterations = len(compute)
    compute, delays, links = compute.tolist(), delays.tolist(), links.tolist()  # Python floats are IEEE doubles
    out = {name: np.zeros((iterations, n)) for name in ("start", "ready", "stop", "finish")}
    used = np.zeros((iterations, n, n), dtype=bool)
    end = np.zeros(iterations)
    last_end, offset = 0.0, [0.0] * n
    for k in range(iterations):
        if adaptive is not None:
            q = [adaptive.start(j, k, last_end + offset[j]) for j in range(n)]
        ready = [(offset[j] + compute[k][j]) if atc else offset[j] for j in range(n)]
        events = [(ready[j], j, READY, j) for j in range(n)]
        if timeout < np.inf:
            events += [(ready[j] + timeout, j, TIMEOUT, j) for j in range(n)]
        if sends:
            for (i, j), d in zip(links, delays[k]):
                events.append((ready[i] + d, int(i), ARRIVAL, int(j)))  # i's message reaches j
        events.sort()  # by time, then the sender's (lower) id
        is_ready = [False] * n
        arrived = [[] for _ in range(n)]  # (sender, time) of every message of this iteration
        rule_time = [None] * n  # when j's own rule first holds (its eligibility r_j)
        for time, sender, kind, j in events:
            if kind == READY:
                is_ready[j] = True
            elif kind == ARRIVAL:
                arrived[j].append((sender, time))
            if rule_time[j] is None and is_ready[j] and (len(arrived[j]) >= q[j] or kind == TIMEOUT):
                rule_time[j] = time
        assert all(r is not None for r in rule_time), "every worker's rule must hold once all messages are in"
        if threshold:
            stop = agree_by_messages(agreement, n, links, rule_time, lambda i, j, k=k: control["threshold"](k, i, j))
        else:
            stop = rule_time
        finish = [stop[j] if atc else stop[j] + compute[k][j] for j in range(n)]
        duration = max(finish)
        if threshold and atc:
            next_start = finish  # learning theta ended the iteration
        else:
            next_start = agree_by_messages(agreement, n, links, finish, lambda i, j, k=k: control["end"](k, i, j))
        for j in range(n):
            out["start"][k, j] = last_end + offset[j]
            out["ready"][k, j] = last_end + ready[j]
            out["stop"][k, j] = last_end + stop[j]
            out["finish"][k, j] = last_end + finish[j]
            for sender, time in arrived[j]:
                used[k, j, sender] = time <= stop[j]
            if adaptive is not None:
                adaptive.finish(j, *(out[name][k, j] for name in ("start", "ready", "stop", "finish")))
                for sender, time in arrived[j]:
                    adaptive.heard(j, k, sender, last_end + time)
        offset = [next_start[j] - duration for j in range(n)]
        last_end = last_end + duration
        end[k] = last_end
    return out["start"], out["ready"], out["stop"], out["finish"], used, end


def simulate_free(n, links, compute, delays, q, atc: bool, sends=True, timeout=np.inf, adaptive=None):
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

    q = list(q)

    def start(j, time):
        k = iteration[j]
        out["start"][k, j] = time
        is_ready[j], stopped[j] = False, False
        if adaptive is not None:
            q[j] = adaptive.start(j, k, time)
        if atc:
            heapq.heappush(queue, (time + compute[k][j], j, READY, j, k))
        else:
            begin(j, time)

    def begin(j, ready_time):  # j's message of its current iteration leaves now
        k = iteration[j]
        is_ready[j] = True
        out["ready"][k, j] = ready_time
        for receiver, index in out_links[j] if sends else []:
            heapq.heappush(queue, (ready_time + delays[k][index], j, ARRIVAL, receiver, k))
        if timeout < np.inf:
            heapq.heappush(queue, (ready_time + timeout, j, TIMEOUT, j, k))
        check(j, ready_time)

    def check(j, time, deadline=False):
        k = iteration[j]
        if not stopped[j] and is_ready[j] and (len(inbox[j].get(k, [])) >= q[j] or deadline):
            stopped[j] = True
            out["stop"][k, j] = time
            if atc:
                finish(j, time)
            else:
                heapq.heappush(queue, (time + compute[k][j], j, FINISH, j, k))

    def finish(j, time):
        k = iteration[j]
        out["finish"][k, j] = time
        if adaptive is not None:
            adaptive.finish(j, *(out[name][k, j] for name in ("start", "ready", "stop", "finish")))
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
        elif kind == TIMEOUT:
            if k == iteration[j]:
                check(j, time, deadline=True)
        else:  # an arrival of sender's iteration-k message at j
            if adaptive is not None:  # early, in time or late: the receiver has seen it from now on
                adaptive.heard(j, k, sender, time)
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


class ControlDelays:
    """One table of control-message delays per agreement phase, ``[T, pairs]``, the clock's ``control``;
    ``delay(phase)(k, i, j)`` reads the same numbers for the brute-force simulation."""

    def __init__(self, rng: np.random.Generator, iterations: int, n: int, family: str):
        self.tables = {phase: random_delays(rng, (iterations, n, n), family) for phase in ("threshold", "end")}

    def __call__(self, first: int, count: int, phase: str, pairs: np.ndarray) -> np.ndarray:
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        return self.tables[phase][first : first + count, pairs[:, 0], pairs[:, 1]]

    def delay(self, phase: str):
        table = self.tables[phase].tolist()
        return lambda k, i, j: table[k][i][j]


def advance_in_chunks(protocol: VirtualClock, compute, delays, chunks):
    parts, first = [], 0
    for size in chunks:
        parts.append(protocol.advance(compute[first : first + size], delays[first : first + size]))
        first += size
    assert [p.first for p in parts] == np.cumsum([0] + chunks[:-1]).tolist()
    names = ("start", "ready", "stop", "finish", "end")
    got = {name: np.concatenate([getattr(p, name) for p in parts]) for name in names}
    got["used"] = np.concatenate([p.used_matrix() for p in parts])
    return got


def equal(actual, expected, message) -> None:
    """Bit-for-bit equality (NaN nowhere expected); numpy's report only when it fails (it is slow)."""
    if not np.array_equal(actual, expected):
        np.testing.assert_array_equal(actual, expected, err_msg=str(message))


def check_case(case_id, rng, n, adjacency, links, compute, delays, kind, parameter, sync, update, stats,
               agreement="instant", control=None):  # fmt: skip
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

    def clock(policy):
        return VirtualClock(n, links, policy, sync, update, agreement=agreement, control=control)

    got = advance_in_chunks(clock(policy), compute, delays, chunks)
    start, ready, stop, finish, used, end = (got[k] for k in ("start", "ready", "stop", "finish", "used", "end"))

    # terminates with finite times
    for name in ("start", "ready", "stop", "finish", "end"):
        assert np.isfinite(got[name]).all(), (case_id, name)
    # stop >= ready >= start, finish as documented (docs/protocol.md: ATC finish = stop; CTA stop + C)
    assert (stop >= ready).all(), case_id
    if atc:
        equal(finish, stop, case_id)
    else:
        equal(ready, start, case_id)
    if not lockstep:
        equal(ready, start + compute, case_id) if atc else None
        if not atc:
            equal(finish, stop + compute, case_id)
    elif agreement == "instant":  # absolute times are E(k-1) + (x + C): a rounding apart from (E(k-1) + x) + C
        assert (ready >= start).all(), case_id
        if atc:
            equal(ready, start + compute, case_id)
        else:
            np.testing.assert_allclose(finish, stop + compute, rtol=1e-12, atol=0, err_msg=case_id)
    # E(k) = max_j finish_j(k), nondecreasing; the next iteration starts at E(k) (lock-step, instant),
    # when each worker learns it (lock-step, agreement) or at its finish (free)
    assert (np.diff(end) >= 0).all(), case_id
    equal(end, finish.max(axis=1), case_id)
    if lockstep and agreement == "instant":
        equal(start[1:], np.repeat(end[:-1, None], n, axis=1), case_id)
        assert (start[0] == 0).all()
    elif lockstep and not (kind == "cb_dybw" and atc):
        # nobody starts before the iteration before it is over (up to the last bit of E(k-1) + offset)
        assert (start[1:] >= end[:-1, None] * (1 - 1e-12)).all(), case_id
    elif not lockstep:
        equal(start[1:], finish[:-1], case_id)
    # used sets: neighbours only, at least q_j of them (all for cb_full), and in cb_dybw lock-step one stop
    assert not (used & ~adjacency[None]).any(), case_id
    counts = used.sum(axis=-1)
    if kind == "cb_adaptive":  # it chooses p_j(k) in 1..d_j every iteration
        assert (counts >= np.minimum(1, degrees)[None]).all(), case_id
    elif kind != "cb_timeout":  # a deadline may leave a worker with anyone who arrived by then, even nobody
        assert (counts >= q[None]).all(), (case_id, counts.tolist(), q.tolist())
    if kind == "cb_full" or (kind == "cb_timeout" and parameter == np.inf):
        assert (counts == degrees[None]).all(), case_id
    if kind == "isolated":
        assert not used.any(), case_id
    if kind == "cb_dybw" and lockstep and agreement == "instant":
        assert (stop == stop[:, :1]).all(), case_id
    # used sets are exactly "every neighbour whose message arrived by the stop time" (free: the absolute
    # arrival times ready_i + D_ij are reported, so this is checkable on the protocol's own output)
    if not lockstep and kind != "isolated":
        arrivals = np.full(used.shape, np.inf)
        src, dst = links.T
        arrivals[:, dst, src] = ready[:, src] + delays
        equal(used, arrivals <= stop[:, :, None], case_id)

    # the core: equal to the brute-force event simulation, exactly (see the module docstring)
    sends = kind != "isolated"
    timeout = parameter if kind == "cb_timeout" else np.inf

    def oracle():
        return AdaptiveOracle(n, links, *parameter) if kind == "cb_adaptive" else None

    if lockstep:
        phases = {phase: control.delay(phase) for phase in ("threshold", "end")} if control is not None else None
        expected = simulate_lockstep(n, links, compute, delays, q, atc, kind == "cb_dybw", sends, agreement, phases,
                                     timeout, oracle())  # fmt: skip
    else:
        expected = simulate_free(n, links, compute, delays, q, atc, sends, timeout, oracle())
    for name, value in zip(("start", "ready", "stop", "finish", "used", "end"), expected):
        equal(got[name], value, f"{case_id}: {name}")

    # chunk boundaries do not change a single bit
    if len(chunks) > 1:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the clamp warning was checked above
            again = make(kind, parameter, degrees)
        whole = advance_in_chunks(clock(again), compute, delays, [len(compute)])
        for name in whole:
            equal(got[name], whole[name], f"{case_id}: chunked {name}")
    stats["cases"] += 1
    stats["agreement", agreement] += 1


def random_cases(rng, scenarios, sync):
    """``(scenario, n, adjacency, links, compute, delays, control, agreements, description)`` per scenario."""
    for scenario in range(scenarios):
        n, adjacency, graph_kind = random_graph(rng)
        links = random_links(rng, adjacency)
        iterations = int(rng.integers(1, 13))
        compute_family, link_family, control_family = rng.choice(FAMILIES, size=3)
        compute = random_delays(rng, (iterations, n), str(compute_family))
        delays = random_delays(rng, (iterations, len(links)), str(link_family))
        control = ControlDelays(rng, iterations, n, str(control_family))
        agreements = sorted(AGREEMENTS) if sync == "lockstep" else ["instant"]
        description = (f"n={n} {graph_kind} degrees={adjacency.sum(axis=1).tolist()} C~{compute_family} "
                       f"D~{link_family} control~{control_family} T={iterations}")  # fmt: skip
        yield scenario, n, adjacency, links, compute, delays, control, agreements, graph_kind, description


@pytest.mark.parametrize("update", ["atc", "cta"])
@pytest.mark.parametrize("sync", ["lockstep", "free"])
def test_timing_core_equals_brute_force_event_simulation(sync, update):
    rng = np.random.default_rng([2024, ("lockstep", "free").index(sync), ("atc", "cta").index(update)])
    stats: Counter = Counter()
    for scenario, n, adjacency, links, compute, delays, control, agreements, graph_kind, description in random_cases(
        rng, SCENARIOS_PER_MODE, sync
    ):
        stats["graph", graph_kind] += 1
        stats["n", n] += 1
        variants = policy_variants(rng, adjacency.sum(axis=1))
        for agreement in agreements:
            # Every variant with the instant agreement; with a modelled one (control messages, slower to
            # simulate), cb_full, isolated and one random cb_static and cb_dybw variant.
            chosen = variants if agreement == "instant" else sample_variants(rng, variants)
            for kind, parameter in chosen:
                case_id = f"{sync}/{update} scenario {scenario} {description} {kind}({parameter}) {agreement}"
                check_case(case_id, rng, n, adjacency, links, compute, delays, kind, parameter, sync, update, stats,
                           agreement, control)  # fmt: skip

    # the random cases covered what they are meant to cover
    assert stats["cases"] >= 1000, stats["cases"]
    for kind in ("cb_full", "cb_static", "cb_dybw", "isolated", "cb_timeout", "cb_adaptive"):
        assert stats["exact", kind] > 0, kind
    for kind in ("cb_static", "cb_dybw"):
        assert stats["clamped", kind] > 0 and stats["rejected", kind] > 0, kind
    assert stats["chunked"] > 0 and stats["unchunked"] > 0
    assert all(stats["graph", g] > 0 for g in ("tree", "sparse", "complete", "path", "star", "cycle"))
    assert stats["n", 2] > 0 and stats["n", 12] > 0
    if sync == "lockstep":
        assert all(stats["agreement", a] >= 250 for a in AGREEMENTS), stats


def sample_variants(rng, variants):
    """cb_full, isolated, and one random variant of each parametrised policy."""
    chosen = [v for v in variants if v[0] in ("cb_full", "isolated")]
    for kind in ("cb_static", "cb_dybw", "cb_timeout", "cb_adaptive"):
        options = [v for v in variants if v[0] == kind]
        chosen.append(options[int(rng.integers(len(options)))])
    return chosen


class OneRoundShort(AllReduce):
    """A deliberately wrong recursive doubling: the last round is skipped."""

    def __init__(self, num_workers, links):
        super().__init__(num_workers, links)
        if self.rounds:
            self.rounds = self.rounds[:-1]
            self._pairs = np.concatenate([self.fold_in, *self.rounds, self.fold_out]).reshape(-1, 2)


class OneHopShort(Flood):
    """A deliberately wrong flood: news travels one hop less far than the graph's diameter needs."""

    def learn(self, entry, delays):
        n = self.num_workers
        senders = np.append(self.links[:, 0], 0)[self.incoming]
        delay = np.append(delays, np.inf)[self.incoming]
        reach = np.full((n, n), np.inf)
        reach[np.arange(n), np.arange(n)] = entry
        relayed = (reach[:, senders] + delay[None]).min(axis=-1)
        reach = np.minimum(reach, relayed)  # one relaxation only: direct neighbours' news
        return np.where(np.isfinite(reach), reach, -np.inf).max(axis=0)


@pytest.mark.parametrize("wrong, name", [(OneRoundShort, "allreduce"), (OneHopShort, "flood")])
def test_a_wrong_hop_count_fails_the_brute_force_check(monkeypatch, wrong, name):
    """The check above can fail: a clock whose agreement is one round (one hop) short is caught."""
    monkeypatch.setitem(AGREEMENTS._classes, name, wrong)
    rng = np.random.default_rng(7)
    caught = 0
    for scenario, n, adjacency, links, compute, delays, control, _, _, description in random_cases(rng, 40, "lockstep"):
        try:
            check_case(f"{scenario} {description}", rng, n, adjacency, links, compute, delays, "cb_full", None,
                       "lockstep", "atc", Counter(), name, control)  # fmt: skip
        except AssertionError:
            caught += 1
    assert caught > 0


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
    assert not (chunk.used_matrix() & ~adjacency[None]).any(), chunk.used_matrix()[0].astype(int).tolist()
    assert (chunk.used_count <= degrees[None]).all(), chunk.used_count.tolist()
