"""The verdict rules of REPRODUCTION.md (``dybw.figures.rules``): every threshold pinned at its boundary.

Each threshold is checked just inside and just outside (a margin of 1e-4, far below the 0.01 by which a
threshold could be moved unnoticed), through the functions claims.py calls, then through claims.py's claims
on small synthetic frames; the printed rule texts and the table of docs/figures.md must be the module's.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import math
import re
import sys
import tokenize
from pathlib import Path
from types import SimpleNamespace

import pytest

from dybw.figures import rules
from dybw.figures.rules import NOT, PARTLY, REPRODUCED

pytestmark = pytest.mark.unit  # no TensorFlow, MPI or subprocess: make test-fast

REPO = Path(__file__).resolve().parents[1]
EPS = 1e-4


# --- the module stands alone ---------------------------------------------------------------------------


def test_the_rules_import_the_standard_library_only():
    tree = ast.parse(Path(rules.__file__).read_text())
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not [n for n in imports if isinstance(n, ast.ImportFrom) and n.level], "no import from dybw"
    names = {a.name.split(".")[0] for n in imports if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in imports if isinstance(n, ast.ImportFrom)}
    assert names <= set(sys.stdlib_module_names) | {"__future__"}, names


def test_importing_the_rules_and_the_report_loads_no_tensorflow():
    # Checked when the test runs, not when the module is collected: in a session mixing tiers an earlier
    # test may load TensorFlow in between (the unit tier's own session always runs this for real).
    if "tensorflow" in sys.modules:
        pytest.skip("TensorFlow was loaded by an earlier test of this session (a session mixing tiers)")
    import dybw.figures.claims  # noqa: F401
    import dybw.figures.report  # noqa: F401
    import dybw.figures.sections  # noqa: F401

    assert "tensorflow" not in sys.modules


# --- C1: the log-log slope ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("slope", "linear", "weak"),
    [
        (-1.25 - EPS, False, False),
        (-1.25, True, False),
        (-1.25 + EPS, True, False),
        (-1.0, True, False),
        (-0.75 - EPS, True, False),
        (-0.75, True, False),  # both ends of the linear band are in it
        (-0.75 + EPS, False, True),
        (-0.25 - EPS, False, True),
        (-0.25, False, True),
        (-0.25 + EPS, False, False),
        (0.1, False, False),
        (math.nan, False, False),
    ],
)
def test_c1_slope_bands(slope, linear, weak):
    assert rules.c1_linear(slope, 3) is linear
    assert rules.c1_weak(slope, 3) is weak
    assert not rules.c1_linear(slope, 0) and not rules.c1_weak(slope, 0)


@pytest.mark.parametrize(
    ("theorem", "fixed", "verdict"),
    [
        (-1.0, -1.0, REPRODUCED),
        (-0.75, -1.25, REPRODUCED),
        (-1.0, -0.75 + EPS, PARTLY),  # linear with the theorem's step only
        (-1.0, 0.0, PARTLY),
        (-0.5, 0.0, PARTLY),  # falls, not linearly
        (0.0, -0.25, PARTLY),
        (0.0, -1.0, NOT),  # linear at a fixed step only: the rule asks for the theorem's step
        (-0.25 + EPS, -0.25 + EPS, NOT),
        (-1.25 - EPS, -1.25 - EPS, NOT),
    ],
)
def test_c1_verdict(theorem, fixed, verdict):
    assert rules.c1_verdict(theorem, 3, fixed, 3) == verdict


def test_c1_without_seeds_is_not_reproduced():
    assert rules.c1_verdict(-1.0, 0, -1.0, 3) == NOT
    assert rules.c1_verdict(-1.0, 3, -1.0, 0) == PARTLY


# --- C2: the cut in the paper's setting -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("cut", "verdict"),
    [
        (0.65 + EPS, REPRODUCED),
        (0.65, REPRODUCED),
        (0.65 - EPS, PARTLY),
        (0.30 + EPS, PARTLY),
        (0.30, PARTLY),
        (0.30 - EPS, NOT),
        (-0.5, NOT),
        (math.nan, NOT),
    ],
)
def test_c2_verdict(cut, verdict):
    assert rules.c2_verdict(cut, 5) == verdict
    assert rules.c2_holds(cut, 5) is (verdict == REPRODUCED)
    assert rules.c2_verdict(cut, 0) == NOT and not rules.c2_holds(cut, 0)


def test_c2_threshold_is_the_lower_end_of_the_papers_range():
    assert rules.PAPER_CUT == (0.65, 0.70)
    assert rules.C2.reproduced == rules.PAPER_CUT[0]
    assert rules.paper_cut() == "65-70 %"


# --- C3: the ratio of iterations to target --------------------------------------------------------------


@pytest.mark.parametrize(
    ("ratio", "same_order", "loose"),
    [
        (0.2 - EPS, False, False),
        (0.2, False, True),
        (0.2 + EPS, False, True),
        (0.5 - EPS, False, True),
        (0.5, True, True),
        (0.5 + EPS, True, True),
        (1.0, True, True),
        (2.0 - EPS, True, True),
        (2.0, True, True),
        (2.0 + EPS, False, True),
        (5.0, False, True),
        (5.0 + EPS, False, False),
        (math.nan, False, False),
    ],
)
def test_c3_factors(ratio, same_order, loose):
    assert rules.c3_same_order(ratio, 3, True) is same_order
    assert rules.c3_loose(ratio, 3) is loose
    assert not rules.c3_same_order(ratio, 3, False)  # a run missed the target
    assert not rules.c3_same_order(ratio, 0, True) and not rules.c3_loose(ratio, 0)


@pytest.mark.parametrize(
    ("strict", "loose", "complete", "verdict"),
    [
        ([True, True], [True, True], True, REPRODUCED),
        ([True, True], [True, True], False, PARTLY),  # checked on part of the runs: at most partly
        ([True, False], [True, True], True, PARTLY),
        ([True, False], [True, False], True, NOT),
        ([], [], True, NOT),
    ],
)
def test_c3_and_c5_over_tasks(strict, loose, complete, verdict):
    assert rules.over_tasks(strict, loose, complete) == verdict


def test_c3_and_c5_are_judged_on_the_iid_tasks():
    assert rules.judged("MNIST") and rules.judged("CIFAR-10") and rules.judged("synthetic")
    assert rules.judged("MNIST (convergence_mnist)")
    assert not rules.judged("MNIST, shards")


# --- C4: backups that vary and adapt --------------------------------------------------------------------


@pytest.mark.parametrize(("change", "varies"), [(0.10 - EPS, False), (0.10, True), (0.10 + EPS, True), (0.0, False)])
def test_c4_variation(change, varies):
    assert rules.c4_varies(change, 3) is varies
    assert not rules.c4_varies(change, 0)


@pytest.mark.parametrize(("slow", "adapts"), [(0.5 - EPS, True), (0.5, True), (0.5 + EPS, False), (1.0, False)])
def test_c4_adaptation(slow, adapts):
    """The slow senders' share of use against the others' (1.0): at most half."""
    assert rules.c4_adapts(slow, 3, 1.0, 3) is adapts
    assert rules.c4_adapts(0.8 * slow, 3, 0.8, 3) is adapts
    assert not rules.c4_adapts(slow, 0, 1.0, 3) and not rules.c4_adapts(slow, 3, 1.0, 0)


def test_c4_verdict():
    assert rules.c4_verdict(True, True) == REPRODUCED
    assert rules.c4_verdict(True, False) == rules.c4_verdict(False, True) == PARTLY
    assert rules.c4_verdict(False, False) == NOT


# --- C5: accuracy and time to target --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("difference", "close", "loose"),
    [
        (0.0, True, True),
        (0.01 - EPS, True, True),
        (0.01, True, True),
        (-0.01, True, True),
        (0.01 + EPS, False, True),
        (-0.01 - EPS, False, True),
        (0.03, False, True),
        (-0.03 + EPS, False, True),
        (0.03 + EPS, False, False),
        (-0.03 - EPS, False, False),
        (math.nan, False, False),
    ],
)
def test_c5_accuracy_margins(difference, close, loose):
    assert rules.c5_close(difference, 3) is close
    assert rules.c5_loose(difference, 3) is loose
    assert not rules.c5_close(difference, 0) and not rules.c5_loose(difference, 0)


@pytest.mark.parametrize(("cut", "faster"), [(EPS, True), (0.0, False), (-EPS, False), (math.nan, False)])
def test_c5_time_to_target_must_be_lower(cut, faster):
    assert rules.c5_faster(cut, 3) is faster
    assert not rules.c5_faster(0.5, 0)


# --- C6 and cb-Adaptive ---------------------------------------------------------------------------------


def test_c6_verdict():
    assert rules.c6_verdict([True, True, True]) == REPRODUCED
    assert rules.c6_verdict([True, False, False]) == PARTLY
    assert rules.c6_verdict([False, False, False]) == NOT
    assert rules.c6_verdict([]) == NOT


@pytest.mark.parametrize(("ratio", "within"), [(1.1 - EPS, True), (1.1, True), (1.1 + EPS, False), (0.5, True)])
def test_adaptive_against_the_best_static_b(ratio, within):
    assert rules.adaptive_within(ratio, 3) is within
    assert not rules.adaptive_within(ratio, 0)


# --- the words ------------------------------------------------------------------------------------------


def test_the_numbers_in_words():
    assert rules.percent(0.3) == "30 %" and rules.percent(0.1) == "10 %" and rules.percent(0.65) == "65 %"
    assert rules.points(0.01) == "1 point" and rules.points(0.03) == "3 points"
    assert rules.number(2.0) == "2" and rules.number(1 / 5) == "0.2" and rules.number(-0.75) == "-0.75"


def test_each_rule_states_its_thresholds():
    texts = rules.TEXTS
    assert list(texts) == ["C1", "C2", "C3", "C4", "C5", "C6", "C3-CNN", "C5-CNN"]
    assert "within [-1.25, -0.75]" in texts["C1"] and "between -0.75 and -0.25; not: above -0.25" in texts["C1"]
    assert "is >= 65 %; partly: >= 30 %" in texts["C2"]
    assert "within [0.5, 2]; partly: within [0.2, 5]" in texts["C3"]
    assert "for >= 10 % of" in texts["C4"] and "at most half as often as the others'" in texts["C4"]
    assert "within 1 point of cb-Full's" in texts["C5"] and "partly: within 3 points" in texts["C5"]
    assert "within 10 % of the best static b" in rules.ADAPTIVE.text() and "at most 1.1x" in rules.ADAPTIVE.text()


def test_the_texts_follow_the_constants():
    """A rule's words are generated from its thresholds: move one and the printed rule moves with it."""
    assert ">= 64 %" in dataclasses.replace(rules.C2, reproduced=0.64).text()
    assert "[0.4, 2.5]" in dataclasses.replace(rules.C3, factor=2.5).text()
    assert "[-1.3, -0.7]" in dataclasses.replace(rules.C1, low=-1.3, high=-0.7).text()
    assert "within 2 points of" in dataclasses.replace(rules.C5, close=0.02).text()
    assert "a quarter as often" in dataclasses.replace(rules.C4, slow_share=0.25).text()


