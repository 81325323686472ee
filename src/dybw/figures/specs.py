"""Experiment specs (``experiments/<name>.yaml``): what each figure or table needs, expanded into jobs.

A spec is YAML::

    title: Convergence on MNIST                 # the figure's title
    figure: convergence                         # a drawing function registered by name (figures/registry.py)
    why: what the figure answers (one line)
    jobs_from: [other_spec]                     # optional: also use (and run) the jobs of other specs
    reads_from: [other_spec]                    # optional: also use those specs' finished jobs, never run them
    default: false                              # optional (true): false = runs only when named (--only)
    sweeps:                                     # optional: this spec's own jobs
      - label: paper setting                    # optional, shown where sweeps are compared
        role: main                              # optional tag the report finds a sweep by
        kind: train                             # train: a run.py job | clock: the virtual clock only
        base:                                   # overrides every job of the sweep gets: override -> reason
          experiment=paper_mnist: the paper's MNIST setting
        variants:                               # one curve each: label -> overrides + reason
          cb_full: {overrides: [algo=cb_full], why: waits for every neighbour}
        grid:                                   # cartesian product: key -> values + reason
          seed: {values: [0, 1, 2], why: three draws of delays and minibatches}
        zip:                                    # keys swept together (equal-length lists)
          why: the step grows with N
          values: {num_workers: [4, 8], algo.eta0: [0.1, 0.2]}
        quick:                                  # --quick: tiny sizes, same code path
          base: {dataset=synthetic: no files}   # appended to base
          grid: {seed: {values: [0, 1]}}        # replaces these grid keys
          zip: {values: {...}}                  # replaces the zip
          variants: [cb_full]                   # keep only these variants
          label: tiny setting                   # replaces the sweep's label

Each job is named exactly as ``run.py -m`` names it: ``results/<experiment_name>/<override_dirname>``
with Hydra's ``override_dirname`` (sorted ``key=value`` joined by ``,``, minus the keys excluded in
``conf/config.yaml``).  ``--quick`` jobs go to ``quick_<experiment_name>``, never mixing with full results.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..errors import ConfigError
from ..results import config_hash

KINDS = ("train", "clock")
# Overrides every job gets: no progress bars, no tracking (both excluded from the job's name and hash).
ALWAYS = ["progress=false", "logger=none"]


@dataclass
class Sweep:
    kind: str
    label: str
    role: str
    base: dict[str, str]
    variants: dict[str, dict]
    grid: dict[str, dict]
    zip: dict
    quick: dict


@dataclass
class Spec:
    name: str
    path: Path
    title: str
    figure: str
    why: str
    jobs_from: list[str]
    sweeps: list[Sweep]
    raw: dict = field(repr=False, default_factory=dict)
    reads_from: list[str] = field(default_factory=list)
    default: bool = True  # part of a plain `make figures`; false: only with --only (its runs are too long)


@dataclass
class Job:
    """One run: its overrides, the values that identify it in figures, and where its results live."""

    spec: str
    kind: str
    overrides: list[str]
    params: dict
    experiment: str
    dirname: str
    plain: dict = field(repr=False)
    digest: str = ""

    @property
    def relative_dir(self) -> Path:
        return Path(self.experiment) / self.dirname

    def job_dir(self, results: Path) -> Path:
        return Path(results) / self.relative_dir


def _fmt(value) -> str:
    """A YAML value as Hydra override syntax."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_fmt(v) for v in value) + "]"
    if value is None:
        return "null"
    return str(value)


def _need(mapping, key, kind, where):
    if key not in mapping:
        raise ConfigError(f"{where}.{key}", None, "is required")
    value = mapping[key]
    if not isinstance(value, kind):
        raise ConfigError(f"{where}.{key}", value, f"must be a {kind.__name__ if isinstance(kind, type) else kind}")
    return value


