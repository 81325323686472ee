"""environment.yml mirrors pyproject.toml, and the README's layout is in place."""

from __future__ import annotations

import re

import pytest
import tomllib
import yaml

from helpers import REPO

pytestmark = pytest.mark.unit  # no TensorFlow, MPI or subprocess: make test-fast


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ]", requirement.strip(), maxsplit=1)[0].lower()


def test_environment_yml_lists_the_same_requirements_as_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = set(project["dependencies"]) | set(project["optional-dependencies"]["test"])
    environment = yaml.safe_load((REPO / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in environment["dependencies"] if isinstance(d, dict))
    listed = {r for r in pip_section if not r.startswith("-e")}
    assert {_name(r): r for r in listed} == {_name(r): r for r in wanted}
    python = next(d for d in environment["dependencies"] if isinstance(d, str) and d.startswith("python"))
    assert python.split("=")[1] >= project["requires-python"].lstrip(">=")


def test_layout_of_the_design():
    for path in (
        "run.py",
        "conf/config.yaml",
        "src/dybw",
        "experiments",
        "tests/mpi",
        "bench",
        "paper_figures",
        "environment.yml",
        "pyproject.toml",
        "Makefile",
        "README.md",
        ".ci/run",
    ):
        assert (REPO / path).exists(), path
    for group in ("algo", "dataset", "model", "topology", "straggler", "runner", "logger", "experiment"):
        assert any((REPO / "conf" / group).glob("*.yaml")), group


def _readme_layout() -> list[str]:
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Layout", 1)[1].split("```", 2)[1]
    return block.strip("\n").splitlines()


def test_the_readmes_layout_names_every_module_and_folder_and_nothing_else():
    lines = _readme_layout()
    top = {line.split()[0].split("/")[0] for line in lines if line and not line.startswith(" ")}
    tracked = {p.name for p in REPO.iterdir() if not p.name.startswith(".") and p.name not in ("data", "results")}
    tracked -= {"environment.yml", "pyproject.toml", "Makefile", "README.md"}  # the files the README names above
    assert top >= tracked, f"the layout misses {sorted(tracked - top)}"
    package = REPO / "src" / "dybw"
    words = set(re.findall(r"[\w.]+", "\n".join(line for line in lines if line.startswith("  "))))
    modules = {p.name for p in package.glob("*.py") if p.name != "__init__.py"}
    modules |= {p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    missing = [m for m in sorted(modules) if m not in words and m.rstrip("/") not in words]
    assert not missing, f"src/dybw/ has modules the README's layout does not name: {missing}"
    named = {w for w in words if w.endswith(".py")} - {"run.py"}
    unknown = [w for w in sorted(named) if not any(package.rglob(w))]
    assert not unknown, f"the README's layout names modules that do not exist: {unknown}"


@pytest.mark.parametrize(
    ("listing", "pattern"),
    [("config.yaml", r"^  - (\w+): \S+\s+# (.*)$"), ("hydra/help/dybw.yaml", r"^    (\w+): +(\w+(?: \| \w+)*)$")],
)
def test_the_option_lists_are_the_yaml_files_of_each_group(listing, pattern):
    text = (REPO / "conf" / listing).read_text()
    found = re.findall(pattern, text, flags=re.M)
    assert len(found) == 8, found  # the eight groups
    for group, listed in found:
        options = {p.stem for p in (REPO / "conf" / group).glob("*.yaml") if not p.name.startswith("_")}
        named = {re.match(r"\s*(\w+)", part).group(1) for part in listed.split("|")}
        assert named == options, (
            f"conf/config.yaml lists {sorted(named)} for {group}; conf/{group}/ has {sorted(options)}"
        )


def test_every_docs_page_is_listed_in_the_index_and_every_relative_link_resolves():
    index = (REPO / "docs" / "index.md").read_text()
    unlisted = [
        p.name for p in sorted((REPO / "docs").glob("*.md")) if p.name != "index.md" and f"({p.name})" not in index
    ]
    assert not unlisted, f"docs/index.md does not list {unlisted}"
    assert "(docs/index.md)" in (REPO / "README.md").read_text()
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target:
                assert (page.parent / target).exists(), f"{page.relative_to(REPO)} links to {target}, which is missing"


def test_the_readme_is_an_entry_document():
    assert len((REPO / "README.md").read_text().splitlines()) <= 150  # measurements live in docs/results.md
