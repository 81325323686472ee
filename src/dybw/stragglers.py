"""Straggler models: compute times ``C_j(k)``, link delays ``D_ij(k)`` and control-message delays, in seconds.

Each is described by a :class:`~dybw.distributions.DelaySpec` and drawn as

    delay = (shift + scale * Z) * slow_mixture * slow_persistent

where the unit random variable ``Z`` belongs to the distribution ``dist`` names (:mod:`dybw.distributions`:
a registry, one class per distribution, with their formulas).

``slow_mixture = slow_factor`` with probability ``slow_prob`` (coin u2), else 1, drawn per position.
``slow_persistent = persistent_factor`` for a fixed set of slow workers (compute) or slow links, chosen
by ``persistent_ids`` or at random as a ``persistent_fraction`` of them, else 1.

Every position k consumes exactly three uniforms ``(u0, u1, u2)`` of its stream, whatever ``dist`` is,
so switching the distribution or the straggler severity keeps the draws paired (common random numbers).
A replayed distribution (``trace``) reads its delays from a CSV instead.
"""

from __future__ import annotations

import numpy as np

from .distributions import DelaySpec
from .errors import ConfigError
from .rng import UniformStream, stream

UNIFORMS_PER_DRAW = 3


def _read_trace(path: str, key_columns: tuple[str, ...], where: str) -> tuple[dict, int]:
    """``{(iteration, *ids): seconds}`` and the trace's period (number of iterations it covers)."""
    import pandas as pd

    frame = pd.read_csv(path)
    needed = ("iteration", *key_columns, "seconds")
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise ConfigError(
            f"{where}.path", path, f"trace CSV needs columns {', '.join(needed)}; missing {', '.join(missing)}"
        )
    if (frame["seconds"] < 0).any() or not np.isfinite(frame["seconds"]).all():
        raise ConfigError(f"{where}.path", path, "trace delays must be finite and >= 0")
    period = int(frame["iteration"].max()) + 1
    table = {tuple(int(v) for v in row[:-1]): float(row[-1]) for row in frame[list(needed)].itertuples(index=False)}
    return table, period


class _Replay:
    """Replays a per-entity trace cyclically: delay(k, e) = trace[k mod period, e]."""

    def __init__(self, spec: DelaySpec, entities: list[tuple[int, ...]], key_columns: tuple[str, ...], where: str):
        table, period = _read_trace(spec.resolved_path(), key_columns, where)
        self.values = np.empty((period, len(entities)))
        for k in range(period):
            for e, ids in enumerate(entities):
                try:
                    self.values[k, e] = table[(k, *ids)]
                except KeyError:
                    who = " ".join(f"{c}={i}" for c, i in zip(key_columns, ids))
                    raise ConfigError(
                        f"{where}.path",
                        spec.path,
                        f"the trace has no row for iteration={k} {who} (does it cover num_workers?)",
                    ) from None

    def take(self, k0: int, count: int) -> np.ndarray:
        rows = np.arange(k0, k0 + count) % self.values.shape[0]
        return self.values[rows]


class _Drawn:
    """Independent draws, one :class:`UniformStream` per entity (worker or directed link), made at the first
    draw: validating a config builds a sampler it never draws from, and a sweep validates hundreds."""

    def __init__(self, spec: DelaySpec, seed: int, kind: str, entities: list[tuple[int, ...]]):
        self.spec = spec
        self._names = [(seed, kind, *ids) for ids in entities]
        self._streams: list[UniformStream] | None = None

    @property
    def streams(self) -> list[UniformStream]:
        if self._streams is None:
            self._streams = [UniformStream(*name, width=UNIFORMS_PER_DRAW) for name in self._names]
        return self._streams

    def take(self, k0: int, count: int) -> np.ndarray:
        for s in self.streams:
            if s.position != k0:
                s.skip_to(k0)
        if not self.streams:
            return np.zeros((count, 0))
        u = np.stack([s.take(count) for s in self.streams], axis=1)  # [count, entities, 3]
        return self.spec.unit_draws(u)


