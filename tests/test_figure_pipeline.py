"""The figure pipeline's parts that need no quick run of it: titles, captions and intervals, the job names
and hashes ``run.py`` gives, a stopped sweep continuing, redrawing with no results, and its one-line
errors.  (tests/test_figures.py holds the tests that share one quick run, on one worker; these run on any.)
"""

from __future__ import annotations

import json
import math

import pytest

from helpers import DEFAULT_FIGURES, REPO, run_figures


def test_full_figures_keep_the_titles_of_their_specs():
    from dybw.figures.scaffold import title_for_data

    assert title_for_data("MNIST: convergence", {"mnist"}) == "MNIST: convergence"
    assert title_for_data("CIFAR-10: convergence", {"cifar10"}) == "CIFAR-10: convergence"
    assert title_for_data("Speed-up vs N", {"synthetic"}) == "Speed-up vs N"
    assert title_for_data("MNIST, i.i.d. vs non-i.i.d.", {"synthetic"}) == "Synthetic data, i.i.d. vs non-i.i.d."
    assert title_for_data("cb-DyBW against the others on MNIST", {"mnist"}) == "cb-DyBW against the others on MNIST"
    assert title_for_data("cb-DyBW on MNIST", {"synthetic"}) == "cb-DyBW on synthetic data"


def test_redrawing_without_any_results_draws_every_figure_as_empty(tmp_path):
    """``--no-run`` before anything ran: each figure says 'no completed runs' (two used to crash)."""
    (tmp_path / "results").mkdir()
    proc = run_figures("--no-run", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0 and "FAILED" not in proc.stdout + proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]
    index = json.loads((tmp_path / "out" / "figures.json").read_text())
    assert sorted(index) == DEFAULT_FIGURES and all(entry["caption"] == "no completed runs" for entry in index.values())


def test_a_mean_that_rounds_to_zero_has_no_minus_sign():
    from dybw.figures.analysis import fmt_pm

    assert fmt_pm((-4e-5, 2e-4, 3), 2, 100) == "0.00 ± 0.02"
    assert fmt_pm((-6e-5, 2e-4, 3), 2, 100) == "-0.01 ± 0.02"


def test_a_step_shared_by_every_algorithm_is_named_once():
    from dybw.figures.style import describe_steps, step_rule

    assert step_rule({"eta0": 0.2, "delta": 1.0}) == "0.2"
    assert step_rule({"eta0": 0.1, "delta": 0.998849}) == "0.1 x 0.998849^k"
    assert describe_steps({"cb-Full": "0.2", "cb-DyBW": "0.2", "isolated (W = I)": "0.2"}) == "step 0.2"
    assert describe_steps({"cb-Full": "0.2", "cb-DyBW": "0.1", "isolated (W = I)": "0.1"}) == (
        "steps 0.2 (cb-Full), 0.1 (cb-DyBW, isolated (W = I))"
    )


