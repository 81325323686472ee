"""The figure pipeline (``make figures-quick``) end to end in a temporary directory.

One quick run (tiny synthetic jobs, the same code path as ``make figures``) produces every figure and
REPRODUCTION.md; its numbers are recomputed here from the summary.json files; a second run reuses every
job (summary.json untouched).  Also: the jobs are named and hashed exactly as ``run.py`` names them.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import statistics
import time
from pathlib import Path

import pytest

from helpers import DEFAULT_FIGURES, run_figures

REPO = Path(__file__).resolve().parents[1]
CLAIMS = ["C1", "C2", "C3", "C4", "C5", "C6"]
VERDICTS = ("reproduced", "partly", "not")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    root = tmp_path_factory.mktemp("figures")
    results, out = root / "results", root / "out"
    started = time.perf_counter()
    # the opt-in CNN spec first, as a user runs `make figures ONLY=deep` before `make figures`, so that the
    # table's CNN rows are computed (its own figure goes elsewhere: the default figures are checked below)
    proc = run_figures(
        "--quick", "--only", "deep", "--jobs", "2", "--results", str(results), "--out", str(root / "deep")
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # two training jobs at once (each in a pool process), as on a 2-core machine by default
    proc = run_figures("--quick", "--jobs", "2", "--results", str(results), "--out", str(out))
    elapsed = time.perf_counter() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"results": results, "out": out, "stdout": proc.stdout, "seconds": elapsed}


def _table_rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] in CLAIMS:
            rows[cells[0]] = cells
    return rows


def test_every_figure_and_the_table_are_written(quick):
    out = quick["out"]
    for name in DEFAULT_FIGURES:
        for suffix in ("png", "pdf"):
            path = out / f"{name}.{suffix}"
            assert path.is_file() and path.stat().st_size > 5000, path
    for name in ("REPRODUCTION.md", "reproduction.json", "README.md", "figures.json"):
        assert (out / name).is_file(), name
    index = json.loads((out / "figures.json").read_text())
    assert sorted(index) == DEFAULT_FIGURES
    assert all(entry["caption"] and entry["source"] for entry in index.values())
    readme = (out / "README.md").read_text()
    assert all(f"({name}.png)" in readme for name in DEFAULT_FIGURES)


def test_quick_figures_name_the_data_they_really_use(quick):
    """The specs' titles name MNIST or CIFAR-10; quick runs train on synthetic data and must say so."""
    index = json.loads((quick["out"] / "figures.json").read_text())
    for name, entry in index.items():
        assert not re.search(r"MNIST|CIFAR", entry["title"]), (name, entry["title"])
    assert index["convergence_mnist"]["title"].startswith("Synthetic data: convergence")
    assert index["noniid"]["title"].startswith("Synthetic data, i.i.d. vs non-i.i.d.")
    assert "In the synthetic training runs" in (quick["out"] / "REPRODUCTION.md").read_text()


def test_quick_results_stay_apart_from_full_results(quick):
    experiments = {p.name for p in quick["results"].iterdir()}
    assert experiments and all(name.startswith("quick_") for name in experiments), experiments


def test_reproduction_has_a_row_per_claim_with_a_verdict(quick):
    text = (quick["out"] / "REPRODUCTION.md").read_text()
    rows = _table_rows(text)
    assert sorted(rows) == CLAIMS
    data = json.loads((quick["out"] / "reproduction.json").read_text())
    for claim, cells in rows.items():
        verdict = cells[-1].strip("*")
        assert verdict in VERDICTS, cells
        assert verdict == data[claim]["verdict"]
        assert re.search(r"\d", cells[3]), f"{claim} has no number: {cells[3]}"
        assert f"## {claim}:" in text


def _pm(values: list[float], digits: int, scale: float = 1.0) -> str:
    text = f"{statistics.mean(values) * scale:.{digits}f}"
    text = text.lstrip("-") if float(text) == 0 else text
    return text + (f" ± {statistics.stdev(values) * scale:.{digits}f}" if len(values) > 1 else "")