def _persistent_factors(
    spec: DelaySpec, seed: int, kind: str, entities: list[tuple[int, ...]], num_workers: int, where: str
) -> np.ndarray:
    """Per-entity factor: ``persistent_factor`` on the slow set, 1 elsewhere.

    Compute: ``persistent_ids`` are worker ids.  Links: ``persistent_ids`` are worker ids whose outgoing
    links are slow (a slow network interface); a random ``persistent_fraction`` picks undirected links,
    both directions slowed.
    """
    factors = np.ones(len(entities))
    ids = [int(i) for i in spec.persistent_ids]
    bad = [i for i in ids if not 0 <= i < num_workers]
    if bad:
        raise ConfigError(f"{where}.persistent_ids", bad, f"worker ids must lie in 0..{num_workers - 1}")
    if ids:
        slow = np.array([e[0] in ids for e in entities])
        factors[slow] = spec.persistent_factor
    if spec.persistent_fraction > 0:
        undirected = sorted({tuple(sorted(e)) for e in entities})
        count = int(round(spec.persistent_fraction * len(undirected)))
        chosen = stream(seed, "persistent", kind).permutation(len(undirected))[:count]
        chosen_set = {undirected[c] for c in chosen}
        slow = np.array([tuple(sorted(e)) in chosen_set for e in entities])
        factors[slow] = spec.persistent_factor
    return factors


class DelaySampler:
    """Draws ``C[k, j]`` (``[count, N]``), ``D[k, l]`` (``[count, L]``, l indexing ``links``) and the
    agreement's control-message delays, in order, each times ``time_scale``.

    Streams: compute ``(seed, "compute", j)``, links ``(seed, "link", i, j)``, control messages
    ``(seed, "control", phase, i, j)`` -- independent of the algorithm and of which process asks, so every
    runner sees the same numbers, and drawing control delays never shifts the others.
    """

    def __init__(
        self,
        compute: DelaySpec,
        link: DelaySpec,
        links: np.ndarray,
        num_workers: int,
        seed: int,
        control: DelaySpec | None = None,
        time_scale: float = 1.0,
    ):
        self.links = np.asarray(links, dtype=np.int64).reshape(-1, 2)
        self.seed, self.time_scale = seed, time_scale
        workers = [(j,) for j in range(num_workers)]
        link_ids = [(int(i), int(j)) for i, j in self.links]
        self._compute = self._source(compute, seed, "compute", workers, ("worker",), "straggler.compute")
        self._link = self._source(link, seed, "link", link_ids, ("src", "dst"), "straggler.link")
        self._compute_factor = _persistent_factors(compute, seed, "compute", workers, num_workers, "straggler.compute")
        self._link_factor = _persistent_factors(link, seed, "link", link_ids, num_workers, "straggler.link")
        self._control_spec = control
        self._control: dict[tuple, _Drawn] = {}  # per (phase, pairs): the streams of those pairs

    @staticmethod
    def _source(spec, seed, kind, entities, key_columns, where):
        if spec.distribution.replayed:
            return _Replay(spec, entities, key_columns, where)
        return _Drawn(spec, seed, kind, entities)

    def compute(self, k0: int, count: int) -> np.ndarray:
        """Compute times of iterations ``k0 .. k0+count-1``, ``[count, N]`` seconds."""
        drawn = self._compute.take(k0, count) * self._compute_factor * self.time_scale
        return _finite(drawn, "straggler.compute", k0)

    def link(self, k0: int, count: int) -> np.ndarray:
        """Link delays of iterations ``k0 .. k0+count-1``, ``[count, L]`` seconds."""
        return _finite(self._link.take(k0, count) * self._link_factor * self.time_scale, "straggler.link", k0)

    def control(self, k0: int, count: int, phase: str, pairs: np.ndarray) -> np.ndarray:
        """Control-message delays of iterations ``k0 .. k0+count-1`` for the directed ``pairs [M, 2]`` of an
        agreement phase, ``[count, M]`` seconds."""
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        key = (phase, pairs.tobytes())
        if key not in self._control:
            entities = [(phase, int(i), int(j)) for i, j in pairs]
            self._control[key] = _Drawn(self._control_spec, self.seed, "control", entities)
        if len(pairs) == 0:
            return np.zeros((count, 0))
        return _finite(self._control[key].take(k0, count) * self.time_scale, "straggler.control", k0)


def _finite(delays: np.ndarray, where: str, k0: int) -> np.ndarray:
    """Delays as drawn, or a one-line error when a draw overflowed (e.g. Pareto with a tiny alpha)."""
    if not np.all(np.isfinite(delays)):
        k = k0 + int(np.argwhere(~np.isfinite(delays))[0][0])
        raise ConfigError(
            where,
            "a draw of inf",
            f"delays must be finite: iteration {k} overflowed; use a larger {where}.alpha / smaller sigma or scale",
        )
    return delays
