"""dybw is extended without editing it: a policy from a plugin module runs on every runner; the package has
no import cycle; the yaml files are the only place defaults live; the docs stand alone."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dybw.config import every_section_class
from helpers import REPO, TINY, compose

TESTS = Path(__file__).resolve().parent
PLUGIN = ["plugins=[toy_plugin]", "algo=wait_two"]


def _with_plugin_path():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH", "")]))
    return env


@pytest.fixture(scope="module")
def plugin_runs(tmp_path_factory):
    """The toy policy on runner=local, runner=mpi (virtual clock, 2 ranks) and the wall clock (2 ranks)."""
    root = tmp_path_factory.mktemp("plugin")
    common = [*TINY, *PLUGIN, "num_workers=6", "topology=complete", "iterations=8", "eval_every=4"]
    runs = {
        "local": common,
        "mpi": [*common, "runner=mpi", "runner.ranks=2"],
        "wall": [*TINY, *PLUGIN, "num_workers=2", "iterations=8", "eval_every=4", "runner=mpi", "runner.clock=wall"],
    }
    out = {}
    for name, overrides in runs.items():
        done = subprocess.run(
            [sys.executable, str(REPO / "run.py"), *overrides, f"hydra.run.dir={root / name}"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=600,
            env=_with_plugin_path(),
        )
        assert done.returncode == 0, (name, done.stderr[-2000:])
        out[name] = root / name
    return out


def test_a_policy_from_a_plugin_runs_on_every_runner(plugin_runs):
    for name, job_dir in plugin_runs.items():
        summary = pd.read_json(job_dir / "summary.json", typ="series")
        assert summary["status"] == "completed" and summary["algo"] == "wait_two", name
        timeline = pd.read_parquet(job_dir / "timeline.parquet")
        degree = 5 if name != "wall" else 1
        # It waits for min(2, d_j) messages and uses every one that arrived by then.
        assert (timeline["used"] >= min(2, degree)).all(), name
    local, mpi = (pd.read_csv(plugin_runs[n] / "metrics.csv").drop(columns="wall_seconds") for n in ("local", "mpi"))
    pd.testing.assert_frame_equal(local, mpi, check_exact=True)  # the MPI ranks compute the local bits


def test_the_plugin_policy_waits_for_its_two_fastest_neighbours(plugin_runs):
    timeline = pd.read_parquet(plugin_runs["local"] / "timeline.parquet")
    # On a complete graph of 6, waiting for 2 of 5 leaves backups most of the time (used < 5).
    assert (timeline["used"] < 5).mean() > 0.5


def _install(site: Path, package: str, module_source: str) -> None:
    """``package`` as pip leaves it in site-packages: its module and a dist-info whose entry_points.txt
    declares the module in dybw's entry-point group (these files are what importlib.metadata reads)."""
    info = site / f"{package}-1.0.dist-info"
    info.mkdir(parents=True)
    (site / f"{package}.py").write_text(module_source)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[dybw.plugins]\n{package} = {package}\n")


