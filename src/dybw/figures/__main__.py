"""``python -m dybw.figures``: run what the experiment specs need, then draw every figure and the table.

    python -m dybw.figures                       # make figures: every spec, full size
    python -m dybw.figures --quick               # make figures-quick: tiny sizes, same code path
    python -m dybw.figures --only speedup        # one spec (and the specs it takes jobs from)
    python -m dybw.figures --list                # the specs and how many jobs each needs
    python -m dybw.figures --from-committed      # no training: from the compact results in paper_figures/results/

Completed jobs (same config hash) are reused, never rerun; a second call with nothing new only redraws.
Every completed training job's compact results go to ``<out>/results/`` (:mod:`.committed`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

PROJECT = Path(__file__).resolve().parents[3]
TABLE = "reproduction"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dybw.figures", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (synthetic data, few iterations), own results")
    parser.add_argument(
        "--only", default="", help="comma-separated spec names (default: every spec but those with default: false)"
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help="results root (default ./results; with --from-committed ./results/committed, rebuilt from them)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output directory (default ./paper_figures, or ./results/quick_figures with --quick)",
    )
    parser.add_argument("--experiments", type=Path, default=PROJECT / "experiments", help="the specs")
    parser.add_argument("--conf", type=Path, default=PROJECT / "conf", help="the Hydra config tree")
    parser.add_argument("--no-run", action="store_true", help="draw from existing results only; run nothing")
    parser.add_argument(
        "--from-committed",
        action="store_true",
        help="train nothing: rebuild the training jobs from the compact results in <out>/results/, simulate the "
        "clock-only jobs, then draw and write REPRODUCTION.md as a full run would",
    )
    parser.add_argument(
        "--captions-in-images",
        action="store_true",
        help="print each figure's caption under it in the PNG/PDF too (default: captions only in figures.json, "
        "README.md and REPRODUCTION.md)",
    )
    parser.add_argument(
        "--no-images",
        action="store_true",
        help="write REPRODUCTION.md, reproduction.json, figures.json and README.md as a full run would, but no "
        "PNG/PDF (the numbers without the rendering, e.g. to check them against the committed ones)",
    )
    parser.add_argument("--list", action="store_true", help="list the specs and their jobs, then exit")
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="training jobs run at once, each in its own process (default: the usable cores; 1: in this process)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    started = time.perf_counter()
    from ..errors import DybwError
    from . import specs as specs_mod

    out = args.out or (Path("results") / "quick_figures" if args.quick else Path("paper_figures"))
    committed = out / "results"
    default_results = Path("results") / ("quick_committed" if args.quick else "committed")
    results = args.results or (default_results if args.from_committed else Path("results"))
    try:
        workers = _workers(args.jobs)
        specs = specs_mod.load_specs(args.experiments)
        selected = [s.strip() for s in args.only.split(",") if s.strip()] or [n for n in specs if specs[n].default]
        unknown = [s for s in selected if s not in specs]
        if unknown:
            raise DybwError(f"--only {','.join(unknown)}: no such spec; known: {', '.join(specs)}")
        composer = specs_mod.Composer(args.conf)
        per_spec = {name: specs_mod.all_jobs(specs[name], specs, composer, args.quick) for name in selected}
        needed = specs_mod.unique([j for jobs in per_spec.values() for j in jobs])
        _validate(needed)
    except DybwError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(
        f"{len(selected)} spec(s), {len(needed)} distinct jobs ({'quick' if args.quick else 'full'}); "
        f"results in {results}/, figures in {out}/, {workers} training job(s) at once "
        f"(prepared in {time.perf_counter() - started:.1f} s)",
        flush=True,
    )
    if args.list:
        for name in selected:
            own = [j for j in needed if j.spec == name]
            print(
                f"  {name:22s} {specs[name].figure:12s} {len(own):4d} own jobs, {len(per_spec[name]):4d} used  "
                f"{specs[name].title}"
            )
        return 0

    read = {name: specs_mod.read_jobs(specs[name], specs, composer, args.quick) for name in selected}
    every_job = specs_mod.unique([j for name in selected for j in per_spec[name] + read[name]])
    failed = 0
    if args.from_committed:
        from .committed import restore

        t0 = time.perf_counter()
        rebuilt = restore(every_job, committed, results)
        print(f"{rebuilt} training job(s) rebuilt from {committed}/ into {results}/ ({time.perf_counter() - t0:.1f} s)")
    if not args.no_run:
        from .runner import run_jobs

        # clock-only specs first (seconds), then training (none from the committed results: they are rebuilt)
        owners = sorted(
            dict.fromkeys(j.spec for j in needed),
            key=lambda name: (any(j.kind == "train" for j in needed if j.spec == name), name),
        )
        ordered = [j for name in owners for j in needed if j.spec == name]
        if args.from_committed:
            ordered = [j for j in ordered if j.kind == "clock"]
        counts = run_jobs(ordered, results, workers)
        failed = sum(c["failed"] for c in counts.values())
    if not args.from_committed:
        from .committed import export

        copied = export(every_job, results, committed)
        print(f"{copied} completed training job(s) kept in {committed}/ (compact: what the figures read)")
    run_seconds = time.perf_counter() - started

    from . import (  # noqa: F401 - the drawing modules: importing one registers its figures
        agreement,
        backups,
        baselines,
        convergence,
        durations,
        min_neighbors,
        network,
        ratio,
        registry,
        report,
        scaffold,
        speedup,
        static_b,
        style,
        wall_vs_virtual,
    )

    figures = registry.figures()
    style.setup()
    drawn, failed_figures = [], []
    command = "make figures-quick" if args.quick else "make figures"
    for name in selected:
        spec = specs[name]
        # the jobs of the specs it reads from: finished results only, never run
        jobs = per_spec[name] + read[name]
        ctx = scaffold.Context(
            spec, jobs, results, out, args.quick, command, Path(args.conf), args.captions_in_images, not args.no_images
        )
        t0 = time.perf_counter()
        if spec.figure == TABLE:
            files = report.write(
                ctx, specs, args.quick, f"`{command}` (`python -m dybw.figures{' --quick' if args.quick else ''}`)"
            )
            print(f"[{name}] wrote {', '.join(str(f) for f in files)} ({time.perf_counter() - t0:.1f} s)", flush=True)
            continue
        if spec.figure not in figures:
            print(
                f"error: {spec.path}: figure '{spec.figure}' is unknown; known: {', '.join(figures)}, {TABLE} "
                "(figures of your own come from a package's 'dybw.plugins' entry point: docs/extending.md)",
                file=sys.stderr,
            )
            return 2
        try:
            result = figures[spec.figure](ctx)
        except Exception as error:  # noqa: BLE001 - one broken figure must not hide the others
            import traceback

            failed_figures.append(name)
            traceback.print_exc()
            print(f"[{name}] FAILED to draw: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
            continue
        drawn.append((spec, result))
        files = ", ".join(str(f) for f in result.files) or "no image (--no-images)"
        print(f"[{name}] drew {files} ({time.perf_counter() - t0:.1f} s)", flush=True)
    _write_index(out, specs, drawn, args.quick)
    total = time.perf_counter() - started
    print(
        f"done in {total:.0f} s (jobs {run_seconds:.0f} s, drawing {total - run_seconds:.0f} s)"
        + (f"; {failed} job(s) FAILED (see their summary.json)" if failed else "")
        + (f"; figures FAILED: {', '.join(failed_figures)}" if failed_figures else ""),
        flush=True,
    )
    return 1 if failed or failed_figures else 0


def _workers(jobs: int | None) -> int:
    """How many training jobs run at once: ``--jobs``, else the usable cores."""
    from ..errors import DybwError
    from ..tf_setup import usable_cores

    if jobs is None:
        return usable_cores()
    if jobs < 1:
        raise DybwError(f"--jobs={jobs} is invalid: must be at least 1 (1 runs every job in this process)")
    return jobs


def _validate(jobs) -> None:
    """Every job's config is checked before anything runs (one line naming the job on error)."""
    import warnings

    from ..config import load, validate
    from ..errors import DybwError

    for job in jobs:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                validate(load(job.plain))
        except DybwError as error:
            raise DybwError(f"spec {job.spec}, job {job.relative_dir}: {error}") from None