def test_reproduction_numbers_match_the_results_files(quick):
    """C2, C3 and C5 recomputed here from the quick runs' summary.json and resolved config files.

    C2 is the paper's setting (lock-step, instant agreement) of the clock-only durations jobs; C3 and C5
    are the i.i.d. MNIST convergence runs.  Both pair cb-DyBW with cb-Full by (graph, seed).
    """
    results, text = quick["results"], (quick["out"] / "REPRODUCTION.md").read_text()
    rows = _table_rows(text)

    durations = _paired(
        results,
        "quick_clock_durations",
        lambda c: c["protocol"]["sync"] == "lockstep" and c["protocol"]["agreement"] == "instant",
    )
    assert len(durations) >= 2  # more than one (graph, seed) pair
    reduction = [1 - d["mean_iteration_duration"] / f["mean_iteration_duration"] for f, d in durations.values()]
    assert f"{_pm(reduction, 1, 100)} %" in rows["C2"][3]
    data = json.loads((quick["out"] / "reproduction.json").read_text())
    assert data["C2"]["values"]["lock-step, instant"]["same_setting"]["mean"] == pytest.approx(
        statistics.mean(reduction)
    )

    runs = _paired(results, "quick_paper_mnist", lambda c: c["dataset"]["split"] == "iid")
    assert len({graph for graph, _ in runs}) >= 2 and len(runs) >= 2
    full, dybw = zip(*runs.values())
    accuracy = [d["final_test_accuracy"] - f["final_test_accuracy"] for f, d in runs.values()]
    assert f"{_pm(accuracy, 2, 100)} points" in rows["C5"][3]
    if all(r["iterations_to_target"] for r in full + dybw):
        ratio = [d["iterations_to_target"] / f["iterations_to_target"] for f, d in runs.values()]
        assert f"{_pm(ratio, 2)}x" in rows["C3"][3]


def _printed_numbers(text: str) -> list[str]:
    """The decimal numbers of REPRODUCTION.md's prose: not its tables, code blocks, headings, or the rules
    and their history (thresholds and dates, which rules.py holds)."""
    prose, code = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            code = not code
        elif not code and not line.startswith(("|", "#", "- **", "- 20")):
            prose.append(line)
    return re.findall(r"(?<![\w.])-?\d+\.\d+", "\n".join(prose))


def _json_numbers(value) -> list[float]:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    items = value.values() if isinstance(value, dict) else value
    return [number for item in items for number in _json_numbers(item)]


def test_every_number_of_the_reproduction_prose_is_in_reproduction_json(quick):
    """A number the prose prints (a mean, a spread, a ratio, a break-even delay, a floor, a ranking's time) is
    one of reproduction.json's, as printed: itself, in % or in ms, at the printed digits -- so every one can
    be re-derived from the file without parsing sentences."""
    text = (quick["out"] / "REPRODUCTION.md").read_text()
    data = json.loads((quick["out"] / "reproduction.json").read_text())
    assert {"floor", "min_neighbors", "baselines", "wall_clock"} <= set(data["sections"])
    known = [scale * v for v in _json_numbers(data) for scale in (1, 100, 1000)]
    printed = _printed_numbers(text)
    assert len(printed) > 40
    missing = [
        token
        for token in printed
        if not any(round(abs(v), len(token.split(".")[1])) == abs(float(token)) for v in known)
    ]
    assert not missing, f"numbers in REPRODUCTION.md's prose that reproduction.json lacks: {missing}"


