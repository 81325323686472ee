"""The virtual clock and the stop rules (docs/protocol.md), checked on cases worked by hand."""

import numpy as np
import pytest

from dybw.algorithms import CbDyBW, CbFull, CbStatic, Isolated, order_statistic
from dybw.clock import VirtualClock
from dybw.errors import ConfigError
from dybw.mixing import gathered_weights, mixing_matrices, mixing_sources
from dybw.topology import Graph, build_graph
from helpers import topology

pytestmark = pytest.mark.unit  # no TensorFlow, MPI or subprocess: make test-fast

INF = np.inf


def square() -> Graph:
    """4 workers on a ring 0-1-2-3-0: every worker has two neighbours."""
    return Graph(4, ((0, 1), (1, 2), (2, 3), (0, 3)), "ring")


def link_delays(graph: Graph, table: dict) -> np.ndarray:
    """D as the protocol expects it: one value per directed link in graph.directed_links() order."""
    return np.array([[table[(int(i), int(j))] for i, j in graph.directed_links()]])


def policies(degrees):
    return [CbFull(degrees), CbStatic(degrees, 0), CbStatic(degrees, 1), CbDyBW(degrees, 1)]


def test_order_statistic_picks_pth_smallest_and_ignores_non_neighbours():
    arrivals = np.array([[INF, 3.0, 1.0, 2.0], [5.0, INF, INF, 4.0]])
    assert order_statistic(arrivals, np.array([1, 2])).tolist() == [1.0, 5.0]
    assert order_statistic(arrivals, np.array([3, 1])).tolist() == [3.0, 4.0]


def test_one_iterations_order_statistic_is_the_batched_ones_row():
    """The one-iteration path (plain indexing) and the batched one (a leading axis of iterations) agree."""
    rng = np.random.default_rng(0)
    arrivals = np.where(rng.random((5, 6, 4)) < 0.3, INF, rng.random((5, 6, 4)))
    waits = rng.integers(1, 5, size=6)
    batched = order_statistic(arrivals, waits)
    assert all((order_statistic(arrivals[t], waits) == batched[t]).all() for t in range(5))


def test_used_counts_are_the_senders_each_worker_used_per_iteration():
    """``used_count[t, j]`` (one bincount for the whole chunk) counts, per iteration, the links into j used."""
    graph = build_graph(topology("erdos_renyi", p=0.5, seed=1), 7)
    links = graph.directed_links()
    rng = np.random.default_rng(1)
    compute, delays = rng.random((9, 7)), rng.random((9, len(links)))
    chunk = VirtualClock(7, links, CbDyBW(graph.degrees, 1)).advance(compute, delays)
    by_hand = [[int(chunk.used[t][links[:, 1] == j].sum()) for j in range(7)] for t in range(9)]
    assert chunk.used_count.tolist() == by_hand
    assert 0 < chunk.used_count.sum() < 9 * len(links)  # some links used, some not: the count can be wrong


@pytest.mark.parametrize("update", ["atc", "cta"])
@pytest.mark.parametrize("sync", ["lockstep", "free"])
def test_constant_delays_make_every_iteration_last_c_plus_d(update, sync):
    graph = build_graph(topology("erdos_renyi", p=0.4, seed=3), 10)
    links = graph.directed_links()
    compute, delay, iterations = 0.013, 0.021, 7
    for policy in policies(graph.degrees):
        protocol = VirtualClock(10, links, policy, sync, update)
        chunk = protocol.advance(np.full((iterations, 10), compute), np.full((iterations, len(links)), delay))
        durations = np.diff(np.concatenate([[0.0], chunk.end]))
        np.testing.assert_allclose(durations, compute + delay, rtol=1e-12)
        # all messages arrive together, so every neighbour is used whatever the rule
        assert (chunk.used_count == graph.degrees).all()