def test_the_rules_cannot_be_changed_at_run_time():
    with pytest.raises(dataclasses.FrozenInstanceError):
        rules.C2.reproduced = 0.5


# --- claims.py, sections.py and report.py: the real code path -----------------------------------------


def test_reproduction_md_prints_the_rules_of_the_module():
    from dybw.figures import report

    assert report.RULES == rules.TEXTS and list(report.RULES) == list(rules.TEXTS)
    assert report.PAPER["C2"] == "cb-DyBW's mean iteration duration is 65-70 % lower than cb-Full's."


REPORT_MODULES = ["claims.py", "sections.py", "report.py"]  # what REPRODUCTION.md says, and why

DRAWING_MODULES = [
    "convergence.py", "backups.py", "speedup.py", "ratio.py", "static_b.py",
    "durations.py", "agreement.py", "min_neighbors.py", "wall_vs_virtual.py", "baselines.py",
]  # fmt: skip


@pytest.mark.parametrize("name", [*REPORT_MODULES, "frames.py", *DRAWING_MODULES])
def test_no_threshold_is_typed_in_the_figure_modules(name):
    """The claims' modules type no float and no percentage but the t-interval's 95 %; the figures type
    neither C2's threshold nor the paper's range."""
    source = (REPO / "src" / "dybw" / "figures" / name).read_text()
    numbers = [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.NUMBER]
    if name in REPORT_MODULES:
        assert not [n for n in numbers if not n.isdigit()], f"a float in {name}: put it in rules.py"
        assert set(re.findall(r"\d+(?:\.\d+)? ?%", source)) <= {"95 %"}
    assert not re.search(r"\b65\b|\b0\.65\b|\b65-70\b", source), "C2's threshold or the paper's range typed"