def _sweep(raw: dict, where: str) -> Sweep:
    if not isinstance(raw, dict):
        raise ConfigError(where, raw, "a sweep is a mapping (kind, base, variants, grid, zip, quick)")
    unknown = set(raw) - {"kind", "label", "role", "base", "variants", "grid", "zip", "quick"}
    if unknown:
        raise ConfigError(
            f"{where}.{sorted(unknown)[0]}",
            None,
            "unknown key; valid: kind, label, role, base, variants, grid, zip, quick",
        )
    kind = raw.get("kind", "train")
    if kind not in KINDS:
        raise ConfigError(f"{where}.kind", kind, "choose one of: " + ", ".join(KINDS))
    variants = raw.get("variants") or {"default": {"overrides": [], "why": ""}}
    for label, variant in variants.items():
        if not isinstance(variant, dict) or not isinstance(variant.get("overrides", []), list):
            raise ConfigError(f"{where}.variants.{label}", variant, "must be {overrides: [...], why: ...}")
    grid = raw.get("grid") or {}
    for key, entry in grid.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("values"), list) or not entry["values"]:
            raise ConfigError(f"{where}.grid.{key}", entry, "must be {values: [non-empty list], why: ...}")
    zipped = raw.get("zip") or {}
    lengths = {len(v) for v in (zipped.get("values") or {}).values()}
    if len(lengths) > 1:
        raise ConfigError(f"{where}.zip.values", zipped.get("values"), "lists swept together must have equal lengths")
    return Sweep(
        kind=kind,
        label=str(raw.get("label", kind)),
        role=str(raw.get("role", "")),
        base=dict(raw.get("base") or {}),
        variants=variants,
        grid=grid,
        zip=zipped,
        quick=dict(raw.get("quick") or {}),
    )


