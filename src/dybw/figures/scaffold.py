"""The scaffold every figure shares: the :class:`Context` a drawing function reads (its spec's jobs, the
results root, the output folder), the :class:`Drawn` it returns, and the small helpers around them --
an empty panel, a figure with no completed runs, a job's setup for captions, the results a figure came
from, the datasets' names in titles.  Public: figures of plugins use them as dybw's own do."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from . import load, style
from .specs import Job, Spec


@dataclass
class Context:
    spec: Spec
    jobs: list[Job]  # the spec's own jobs and those of the specs it takes jobs from
    results: Path
    out: Path
    quick: bool
    command: str
    conf_dir: Path
    # Captions go to figures.json, README.md and REPRODUCTION.md; an image carries its title, legend and
    # panels only, as a figure placed in a paper does (`--captions-in-images` embeds them too).
    captions_in_images: bool = False
    # `--no-images`: every figure is built (its caption and numbers feed figures.json and REPRODUCTION.md)
    # but none is rendered to a file.
    images: bool = True

    @property
    def title(self) -> str:
        """The spec's title, naming the data its training runs really use (``--quick``: synthetic)."""
        return title_for_data(self.spec.title, {j.plain["dataset"]["name"] for j in self.jobs if j.kind == "train"})

    def finish(self, fig, caption: str, source: str = "training") -> Drawn:
        """Save the spec's figure (title above the legend; the caption underneath only with
        ``captions_in_images``) as ``<spec>.png`` and ``<spec>.pdf`` in ``out`` unless ``images`` is off, and
        describe it."""
        name, title = self.spec.name, self.title
        embedded = caption if self.captions_in_images else None
        files = style.finish(fig, self.out, name, title, embedded, save=self.images)
        return Drawn(name, title, caption, files, source)

    def select(self, spec: str | None = None, kind: str | None = None, **params) -> list[Job]:
        jobs = [j for j in self.jobs if (spec is None or j.spec == spec) and (kind is None or j.kind == kind)]
        for key, value in params.items():
            jobs = [j for j in jobs if j.params.get(key) == value]
        return jobs

    def summaries(self, jobs: list[Job] | None = None) -> pd.DataFrame:
        """Summaries of the completed runs of exactly these configs."""
        frame = load.summaries(self.jobs if jobs is None else jobs, self.results)
        if frame.empty:
            return frame
        return frame[frame["current"] & (frame["status"] == "completed")].reset_index(drop=True)

    def metrics(self, jobs: list[Job]) -> pd.DataFrame:
        return load.metrics(self.completed_jobs(jobs), self.results)

    def completed_jobs(self, jobs: list[Job]) -> list[Job]:
        """The jobs with a completed run of exactly their config."""
        frame = self.summaries(jobs) if jobs else pd.DataFrame()
        done = set(frame["job"]) if not frame.empty else set()
        return [j for j in jobs if str(j.relative_dir) in done]


@dataclass
class Drawn:
    name: str
    title: str
    caption: str
    files: list[Path] = field(default_factory=list)
    source: str = "training"


def no_data(ax, text="no completed runs"):
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def no_runs(ctx: Context, fig, axes, source: str = "training") -> Drawn:
    """The figure of a spec none of whose runs completed: every panel says so."""
    for ax in axes.flat:
        no_data(ax)
    return ctx.finish(fig, "no completed runs", source)


def job_setup(ctx: Context, jobs: list[Job]) -> tuple[dict, dict | None]:
    job = jobs[0]
    return job.plain, load.topology(job, ctx.results)


def source_of(ctx: Context, jobs: list[Job]) -> str:
    """Where a run of ``make figures`` keeps the jobs' results (whichever root this drawing reads them from)."""
    experiments = sorted({j.experiment for j in jobs})
    return ", ".join(f"results/{e}/" for e in experiments)


DATASET_NAMES = {"mnist": "MNIST", "cifar10": "CIFAR-10", "synthetic": "synthetic"}


def dataset_name(name: str) -> str:
    return DATASET_NAMES.get(name, name)


def title_for_data(title: str, datasets: set[str]) -> str:
    """``title`` with each dataset it names but no run uses replaced by the datasets the runs do use.

    A spec's title names the paper's data ("MNIST: convergence of ..."); ``make figures-quick`` runs the
    same specs on synthetic data, and its figures must say so ("Synthetic data: convergence of ...").
    """
    if not datasets:
        return title
    used = " and ".join(dataset_name(d) for d in sorted(datasets))
    used = used + " data" if datasets == {"synthetic"} else used
    spec_title = title
    for key, shown in DATASET_NAMES.items():
        if key not in datasets:
            title = re.sub(rf"(?<![\w-]){re.escape(shown)}(?![\w-])", used, title)
    if title != spec_title and title.startswith(used):  # "synthetic data: ..." opens a sentence
        title = title[:1].upper() + title[1:]
    return title  # a spec's own title keeps its case ("cb-DyBW against ...")