class FakeContext:
    """What the claims read from a :class:`dybw.figures.scaffold.Context`: the summaries of each spec."""

    def __init__(self, **frames):
        self.frames, self.missing, self.results = frames, [], None
        self.jobs = [SimpleNamespace(spec=spec, kind="clock", params={}) for spec in frames]

    def select(self, spec=None, kind=None, **params):
        return [j for j in self.jobs if spec is None or j.spec == spec]

    def completed_jobs(self, jobs):
        return list(jobs)

    def summaries(self, jobs=None):
        import pandas as pd

        frames = [self.frames[j.spec] for j in (self.jobs if jobs is None else jobs)]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _pairs(seeds=3, **columns):
    """Rows of cb-Full and cb-DyBW per seed: ``columns`` maps a column to its (cb-Full, cb-DyBW) values."""
    import pandas as pd

    rows = []
    for seed in range(seeds):
        for i, (label, algo) in enumerate((("cb-Full", "cb_full"), ("cb-DyBW", "cb_dybw"))):
            row = {"label": label, "algo": algo, "seed": seed, "graph": 0, "dataset": "mnist", "split": "iid"}
            row.update({key: value[i] for key, value in columns.items()})
            row["job"] = f"{algo}/{seed}"
            rows.append(row)
    return pd.DataFrame(rows)