def test_hand_worked_four_worker_example():
    """Ring 0-1-2-3-0, ATC, lock-step, one iteration.

    C = (1, 2, 1, 5) so ready = (1, 2, 1, 5).  Link delays (i->j):
      0->1: 1  0->3: 4  1->0: 1  1->2: 6  2->1: 3  2->3: 1  3->0: 2  3->2: 1
    Arrivals a_ij = ready_i + D_ij:
      at 0: from 1 at 3, from 3 at 7      at 1: from 0 at 2, from 2 at 4
      at 2: from 1 at 8, from 3 at 6      at 3: from 0 at 5, from 2 at 2
    cb_full:   stop = max(ready, last arrival) = (7, 4, 8, 5)          E = 8, everyone used
    cb_static(b=1): stop = max(ready, first arrival) = (3, 2, 6, 5)
               used: 0:{1}  1:{0}  2:{3}  3:{0,2} (0 arrived at 5 = ready_3, so it is used too)
    cb_dybw(m=1): r = (3, 2, 6, 5); theta = 6; stop = 6 for all
               used: 0:{1}  1:{0,2}  2:{3}  3:{0,2}                   E = 6
    """
    graph = square()
    compute = np.array([[1.0, 2.0, 1.0, 5.0]])
    delays = link_delays(
        graph, {(0, 1): 1, (0, 3): 4, (1, 0): 1, (1, 2): 6, (2, 1): 3, (2, 3): 1, (3, 0): 2, (3, 2): 1}
    )
    links = graph.directed_links()

    def run(policy):
        return VirtualClock(4, links, policy, "lockstep", "atc").advance(compute, delays)

    def used_sets(chunk):
        return [set(np.flatnonzero(row).tolist()) for row in chunk.used_matrix()[0]]

    full = run(CbFull(graph.degrees))
    assert full.stop[0].tolist() == [7, 4, 8, 5] and full.end.tolist() == [8]
    assert used_sets(full) == [{1, 3}, {0, 2}, {1, 3}, {0, 2}]

    static = run(CbStatic(graph.degrees, 1))
    assert static.stop[0].tolist() == [3, 2, 6, 5] and static.end.tolist() == [6]
    assert used_sets(static) == [{1}, {0}, {3}, {0, 2}]

    dybw = run(CbDyBW(graph.degrees, 1))
    assert dybw.stop[0].tolist() == [6, 6, 6, 6] and dybw.end.tolist() == [6]
    assert used_sets(dybw) == [{1}, {0, 2}, {3}, {0, 2}]
    assert (graph.degrees - dybw.used_count[0]).tolist() == [1, 0, 1, 0]


def constant_control(value):
    """The clock's ``control(k0, count, phase, pairs)``: every control message takes ``value`` seconds."""
    return lambda first, count, phase, pairs: np.full((count, len(pairs)), float(value))


def test_agreements_on_the_hand_worked_example():
    """The same square and iteration, every control message taking 1 s.

    cb_full: finish = stop = (7, 4, 8, 5), E = 8.
      allreduce (recursive doubling, round 0 pairs 0-1 and 2-3, round 1 pairs 0-2 and 1-3):
        round 0: tau = (max(7, 4+1), max(4, 7+1), max(8, 5+1), max(5, 8+1)) = (7, 8, 8, 9)
        round 1: tau = (max(7, 8+1), max(8, 9+1), max(8, 7+1), max(9, 8+1)) = (9, 10, 8, 9)
        -> the next iteration starts at (9, 10, 8, 9): offsets (1, 2, 0, 1) from E = 8
      flood (news of i reaches j after hops(i, j) s; hops 1 to a neighbour, 2 across):
        L_0 = max(7, 4+1, 8+2, 5+1) = 10   L_1 = max(7+1, 4, 8+1, 5+2) = 9
        L_2 = max(7+2, 4+1, 8, 5+1) = 9    L_3 = max(7+1, 4+2, 8+1, 5) = 9
    cb_dybw (m=1): r = (3, 2, 6, 5); every worker listens until it learns theta = 6:
      allreduce: round 0: (max(3, 2+1), max(2, 3+1), max(6, 5+1), max(5, 6+1)) = (3, 4, 6, 7)
                 round 1: (max(3, 6+1), max(4, 7+1), max(6, 3+1), max(7, 4+1)) = (7, 8, 6, 7)
        stop = (7, 8, 6, 7), E = 8; used: 0:{1,3} (3 arrived at 7)  1:{0,2}  2:{3} (1 arrives at 8)  3:{0,2}
        ATC: nothing follows theta, so each starts the next iteration at its own stop.
      flood: L_j = max_i (r_i + hops(i, j)) = (max(3,3,8,6), max(4,2,7,7), max(5,3,6,6), max(4,4,7,5))
           = (8, 7, 6, 7)
    """
    graph = square()
    compute = np.array([[1.0, 2.0, 1.0, 5.0]] * 2)
    delays = np.repeat(
        link_delays(graph, {(0, 1): 1, (0, 3): 4, (1, 0): 1, (1, 2): 6, (2, 1): 3, (2, 3): 1, (3, 0): 2, (3, 2): 1}),
        2,
        axis=0,
    )
    links = graph.directed_links()

    def run(policy, agreement):
        clock = VirtualClock(4, links, policy, "lockstep", "atc", agreement=agreement, control=constant_control(1))
        return clock.advance(compute, delays)

    full = run(CbFull(graph.degrees), "allreduce")
    assert full.stop[0].tolist() == [7, 4, 8, 5] and full.end[0] == 8
    assert full.start[1].tolist() == [9, 10, 8, 9]
    full = run(CbFull(graph.degrees), "flood")
    assert full.start[1].tolist() == [10, 9, 9, 9]

    dybw = run(CbDyBW(graph.degrees, 1), "allreduce")
    assert dybw.stop[0].tolist() == [7, 8, 6, 7] and dybw.end[0] == 8
    assert [set(np.flatnonzero(row).tolist()) for row in dybw.used_matrix()[0]] == [{1, 3}, {0, 2}, {3}, {0, 2}]
    assert dybw.start[1].tolist() == [7, 8, 6, 7]
    dybw = run(CbDyBW(graph.degrees, 1), "flood")
    assert dybw.stop[0].tolist() == [8, 7, 6, 7] and dybw.end[0] == 8
    # Iteration 1 starts at each worker's own stop: worker 2 (at 6) is ready at 7 and so on.
    assert dybw.ready[1].tolist() == [9, 9, 7, 12]