def _run_with_site(site: Path, overrides: list[str], run_dir: Path) -> subprocess.CompletedProcess:
    # The site directory stands in for site-packages (added to the path, not named to dybw anywhere).
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    return subprocess.run(
        [sys.executable, str(REPO / "run.py"), *overrides, f"hydra.run.dir={run_dir}"],
        cwd=run_dir.parent,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def test_an_installed_plugin_is_found_by_its_entry_point_on_every_runner(tmp_path):
    site = tmp_path / "site"
    source = (TESTS / "toy_plugin.py").read_text().replace('name = "wait_two"', 'name = "wait_two_installed"')
    _install(site, "dybw_toy_installed", source)
    # No plugins= key and no module name anywhere on the command line: only the entry point names it.
    common = [*TINY, "algo=wait_two_installed", "num_workers=6", "topology=complete", "iterations=8", "eval_every=4"]
    for name, extra in {"local": [], "mpi": ["runner=mpi", "runner.ranks=2"]}.items():
        done = _run_with_site(site, [*common, *extra], tmp_path / name)
        assert done.returncode == 0, (name, done.stderr[-2000:])
        summary = pd.read_json(tmp_path / name / "summary.json", typ="series")
        assert summary["status"] == "completed" and summary["algo"] == "wait_two_installed", name
    local, mpi = (pd.read_csv(tmp_path / n / "metrics.csv").drop(columns="wall_seconds") for n in ("local", "mpi"))
    pd.testing.assert_frame_equal(local, mpi, check_exact=True)


def test_an_unknown_name_and_a_broken_installed_plugin_are_one_line_each(tmp_path):
    site = tmp_path / "site"
    _install(site, "dybw_broken_plugin", "raise ImportError('needs a package that is not installed')\n")
    done = _run_with_site(site, ["algo=cb_dybw"], tmp_path / "broken")
    assert done.returncode != 0
    (line,) = [line for line in done.stderr.splitlines() if line.strip()]
    assert line.startswith("error: entry point dybw.plugins:dybw_broken_plugin=") and "dybw_broken_plugin" in line
    assert "needs a package that is not installed" in line

    (tmp_path / "empty").mkdir()
    done = _run_with_site(tmp_path / "empty", ["algo=wait_three"], tmp_path / "unknown")
    (line,) = [line for line in done.stderr.splitlines() if line.strip()]
    assert line.startswith("error: algo='wait_three' is invalid: choose one of: ") and "cb_dybw" in line
    assert "'dybw.plugins' entry point" in line and "plugins=[<module>]" in line


WEIBULL = """
import math
from dataclasses import dataclass
from typing import Annotated

import numpy as np

from dybw.distributions import DISTRIBUTIONS, DelaySpec, Distribution, ms
from dybw.schema import Finite


@dataclass
class WeibullSpec(DelaySpec):
    shape: Annotated[float, Finite(0, strict=True)]


@DISTRIBUTIONS.register
class Weibull(Distribution):
    \"\"\"Z = (-ln(1 - u0))^(1/shape): shape 1 is the exponential.\"\"\"

    name, Spec = "weibull", WeibullSpec

    def unit(self, spec, u0, u1):
        return (-np.log1p(-u0)) ** (1.0 / spec.shape)

    def mean_unit(self, spec):
        return math.gamma(1 + 1 / spec.shape)

    def describe(self, spec):
        return f"{ms(spec['shift'])} + Weibull(scale {ms(spec['scale'])}, shape {spec['shape']:g})"
"""

# Every straggler preset's config_hash (results are cached by it): a distribution added by a plugin, or a
# refactor of the built-in ones, must leave them all as they are.
PRESET_HASHES = {
    "compute_bound": "a123b659bed775cb",
    "lognormal": "37b8624da963235c",
    "mixture": "45de999eb8568524",
    "network": "6f133941e72acd3f",
    "none": "2cea9b6b2ea6f2be",
    "paper": "2be806ef14dd77b8",
    "pareto": "d8c42566c6fdfb41",
    "persistent": "c40cf732a729be3b",
    "shifted_exp": "c24f3b645964f660",
    "trace": "4d0e8144f182f1c3",
    "uniform": "a7e75bd5f9646fe8",
}


def _preset_hashes() -> dict[str, str]:
    from dybw.results import config_hash

    extra = {"trace": ["num_workers=16"]}  # the example trace covers 16 workers
    return {name: config_hash(compose([f"straggler={name}", *extra.get(name, [])])[1]) for name in PRESET_HASHES}


def test_a_delay_distribution_from_an_installed_plugin_runs_and_changes_no_existing_hash(tmp_path):
    site = tmp_path / "site"
    _install(site, "dybw_weibull", WEIBULL)
    # Weibull of shape 1 is the exponential to the bit ((-ln(1 - u))^1.0 = -ln(1 - u)): the same delays
    # as the built-in shifted_exp, so the same run.
    straggler = ["straggler=paper", "straggler.compute.scale=0.005", "straggler.compute.shift=0.01"]
    weibull = ["straggler.compute.dist=weibull", "+straggler.compute.shape=1.0"]
    common = [*TINY, "algo=cb_dybw", "num_workers=6", "iterations=12", "eval_every=4", *straggler]
    runs = {
        "builtin": common,
        "plugin": [*common, *weibull],
        "slower": [*common, *weibull[:1], "+straggler.compute.shape=0.5"],
    }
    for name, overrides in runs.items():
        done = _run_with_site(site, overrides, tmp_path / name)
        assert done.returncode == 0, (name, done.stderr[-2000:])
    builtin, plugin, slower = (pd.read_parquet(tmp_path / n / "timeline.parquet") for n in runs)
    pd.testing.assert_frame_equal(builtin, plugin, check_exact=True)
    # Shape 0.5: the plugin's own key is used (the compute times, ready - start, change).
    assert not (builtin["ready"] - builtin["start"]).equals(slower["ready"] - slower["start"])

    # A shape key under a distribution that has none is one line naming the key.
    done = _run_with_site(site, [*common, "+straggler.compute.shape=1.0"], tmp_path / "stray")
    (line,) = [line for line in done.stderr.splitlines() if line.strip()]
    assert line.startswith("error: straggler.compute.shape=1.0 is invalid: unknown key")

    # Registered in this process too, the new distribution changes no existing job's config_hash.
    sys.path.insert(0, str(site))
    try:
        __import__("dybw_weibull")
        assert _preset_hashes() == PRESET_HASHES
    finally:
        sys.path.remove(str(site))


@pytest.mark.unit
def test_the_straggler_presets_keep_their_config_hashes():
    assert _preset_hashes() == PRESET_HASHES


FIGURE_SPEC = """
title: "Mean iteration of each algorithm (a plugin's figure)"
figure: iteration_bars
why: "a figure drawn by a plugin package, from jobs of its own spec"
sweeps:
  - label: clock
    kind: clock
    base:
      experiment_name=clock_plugin_figure: apart from other results
      dataset=synthetic: no files
      num_workers=6: small
      iterations=40: short
    variants:
      cb_dybw: {overrides: [algo=cb_dybw], why: the policy}
      cb_full: {overrides: [algo=cb_full], why: the baseline}
    grid:
      seed: {values: [0], why: one draw}
"""


def test_a_figure_from_an_installed_plugin_is_drawn_by_the_figure_pipeline(tmp_path):
    # The plugin is docs/extending.md's own example, as printed there.
    docs = (REPO / "docs" / "extending.md").read_text()
    source = docs.split("# my_figures.py", 1)[1].split("\n", 1)[1].split("```", 1)[0]
    site, experiments = tmp_path / "site", tmp_path / "experiments"
    _install(site, "dybw_figure_plugin", source)
    experiments.mkdir()
    (experiments / "plugin_bars.yaml").write_text(FIGURE_SPEC)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    args = ["--only", "plugin_bars", "--experiments", str(experiments), "--results", str(tmp_path / "results")]
    done = subprocess.run(
        [sys.executable, "-m", "dybw.figures", *args, "--out", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (out / "plugin_bars.png").stat().st_size > 0 and (out / "plugin_bars.pdf").is_file()
    index = json.loads((out / "figures.json").read_text())
    assert index["plugin_bars"]["caption"] == "Mean iteration duration of each completed job."

    # Without the plugin installed, the spec's figure is one line naming where figures come from.
    done = subprocess.run(
        [sys.executable, "-m", "dybw.figures", *args, "--out", str(tmp_path / "out2"), "--no-run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2 and "figure 'iteration_bars' is unknown" in done.stderr
    assert "'dybw.plugins' entry point" in done.stderr


# --------------------------------------------------------------------------------------------------
# The package's structure


def _module_name(path: Path, src: Path) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, src: Path, modules: set[str]) -> set[str]:
    """The package's modules ``path`` imports, at module level or inside functions."""
    name = _module_name(path, src)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], *([base] if base else [])])
            for alias in node.names:  # `from pkg import submodule` imports the submodule
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in found if m in modules}