@pytest.mark.parametrize(("cut", "verdict"), [(0.65 + EPS, REPRODUCED), (0.65 - EPS, PARTLY), (0.30 - EPS, NOT)])
def test_report_c2_judges_the_paper_setting(cut, verdict):
    from dybw.figures import claims

    frame = _pairs(setting=("lock-step, instant", "lock-step, instant"), mean_iteration_duration=(1.0, 1.0 - cut))
    claim = claims.claim_c2(FakeContext(durations=frame))
    assert claim.verdict == verdict
    held = "cb-DyBW's cut is " + f"{100 * cut:.1f} ± 0.0 % with the instant agreement. It is at or above 65 %."
    assert (held in claim.why) is (verdict == REPRODUCED)
    # Every pair (graph, seed) is at the same cut here: all of them or none count as at the threshold.
    pairs = 3 if verdict == REPRODUCED else 0
    assert claim.values["lock-step, instant"] | {"same_setting": None, "vs_barrier_free": None} == {
        "same_setting": None, "vs_barrier_free": None, "pairs_at_or_above_threshold": pairs, "pairs": 3,
        "lowest": pytest.approx(cut), "highest": pytest.approx(cut),
    }  # fmt: skip
    assert f"{pairs} of 3 graph/seed pairs at or above 65 %, range {100 * cut:.1f} to {100 * cut:.1f} %" in claim.number


def test_report_c2_shows_the_paid_agreements_beside_the_judged_cut_and_which_cuts_hold():
    """The verdict keeps the paper's setting (instant agreement); the row shows the cut with the agreement
    paid for beside it, and the prose says which comparisons stay at the threshold."""
    import pandas as pd

    from dybw.figures import claims

    settings = {"lock-step, instant": 0.70, "lock-step, allreduce": 0.64, "lock-step, flood": 0.66}
    frame = pd.concat(
        [_pairs(setting=(s, s), mean_iteration_duration=(1.0, 1.0 - cut)) for s, cut in settings.items()],
        ignore_index=True,
    )
    claim = claims.claim_c2(FakeContext(durations=frame))
    assert claim.verdict == REPRODUCED
    assert claim.number == (
        "70.0 ± 0.0 % (paper's setting: lock-step, instant agreement; 3 of 3 graph/seed pairs at or above 65 %, "
        "range 70.0 to 70.0 %); "
        "with the agreement paid: all-reduce 64.0 ± 0.0 %, flood 66.0 ± 0.0 %"
    )
    assert "2 of these 3 cuts are at or above 65 %: the instant agreement and a flooded agreement" in claim.why