def load_spec(path: Path) -> Spec:
    """Parse and check one spec file."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise ConfigError(str(path), None, f"is not valid YAML: {error}".replace("\n", " ")) from None
    where = path.stem
    title = _need(raw, "title", str, where)
    figure = _need(raw, "figure", str, where)
    sweeps = [_sweep(s, f"{where}.sweeps[{i}]") for i, s in enumerate(raw.get("sweeps") or [])]
    jobs_from = list(raw.get("jobs_from") or [])
    if not sweeps and not jobs_from:
        raise ConfigError(where, None, "a spec needs sweeps or jobs_from")
    default = raw.get("default", True)
    if not isinstance(default, bool):
        raise ConfigError(f"{where}.default", default, "must be true or false")
    return Spec(
        name=path.stem,
        path=path,
        title=title,
        figure=figure,
        why=str(raw.get("why", "")),
        jobs_from=jobs_from,
        sweeps=sweeps,
        raw=raw,
        reads_from=list(raw.get("reads_from") or []),
        default=default,
    )


def load_specs(directory: Path) -> dict[str, Spec]:
    """Every ``*.yaml`` spec of ``directory``, by name (file stem), in name order."""
    specs = {p.stem: load_spec(p) for p in sorted(Path(directory).glob("*.yaml"))}
    for spec in specs.values():
        for key in ("jobs_from", "reads_from"):
            for other in getattr(spec, key):
                if other not in specs:
                    raise ConfigError(f"{spec.name}.{key}", other, "no such spec; known: " + ", ".join(specs))
    return specs


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def _effective(sweep: Sweep, quick: bool) -> tuple[dict, dict, dict, dict]:
    """``(base, variants, grid, zip)`` of a sweep, with the quick replacements applied."""
    base, variants, grid, zipped = dict(sweep.base), dict(sweep.variants), dict(sweep.grid), dict(sweep.zip)
    if quick:
        q = sweep.quick
        for override, why in (q.get("base") or {}).items():  # replaces an override of the same key
            key = _key(override)
            base = {o: w for o, w in base.items() if _key(o) != key}
            base[override] = why
        for key, entry in (q.get("grid") or {}).items():
            grid[key] = {**grid.get(key, {}), **entry}
        if "zip" in q:
            zipped = {**zipped, **q["zip"]}
        if "variants" in q:
            variants = {k: v for k, v in variants.items() if k in q["variants"]}
    return base, variants, grid, zipped


def sweep_points(sweep: Sweep, quick: bool) -> list[tuple[str, list[str], dict]]:
    """``(variant, overrides, params)`` for every job of the sweep, in a stable order."""
    base, variants, grid, zipped = _effective(sweep, quick)
    zip_values = zipped.get("values") or {}
    zip_rows = [dict(zip(zip_values, row)) for row in zip(*zip_values.values())] if zip_values else [{}]
    grid_keys = list(grid)
    points = []
    for label, variant in variants.items():
        for zip_row in zip_rows:
            for combo in itertools.product(*(grid[k]["values"] for k in grid_keys)):
                swept = {**zip_row, **dict(zip(grid_keys, combo))}
                overrides = [*base, *variant.get("overrides", []), *(f"{k}={_fmt(v)}" for k, v in swept.items())]
                sweep_label = str(sweep.quick.get("label", sweep.label)) if quick else sweep.label
                params = {"variant": label, "sweep": sweep_label, "role": sweep.role, **swept}
                points.append((label, overrides, params))
    return points


class Composer:
    """Composes job configs through Hydra as ``run.py`` does, and names their directories.

    Hydra composes a config in two steps: the defaults list (group choices such as ``algo=cb_static`` or
    ``experiment=paper_mnist``), then every value override (``seed=1``, ``+a.b=[0,1]``) applied in order to
    the merged config.  A sweep has few distinct group choices and many value points, so the first step is
    done once per distinct set of group overrides and the second by Hydra's own
    ``ConfigLoaderImpl._apply_overrides_to_config`` on a copy.  ``tests/test_figures.py`` checks the result
    against :func:`dybw.cli.compose_job` and Hydra's ``override_dirname``.
    """

    def __init__(self, conf_dir: Path):
        from omegaconf import OmegaConf

        from ..cli import register_resolvers
        from ..registry import import_installed_plugins

        register_resolvers()
        import_installed_plugins()  # an installed plugin's config options are composed like built-in ones
        self.conf_dir = Path(conf_dir).resolve()
        hydra_job = OmegaConf.load(self.conf_dir / "config.yaml").hydra.job.config.override_dirname
        self.exclude_keys = list(hydra_job.get("exclude_keys", []))
        self.kv_sep = hydra_job.get("kv_sep", "=")
        self.item_sep = hydra_job.get("item_sep", ",")
        self._cache: dict[tuple[str, ...], dict] = {}
        self._groups: dict[tuple[str, ...], object] = {}
        self._dirnames: dict[tuple[str, ...], str] = {}
        self._parsed: dict[str, object] = {}  # an override string -> Hydra's parsed Override
        self.spec_jobs: dict[tuple[str, bool], list[Job]] = {}  # own_jobs's, per (spec, quick)

    def _is_group(self, override: str) -> bool:
        key = override.lstrip("+~").split("=", 1)[0]
        return bool(key) and "." not in key and (self.conf_dir / key).is_dir()

    def _parse(self, overrides: list[str]) -> list:
        """Hydra's parse of each override, once per distinct string: the jobs of a sweep share most of theirs,
        and Hydra's grammar takes milliseconds per string (a quarter of composing a sweep of hundreds of jobs).
        An ``Override`` is only read by what uses it, so one can serve every job."""
        from hydra.core.override_parser.overrides_parser import OverridesParser

        new = [o for o in dict.fromkeys(overrides) if o not in self._parsed]
        if new:
            self._parsed.update(zip(new, OverridesParser.create().parse_overrides(new), strict=True))
        return [self._parsed[o] for o in overrides]

    def _group_config(self, head: tuple[str, ...]):
        from hydra import compose, initialize_config_dir

        if head not in self._groups:
            with initialize_config_dir(config_dir=str(self.conf_dir), version_base="1.3"):
                self._groups[head] = compose(config_name="config", overrides=list(head))
        return self._groups[head]

    def compose(self, overrides: list[str]) -> dict:
        """The resolved plain config of a job, as :func:`dybw.cli.compose_job` returns it."""
        import copy

        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        from omegaconf import OmegaConf

        key = tuple(overrides)
        if key in self._cache:
            return self._cache[key]
        job = [o for o in overrides if not o.lstrip("+~").startswith(("hydra.", "hydra/"))]
        head = tuple(o for o in job if self._is_group(o))
        tail = [o for o in job if not self._is_group(o)]
        try:
            cfg = copy.deepcopy(self._group_config(head))
            ConfigLoaderImpl._apply_overrides_to_config(self._parse(tail), cfg)
            plain = OmegaConf.to_container(cfg, resolve=True)
        except Exception as error:  # Hydra's composition errors: one line naming the overrides
            message = " ".join(str(error).split())
            raise ConfigError("overrides", " ".join(overrides), message) from None
        self._cache[key] = plain
        return plain

    def dirname(self, overrides: list[str]) -> str:
        """The job directory's name as run.py makes it: Hydra's ``override_dirname`` of the overrides, through
        :func:`dybw.results.job_dirname` (``default`` when empty; a long name is shortened with a hash)."""
        from hydra._internal.config_loader_impl import get_overrides_dirname

        key = tuple(overrides)
        if key not in self._dirnames:
            name = get_overrides_dirname(self._parse(list(overrides)), self.exclude_keys, self.item_sep, self.kv_sep)
            try:  # run.py's own rule (conf/config.yaml: hydra.sweep.subdir), when it has one
                from ..results import job_dirname
            except ImportError:
                self._dirnames[key] = name or "default"
            else:
                self._dirnames[key] = job_dirname(name)
        return self._dirnames[key]


def _job(composer: Composer, spec: str, kind: str, overrides: list[str], params: dict, quick: bool) -> Job:
    overrides = [*overrides, *ALWAYS]
    plain = composer.compose(overrides)
    if quick and not str(plain["experiment_name"]).startswith("quick_"):
        overrides = [o for o in overrides if not o.startswith("experiment_name=")]
        overrides.append(f"experiment_name=quick_{plain['experiment_name']}")
        plain = composer.compose(overrides)
    from .clock_only import VERSION

    digest = config_hash(plain) if kind == "train" else config_hash({**plain, "clock_only": VERSION})
    return Job(
        spec=spec,
        kind=kind,
        overrides=overrides,
        params=params,
        experiment=str(plain["experiment_name"]),
        dirname=composer.dirname(overrides),
        plain=plain,
        digest=digest,
    )


def own_jobs(spec: Spec, composer: Composer, quick: bool) -> list[Job]:
    """The jobs of the spec's own sweeps, composed once per composer (the specs that take jobs from this one
    ask for them again)."""
    key = (spec.name, quick)
    if key not in composer.spec_jobs:
        composer.spec_jobs[key] = [
            _job(composer, spec.name, sweep.kind, overrides, params, quick)
            for sweep in spec.sweeps
            for _variant, overrides, params in sweep_points(sweep, quick)
        ]
    return list(composer.spec_jobs[key])


def all_jobs(spec: Spec, specs: dict[str, Spec], composer: Composer, quick: bool, _seen=None) -> list[Job]:
    """The spec's jobs and those of the specs it takes jobs from (recursively), without duplicates."""
    seen = set() if _seen is None else _seen
    if spec.name in seen:
        return []
    seen.add(spec.name)
    jobs = own_jobs(spec, composer, quick)
    for other in spec.jobs_from:
        jobs.extend(all_jobs(specs[other], specs, composer, quick, seen))
    return jobs


