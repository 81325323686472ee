"""paper_figures/ as committed: its compact results are small, of the specs as they stand, and rebuild every
published text byte for byte at full size, without training (``python -m dybw.figures --from-committed``).

Apart from tests/test_figures.py, whose tests share one quick pipeline on one worker: these need none of it,
and the rebuild is the suite's longest test, so it runs beside them.
"""

from __future__ import annotations

import json
import shutil
from fnmatch import fnmatch
from pathlib import Path

import pytest

from helpers import run_figures

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_committed_paper_figures_are_rebuilt_from_their_compact_results_byte_for_byte(tmp_path):
    """Full size, from a checkout alone: ``python -m dybw.figures --from-committed --no-images`` on a copy of
    paper_figures/ (no results/ of any run) writes REPRODUCTION.md, figures.json, reproduction.json and
    README.md exactly as committed -- every number published is re-derivable without training (about a
    minute on 2 idle cores: the clock-only jobs are simulated again)."""
    committed = REPO / "paper_figures"
    copy = tmp_path / "paper_figures"
    shutil.copytree(committed, copy)
    texts = ("REPRODUCTION.md", "figures.json", "reproduction.json", "README.md")
    for name in texts:
        (copy / name).unlink()
    from dybw.figures.specs import load_specs

    every_spec = ",".join(load_specs(REPO / "experiments"))  # the opt-in CNN spec too, as committed
    images = {p.name: p.stat().st_mtime_ns for p in copy.glob("*.p[nd][gf]")}
    args = ["--from-committed", "--no-images", "--only", every_spec, "--out", str(copy)]
    proc = run_figures(*args, "--results", str(tmp_path / "results"), timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in texts:
        assert (copy / name).read_bytes() == (committed / name).read_bytes(), name
    # the figures were built for their captions and numbers, and none was rendered over the committed ones
    assert {p.name: p.stat().st_mtime_ns for p in copy.glob("*.p[nd][gf]")} == images
    assert proc.stdout.count("no image (--no-images)") == len(images) / 2


def test_the_committed_results_are_compact_and_of_the_current_specs():
    """``paper_figures/results/``: every file under 2 MB, all of them under 10 MB, and every job in it is a
    training job of a spec as it stands, with the config hash it was run under (a stale copy would be
    drawn as missing: this names it instead)."""
    from dybw.figures import committed, specs

    kept = REPO / "paper_figures" / "results"
    files = [p for p in kept.rglob("*") if p.is_file()]
    assert files, "make figures keeps the compact results in paper_figures/results/"
    assert max(p.stat().st_size for p in files) < 2_000_000
    assert sum(p.stat().st_size for p in files) < 10_000_000
    composer = specs.Composer(REPO / "conf")
    every = specs.load_specs(REPO / "experiments")
    jobs = {
        j.relative_dir: j
        for name in every
        for j in specs.all_jobs(every[name], every, composer, False)
        if j.kind == "train"
    }
    for summary in kept.glob("*/*/summary.json"):
        job = jobs.get(summary.parent.relative_to(kept))
        assert job is not None, f"{summary.parent.relative_to(kept)}: no spec has this job"
        assert json.loads(summary.read_text())["config_hash"] == job.digest, (
            f"{job.relative_dir}: run under another config"
        )
        present = {str(p.relative_to(summary.parent)) for p in summary.parent.rglob("*") if p.is_file()}
        allowed = {name for name in present if any(fnmatch(name, kept) for kept in committed.kept_files(job))}
        assert set(committed.KEPT) <= present == allowed, (job.relative_dir, present - allowed)
    beside = {p.relative_to(kept) for p in kept.glob("*/*") if p.is_file()}  # an experiment's own files
    assert all(path.name in committed.EXPERIMENT_FILES for path in beside), beside
