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
