"""Tests that run in one grading variant only (opd_gym/grading/once.py): which, and that a
grade still reads, checks and scores them as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opd_gym.grading import Calibration, Grader, build_report, make_canaries, merge, parse_verdict
from opd_gym.grading.canary import CanarySet, Variants
from opd_gym.grading.held import HeldRuns
from opd_gym.grading.once import run_once
from opd_gym.grading.sentinel import SentinelSite

pytestmark = pytest.mark.filterwarnings("ignore:opd_gym local sandbox")

SOURCES = {"test_x.py": (
    "def test_lit():\n    assert f(1) == 1\n\n"          # a literal: a canary
    "def test_truthy():\n    assert f(2)\n\n"            # a negation canary: never held
    "def test_none():\n    f(3)\n\n"                     # nothing to perturb: no canary
    "def test_held():\n    assert f(4) == 4\n")}         # its canary is on a held site
IDS = ["test_x.py::test_lit", "test_x.py::test_truthy", "test_x.py::test_none",
       "test_x.py::test_held"]


def _canaries() -> CanarySet:
    canaries = make_canaries(SOURCES, list(SOURCES), 1)
    assert set(canaries.tests) == set(IDS)
    assert set(canaries.canaries) == set(IDS) - {"test_x.py::test_none"}
    return canaries


def _held(real_in, held=("test_x.py::test_held",), same=("test_x.py::test_lit",)) -> HeldRuns:
    """Held expectations as held.rewrite reports them: `held` tests with the canary's value
    in the canary run, `same` tests held alike in both runs (their canary elsewhere)."""
    expect: tuple[dict, dict] = ({}, {})
    for test in held:
        expect[real_in[test]][test] = {0: ("==", 4)}
        expect[1 - real_in[test]][test] = {0: ("==", 5)}
    for test in same:
        expect[0][test] = expect[1][test] = {1: ("==", 1)}
    return HeldRuns((dict(SOURCES), dict(SOURCES)), expect)


def _once(skip) -> dict[str, int]:
    """{base id: the one variant it runs in} from run_once's skip sets."""
    assert not skip[0] & skip[1]
    return {t: 1 if t in skip[0] else 0 for t in skip[0] | skip[1]}


@pytest.mark.parametrize("real", [0, 1])
def test_which_tests_run_once_and_where(real):
    canaries = _canaries()
    real_in = dict.fromkeys(IDS, real)
    # a calibration's own runs: only the test without a canary
    assert _once(run_once(canaries, real_in, ())) == {"test_x.py::test_none": real}
    # a grade: also a canary held on the host; never a canary the sandbox can be judged by
    once = _once(run_once(canaries, real_in, (), IDS, frozenset(), _held(real_in)))
    assert once == {"test_x.py::test_none": real, "test_x.py::test_held": real}
    # an invalid canary (the reference passes it) is never judged: once too
    once = _once(run_once(canaries, real_in, (), IDS,
                          frozenset({"test_x.py::test_truthy"}), None))
    assert once == {"test_x.py::test_none": real, "test_x.py::test_truthy": real}


def test_a_sentinel_site_and_a_test_the_host_cannot_hold_keep_both_runs():
    canaries = _canaries()
    real_in = dict.fromkeys(IDS, 0)
    # every site grades may draw a clone from, drawn in this grade or not
    site = SentinelSite("test_x.py::test_none", "test_x.py", *[0] * 8)
    assert _once(run_once(canaries, real_in, (site,))) == {}
    unholdable = _held(real_in)
    unholdable.expect[1]["test_x.py::test_held"] = {-1: ("never", None)}
    once = _once(run_once(canaries, real_in, (), IDS, frozenset(), unholdable))
    assert once == {"test_x.py::test_none": 0}
    # a test the reference did not report keeps both runs, whatever its canary
    once = _once(run_once(canaries, real_in, (), IDS[:2], frozenset(), _held(real_in)))
    assert once == {"test_x.py::test_none": 0}


def _verdict(first, second):
    def run(entries):
        return {"exit": 0, "tests": entries, "collect_errors": [], "timed_out": False,
                "output": ""}

    return parse_verdict(json.dumps({"version": 2, "variants": [run(first), run(second)]})
                         .encode())