@pytest.mark.parametrize("update", ["atc", "cta"])
@pytest.mark.parametrize("agreement", ["allreduce", "flood"])
@pytest.mark.filterwarnings("ignore:algo.b=1. clamped:UserWarning")
def test_zero_control_delays_reproduce_instant_bit_for_bit(agreement, update):
    graph = build_graph(topology("erdos_renyi", p=0.3, seed=2), 11)  # N = 11: allreduce folds 3 extra in
    links = graph.directed_links()
    rng = np.random.default_rng(5)
    compute, delays = rng.exponential(0.01, size=(40, 11)), rng.exponential(0.03, size=(40, len(links)))
    for policy in [*policies(graph.degrees), Isolated(graph.degrees)]:
        instant = VirtualClock(11, links, policy, "lockstep", update).advance(compute, delays)
        agreed = VirtualClock(11, links, policy, "lockstep", update, agreement=agreement, control=constant_control(0))
        chunks = [agreed.advance(compute[:13], delays[:13]), agreed.advance(compute[13:], delays[13:])]
        for name in ("start", "ready", "stop", "finish", "used", "end"):
            np.testing.assert_array_equal(np.concatenate([getattr(c, name) for c in chunks]), getattr(instant, name))


def test_free_sync_lets_fast_workers_run_ahead_and_dybw_uses_local_rule():
    graph = square()
    links = graph.directed_links()
    compute = np.array([[1.0, 1.0, 1.0, 10.0]] * 2)
    delays = np.ones((2, len(links)))
    chunk = VirtualClock(4, links, CbDyBW(graph.degrees, 1), "free", "atc").advance(compute, delays)
    # iteration 0: ready = (1,1,1,10); worker 0 hears 1 at 2 -> stops at 2; worker 3 is ready at 10
    assert chunk.stop[0].tolist() == [2.0, 2.0, 2.0, 10.0]
    # iteration 1 starts where each worker stopped: no barrier
    assert chunk.start[1].tolist() == [2.0, 2.0, 2.0, 10.0]
    assert chunk.end.tolist() == [10.0, 20.0]


def test_cta_sends_at_start_and_computes_after_the_decision():
    graph = square()
    links = graph.directed_links()
    compute = np.array([[1.0, 2.0, 3.0, 4.0]])
    delays = np.full((1, len(links)), 0.5)
    chunk = VirtualClock(4, links, CbFull(graph.degrees), "lockstep", "cta").advance(compute, delays)
    assert chunk.ready[0].tolist() == [0, 0, 0, 0]
    assert chunk.stop[0].tolist() == [0.5] * 4
    assert chunk.finish[0].tolist() == [1.5, 2.5, 3.5, 4.5] and chunk.end.tolist() == [4.5]