@pytest.mark.parametrize(
    ("ratio", "verdict"),
    [(2.0, REPRODUCED), (2.0 + EPS, PARTLY), (0.5 - EPS, PARTLY), (5.0 + EPS, NOT), (0.2 - EPS, NOT)],
)
def test_report_c3_on_one_task(ratio, verdict):
    from dybw.figures import claims

    frame = _pairs(iterations_to_target=(100.0, 100.0 * ratio), target_accuracy=(0.9, 0.9))
    assert claims.claim_c3(SimpleNamespace(missing=[]), [("MNIST", frame)]).verdict == verdict


@pytest.mark.parametrize(
    ("difference", "time_cut", "verdict"),
    [(0.01 - EPS, 0.5, REPRODUCED), (0.01 + EPS, 0.5, PARTLY), (0.0, 0.0, PARTLY), (-0.03 - EPS, 0.5, NOT)],
)
def test_report_c5_on_one_task(difference, time_cut, verdict):
    from dybw.figures import claims

    frame = _pairs(
        final_test_accuracy=(0.9, 0.9 + difference),
        final_train_loss=(0.1, 0.1),
        time_to_target=(10.0, 10.0 * (1 - time_cut)),
    )
    claim = claims.claim_c5(SimpleNamespace(missing=[]), [("MNIST", frame)])
    assert claim.verdict == verdict
    assert ("Accuracy differs by more than 3 points." in claim.why) is (verdict == NOT)


@pytest.mark.parametrize(
    ("theorem", "fixed", "verdict"),
    [(-0.75 - EPS, -1.25 + EPS, REPRODUCED), (-0.75 + EPS, -1.0, PARTLY), (-0.25 + EPS, -0.25 + EPS, NOT)],
)
def test_report_c1_from_the_fitted_slopes(theorem, fixed, verdict):
    import pandas as pd

    from dybw.figures import claims

    rows = [
        {"role": role, "sweep": role, "label": "cb-DyBW", "num_workers": n, "seed": seed, "eta0": 0.025 * n,
         "iterations_to_target": 1000.0 * (n / 4) ** slope, "time_to_target": 10.0 * (n / 4) ** slope}
        for role, slope in (("theorem", theorem), ("fixed", fixed))
        for seed in range(3)
        for n in (4, 16, 64)
    ]  # fmt: skip
    assert claims.claim_c1(FakeContext(speedup=pd.DataFrame(rows))).verdict == verdict


@pytest.mark.parametrize(
    ("cut", "ratio", "difference", "verdict"),
    [
        (0.65 + EPS, 2.0, 0.01 - EPS, REPRODUCED),
        (0.10, 2.0, 0.01 - EPS, REPRODUCED),  # the cut is the clock's: the split cannot change it, not judged
        (0.65 + EPS, 2.0 + EPS, 0.01 - EPS, PARTLY),
        (0.65 + EPS, 0.5 - EPS, 0.01 - EPS, PARTLY),
        (0.65 + EPS, 2.0, 0.01 + EPS, PARTLY),
        (0.65 + EPS, 2.0, -0.01 - EPS, PARTLY),
        (0.65 + EPS, 0.5 - EPS, -0.01 - EPS, NOT),
    ],
)
def test_report_c6_judges_what_the_split_can_change_with_the_c3_and_c5_criteria(cut, ratio, difference, verdict):
    from dybw.figures import claims

    frame = _pairs(
        split=("shards", "shards"),
        setting=("lock-step, instant", "lock-step, instant"),
        mean_iteration_duration=(1.0, 1.0 - cut),
        iterations_to_target=(100.0, 100.0 * ratio),
        final_test_accuracy=(0.9, 0.9 + difference),
    )
    claim = claims.claim_c6(FakeContext(noniid=frame))
    assert claim.verdict == verdict
    assert f"The iteration-time cut ({100 * cut:.1f} ± 0.0 % on shards; n/a on iid) is not judged" in claim.why