def test_the_cnn_rows_pair_every_seed_of_the_deep_spec(quick):
    """C5-CNN is the C5 rule over every seed of `experiments/deep.yaml`, one number per network."""
    results, text = quick["results"], (quick["out"] / "REPRODUCTION.md").read_text()
    data = json.loads((quick["out"] / "reproduction.json").read_text())
    row = next(line for line in text.splitlines() if line.startswith("| C5-CNN |"))
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    assert cells[-1].strip("*") in VERDICTS and cells[-1].strip("*") == data["C5-CNN"]["verdict"]
    for experiment in ("quick_cnn_mnist", "quick_cnn_cifar10"):
        runs = _paired(results, experiment, lambda config: True)
        assert len(runs) == 2  # the quick grid's two seeds, each a cb-Full and cb-DyBW pair
        accuracy = [d["final_test_accuracy"] - f["final_test_accuracy"] for f, d in runs.values()]
        assert f"{_pm(accuracy, 2, 100)} points" in cells[3], (experiment, cells[3])
        half = 12.706 * statistics.stdev(accuracy) / math.sqrt(2)  # t_{0.975, 1}: two seeds
        low, high = 100 * (statistics.mean(accuracy) - half), 100 * (statistics.mean(accuracy) + half)
        assert f"(95 % interval {low:+.2f} to {high:+.2f})" in cells[3], (experiment, cells[3])
    assert [v["accuracy_points"]["seeds"] for v in data["C5-CNN"]["values"].values()] == [2, 2]


@pytest.mark.parametrize("lost", ["every CIFAR-10 run", "one CIFAR-10 run"])
def test_missing_cnn_runs_are_counted_and_cap_the_verdict(quick, tmp_path, lost):
    """A `make figures ONLY=deep` stopped part-way: C3-CNN and C5-CNN are judged on the completed runs only,
    say how many of each sweep's runs completed, and cannot be ``reproduced``."""
    results = tmp_path / "results"
    shutil.copytree(quick["results"], results)
    cifar = results / "quick_cnn_cifar10"
    runs = sorted(path.parent for path in cifar.glob("*/summary.json"))
    assert len(runs) == 4  # cb-Full and cb-DyBW, two seeds
    for run in runs if lost == "every CIFAR-10 run" else runs[-1:]:
        shutil.rmtree(run)
    proc = run_figures(
        "--quick", "--no-run", "--only", "reproduction", "--results", str(results), "--out", str(tmp_path)
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "reproduction.json").read_text())
    sections = (tmp_path / "REPRODUCTION.md").read_text().split("\n## ")
    mnist, cifar_label = "synthetic, MLP (for LeNet-5 on MNIST)", "synthetic, MLP (for the CNN on CIFAR-10)"
    for key in ("C3-CNN", "C5-CNN"):
        judged = [mnist] if lost == "every CIFAR-10 run" else [mnist, cifar_label]
        assert list(data[key]["values"]) == judged, data[key]["values"]
        assert data[key]["verdict"] != "reproduced"
        section = next(s for s in sections if s.startswith(f"{key}:"))
        done = 0 if lost == "every CIFAR-10 run" else 3
        assert f"Runs missing for deep ({cifar_label}: {done} of 4 completed)" in section, section[:1500]


def test_every_m_of_cb_dybw_is_timed_on_the_same_runs(quick):
    """The m table's time to target compares like with like: m = 1 and cb-Full are the first graph's runs of
    the m > 1 setting (convergence_mnist), not every cb-DyBW run of any spec (other delays, the CNN presets)."""
    text = (quick["out"] / "REPRODUCTION.md").read_text()
    section = text.split("## Beyond the paper: cb-DyBW's m", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if re.match(r"\| (\d|cb-Full) ", line)]
    totals = {row.split("|")[1].strip(): row.strip().strip("|").split("|")[-1].strip().split("/")[1] for row in rows}
    timed = {m: total for m, total in totals.items() if total != "0"}  # m without training runs: clock only
    assert set(timed) == {"1", "2", "cb-Full"} and len(set(timed.values())) == 1, totals


def test_the_deep_caption_names_the_step_of_each_algorithm_where_they_differ(quick):
    """On CIFAR-10 cb-Full runs at its own tuned step (experiments/deep.yaml): one step in the caption would be
    wrong for one of the two curves."""
    caption = json.loads((quick["out"].parent / "deep" / "figures.json").read_text())["deep"]["caption"]
    mnist, cifar = caption.split("(for the CNN on CIFAR-10)")
    assert re.search(r"steps 0\.2 x [0-9.]+\^k \(cb-Full\), 0\.1 x [0-9.]+\^k \(cb-DyBW\)", cifar), cifar
    assert re.search(r", step 0\.2, ", mnist) and "(cb-Full)" not in mnist, mnist


