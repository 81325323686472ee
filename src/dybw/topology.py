"""Communication graphs of the N workers in consensus-based training.

A topology is an undirected, connected, simple graph ``G = (V, E)`` with ``V = {0, ..., N-1}``.
Worker ``i`` exchanges parameters only with its neighbours ``N(i) = {j : {i, j} in E}``; which of their
messages it uses, and with what weights, is decided every iteration by the stop policy and the mixing
rule (:mod:`dybw.mixing`).  :meth:`Graph.metropolis_weights` and :attr:`Graph.spectral_gap` describe the
graph itself (the Metropolis matrix of cb-Full).

:func:`build_graph` turns a typed, validated ``topology`` config (one dataclass per kind, in
:data:`TOPOLOGY_CONFIGS`; ranges such as ``p`` in (0, 1] are checked there) into a :class:`Graph`; what
depends on the number of workers (a degree that fits N, a connected draw) is reported as a one-line
:class:`~dybw.errors.ConfigError`.  Kinds (``TOPOLOGIES``):

``ring``            ``i ~ (i + 1) mod N``
``torus``           2-D wrap-around grid, ``rows * cols = N``
``complete``        ``i ~ j`` for all ``i != j``
``erdos_renyi``     each pair independently with probability ``p``, conditioned on connectivity
``random_regular``  uniform-ish random simple ``d``-regular graph, conditioned on connectivity
``exponential``     ``i ~ (i ± 2^k) mod N`` for every ``k`` with ``2^k < N``
``custom``          the edge list ``cfg.edges``
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated

import numpy as np

from dybw.errors import ConfigError
from dybw.schema import AtLeast, Range

__all__ = [
    "TOPOLOGIES",
    "TOPOLOGY_CONFIGS",
    "Graph",
    "build_graph",
    "torus_shape",
]

TOPOLOGIES: tuple[str, ...] = (
    "complete",
    "custom",
    "erdos_renyi",
    "exponential",
    "random_regular",
    "ring",
    "torus",
)

# Swap-chain length per edge for random_regular; ~10 swaps per edge mixes well in practice
# (every edge is touched ~20 times) while staying cheap for a few thousand edges.
_SWAPS_PER_EDGE = 10


# --------------------------------------------------------------------------------------------
# Graph
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Graph:
    """An undirected simple graph on nodes ``0..num_nodes-1``.

    ``edges`` is canonicalised on construction: each pair is stored as ``(i, j)`` with ``i < j``
    and the tuple is sorted lexicographically, so two graphs with the same edge set compare equal
    whatever order or orientation the pairs were given in. Self-loops, out-of-range ids and
    duplicate edges raise ``ValueError`` (programming errors; user input is checked by
    :func:`build_graph`, which raises ``ConfigError``).
    """

    num_nodes: int
    edges: tuple[tuple[int, int], ...]
    name: str

    def __post_init__(self) -> None:
        n = self.num_nodes
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"num_nodes must be a positive integer, got {n!r}")
        canon = []
        for pair in self.edges:
            i, j = (int(v) for v in pair)
            if i == j:
                raise ValueError(f"self-loop ({i}, {j}) in graph {self.name!r}")
            if not (0 <= i < n and 0 <= j < n):
                raise ValueError(f"edge ({i}, {j}) out of range for {n} nodes")
            canon.append((i, j) if i < j else (j, i))
        canon.sort()
        for a, b in zip(canon, canon[1:]):
            if a == b:
                raise ValueError(f"duplicate edge {a} in graph {self.name!r}")
        # The dataclass is frozen; canonicalising once here keeps equality/hash meaningful.
        object.__setattr__(self, "num_nodes", int(n))
        object.__setattr__(self, "edges", tuple(canon))

    # -- structure ---------------------------------------------------------------------------

    @cached_property
    def adjacency(self) -> np.ndarray:
        """Boolean adjacency ``A`` with ``A[i, j] = A[j, i] = True`` iff ``{i, j} in E``; ``A[i, i] = False``.

        Read-only: it is cached and shared by every caller.
        """
        a = np.zeros((self.num_nodes, self.num_nodes), dtype=bool)
        if self.edges:
            e = np.asarray(self.edges, dtype=np.int64)
            a[e[:, 0], e[:, 1]] = True
            a[e[:, 1], e[:, 0]] = True
        a.flags.writeable = False
        return a

    @property
    def degrees(self) -> np.ndarray:
        """Degrees ``d_i = |N(i)| = sum_j A[i, j]`` as an int64 array of length N."""
        return self.adjacency.sum(axis=1).astype(np.int64)

    @cached_property
    def neighbors(self) -> tuple[np.ndarray, ...]:
        """``N(i) = {j : A[i, j]}`` for each node ``i``, as sorted read-only int64 arrays."""
        out = []
        for row in self.adjacency:
            nb = np.flatnonzero(row).astype(np.int64)
            nb.flags.writeable = False
            out.append(nb)
        return tuple(out)

    @property
    def num_edges(self) -> int:
        """``|E|``, the number of undirected edges."""
        return len(self.edges)

    def directed_links(self) -> np.ndarray:
        """Both orientations of every edge: rows ``(src, dst)`` for ``{src, dst} in E``.

        Shape ``[2|E|, 2]``, int64, sorted lexicographically by ``(src, dst)`` — the message
        pattern of one synchronous gossip round.
        """
        if not self.edges:
            return np.zeros((0, 2), dtype=np.int64)
        e = np.asarray(self.edges, dtype=np.int64)
        links = np.concatenate([e, e[:, ::-1]], axis=0)
        order = np.lexsort((links[:, 1], links[:, 0]))
        return links[order]

    def _bfs_distances(self, source: int) -> list[int]:
        """Hop distances ``dist(source, v)`` by breadth-first search; ``-1`` if unreachable."""
        dist = [-1] * self.num_nodes
        dist[source] = 0
        nbrs = self._neighbor_lists
        queue = deque([source])
        while queue:
            u = queue.popleft()
            for v in nbrs[u]:
                if dist[v] < 0:
                    dist[v] = dist[u] + 1
                    queue.append(v)
        return dist

    @cached_property
    def _neighbor_lists(self) -> list[list[int]]:
        # Plain Python lists: BFS over numpy scalars is several times slower.
        return [nb.tolist() for nb in self.neighbors]

    def components(self) -> list[list[int]]:
        """Connected components (maximal sets of mutually reachable nodes), each sorted, ordered by smallest id."""
        seen = [False] * self.num_nodes
        comps = []
        for s in range(self.num_nodes):
            if seen[s]:
                continue
            comp = [v for v, d in enumerate(self._bfs_distances(s)) if d >= 0]
            for v in comp:
                seen[v] = True
            comps.append(comp)
        return comps

    def is_connected(self) -> bool:
        """True iff every node is reachable from node 0, i.e. ``dist(0, v) < inf`` for all ``v``."""
        return all(d >= 0 for d in self._bfs_distances(0))

    @cached_property
    def diameter(self) -> int | None:
        """``max_{u,v} dist(u, v)`` in hops (BFS from every node); ``None`` if disconnected."""
        best = 0
        for s in range(self.num_nodes):
            dist = self._bfs_distances(s)
            if min(dist) < 0:
                return None
            best = max(best, max(dist))
        return best

    # -- mixing ------------------------------------------------------------------------------

    def metropolis_weights(self) -> np.ndarray:
        """Metropolis–Hastings mixing matrix ``W`` (float64, ``[N, N]``, a fresh copy).

        ``W_ij = 1 / (1 + max(d_i, d_j))`` if ``{i, j} in E``, ``0`` for other ``i != j``, and
        ``W_ii = 1 - sum_{j != i} W_ij``. ``W`` is symmetric, so it is doubly stochastic, and
        ``W_ii >= 1 / (1 + d_i) > 0`` (each of the ``d_i`` off-diagonal terms is at most
        ``1 / (1 + d_i)``), so consensus ``x <- W x`` converges to the average on connected graphs.
        """
        d = self.degrees
        w = np.where(self.adjacency, 1.0 / (1.0 + np.maximum.outer(d, d)), 0.0)
        np.fill_diagonal(w, 1.0 - w.sum(axis=1))
        return w

    @cached_property
    def spectral_gap(self) -> float:
        """``1 - SLEM(W)`` for the Metropolis matrix ``W`` of :meth:`metropolis_weights`.

        ``SLEM(W) = max(|lambda_2|, |lambda_N|)`` is the second largest eigenvalue modulus, with
        eigenvalues ``1 = lambda_1 >= lambda_2 >= ... >= lambda_N`` (real, since ``W`` is
        symmetric). Consensus error shrinks by a factor ``SLEM`` per round, so a larger gap means
        faster mixing: it is 1 for the complete graph (``W = 11^T / N``), in ``(0, 1)`` for other
        connected graphs, and 0 for disconnected ones (``lambda_2 = 1``). Clipped to ``[0, 1]``
        against round-off.
        """
        if self.num_nodes == 1:
            return 1.0
        lam = np.linalg.eigvalsh(self.metropolis_weights())  # ascending; lam[-1] == 1
        slem = max(abs(lam[0]), abs(lam[-2]))
        return float(min(1.0, max(0.0, 1.0 - slem)))

    # -- serialisation -----------------------------------------------------------------------

    def to_json(self) -> dict:
        """JSON-ready summary (plain Python types).

        Keys: ``name``, ``num_workers`` (= N), ``num_edges`` (= |E|), ``edges`` (``[[i, j], ...]``,
        ``i < j``, sorted), ``degrees`` (``d_i``), ``diameter`` (hops, ``None`` if disconnected) and
        ``spectral_gap`` (``1 - SLEM`` of the Metropolis–Hastings matrix
        ``W_ij = 1 / (1 + max(d_i, d_j))``, ``W_ii = 1 - sum_{j != i} W_ij``; see
        :attr:`spectral_gap`).
        """
        return {
            "name": self.name,
            "num_workers": self.num_nodes,
            "num_edges": self.num_edges,
            "edges": [[i, j] for i, j in self.edges],
            "degrees": [int(x) for x in self.degrees],
            "diameter": self.diameter,
            "spectral_gap": self.spectral_gap,
        }

    @classmethod
    def from_json(cls, data: Mapping) -> Graph:
        """Inverse of :meth:`to_json` on the structural keys: ``Graph(num_workers, edges, name)``."""
        return cls(
            num_nodes=int(data["num_workers"]),
            edges=tuple((int(i), int(j)) for i, j in data["edges"]),
            name=str(data["name"]),
        )


# Typed configs: one dataclass per kind, the keys its yaml sets (conf/topology/<kind>.yaml)
# --------------------------------------------------------------------------------------------


@dataclass
class TopologyConfig:
    """ring, complete, exponential: the name is all."""

    name: str


@dataclass
class TorusConfig(TopologyConfig):
    rows: Annotated[int, AtLeast(0)]  # 0 = the most square factorisation


@dataclass
class RandomGraphConfig(TopologyConfig):
    seed: Annotated[int, AtLeast(0)]  # the graph's own seed: the same graph for every algorithm and run seed
    max_tries: Annotated[int, AtLeast(1)]  # draws before a disconnected graph is an error


@dataclass
class ErdosRenyiConfig(RandomGraphConfig):
    p: Annotated[float, Range(0, 1, low_open=True)]


@dataclass
class RandomRegularConfig(RandomGraphConfig):
    d: Annotated[int, AtLeast(1)]


@dataclass
class CustomConfig(TopologyConfig):
    edges: list


TOPOLOGY_CONFIGS = {
    "complete": TopologyConfig,
    "custom": CustomConfig,
    "erdos_renyi": ErdosRenyiConfig,
    "exponential": TopologyConfig,
    "random_regular": RandomRegularConfig,
    "ring": TopologyConfig,
    "torus": TorusConfig,
}


def _is_int(x) -> bool:
    # bool is an int subclass, but `seed: true` is a config mistake, not a seed.
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


class _Abbrev(str):
    """A string whose repr is itself, so ConfigError shows ``[[0, 1], ...]`` without quotes."""

    def __repr__(self) -> str:
        return str(self)


def _short_list(items: list, limit: int = 4) -> str:
    """``'0, 1, 2, 3, …(+5)'``: the first ``limit`` items, then how many were left out."""
    head = ", ".join(str(x) for x in items[:limit])
    return head + (f", …(+{len(items) - limit})" if len(items) > limit else "")


def _edges_repr(edges: list) -> _Abbrev:
    return _Abbrev("[" + _short_list([list(e) for e in edges], limit=4) + "]")


# --------------------------------------------------------------------------------------------
# Builders (each returns a list of (i, j) pairs; Graph canonicalises them)
# --------------------------------------------------------------------------------------------


def _ring_edges(n: int) -> set[tuple[int, int]]:
    """``E = {{i, (i + 1) mod N}}``; the set removes the duplicate edge when N = 2."""
    return {tuple(sorted((i, (i + 1) % n))) for i in range(n)}


def torus_shape(num_workers: int, rows=None) -> tuple[int, int]:
    """``(rows, cols)`` with ``rows * cols = N``.

    Auto (``rows`` 0/None): ``rows = max{r : r | N, r <= sqrt(N)}``, the most square factorisation
    with ``rows <= cols``. Otherwise ``rows`` must be a positive divisor of N.
    """
    n = num_workers
    if rows is None or (_is_int(rows) and rows == 0):
        r = max(r for r in range(1, math.isqrt(n) + 1) if n % r == 0)
        return r, n // r
    divisors = [r for r in range(1, n + 1) if n % r == 0]
    if not _is_int(rows) or rows < 0 or n % rows != 0:
        raise ConfigError(
            "topology.rows", rows, f"must divide num_workers={n} (0/None = auto); divisors: {_short_list(divisors, 12)}"
        )
    return int(rows), n // int(rows)


def _torus_edges(n: int, rows: int, cols: int) -> set[tuple[int, int]]:
    """Node ``(r, c)`` has id ``r * cols + c`` and ``(r, c) ~ (r, c+1 mod cols)``, ``(r, c) ~ (r+1 mod rows, c)``.

    Degree is 4 when both sides are >= 3; a side of 2 contributes one neighbour (the set drops the
    duplicate wrap edge), a side of 1 contributes none (its wrap would be a self-loop), so 1 x N is
    the ring.
    """
    edges = set()
    for r in range(rows):
        for c in range(cols):
            u = r * cols + c
            for v in (r * cols + (c + 1) % cols, ((r + 1) % rows) * cols + c):
                if u != v:  # side of length 1 wraps onto itself
                    edges.add((min(u, v), max(u, v)))
    return edges


def _complete_edges(n: int) -> list[tuple[int, int]]:
    """``E = {{i, j} : 0 <= i < j < N}``."""
    return [(i, j) for i in range(n) for j in range(i + 1, n)]


def _exponential_edges(n: int) -> set[tuple[int, int]]:
    """``E = {{i, (i ± 2^k) mod N} : 0 <= i < N, 2^k < N}`` (undirected exponential graph of SGP).

    Every node has degree ``|{±2^k mod N : 2^k < N}|``; the set merges offsets that coincide
    mod N (e.g. ``+2^k == -2^k`` when ``2^(k+1) = N``).
    """
    edges = set()
    hop = 1
    while hop < n:
        for i in range(n):
            j = (i + hop) % n  # i - hop is covered as the edge (i - hop, i)
            edges.add((min(i, j), max(i, j)))
        hop *= 2
    return edges


def _erdos_renyi_edges(n: int, p: float, seed: int, max_tries: int) -> list[tuple[int, int]]:
    """G(N, p) conditioned on connectivity: ``P({i, j} in E) = p`` independently, rejection-sampled.

    One ``np.random.default_rng(seed)`` stream feeds all draws, so the result depends on
    ``(N, p, seed)`` only. Draw ``t`` uses ``U_t ~ Uniform[0,1)^{N x N}`` and keeps ``i < j`` with
    ``U_t[i, j] < p``.
    """
    rng = np.random.default_rng(seed)
    iu, ju = np.triu_indices(n, k=1)
    for _ in range(max_tries):
        keep = rng.random(iu.size) < p
        g = Graph(n, tuple(zip(iu[keep].tolist(), ju[keep].tolist())), "erdos_renyi")
        if g.is_connected():
            return list(g.edges)
    x = math.log(n) / n
    raise ConfigError(
        "topology.p",
        p,
        f"the graph stayed disconnected in {max_tries} draws for {n} workers; "
        f"connectivity needs p above about ln(N)/N = {x:.2f}",
    )


def _regular_allowed(n: int) -> str:
    """Human-readable set of valid degrees for N workers (connected simple d-regular graphs)."""
    if n == 2:
        return "d=1 (the only regular connected graph on 2 workers)"
    if n == 3:
        return "d=2"
    if n % 2 == 0:
        return f"an integer d in 2..{n - 1}"
    return f"an even integer d in 2..{n - 1} (N*d must be even)"


def _circulant_regular(n: int, d: int) -> list[tuple[int, int]]:
    """A connected simple d-regular circulant: offsets ``±1..±floor(d/2)``, plus ``N/2`` when d is odd.

    Simple because the offsets are distinct mod N for ``d < N``; connected through offset 1.
    """
    offsets = list(range(1, d // 2 + 1)) + ([n // 2] if d % 2 else [])
    edges = set()
    for i in range(n):
        for o in offsets:
            j = (i + o) % n
            edges.add((min(i, j), max(i, j)))
    return sorted(edges)


def _swap_chain(edges: list[tuple[int, int]], n_swaps: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """Degree-preserving double-edge swaps: ``{a,b},{c,d} -> {a,c},{b,d}`` or ``{a,d},{b,c}``.

    The proposal (two distinct edges and one of two rewirings, uniformly) is symmetric, and swaps
    that would create a self-loop or a multi-edge are rejected, so the chain's stationary law is
    uniform over simple graphs with the given degree sequence.
    """
    edges = list(edges)
    present = set(edges)
    m = len(edges)
    if m < 2:
        return edges
    # Pre-draw all randomness: one vectorised call instead of 3 rng calls per swap.
    picks = rng.integers(0, m, size=(n_swaps, 2))
    flips = rng.random(n_swaps) < 0.5
    for (x, y), flip in zip(picks.tolist(), flips.tolist()):
        if x == y:
            continue
        a, b = edges[x]
        c, d = edges[y]
        if flip:
            c, d = d, c
        # new edges {a, c} and {b, d}
        if a == c or b == d:
            continue
        e1 = (a, c) if a < c else (c, a)
        e2 = (b, d) if b < d else (d, b)
        if e1 in present or e2 in present:
            continue
        present.discard(edges[x])
        present.discard(edges[y])
        present.add(e1)
        present.add(e2)
        edges[x], edges[y] = e1, e2
    return edges


def _random_regular_edges(n: int, d: int, seed: int, max_tries: int) -> list[tuple[int, int]]:
    """A random connected simple d-regular graph on N nodes, seeded.

    * ``d = N - 1``: the complete graph (the only one).
    * ``d = 2``: a uniformly random Hamiltonian cycle ``pi_0 ~ pi_1 ~ ... ~ pi_{N-1} ~ pi_0`` with
      ``pi`` a random permutation — exactly the uniform law on connected 2-regular graphs (a
      random 2-regular graph is usually several cycles, so rejection would be wasteful).
    * ``d > (N - 1) / 2``: the complement of a random ``(N - 1 - d)``-regular graph. It is
      connected automatically (any two nodes have ``>= 2d - (N - 2) > 0`` common neighbours or are
      adjacent), and the sparse side keeps the swap chain's acceptance rate high.
    * otherwise: start from a connected circulant and run :func:`_swap_chain` for
      ``10 |E|`` swaps; if the result is disconnected, keep swapping, at most ``max_tries`` rounds.
    """
    rng = np.random.default_rng(seed)
    if d == n - 1:
        return _complete_edges(n)
    if d == 2:
        perm = rng.permutation(n).tolist()
        return [tuple(sorted((perm[k], perm[(k + 1) % n]))) for k in range(n)]
    if 2 * d > n - 1:
        dc = n - 1 - d
        sparse = set(_swap_chain(_circulant_regular(n, dc), _SWAPS_PER_EDGE * (n * dc // 2), rng)) if dc else set()
        return [e for e in _complete_edges(n) if e not in sparse]
    edges = _circulant_regular(n, d)
    n_swaps = _SWAPS_PER_EDGE * len(edges)
    for _ in range(max_tries):
        edges = _swap_chain(edges, n_swaps, rng)
        if Graph(n, tuple(edges), "random_regular").is_connected():
            return edges
    raise ConfigError(
        "topology.d",
        d,
        f"the graph stayed disconnected in {max_tries} draws for {n} workers; try a larger d",
    )


def _custom_edges(n: int, raw) -> list[tuple[int, int]]:
    """``E = {{i, j} : [i, j] in cfg.edges}``; ids in ``0..N-1``, no self-loops, connected.

    ``[i, j]`` and ``[j, i]`` (and repeats) denote the same undirected edge and are merged.
    """
    if raw is None or isinstance(raw, (str, bytes)) or not isinstance(raw, Iterable):
        raise ConfigError("topology.edges", raw, "a list of [i, j] pairs is required for the custom topology")
    pairs = []
    for item in raw:
        try:
            pair = list(item)
        except TypeError:
            pair = None
        if pair is None or len(pair) != 2 or not all(_is_int(v) for v in pair):
            raise ConfigError("topology.edges", item, "each edge must be a pair [i, j] of integer worker ids")
        i, j = int(pair[0]), int(pair[1])
        if not (0 <= i < n and 0 <= j < n):
            raise ConfigError("topology.edges", [i, j], f"worker ids must be in 0..{n - 1} for {n} workers")
        if i == j:
            raise ConfigError(
                "topology.edges", [i, j], "self-loops are not allowed (a worker always keeps its own model)"
            )
        pairs.append((min(i, j), max(i, j)))
    unique = sorted(set(pairs))
    g = Graph(n, tuple(unique), "custom")
    comps = g.components()
    if len(comps) > 1:
        shown = " and ".join("{" + _short_list(c, 5) + "}" for c in comps[:2])
        more = f" (+{len(comps) - 2} more)" if len(comps) > 2 else ""
        raise ConfigError(
            "topology.edges",
            _edges_repr(unique),
            f"the graph is disconnected: {len(comps)} components, e.g. {shown}{more}",
        )
    return unique


# --------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------


def build_graph(cfg, num_workers: int) -> Graph:
    """Build the connected topology ``cfg.name`` on ``N = num_workers`` nodes.

    ``cfg`` is the typed ``topology`` config of its kind (:data:`TOPOLOGY_CONFIGS`): ``torus`` --
    ``rows`` (0 = auto); ``erdos_renyi`` -- ``p``, ``seed``, ``max_tries``; ``random_regular`` -- ``d``,
    ``seed``, ``max_tries``; ``custom`` -- ``edges``.  The edge rule of each kind is documented on its
    builder and in the module docstring.  The returned graph is always connected, simple and has
    ``Graph.name == cfg.name``; a value that does not fit N raises a one-line ``ConfigError``.
    """
    n = num_workers
    if not _is_int(n) or n < 2:
        raise ConfigError("num_workers", n, "need at least 2 workers")
    n = int(n)
    name = cfg.name
    if name == "ring":
        edges = _ring_edges(n)
    elif name == "torus":
        rows, cols = torus_shape(n, cfg.rows)
        edges = _torus_edges(n, rows, cols)
    elif name == "complete":
        edges = _complete_edges(n)
    elif name == "exponential":
        edges = _exponential_edges(n)
    elif name == "erdos_renyi":
        edges = _erdos_renyi_edges(n, float(cfg.p), cfg.seed, cfg.max_tries)
    elif name == "random_regular":
        d = cfg.d
        # d = 1 is a perfect matching, connected only for N = 2; N*d odd has no d-regular graph.
        if not (1 <= d < n and (n * d) % 2 == 0 and (d >= 2 or n == 2)):
            raise ConfigError(
                "topology.d",
                d,
                f"need 1 <= d < {n}, N*d even and a connected graph; allowed for {n} workers: {_regular_allowed(n)}",
            )
        edges = _random_regular_edges(n, int(d), cfg.seed, cfg.max_tries)
    elif name == "custom":
        edges = _custom_edges(n, cfg.edges)
    else:
        raise ConfigError("topology", name, "choose one of: " + ", ".join(TOPOLOGIES))

    graph = Graph(n, tuple(edges), name)
    # Every builder guarantees connectivity; this guards the invariant the trainers rely on.
    assert graph.is_connected(), f"internal error: {name} graph on {n} nodes is disconnected"
    return graph