def _room(module: str, package: str) -> str:
    """The part of the package a module belongs to: its subpackage (``dybw.mpi``) or itself (``dybw.clock``)."""
    return ".".join(module.split(".")[: len(package.split(".")) + 1])


def import_cycles(src: Path, package: str, by_subpackage: bool = False) -> list[list[str]]:
    """Groups of modules of ``src/<package>`` that import each other, directly or around a circle; with
    ``by_subpackage``, each subpackage counts as one node (a circle through two of its modules counts)."""
    files = sorted((src / package).rglob("*.py"))
    modules = {_module_name(p, src) for p in files}
    graph = {}
    for path in files:
        name = _module_name(path, src)
        imported = _imports(path, src, modules)
        if by_subpackage:
            name, imported = _room(name, package), {_room(m, package) for m in imported}
        graph.setdefault(name, set()).update(imported - {name})
    index, low, stack, cycles = {}, {}, [], []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return cycles


@pytest.mark.unit
def test_no_module_imports_another_modules_private_names():
    found = []
    for path in sorted((REPO / "src" / "dybw").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("dybw")):
                private = [a.name for a in node.names if a.name.startswith("_")]
                found += [f"{path.relative_to(REPO)}:{node.lineno} {name}" for name in private]
    assert not found, found


@pytest.mark.unit
def test_no_import_cycle_among_dybw_modules():
    assert len(list((REPO / "src" / "dybw").rglob("*.py"))) > 30
    assert import_cycles(REPO / "src", "dybw") == []


