"""Tests for dybw.topology: structure of every kind, seeding, errors, Metropolis mixing."""

from __future__ import annotations

import json
import math
import typing

import numpy as np
import pytest
import yaml

from dybw.config import RunConfig
from dybw.errors import ConfigError
from dybw.schema import convert
from dybw.topology import TOPOLOGIES, Graph, build_graph, torus_shape
from helpers import CONF

pytestmark = pytest.mark.unit  # no TensorFlow, MPI or subprocess: make test-fast

SIZES = (2, 3, 4, 7, 16, 64)
TOPOLOGY_FIELD = typing.get_type_hints(RunConfig, include_extras=True)["topology"]


def raw(name, **kw):
    """A topology config as a user writes it: the kind's yaml, ``kw`` replacing keys (None removes one)."""
    path = CONF / "topology" / f"{name}.yaml"
    values = {**(yaml.safe_load(path.read_text()) if path.exists() else {"name": name}), **kw}
    return {key: value for key, value in values.items() if value is not None}


def typed(values: dict):
    """What the config loader makes of it (types and ranges checked)."""
    return convert(TOPOLOGY_FIELD, values, "topology")


def cfg(name, **kw):
    return typed(raw(name, **kw))


def kind_cfg(kind: str, n: int):
    """A valid config of each kind for n workers."""
    if kind == "erdos_renyi":
        return cfg(kind, p=min(1.0, 3 * math.log(n) / n + 0.2), seed=1)
    if kind == "random_regular":
        d = 1 if n == 2 else (2 if n == 3 else (3 if n % 2 == 0 else 4))
        return cfg(kind, d=d, seed=1)
    if kind == "custom":  # a path
        return cfg(kind, edges=[[i, i + 1] for i in range(n - 1)])
    return cfg(kind)


def assert_valid(g: Graph, n: int):
    a = g.adjacency
    assert a.shape == (n, n) and a.dtype == bool
    assert np.array_equal(a, a.T)
    assert not a.diagonal().any()
    assert all(i < j for i, j in g.edges)
    assert list(g.edges) == sorted(set(g.edges))
    assert g.is_connected()
    assert int(a.sum()) == 2 * len(g.edges)
    assert np.array_equal(g.degrees, a.sum(1))
    for i, nb in enumerate(g.neighbors):
        assert np.array_equal(nb, np.flatnonzero(a[i]))


def exp_degree(n):
    offs = set()
    h = 1
    while h < n:
        offs |= {h % n, (-h) % n}
        h *= 2
    return len(offs)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kind", TOPOLOGIES)
def test_every_kind_valid(kind, n):
    g = build_graph(kind_cfg(kind, n), n)
    assert g.name == kind and g.num_nodes == n
    assert_valid(g, n)
    deg = g.degrees
    if kind == "ring":
        assert (deg == (1 if n == 2 else 2)).all()
    elif kind == "complete":
        assert (deg == n - 1).all()
    elif kind == "random_regular":
        assert (deg == kind_cfg(kind, n).d).all()
    elif kind == "exponential":
        assert (deg == exp_degree(n)).all()
    elif kind == "custom":
        assert len(g.edges) == n - 1


def test_exponential_known_degrees():
    # N=16: offsets ±1, ±2, ±4, +8 (= -8) -> 7 neighbours; N=7: ±1, ±2, ±4 (4 = -3, 2^2 < 7)
    assert (build_graph(cfg("exponential"), 16).degrees == 7).all()
    assert (build_graph(cfg("exponential"), 7).degrees == 6).all()  # {1,2,3,4,5,6}
    assert build_graph(cfg("exponential"), 2).edges == ((0, 1),)


@pytest.mark.parametrize(
    "n,rows,shape,deg",
    [
        (16, None, (4, 4), {4}),
        (12, 0, (3, 4), {4}),
        (9, None, (3, 3), {4}),
        (8, None, (2, 4), {3}),  # side of 2: one vertical neighbour, no duplicate edge
        (4, None, (2, 2), {2}),
        (7, None, (1, 7), {2}),  # prime -> ring
        (6, 6, (6, 1), {2}),
        (64, None, (8, 8), {4}),
    ],
)
def test_torus(n, rows, shape, deg):
    assert torus_shape(n, rows) == shape
    g = build_graph(cfg("torus", rows=rows or 0), n)
    assert_valid(g, n)
    assert set(g.degrees.tolist()) == deg