def test_merge_expects_a_test_that_runs_once_in_its_variant_only():
    canaries = _canaries()
    real_in = {"test_x.py::test_lit": 0, "test_x.py::test_truthy": 1,
               "test_x.py::test_none": 1, "test_x.py::test_held": 0}
    skip = run_once(canaries, real_in, (), IDS, frozenset(), _held(real_in))
    variants = Variants((dict(SOURCES), dict(SOURCES)), real_in, skip)
    calibration = Calibration(canaries, calibrated=True, reference_ids=frozenset(IDS))

    def entry(test, outcome):
        return {"id": f"test_x.py::{test}", "outcome": outcome}

    first = [entry("test_lit", "passed"), entry("test_truthy", "failed"),
             entry("test_held", "passed")]
    second = [entry("test_lit", "failed"), entry("test_truthy", "passed"),
              entry("test_none", "passed")]
    merged = merge(_verdict(first, second), set(IDS), False, canaries, variants)
    assert merged.reason == ""
    report = build_report(merged, calibration, {"task_id": "t"}, 0.1)
    assert report.score == 1.0 and report.earning == 3 and not report.forgery
    canary = {t.name: t.canary for t in report.tests}
    assert canary == {"test_x::test_lit": "failed", "test_x::test_truthy": "failed",
                      "test_x::test_held": "", "test_x::test_none": ""}
    # its one run must report it; the other must not (a run that ran it anyway is refused)
    missing = merge(_verdict(first[:2], second), set(IDS), False, canaries, variants)
    assert "did not run" in missing.reason and "test_held" in missing.reason
    extra = merge(_verdict(first, [*second, entry("test_held", "passed")]), set(IDS), False,
                  canaries, variants)
    assert "not hidden tests" in extra.reason and "test_held" in extra.reason
    # a twin test still needs both runs
    twin = merge(_verdict(first, second[1:]), set(IDS), False, canaries, variants)
    assert "did not run" in twin.reason and "test_lit" in twin.reason
    # every test once, all drawn into one variant: the other runs nothing, as it should
    alone = Variants((dict(SOURCES), dict(SOURCES)), dict.fromkeys(IDS, 0),
                     (frozenset(), frozenset(IDS)))
    everything = [entry(t.partition("::")[2], "passed") for t in IDS]
    assert merge(_verdict(everything, []), set(IDS), False, canaries, alone).reason == ""
    assert merge(_verdict([], []), set(IDS), False, canaries, alone).reason == "no tests ran"


COUNTED = '''
from pathlib import Path

from calc import add

LOG = Path({log!r})


def count(name):
    with LOG.open("a") as fh:
        fh.write(name + "\\n")


def test_gate():
    count("gate")
    add(0, 0)  # no assertion: nothing for a canary to change, the test gates


def test_add():
    count("add")
    assert add(2, 3) == 5


def test_add_more():
    count("add_more")
    assert add(4, 5) == 9


def test_add_negative():
    assert add(-4, 1) == -3


def test_add_zero():
    assert add(0, 7) == 7
'''


def test_a_grade_runs_a_gate_once_and_scores_as_before(local_pool, make_task, tmp_path: Path):
    """The local backend shares this host's files, so each execution of a test is counted
    in a log outside the sandbox: with `once=True` a test without a canary runs once per
    grade (under either Grader), and the scores are what they were with every test in both
    runs; by default it runs in both."""
    log = tmp_path / "runs.log"
    task = make_task("counted", tests={"test_calc.py": COUNTED.format(log=str(log))})
    log.write_text("")
    report = Grader(local_pool).grade(task, {"calc.py": b"def add(a, b):\n    return a + b\n"})
    assert report.score == 1.0 and log.read_text().split().count("gate") >= 2
    for grader in (Grader(local_pool, once=True), Grader(local_pool, hold=False, once=True)):
        calibration = grader.calibration(task)
        assert "test_calc.py::test_gate" not in calibration.canaries.canaries
        assert len(calibration.sentinels) > 2  # more sites than a grade draws clones from
        shown = set()
        for _ in range(5):  # which variant runs it, and the sentinels, are drawn per grade
            log.write_text("")
            report = grader.grade(task, {"calc.py": b"def add(a, b):\n    return a + b\n"})
            assert report.score == 1.0 and report.earning == 4, report.reason
            assert log.read_text().split().count("gate") == 1
            assert {t.name: t.canary for t in report.tests}["test_calc::test_gate"] == ""
            shown.add(tuple((t.name, t.outcome, t.canary) for t in report.tests))
        assert len(shown) == 1, shown  # the same report every grade: rows replay exactly
        wrong = grader.grade(task, {"calc.py": b"def add(a, b):\n    return a - b\n"})
        assert wrong.score == 0.0 and not wrong.forgery
        broken = grader.grade(task, {"calc.py": b"def add(a, b):\n    assert a or b\n"
                                                b"    return a + b\n"})
        assert broken.score == 0.0 and broken.gates_failed == ("test_calc::test_gate",)


STATEFUL = """\
from calc import add


class TestOrder:
    def test_01_setup(self):
        type(self).base = add(1, 1)

    def test_02_uses(self):
        assert add(type(self).base, 1) == 3

    def test_03_uses(self):
        assert add(type(self).base, 2) == 4
"""


def test_by_default_a_test_handing_state_on_runs_in_both_variants(local_pool, make_task):
    """A test with no assertion (so no canary) that sets what later tests read, as real
    suites do: by default every test runs in both variants, so each grade passes what plain
    pytest passes; run once (`once=True`), the variant without it fails the later tests."""
    task = make_task("stateful", tests={"test_order.py": STATEFUL})
    solved = {"calc.py": b"def add(a, b):\n    return a + b\n"}
    grader = Grader(local_pool)
    for _ in range(4):  # the variant holding each real test is drawn per grade
        report = grader.grade(task, solved)
        assert report.score == 1.0, (report.reason, report.tests)
        assert {t.outcome for t in report.tests} == {"passed"}, report.tests
    once = Grader(local_pool, once=True, single_run=False)  # a split, not one whole run
    outcomes = set()
    for _ in range(8):  # all passing: (1/4) ** 8
        report = once.grade(task, solved)
        outcomes.update(t.outcome for t in report.tests)
    assert outcomes != {"passed"}, "run once, a later test should miss the state it reads"
