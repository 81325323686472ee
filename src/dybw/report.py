"""``python -m dybw.report``: a W&B Report for one experiment (the runs of a W&B group).

    python -m dybw.report [--experiment NAME] [--results results] [--project dybw] [--entity E]
                          [--mode auto|online|offline] [--json]

The report's layout is plain data built by :func:`report_layout` (sections of panel specs: test accuracy
and train loss vs iteration and vs virtual time, iteration durations, backup counts, a summary); no
network is needed to build or check it.  :func:`to_report` turns it into a ``wandb_workspaces`` Report,
which is saved only when W&B is online (credentials and a reachable host, as ``logger.mode=auto``
decides).  Without ``--experiment`` it reports on the training experiment whose last job ended last
(:func:`latest_experiment`: not a directory of clock-only jobs or of figures).  Offline the command
prints what it would create, the offline runs it found under ``results/<experiment>/`` and the
``wandb sync`` command that uploads them, and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from .tracking import effective_mode, find_run_files, read_run_file, requested_mode


@dataclass(frozen=True)
class Panel:
    """One chart: ``y`` metrics of every run of the experiment against ``x``.

    ``kind="line"`` plots history (``x`` is a logged metric: ``iteration`` or ``time``);
    ``kind="bar"`` compares the runs' summary values of ``y`` (``x`` unused).
    """

    title: str
    y: tuple[str, ...]
    x: str = "iteration"
    kind: str = "line"
    log_y: bool = False


@dataclass(frozen=True)
class Section:
    heading: str
    text: str
    panels: tuple[Panel, ...]


def report_sections() -> tuple[Section, ...]:
    """What the report shows, in order (metric names are those :mod:`dybw.tracking` logs)."""
    return (
        Section(
            "Convergence vs iterations",
            "Average model after every evaluation, against the iteration k.",
            (
                Panel("Test accuracy vs iteration", ("test_accuracy",), "iteration"),
                Panel("Train loss vs iteration", ("train_loss",), "iteration", log_y=True),
            ),
        ),
        Section(
            "Convergence vs time",
            "The same against the (virtual) time E(k) at which iteration k ended: what backup workers buy.",
            (
                Panel("Test accuracy vs time", ("test_accuracy",), "time"),
                Panel("Train loss vs time", ("train_loss",), "time", log_y=True),
            ),
        ),
        Section(
            "Iteration durations",
            "T(k) = E(k) - E(k-1) per iteration, and its running mean.",
            (
                Panel("Iteration duration T(k)", ("iteration_duration",), "iteration"),
                Panel("Mean iteration duration", ("mean_iteration_duration",), "iteration"),
            ),
        ),
        Section(
            "Backup workers",
            "Per iteration, the number of neighbours a worker did not wait for (mean, min and max over the workers).",
            (
                Panel("Backup count per iteration", ("backups_mean", "backups_min", "backups_max"), "iteration"),
                Panel("Mean backup count", ("mean_backups",), "iteration"),
            ),
        ),
        Section(
            "Summary",
            "One bar per run, from summary.json.",
            (
                Panel("Final test accuracy", ("final_test_accuracy",), kind="bar"),
                Panel("Time to target accuracy", ("time_to_target",), kind="bar"),
                Panel("Mean iteration duration", ("mean_iteration_duration",), kind="bar"),
            ),
        ),
    )


def report_layout(experiment: str, project: str = "dybw", entity: str | None = None) -> dict:
    """The report as plain data: title, where the runs are (project, entity, group) and its sections."""
    return {
        "title": f"dybw: {experiment}",
        "description": f"Runs of the experiment {experiment!r} (W&B group {experiment!r}), one per job.",
        "project": project,
        "entity": entity,
        "group": experiment,
        "sections": [
            {"heading": s.heading, "text": s.text, "panels": [asdict(p) for p in s.panels]} for s in report_sections()
        ],
    }


def to_report(layout: dict):
    """A ``wandb_workspaces.reports.v2.Report`` of ``layout`` (not saved: ``.save()`` needs W&B online).

    Needs an ``entity`` in the layout when offline (the default entity is asked from the W&B API).
    """
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces import expr

    entity = layout["entity"]
    extra = {"entity": entity} if entity else {}

    def runset():
        return wr.Runset(
            project=layout["project"],
            name=layout["group"],
            filters=expr.And(expr.Metric("Group") == layout["group"]),
            **extra,
        )

    def panel(spec: dict):
        if spec["kind"] == "bar":
            return wr.BarPlot(title=spec["title"], metrics=[wr.SummaryMetric(name) for name in spec["y"]])
        return wr.LinePlot(
            title=spec["title"], x=spec["x"], y=list(spec["y"]), log_y=spec["log_y"] or None, title_x=spec["x"]
        )

    blocks = [wr.P(layout["description"])]
    for section in layout["sections"]:
        blocks += [
            wr.H2(section["heading"]),
            wr.P(section["text"]),
            wr.PanelGrid(runsets=[runset()], panels=[panel(p) for p in section["panels"]]),
        ]
    return wr.Report(
        project=layout["project"],
        title=layout["title"],
        description=layout["description"],
        blocks=blocks,
        width="fluid",
        **extra,
    )


def describe(layout: dict) -> str:
    """The layout as a few readable lines."""
    where = f"{layout['entity']}/{layout['project']}" if layout["entity"] else layout["project"]
    lines = [f'W&B report "{layout["title"]}" in project {where}, runs of group {layout["group"]!r}:']
    for section in layout["sections"]:
        panels = []
        for p in section["panels"]:
            what = ", ".join(p["y"])
            panels.append(
                f"{what} (summary bars)"
                if p["kind"] == "bar"
                else f"{what} vs {p['x']}" + (" (log y)" if p["log_y"] else "")
            )
        lines.append(f"  {section['heading']}: " + "; ".join(panels))
    return "\n".join(lines)


@dataclass(frozen=True)
class Experiment:
    """A directory under ``results/``: what it holds and when a job of it last ended."""

    name: str
    kind: str  # training | clock-only | figures | no runs
    ended: float  # newest summary.json's modification time (0 when there is none)


def experiments(results: Path) -> list[Experiment]:
    """Every directory under ``results``: training experiments (some job trained a model), clock-only ones
    (``make figures``' timing simulations), figure outputs (``quick_figures``) and the rest."""
    found = []
    for directory in sorted(p for p in Path(results).glob("*") if p.is_dir()):
        training, clock = [], []
        for path in directory.glob("*/summary.json"):
            try:
                mode = json.loads(path.read_text()).get("mode", "train")
                (clock if mode == "clock" else training).append(path.stat().st_mtime)
            except (OSError, ValueError, AttributeError):
                continue
        if training:
            found.append(Experiment(directory.name, "training", max(training)))
        elif clock:
            found.append(Experiment(directory.name, "clock-only", max(clock)))
        elif (directory / "figures.json").is_file():
            found.append(Experiment(directory.name, "figures", 0.0))
        else:
            found.append(Experiment(directory.name, "no runs", 0.0))
    return found


def latest_experiment(results: Path) -> str | None:
    """The training experiment under ``results`` whose last job ended last (None when there is none)."""
    training = [e for e in experiments(results) if e.kind == "training"]
    return max(training, key=lambda e: e.ended).name if training else None


def _listing(results: Path) -> str:
    found = experiments(results)
    if not found:
        return f"nothing under {results}/"
    return f"under {results}/: " + ", ".join(f"{e.name} ({e.kind})" for e in found)


def runs_of(experiment_dir: Path) -> list[dict]:
    """The W&B run files under an experiment's job directories: path, name, job type, whether synced."""
    runs = []
    for path in find_run_files(experiment_dir):
        try:
            run = read_run_file(path, header_only=True)
            name, job_type, group = run.name, run.job_type, run.group
        except Exception:  # noqa: BLE001 - a run file being written or damaged: list it anyway
            name = job_type = group = "?"
        runs.append(
            {
                "path": path,
                "run_dir": path.parent,
                "name": name,
                "job_type": job_type,
                "group": group,
                "offline": path.parent.name.startswith("offline-run-"),
                "synced": path.with_name(path.name + ".synced").exists(),
            }
        )
    return runs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dybw.report", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--experiment", help="experiment name = W&B group (default: the training experiment under --results run last)"
    )
    parser.add_argument("--results", default="results", help="where the experiments' job directories are")
    parser.add_argument("--project", default="dybw")
    parser.add_argument("--entity", default=None)
    parser.add_argument(
        "--mode",
        default="auto",
        choices=("auto", "online", "offline"),
        help="auto: online when W&B credentials exist and the host answers",
    )
    parser.add_argument("--json", action="store_true", help="print the layout as JSON and exit")
    args = parser.parse_args(argv)

    results = Path(args.results)
    experiment = args.experiment or latest_experiment(results)
    if experiment is None:
        print(
            f"error: no training experiment to report on ({_listing(results)}); "
            f"run one (e.g. make run) or pass --experiment NAME",
            file=sys.stderr,
        )
        return 2
    if not (results / experiment).is_dir():
        print(f"error: --experiment {experiment}: no such experiment ({_listing(results)})", file=sys.stderr)
        return 2
    layout = report_layout(experiment, args.project, args.entity)
    if args.json:
        print(json.dumps(layout, indent=2))
        return 0
    runs = runs_of(results / experiment)
    unsynced = [r for r in runs if r["offline"] and not r["synced"]]
    requested = requested_mode(args.mode)
    mode, why = effective_mode(requested)

    if mode != "online":
        if not why:
            why = (
                "--mode offline"
                if args.mode == "offline"
                else "WANDB_MODE=" + os.environ["WANDB_MODE"]
                if os.environ.get("WANDB_MODE")
                else "no W&B credentials"
            )
        print(f"W&B is offline ({why}): nothing created.")
        print("Would create " + describe(layout))
        _print_runs(runs, results / experiment)
        if unsynced:
            print("Upload the offline runs, then rerun this command online:")
            print(f"  wandb sync {results / experiment}/*/wandb/offline-run-*")
        return 0

    if unsynced:
        print(
            f"{len(unsynced)} offline run(s) are not uploaded yet; first: "
            f"wandb sync {results / experiment}/*/wandb/offline-run-*"
        )
    try:
        report = to_report(layout)
        report.save()
    except ImportError:
        print("error: the report needs wandb-workspaces (pip install wandb-workspaces)", file=sys.stderr)
        return 1
    except Exception as error:  # noqa: BLE001 - one line, not a traceback
        print(f"error: W&B did not save the report: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    print(f"Created {describe(layout)}\n{report.url}")
    return 0


def _print_runs(runs: list[dict], where: Path) -> None:
    if not runs:
        print(f"No W&B run files under {where}/ (run with logger=wandb).")
        return
    print(f"{len(runs)} W&B run(s) under {where}/:")
    for run in runs:
        state = "online" if not run["offline"] else ("offline, synced" if run["synced"] else "offline, not synced")
        print(f"  {run['name']} [{run['job_type']}] ({state}): {run['run_dir']}")


if __name__ == "__main__":
    sys.exit(main())