@pytest.mark.unit
def test_no_import_cycle_among_dybw_subpackages_and_modules():
    """The layers read top-down (cli -> config -> runners -> mpi -> engine ...): no subpackage imports a
    module that imports back into it, even through different modules of the subpackage."""
    assert import_cycles(REPO / "src", "dybw", by_subpackage=True) == []


@pytest.mark.unit
def test_the_cycle_check_sees_a_cycle_through_function_level_imports(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from .a import f\n")
    (package / "sub" / "a.py").write_text("def f():\n    from ..b import g\n")
    (package / "b.py").write_text("def g():\n    from .sub import a\n")
    (package / "c.py").write_text("import pkg.b\n")
    assert import_cycles(tmp_path, "pkg") == [["pkg.b", "pkg.sub.a"]]
    (package / "sub" / "a.py").write_text("def f():\n    pass\n")
    (package / "sub" / "main.py").write_text("from ..b import g\n")  # pkg.sub.main -> pkg.b -> pkg.sub.a
    assert import_cycles(tmp_path, "pkg") == []
    assert import_cycles(tmp_path, "pkg", by_subpackage=True) == [["pkg.b", "pkg.sub"]]


def test_the_yaml_files_are_the_only_place_defaults_live():
    classes = every_section_class()
    assert len(classes) > 15
    for cls in classes:
        with_default = [
            f.name
            for f in dataclasses.fields(cls)
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        ]
        assert not with_default, f"{cls.__name__} has defaults of its own: {with_default}"


def test_every_composed_option_sets_exactly_its_schemas_keys():
    """A yaml that left out a key would fail to load (no dataclass default fills it); one with a key its
    schema lacks is rejected too.  So composing and loading every option checks both sources agree."""
    for group in ("algo", "model", "runner", "topology", "dataset", "logger", "straggler"):
        for option in sorted(p.stem for p in (REPO / "conf" / group).glob("[!_]*.yaml")):
            extra = ["num_workers=16"] if option == "trace" else []
            cfg, plain = compose([f"{group}={option}", *extra])
            section = getattr(cfg, group)
            assert set(plain[group]) == {f.name for f in dataclasses.fields(section)}, (group, option)


# --------------------------------------------------------------------------------------------------
# The docs stand alone


def test_no_reference_to_documents_outside_the_repository():
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    pattern = re.compile(r"DESIGN\.md|\bissue (\d+|N)\b|\bissues? #\d+", re.IGNORECASE)
    assert pattern.search("as issue 7 asks") and pattern.search("see DESIGN.md §2")  # it would see one
    found = []
    for name in tracked:
        path = REPO / name
        if path.suffix not in (".py", ".md", ".yaml", ".yml", ".toml", ".txt", "") or not path.is_file():
            continue
        if name == "tests/test_extending.py":
            continue  # this test names what it looks for
        for number, line in enumerate(path.read_text(errors="ignore").splitlines(), 1):
            if pattern.search(line):
                found.append(f"{name}:{number}: {line.strip()[:100]}")
    assert not found, "\n".join(found)
