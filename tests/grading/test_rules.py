"""The scoring table (opd_gym.grading.rules): one case per row, each the facts that make that
row the first to apply, and the report and check-suite reading the rule a test was decided by.
Everything here runs on stored verdicts: no sandbox."""

from __future__ import annotations

import json

import pytest

from opd_gym.grading import (
    Calibration,
    CanarySet,
    Variants,
    build_report,
    build_variants,
    make_canaries,
    merge,
)
from opd_gym.grading.rules import (
    EARNS,
    GATE,
    NEUTRAL,
    RULES,
    Facts,
    canary_failed,
    decide,
    earns_on_its_own,
)
from opd_gym.grading.suite_check import IdVerdict, SuiteCheck
from opd_gym.grading.verdict import parse_verdict

EARNING = Facts(canary=True, canary_earns=True)  # a valid canary, nothing else said

# (row name, facts that make it the first row to apply, the role it gives)
CASES = [
    ("neutral", Facts(neutral=True, starter_passed=True, canary=True, canary_earns=True),
     NEUTRAL),
    ("starter-passes", Facts(starter_passed=True, null_passed=True, canary=True), GATE),
    ("empty-passes", Facts(null_passed=True, canary=True, canary_earns=True), GATE),
    # across the process boundary: no canary, no held site, and still it earns
    ("boundary", Facts(boundary=True, canary_invalid=True, too_few_unheld=True), EARNS),
    ("canary-not-failed", Facts(canary=True, canary_earns=True, canary_invalid=True,
                                computed=True), GATE),
    ("no-expectation", Facts(), GATE),
    ("reads-answer", Facts(canary=True, canary_why="an oracle call"), GATE),
    ("too-few-unheld", Facts(canary=True, canary_earns=True, too_few_unheld=True,
                             held_only=True, held=True), GATE),
    ("not-held", Facts(canary=True, canary_earns=True, held_only=True), GATE),
    ("held", Facts(canary=True, canary_earns=True, held_only=True, held=True,
                   computed=True), EARNS),
    ("computed", Facts(computed=True), EARNS),
    ("canary", EARNING, EARNS),
]


def test_every_row_has_a_case():
    assert [name for name, _, _ in CASES] == [rule.name for rule in RULES]


@pytest.mark.parametrize(("name", "facts", "role"), CASES, ids=[c[0] for c in CASES])
def test_each_row_decides_its_case(name, facts, role):
    rule = decide(facts)
    assert (rule.name, rule.role) == (name, role)
    assert rule.explain(facts)  # every row says why in a sentence
    # the per-test rows alone decide whether the task-level rows count the test
    assert earns_on_its_own(facts) == (not rule.own or rule.role == EARNS)


def test_a_canary_that_errored_or_was_skipped_is_never_valid():
    assert canary_failed("failed") and canary_failed("xfailed")
    for outcome in ("passed", "xpassed", "error", "skipped"):
        assert not canary_failed(outcome)


def test_reads_answer_names_the_canarys_reason():
    facts = Facts(canary=True, canary_why="compares with what `oracle()` returns")
    assert "oracle()" in decide(facts).explain(facts)


SOURCES = {"test_x.py": "def test_a():\n    assert f() == 1\n\n"
                        "def test_b():\n    assert f() == 2\n\n"
                        "def test_c():\n    assert f() == 3\n"}
IDS = ["test_x.py::test_a", "test_x.py::test_b", "test_x.py::test_c"]


def _report(outcomes, canary="failed", **fields):
    canaries = make_canaries(SOURCES, ["test_x.py"], 1)
    variants = build_variants(SOURCES, canaries)
    real = [{"id": i, "outcome": o} for i, o in zip(IDS, outcomes, strict=True)]
    twin = [{"id": i, "outcome": canary} for i in IDS]
    firsts = [real[k] if variants.real_in[i] == 0 else twin[k] for k, i in enumerate(IDS)]
    seconds = [twin[k] if variants.real_in[i] == 0 else real[k] for k, i in enumerate(IDS)]
    data = {"version": 2, "variants": [
        {"exit": 0, "tests": r, "collect_errors": [], "timed_out": False, "output": ""}
        for r in (firsts, seconds)]}
    merged = merge(parse_verdict(json.dumps(data).encode()), set(IDS), True, canaries,
                   variants)
    calibration = Calibration(canaries, **fields)
    return build_report(merged, calibration, {"task_id": "t"}, 0.1), calibration