def _write_index(out: Path, specs, drawn, quick: bool) -> None:
    """``figures.json`` (title, caption, source of every figure drawn so far) and ``README.md`` from it."""
    from ..results import atomic_write_text

    out.mkdir(parents=True, exist_ok=True)
    index_path = out / "figures.json"
    try:
        index = json.loads(index_path.read_text())
    except (OSError, ValueError):
        index = {}
    for spec, result in drawn:
        index[spec.name] = {
            "title": result.title,
            "caption": result.caption,
            "source": result.source,
            "why": spec.why,
            "spec": f"experiments/{spec.path.name}",
        }
    order = list(dict.fromkeys([*(specs[TABLE].jobs_from if TABLE in specs else []), *specs]))  # the table's order
    index = {k: index[k] for k in order if k in index}
    atomic_write_text(index_path, json.dumps(index, indent=2) + "\n")
    lines = [
        "# Paper figures",
        "",
        f"Generated by `{'make figures-quick' if quick else 'make figures'}` (`python -m dybw.figures"
        f"{' --quick' if quick else ''}`) from the experiment specs in `experiments/`; do not edit. "
        "Each figure is a PNG and a PDF; [REPRODUCTION.md](REPRODUCTION.md) checks the paper's claims "
        "C1-C6 against them. *Source* says whether a figure comes from training runs or from the virtual "
        "clock alone (the clock never depends on the model, so timing-only figures simulate it without "
        "training).",
        "",
    ]
    for name, entry in index.items():
        lines += [
            f"## {entry['title']}",
            "",
            f"![{name}]({name}.png)",
            "",
            f"[{name}.pdf]({name}.pdf) · spec `{entry['spec']}` · source: {entry['source']} · {entry['why']}",
            "",
            entry["caption"],
            "",
        ]
    atomic_write_text(out / "README.md", "\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