def test_static_b_no_worker_can_honour_is_an_error_and_partial_is_clamped():
    degrees = np.array([2, 2, 3, 1])
    with pytest.warns(UserWarning, match="clamped"):
        policy = CbStatic(degrees, 2)
    assert policy.waits.tolist() == [1, 1, 1, 1]
    with pytest.raises(ConfigError, match="algo.b"):
        CbStatic(degrees, 3)


def test_lockstep_chunks_continue_the_clock():
    graph = square()
    links = graph.directed_links()
    rng = np.random.default_rng(0)
    compute, delays = rng.exponential(size=(10, 4)), rng.exponential(size=(10, len(links)))
    whole = VirtualClock(4, links, CbDyBW(graph.degrees, 1)).advance(compute, delays)
    protocol = VirtualClock(4, links, CbDyBW(graph.degrees, 1))
    parts = [protocol.advance(compute[:3], delays[:3]), protocol.advance(compute[3:], delays[3:])]
    np.testing.assert_allclose(np.concatenate([p.end for p in parts]), whole.end)
    np.testing.assert_array_equal(np.concatenate([p.used for p in parts]), whole.used)


@pytest.mark.parametrize("rule", ["uniform", "metropolis"])
def test_mixing_rows_sum_to_one_for_random_used_sets(rule):
    graph = build_graph(topology("erdos_renyi", p=0.3, seed=1), 12)
    rng = np.random.default_rng(1)
    used = (rng.random((50, 12, 12)) < 0.5) & graph.adjacency[None]
    weights = mixing_matrices(used, rule, graph.degrees)
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-6)
    assert (weights >= 0).all()
    off_diagonal = weights * ~np.eye(12, dtype=bool)
    assert ((off_diagonal > 0) == used).all()  # only used neighbours get weight


@pytest.mark.parametrize("rule", ["uniform", "metropolis"])
def test_gathered_weights_are_the_rows_of_w_over_each_workers_sources(rule):
    """sum_s w[j, s] y[sources[j, s]] == (W y)_j: every neighbour and j once, in ascending order, and the
    padding (j repeated) weighs 0."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = int(rng.integers(2, 12))
        graph = build_graph(topology("erdos_renyi", p=float(rng.uniform(0.2, 1.0)), seed=int(rng.integers(1 << 30))), n)
        sources = mixing_sources(graph.adjacency)
        assert sources.shape == (n, graph.degrees.max() + 1)
        for j, row in enumerate(sources):
            count = graph.degrees[j] + 1
            assert list(row[:count]) == sorted([j, *graph.neighbors[j]]) and (row[count:] == j).all()
        used = graph.adjacency[None] & (rng.random((3, n, n)) < 0.6)
        weights = mixing_matrices(used, rule, graph.degrees)
        gathered = gathered_weights(weights, sources)
        y = rng.normal(size=(n, 5))
        np.testing.assert_allclose(np.einsum("kjs,jsp->kjp", gathered, y[sources]), weights @ y, atol=1e-12)
        hosted = np.arange(n)[n // 2 :]
        np.testing.assert_array_equal(gathered_weights(weights, sources[hosted], hosted), gathered[:, hosted])


def test_metropolis_with_every_neighbour_is_the_doubly_stochastic_matrix():
    graph = build_graph(topology("erdos_renyi", p=0.3, seed=1), 12)
    weights = mixing_matrices(graph.adjacency, "metropolis", graph.degrees).astype(np.float64)
    np.testing.assert_allclose(weights, graph.metropolis_weights(), atol=1e-6)
    np.testing.assert_allclose(weights.sum(axis=0), 1.0, atol=1e-6)


def test_uniform_weights_worked_example():
    used = np.array([[False, True, False], [True, False, True], [False, False, False]])
    weights = mixing_matrices(used, "uniform", np.array([1, 2, 1]))
    np.testing.assert_allclose(weights, [[0.5, 0.5, 0], [1 / 3, 1 / 3, 1 / 3], [0, 0, 1]], atol=1e-7)


def test_stream_keys_do_not_depend_on_the_integer_type():
    from dybw.rng import stream_key

    assert stream_key(0, "batch", 3) == stream_key(np.int64(0), "batch", np.int32(3))
    assert stream_key(0, "batch", 3) != stream_key(0, "batch", 4) != stream_key(1, "batch", 3)