def test_the_report_names_each_tests_rule():
    report, _ = _report(["passed"] * 3, calibrated=True, reference_ids=frozenset(IDS),
                        starter_passed=frozenset(IDS[:1]), neutral=frozenset(IDS[2:]))
    assert [t.rule for t in report.tests] == ["starter-passes", "canary", "neutral"]
    assert [t.earns for t in report.tests] == [False, True, False]
    assert report.score == 1.0 and not report.infra_error and not report.unverifiable


def test_a_task_no_test_of_which_earns_is_an_infra_error_not_a_zero():
    # calibrated: every test a gate; whatever this grade's run did, it says nothing
    for outcomes in (["passed"] * 3, ["failed"] * 3):
        report, calibration = _report(outcomes, calibrated=True, reference_ids=frozenset(IDS),
                                      starter_passed=frozenset(IDS))
        assert not calibration.earning
        assert report.unverifiable and report.infra_error and report.score == 0.0
        assert "cannot be verified" in report.reason and "starter-passes 3" in report.reason
        assert report.to_dict()["unverifiable"] is True
    # a task with earning tests whose grade fails is a 0, not an infra error
    failed, _ = _report(["failed"] * 3, calibrated=True, reference_ids=frozenset(IDS))
    assert failed.score == 0.0 and not failed.infra_error and not failed.unverifiable


def test_errored_canaries_never_earn():
    # the calibration marks a canary that did not fail on the reference invalid: a gate
    report, _ = _report(["passed"] * 3, calibrated=True, reference_ids=frozenset(IDS),
                        invalid=frozenset(IDS[:2]))
    assert [t.rule for t in report.tests] == ["canary-not-failed"] * 2 + ["canary"]


def _check(**fields):
    base = dict(name="lib-1.0", ids=3, agree=3, disagreements=(), infra_error="",
                plain_s=1.0, grade_s=1.5, earning=2, shapes=(), config="pytest.ini",
                score=1.0, verdicts=(IdVerdict("t.py::a", "passed", "passed", "earns", "canary"),
                                     IdVerdict("t.py::b", "passed", "passed", "gate",
                                               "starter-passes")))
    return SuiteCheck(**{**base, **fields})


def test_check_suite_fails_where_the_honest_code_would_earn_less_than_1():
    assert _check().ok and _check().rule_counts() == {"canary": 1, "starter-passes": 1}
    nothing = _check(earning=0, score=0.0, reason="the task cannot be verified: ...")
    assert not nothing.ok and "no test could earn" in nothing.problems[0]
    partial = _check(score=0.5)
    assert not partial.ok and "scores 0.500, not 1.0" in partial.problems[0]
    gated = _check(score=0.0, gates_failed=("t::b",))
    assert "gates failed: t::b" in gated.problems[0]
    disagree = _check(agree=2, disagreements=("t.py::a: plain=passed grader=failed",))
    assert not disagree.ok and "1 of 3 ids disagree" in disagree.problems[0]
    data = json.loads(json.dumps(nothing.to_dict()))
    assert data["ok"] is False and data["tests"][1] == {
        "id": "t.py::b", "plain": "passed", "grader": "passed", "agree": True, "role": "gate",
        "rule": "starter-passes", "why": ""}


def _boundary_report(outcomes, **fields):
    """A one-run grade of a task graded across the process boundary: no canary at all."""
    canaries = CanarySet({}, make_canaries(SOURCES, ["test_x.py"], 1).tests)
    variants = build_variants(SOURCES, canaries)
    variants = Variants((variants.files[0], variants.files[0]), dict.fromkeys(variants.real_in, 0))
    run = {"exit": 0, "collect_errors": [], "timed_out": False, "output": "",
           "tests": [{"id": i, "outcome": o} for i, o in zip(IDS, outcomes, strict=True)]}
    data = {"version": 2, "variants": [run]}
    merged = merge(parse_verdict(json.dumps(data).encode(), 1), set(IDS), True, canaries,
                   variants)
    calibration = Calibration(canaries, calibrated=True, reference_ids=frozenset(IDS),
                              boundary=True, **fields)
    return build_report(merged, calibration, {"task_id": "t"}, 0.1), calibration


def test_across_the_boundary_every_test_the_starter_fails_earns_without_a_canary():
    report, calibration = _boundary_report(["passed", "passed", "failed"],
                                           starter_passed=frozenset(IDS[:1]))
    assert [t.rule for t in report.tests] == ["starter-passes", "boundary", "boundary"]
    assert calibration.earning == frozenset(IDS[1:]) and report.score == 0.5
    assert not report.forgery and not report.infra_error
    # where the starter passes every test, nothing earns: unverifiable, and it says why
    none, _ = _boundary_report(["passed"] * 3, starter_passed=frozenset(IDS))
    assert none.unverifiable and "fails on the untouched starter" in none.reason