@pytest.mark.parametrize(
    ("change", "slow", "verdict"),
    [
        (0.10 + EPS, 0.5 - EPS, REPRODUCED),
        (0.10 - EPS, 0.5 - EPS, PARTLY),
        (0.10 + EPS, 0.5 + EPS, PARTLY),
        (0.10 - EPS, 0.5 + EPS, NOT),
    ],
)
def test_report_c4_on_backup_counts_and_usage(monkeypatch, change, slow, verdict):
    import pandas as pd

    from dybw.figures import analysis, claims, load

    runs = [
        SimpleNamespace(spec="convergence_mnist", kind="train", params={}, plain={"dataset": {"name": "mnist"}})
        for _ in range(3)
    ]
    clock = [SimpleNamespace(spec="backups", kind="clock", params={"variant": v}) for v in ("even", "slow")]
    usage = pd.DataFrame(
        [
            {"variant": variant, "seed": seed, "sender": sender, "used_fraction": share, "slow_ids": [0, 1, 3]}
            for variant in ("even", "slow")
            for seed in range(3)
            for sender, share in (("slow workers' messages", 0.8 * slow), ("other messages", 0.8))
        ]
    )
    variation = {"change_fraction": change, "std_over_time": 0.5, "mean": 1.0, "p05": 0.5, "p95": 1.5}
    monkeypatch.setattr(load, "algo_label", lambda plain: "cb-DyBW")
    monkeypatch.setattr(load, "timeline", lambda job, results: "timeline")
    monkeypatch.setattr(load, "backups_matrix", lambda timeline: None)
    monkeypatch.setattr(analysis, "backup_variation", lambda matrix: variation)
    monkeypatch.setattr(analysis, "usage_frame", lambda jobs, results, variant: usage)
    ctx = FakeContext()
    ctx.jobs = runs + clock
    assert claims.claim_c4(ctx).verdict == verdict


@pytest.mark.parametrize(("ratio", "said"), [(1.1 - EPS, "within 10 %"), (1.1 + EPS, "not within 10 %")])
def test_report_adaptive_against_the_best_static_b(ratio, said):
    import pandas as pd

    from dybw.figures import sections

    common = {"preset": "paper", "sync": "lockstep", "agreement": "flood", "split": "iid", "chosen": True}
    frame = pd.DataFrame(
        [{**common, "algo": "cb_adaptive", "method": "cb-Adaptive", "seed": s, "time_to_target": 10 * ratio}
         for s in range(3)]
        + [{**common, "algo": "cb_static", "method": "cb-Static (b=1)", "seed": s, "time_to_target": 10.0}
           for s in range(3)]
    )  # fmt: skip
    text, ratios = sections._adaptive_vs_best_static(frame)
    assert text.endswith(f"the best static b's (cb-Static (b=1)), {said}.")
    assert ratios["iid"]["ratio"]["mean"] == pytest.approx(ratio) and ratios["iid"]["within"] is (said == "within 10 %")


# --- docs/figures.md ------------------------------------------------------------------------------------


def test_the_docs_state_the_rules_of_the_code():
    docs = (REPO / "docs" / "figures.md").read_text()
    table = "\n".join(f"  {row}" for row in rules.docs_table())  # inside the list item of the conventions
    assert table in docs, "docs/figures.md: paste the output of `python -m dybw.figures.rules`"
    for key, text in rules.TEXTS.items():
        assert f"  | {key} | {text} |\n" in docs, key
    assert "fixed before the runs" not in docs
    history = "\n".join(f"  {line}" for line in rules.history_lines())
    assert f"also in REPRODUCTION.md):\n\n{history}\n" in docs
    assert [claim for _, claim, _ in rules.RULE_HISTORY] == ["C2", "C6"]
