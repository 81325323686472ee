"""The exchange plan: who sends which rows to whom, and in what order a rank stores its rows (no MPI)."""

from __future__ import annotations

import numpy as np
import pytest

from dybw.mixing import mixing_sources
from dybw.mpi.exchange import ExchangePlan, worker_groups
from dybw.topology import build_graph
from helpers import topology

pytestmark = pytest.mark.unit  # no TensorFlow, MPI or subprocess: make test-fast


def random_graph(rng, n):
    return build_graph(topology("erdos_renyi", p=float(rng.uniform(0.15, 0.8)), seed=int(rng.integers(1 << 30))), n)


@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 5])
def test_every_rank_receives_exactly_the_rows_its_workers_mix_in_the_order_they_are_sent(ranks):
    rng = np.random.default_rng(ranks)
    for _ in range(30):
        n = int(rng.integers(max(ranks, 2), 24))
        graph = random_graph(rng, n)
        groups = worker_groups(n, ranks)
        plans = [ExchangePlan.build(graph.adjacency, groups, r) for r in range(ranks)]
        for rank, plan in enumerate(plans):
            assert sorted(plan.mine) == list(groups[rank])  # the same workers, stored in hosting order
            for peer, rows in plan.send_rows.items():  # what I send is what the peer expects, in order
                np.testing.assert_array_equal(plan.mine[rows], plans[peer].recv_workers[rank])
            assert set(plans_received(plan)) == set(mixing_sources(graph.adjacency)[plan.mine].ravel()) - set(plan.mine)
            if ranks <= 3:  # at most two peers: every peer's rows are one slice, sent without a datatype
                assert all((np.diff(rows) == 1).all() for rows in plan.send_rows.values())


def plans_received(plan):
    return [int(w) for peer in sorted(plan.recv_workers) for w in plan.recv_workers[peer]]