def _paired(results: Path, experiment: str, keep) -> dict[tuple, tuple[dict, dict]]:
    """``(topology.seed, seed) -> (cb-Full summary, cb-DyBW summary)`` of the jobs whose config ``keep`` accepts."""
    from omegaconf import OmegaConf

    by = {}
    for path in sorted((results / experiment).glob("*/summary.json")):
        config = OmegaConf.to_container(OmegaConf.load(path.parent / ".hydra" / "config.yaml"), resolve=False)
        summary = json.loads(path.read_text())
        if summary["algo"] in ("cb_full", "cb_dybw") and keep(config):
            if summary["algo"] == "cb_dybw" and config["algo"].get("min_neighbors", 1) != 1:
                continue  # the min_neighbors variants are another spec's
            key = (config["topology"]["seed"], config["seed"], summary["algo"])
            assert key not in by, f"two jobs for {key}"
            by[key] = summary
    pairs = {key[:2] for key in by}
    return {pair: (by[(*pair, "cb_full")], by[(*pair, "cb_dybw")]) for pair in sorted(pairs)}


def test_time_to_target_is_resolved_to_the_iteration_and_curves_skip_the_probes(quick):
    """Every quick training run that reached its target did so at a resolution of one iteration; the probes'
    rows are in metrics.csv, and the frames the curves are drawn from hold the scheduled evaluations only."""
    import pandas as pd

    from dybw.figures import load
    from dybw.figures.specs import Composer, load_specs, own_jobs, unique

    results = quick["results"]
    from omegaconf import OmegaConf

    def replayable(job_dir: Path) -> bool:
        """Iteration-engine runs on the virtual clock probe; AD-PSGD (no iterations), a measured wall-clock
        run (nothing to replay) and a run that turned the probe off keep their evaluation grid."""
        config = OmegaConf.load(job_dir / ".hydra" / "config.yaml")
        virtual = config.runner.get("clock", "virtual") == "virtual"
        return config.algo.name != "ad_psgd" and virtual and config.evaluation.probe_target

    summaries = [json.loads(p.read_text()) for p in results.glob("*/*/summary.json") if replayable(p.parent)]
    runs = [s for s in summaries if s.get("mode", "train") == "train"]
    reached = [s for s in runs if s["iterations_to_target"] is not None]
    assert reached and all(s["target_resolution"] == 1 for s in reached)
    probed = [p.parent for p in results.glob("*/*/metrics.csv") if "probe" in set(pd.read_csv(p)["evaluation"])]
    assert probed
    note = (quick["out"] / "REPRODUCTION.md").read_text()
    assert "resolved to the iteration" in note
    assert "runs with `evaluation.probe_target=false`, to their evaluation grid" in note  # the CIFAR-10 CNN runs
    specs = load_specs(REPO / "experiments")
    composer = Composer(REPO / "conf")
    jobs = unique([job for spec in specs.values() for job in own_jobs(spec, composer, quick=True)])
    jobs = [job for job in jobs if job.kind == "train"]
    frame = load.metrics(jobs, results)
    assert not frame.empty and set(frame["evaluation"]) <= {"full", "light"}
    every = load.metrics(jobs, results, kinds=("full", "light", "probe"))
    assert (every["evaluation"] == "probe").any()