def read_jobs(spec: Spec, specs: dict[str, Spec], composer: Composer, quick: bool) -> list[Job]:
    """The jobs of the specs ``spec`` reads from: their finished results are used, they are never run."""
    return [job for other in spec.reads_from for job in all_jobs(specs[other], specs, composer, quick)]


def unique(jobs: list[Job]) -> list[Job]:
    """One job per directory (specs share jobs by naming them identically)."""
    by_dir: dict[Path, Job] = {}
    for job in jobs:
        existing = by_dir.get(job.relative_dir)
        if existing is not None and existing.digest != job.digest:
            raise ConfigError(
                str(job.relative_dir),
                job.overrides,
                f"two specs ({existing.spec}, {job.spec}) name the same job directory with different configs",
            )
        by_dir.setdefault(job.relative_dir, job)
    return list(by_dir.values())


def run_py_commands(spec: Spec, quick: bool = False) -> list[str]:
    """The ``python run.py -m ...`` lines that produce the spec's training jobs (one per variant / zip row)."""
    lines = []
    for sweep in spec.sweeps:
        if sweep.kind != "train":
            continue
        base, variants, grid, zipped = _effective(sweep, quick)
        zip_values = zipped.get("values") or {}
        zip_rows = [dict(zip(zip_values, row)) for row in zip(*zip_values.values())] if zip_values else [{}]
        for variant in variants.values():
            for zip_row in zip_rows:
                parts = [*base, *variant.get("overrides", []), *(f"{k}={_fmt(v)}" for k, v in zip_row.items())]
                parts += [f"{k}={','.join(_fmt(v) for v in e['values'])}" for k, e in grid.items()]
                lines.append("python run.py -m " + " ".join(parts))
    return lines