def test_a_job_count_below_one_is_one_line_error(tmp_path):
    proc = run_figures("--jobs", "0", "--results", str(tmp_path / "r"), "--out", str(tmp_path / "o"), timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == "error: --jobs=0 is invalid: must be at least 1 (1 runs every job in this process)\n"
    assert not (tmp_path / "r").exists()


def test_jobs_are_named_and_hashed_as_run_py_names_them(tmp_path):
    """A job run by ``run.py`` lands where the pipeline looks for it, with the hash it expects."""
    from dybw.figures import specs
    from helpers import run_cli

    spec = specs.load_specs(REPO / "experiments")["convergence_mnist"]
    job = specs.own_jobs(spec, specs.Composer(REPO / "conf"), quick=True)[0]
    proc = run_cli(job.overrides, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((job.job_dir(tmp_path / "results") / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["config_hash"] == job.digest


def test_a_sweep_stopped_mid_job_continues_from_the_checkpoint(tmp_path, monkeypatch):
    """Stopped part-way (Ctrl-C, a lost session), a job continues from its last checkpoint when the sweep is
    run again, and ends with the bits of an uninterrupted run."""
    import io

    import pandas as pd

    from dybw import job as job_module
    from dybw.figures import specs
    from dybw.figures.runner import run_jobs

    spec = specs.load_specs(REPO / "experiments")["convergence_mnist"]
    job = specs.own_jobs(spec, specs.Composer(REPO / "conf"), quick=True)[0]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    run_jobs([job], whole, stream=io.StringIO())

    write_checkpoint, stop_at = job_module.write_checkpoint, 3 * job.plain["eval_every"]

    def stopped_after_a_checkpoint(job_dir, state, digest):
        write_checkpoint(job_dir, state, digest)
        if int(state["iteration"]) >= stop_at:
            raise KeyboardInterrupt

    monkeypatch.setattr(job_module, "write_checkpoint", stopped_after_a_checkpoint)
    with pytest.raises(KeyboardInterrupt):
        run_jobs([job], cut, stream=io.StringIO())
    monkeypatch.undo()
    job_dir = job.job_dir(cut)
    assert json.loads((job_dir / "summary.json").read_text())["status"] == "interrupted"
    before = pd.read_csv(job_dir / "metrics.csv")
    assert before["iteration"].max() == stop_at < job.plain["iterations"]

    counts = run_jobs([job], cut, stream=io.StringIO())
    assert counts[job.spec]["ran"] == 1 and counts[job.spec]["failed"] == 0
    after = pd.read_csv(job_dir / "metrics.csv")
    # the rows up to the checkpoint were kept, not recomputed: their measured wall times are the first try's
    pd.testing.assert_frame_equal(after.iloc[: len(before)], before, check_exact=True)
    assert not (job_dir / "checkpoint.npz").exists()
    for name in ("metrics.csv", "timeline.parquet"):
        read = pd.read_csv if name.endswith(".csv") else pd.read_parquet
        mine, theirs = (
            read(root / job.relative_dir / name).drop(columns=["wall_seconds"], errors="ignore")
            for root in (cut, whole)
        )
        pd.testing.assert_frame_equal(mine, theirs, check_exact=True)


def test_two_step_composition_matches_hydra():
    """The sweep composer's configs equal dybw.cli.compose_job's, and its names Hydra's override_dirname."""
    from hydra import compose, initialize_config_dir

    from dybw.cli import compose_job
    from dybw.figures import specs

    composer = specs.Composer(REPO / "conf")
    all_specs = specs.load_specs(REPO / "experiments")
    jobs = specs.unique([j for s in all_specs.values() for j in specs.all_jobs(s, all_specs, composer, quick=True)])
    for job in jobs[::7]:
        assert compose_job(composer.conf_dir, job.overrides) == job.plain, job.overrides
        with initialize_config_dir(config_dir=str(composer.conf_dir), version_base="1.3"):
            cfg = compose(config_name="config", overrides=job.overrides, return_hydra_config=True)
        from dybw.results import job_dirname

        assert job_dirname(cfg.hydra.job.override_dirname) == job.dirname


def test_a_bad_spec_is_one_line_error(tmp_path):
    (tmp_path / "broken.yaml").write_text("title: t\nfigure: convergence\nsweeps:\n  - kind: train\n    bogus: 1\n")
    proc = run_figures(
        "--experiments", str(tmp_path), "--results", str(tmp_path / "r"), "--out", str(tmp_path / "o"), timeout=120
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "bogus" in proc.stderr


def test_a_caption_says_when_accuracy_is_measured_on_held_out_training_samples():
    from dybw.figures import style
    from helpers import compose

    _, plain = compose(["dataset=synthetic", "model=logreg"])
    assert "held-out" not in style.describe_training(plain)
    _, plain = compose(["dataset=synthetic", "model=logreg", "dataset.holdout=500"])
    assert "evaluated on 500 held-out training samples, not the test set" in style.describe_training(plain)


def test_the_95_percent_interval_uses_students_t():
    """mean ± t_{0.975, n-1} s / sqrt(n): the table and its series beyond 30 degrees of freedom agree with scipy."""
    from scipy import stats

    from dybw.figures.analysis import interval95, mean_std, t_quantile_975

    for dof in (1, 2, 4, 9, 30, 31, 60, 200):
        assert t_quantile_975(dof) == pytest.approx(stats.t.ppf(0.975, dof), abs=2e-3), dof
    low, high = interval95(mean_std([1.0, 2.0, 3.0]))  # mean 2, s 1, n 3
    assert (low, high) == pytest.approx((2 - 4.303 / 3**0.5, 2 + 4.303 / 3**0.5))
    assert all(math.isnan(v) for v in interval95(mean_std([1.0])))
    with pytest.raises(ValueError):
        t_quantile_975(0)