def test_torus_bad_rows():
    with pytest.raises(ConfigError, match=r"^topology\.rows=5 is invalid: must divide num_workers=16"):
        build_graph(cfg("torus", rows=5), 16)


def test_ring_two_nodes_single_edge():
    assert build_graph(cfg("ring"), 2).edges == ((0, 1),)


def test_erdos_renyi_seeding():
    a = build_graph(cfg("erdos_renyi", p=0.3, seed=7), 32)
    b = build_graph(cfg("erdos_renyi", p=0.3, seed=7), 32)
    c = build_graph(cfg("erdos_renyi", p=0.3, seed=8), 32)
    assert a == b
    assert a.edges != c.edges
    # p = 1 is the complete graph
    assert len(build_graph(cfg("erdos_renyi", p=1.0, seed=0), 10).edges) == 45


def test_random_regular_seeding_and_dense():
    a = build_graph(cfg("random_regular", d=4, seed=3), 30)
    assert a == build_graph(cfg("random_regular", d=4, seed=3), 30)
    assert a.edges != build_graph(cfg("random_regular", d=4, seed=4), 30).edges
    for n, d in [(30, 2), (30, 20), (30, 28), (30, 29), (9, 6), (64, 5)]:
        g = build_graph(cfg("random_regular", d=d, seed=0), n)
        assert_valid(g, n)
        assert (g.degrees == d).all()


def one_line(exc: ConfigError) -> str:
    s = str(exc)
    assert "\n" not in s
    return s


@pytest.mark.parametrize(
    "n,c,field",
    [
        (1, raw("ring"), "num_workers"),
        (0, raw("complete"), "num_workers"),
        (8, raw("star"), "topology.name"),
        (8, raw("erdos_renyi", p=0.0, seed=0), "topology.p"),
        (8, raw("erdos_renyi", p=1.5, seed=0), "topology.p"),
        (8, raw("erdos_renyi", p=-0.1, seed=0), "topology.p"),
        (8, raw("erdos_renyi", p=0.5, seed=None), "topology.seed"),
        (8, raw("erdos_renyi", p=0.5, seed=-1), "topology.seed"),
        (8, raw("random_regular", d=8, seed=0), "topology.d"),
        (8, raw("random_regular", d=0, seed=0), "topology.d"),
        (7, raw("random_regular", d=3, seed=0), "topology.d"),
        (8, raw("random_regular", d=1, seed=0), "topology.d"),
        (8, raw("random_regular", d=None, seed=0), "topology.d"),
        (4, raw("custom", edges=[[0, 1], [1, 4]]), "topology.edges"),
        (4, raw("custom", edges=[[0, 1], [-1, 2]]), "topology.edges"),
        (4, raw("custom", edges=[[0, 1], [2, 2]]), "topology.edges"),
        (4, raw("custom", edges=[[0, 1, 2]]), "topology.edges"),
        (4, raw("custom", edges=None), "topology.edges"),
    ],
)
def test_config_errors(n, c, field):
    with pytest.raises(ConfigError) as info:
        build_graph(typed(c), n)
    s = one_line(info.value)
    assert info.value.field == field
    assert s.startswith((field + "=", field + " is missing"))


def test_error_messages():
    with pytest.raises(ConfigError) as info:
        build_graph(cfg("ring"), 1)
    assert str(info.value) == "num_workers=1 is invalid: need at least 2 workers"
    with pytest.raises(ConfigError) as info:
        cfg("star")
    assert str(info.value) == (
        "topology.name='star' is invalid: choose one of: complete, custom, erdos_renyi, exponential, "
        "random_regular, ring, torus"
    )
    with pytest.raises(ConfigError) as info:
        cfg("erdos_renyi", p=2, seed=0)
    assert str(info.value) == "topology.p=2.0 is invalid: allowed range (0, 1]"


def test_erdos_renyi_disconnected_error():
    with pytest.raises(ConfigError) as info:
        build_graph(cfg("erdos_renyi", p=0.01, seed=0, max_tries=5), 64)
    s = one_line(info.value)
    assert s.startswith("topology.p=0.01 is invalid: the graph stayed disconnected in 5 draws for 64 workers")
    assert f"ln(N)/N = {math.log(64) / 64:.2f}" in s