def test_a_second_run_reuses_every_job(quick):
    results, out = quick["results"], quick["out"]
    summaries = sorted(results.glob("*/*/summary.json"))
    assert len(summaries) > 40
    before = {p: p.stat().st_mtime_ns for p in summaries}
    started = time.perf_counter()
    # no images: the figures are drawn by the first run; this one is about the jobs
    proc = run_figures("--quick", "--no-images", "--results", str(results), "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in summaries} == before
    assert " 0 to run" in proc.stdout and not re.search(r" [1-9]\d* to run", proc.stdout), proc.stdout
    assert time.perf_counter() - started < quick["seconds"]


TEXT_FILES = ("REPRODUCTION.md", "reproduction.json", "figures.json", "README.md")


def test_the_committed_results_rebuild_every_text_and_figure_byte_for_byte(quick, tmp_path):
    """What a run keeps in ``<out>/results/`` (summaries and evaluations of the training jobs, the measured
    clocks of wall-clock runs) is enough: with nothing trained, the text files and the PNGs come back the same."""
    out = tmp_path / "out"
    shutil.copytree(quick["out"], out)
    kept = out / "results"
    trained = {p.parent for p in quick["results"].glob("*/*/metrics.csv")}
    assert {p.parent.relative_to(kept) for p in kept.glob("*/*/summary.json")} == {
        d.relative_to(quick["results"]) for d in trained
    }
    assert not list(kept.glob("quick_clock_*")), "clock-only jobs are simulated again, never kept"
    assert max(p.stat().st_size for p in kept.rglob("*") if p.is_file()) < 2_000_000
    for name in (*TEXT_FILES, *(f"{figure}.png" for figure in DEFAULT_FIGURES)):
        (out / name).unlink()

    proc = run_figures(
        "--quick", "--from-committed", "--jobs", "2", "--results", str(tmp_path / "rebuilt"), "--out", str(out)
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"^\d+ training job\(s\) rebuilt", proc.stdout, re.M), proc.stdout[-2000:]
    assert "train " not in proc.stdout, "a training job ran"
    for name in (*TEXT_FILES, *(f"{figure}.png" for figure in DEFAULT_FIGURES)):
        assert (out / name).read_bytes() == (quick["out"] / name).read_bytes(), name


def test_a_training_jobs_clock_files_are_rebuilt_from_its_config_to_the_byte(quick, tmp_path):
    """Only what training alone gives is kept: a virtual-clock job's timeline, links and topology are its
    clock and graph, computed again from the config; a wall-clock job's are measurements and are kept."""
    from dybw.figures import committed, specs

    composer = specs.Composer(REPO / "conf")
    every = specs.load_specs(REPO / "experiments")
    jobs = [j for name in every for j in specs.all_jobs(every[name], every, composer, True) if j.kind == "train"]
    rebuilt = measured = 0
    for job in specs.unique(jobs):
        source = job.job_dir(quick["results"])
        if not (source / "summary.json").is_file():
            continue
        if not committed.clock_is_recomputable(job):
            assert set(committed.MEASURED) <= set(committed.kept_files(job))
            measured += 1
            continue
        committed.rebuild(job, tmp_path / job.dirname)
        for name in ("timeline.parquet", "links.parquet", "topology.json"):
            assert (tmp_path / job.dirname / name).read_bytes() == (source / name).read_bytes(), (job.dirname, name)
        rebuilt += 1
    assert rebuilt > 40 and measured >= 1


def test_jobs_in_pool_processes_give_the_bits_of_jobs_run_one_after_another(quick, tmp_path):
    """A job's numbers do not depend on the process that runs it, nor on the jobs it ran before."""
    import pandas as pd

    from dybw.results import MEASURED_SUMMARY_KEYS

    proc = run_figures(
        "--quick", "--only", "noniid", "--jobs", "1", "--results", str(tmp_path), "--out", str(tmp_path / "o")
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    serial = sorted(tmp_path.glob("*/*/summary.json"))
    assert len(serial) >= 4
    for path in serial:
        pooled = quick["results"] / path.relative_to(tmp_path)
        one, other = (json.loads(p.read_text()) for p in (path, pooled))
        for key in MEASURED_SUMMARY_KEYS:
            one.pop(key, None), other.pop(key, None)
        assert one == other, path.parent.name
        for name in ("metrics.csv", "timeline.parquet"):
            read = pd.read_csv if name.endswith(".csv") else pd.read_parquet
            # wall_seconds (metrics.csv) is measured, everything else computed
            one, other = (read(p.parent / name).drop(columns=["wall_seconds"], errors="ignore") for p in (path, pooled))
            pd.testing.assert_frame_equal(one, other, check_exact=True)