def test_custom_disconnected_error():
    edges = [[0, 1], [1, 2], [3, 4]] + [[i, i + 1] for i in range(5, 19)]
    with pytest.raises(ConfigError) as info:
        build_graph(cfg("custom", edges=edges), 21)  # components {0,1,2}, {3,4}, {5..19}, {20}
    s = one_line(info.value)
    assert s.startswith("topology.edges=[[0, 1], [1, 2], [3, 4], [5, 6], …(+13)] is invalid: the graph is disconnected")
    assert "4 components" in s and "{0, 1, 2}" in s and "{3, 4}" in s
    assert len(s) < 200


def test_custom_merges_orientation_and_repeats():
    g = build_graph(cfg("custom", edges=[[1, 0], [0, 1], [2, 1]]), 3)
    assert g.edges == ((0, 1), (1, 2))


def test_metropolis_doubly_stochastic_symmetric():
    for c, n in [
        (cfg("ring"), 7),
        (cfg("torus"), 12),
        (cfg("erdos_renyi", p=0.3, seed=2), 16),
        (cfg("exponential"), 10),
    ]:
        g = build_graph(c, n)
        w = g.metropolis_weights()
        assert np.allclose(w, w.T)
        assert np.allclose(w.sum(0), 1) and np.allclose(w.sum(1), 1)
        assert (w >= 0).all() and (np.diag(w) > 0).all()
        assert np.array_equal(w != 0, g.adjacency | np.eye(n, dtype=bool))
        d = g.degrees
        i, j = g.edges[0]
        assert w[i, j] == pytest.approx(1 / (1 + max(d[i], d[j])))


def test_spectral_gap():
    for kind in TOPOLOGIES:
        for n in (2, 5, 16):
            gap = build_graph(kind_cfg(kind, n), n).spectral_gap
            assert 0 < gap <= 1
    for n in (4, 8, 16):
        assert build_graph(cfg("complete"), n).spectral_gap == pytest.approx(1.0)
        assert build_graph(cfg("complete"), n).spectral_gap > build_graph(cfg("ring"), n).spectral_gap
    # ring of N: eigenvalues 1/3 + 2/3 cos(2 pi k / N)
    n = 10
    lam = 1 / 3 + 2 / 3 * np.cos(2 * np.pi * np.arange(1, n) / n)
    assert build_graph(cfg("ring"), n).spectral_gap == pytest.approx(1 - np.abs(lam).max())
    # disconnected graph: gap 0, diameter None
    g = Graph(4, ((0, 1), (2, 3)), "two")
    assert not g.is_connected() and g.spectral_gap == pytest.approx(0.0, abs=1e-12) and g.diameter is None


def test_to_json_round_trip():
    g = build_graph(cfg("torus"), 12)
    j = json.loads(json.dumps(g.to_json()))
    assert set(j) == {"name", "num_workers", "num_edges", "edges", "degrees", "diameter", "spectral_gap"}
    assert Graph.from_json(j) == g
    assert [tuple(e) for e in j["edges"]] == list(g.edges)
    assert j["num_edges"] == len(g.edges) and j["num_workers"] == 12
    assert j["degrees"] == g.degrees.tolist()
    assert j["diameter"] == 3  # 3x4 torus: 1 + 2
    assert build_graph(cfg("ring"), 9).diameter == 4
    assert build_graph(cfg("complete"), 9).diameter == 1


@pytest.mark.parametrize("kind", TOPOLOGIES)
def test_directed_links(kind):
    g = build_graph(kind_cfg(kind, 16), 16)
    links = g.directed_links()
    assert links.shape == (2 * len(g.edges), 2)
    assert [tuple(r) for r in links.tolist()] == sorted({(i, j) for i, j in g.edges} | {(j, i) for i, j in g.edges})


def test_graph_canonicalises_and_rejects():
    assert Graph(3, ((2, 1), (1, 0)), "x").edges == ((0, 1), (1, 2))
    with pytest.raises(ValueError):
        Graph(3, ((1, 1),), "x")
    with pytest.raises(ValueError):
        Graph(3, ((0, 1), (1, 0)), "x")
    with pytest.raises(ValueError):
        Graph(3, ((0, 3),), "x")


def test_cached_arrays_read_only():
    g = build_graph(cfg("ring"), 5)
    with pytest.raises(ValueError):
        g.adjacency[0, 1] = False
