"""Sentinels (opd_gym/grading/sentinel.py): which assertions a clone may change, how a clone is
made from each grading run's own text, and how the merge reads a test passed together with its
sentinel. Pure: no Docker (the split attacks against real sandboxes are in
tests/security/test_split_collusion.py)."""

from __future__ import annotations

import ast
import random

from opd_gym.grading.canary import make_canaries
from opd_gym.grading.report import PASSING
from opd_gym.grading.sentinel import (
    build_runs,
    choose,
    clone_edit,
    compatible,
    sentinel_sites,
)
from opd_gym.grading.verdict import Calibration, build_report, merge

SOURCE = '''\
import pytest
from calc import add, name


def test_literal():
    x = add(1, 2)
    assert x == 3
    assert name() == "calc"


def test_branch():
    if add(1, 1):
        assert add(1, 1) == 2
    for i in range(3):
        assert add(i, 0) == i


def test_after_return():
    if add(0, 0) == 0:
        return
    assert add(2, 2) == 4


@pytest.mark.parametrize("a, expected", [(1, 2), (2, 3)])
def test_param(a, expected):
    assert add(a, 1) == expected


def test_flag():
    assert (add(1, 1) == 2) is True


class TestCase:
    def test_method(self):
        assert add(5, 5) == 10
'''


def _sites(source: str = SOURCE):
    return sentinel_sites({"tests/test_calc.py": source}, ["tests/test_calc.py"])


def test_sites_are_equalities_nothing_before_can_skip():
    sites = _sites()
    tests = {s.test_id.rpartition("::")[2] for s in sites}
    assert tests == {"test_literal", "test_param", "test_flag", "test_method"}
    by_test = {t: {s.kind for s in sites if s.test_id.endswith("::" + t)} for t in tests}
    assert by_test["test_literal"] == {"value", "wrap", "negate"}
    assert by_test["test_param"] == {"wrap", "negate"}  # `expected`: a parametrize argument
    assert by_test["test_flag"] == {"value", "negate"}  # True and False never both hold
    assert any(s.test_id == "tests/test_calc.py::TestCase::test_method" for s in sites)


def test_a_clone_differs_from_its_test_in_one_value_and_its_name():
    data = SOURCE.encode()
    for site in _sites():
        made = clone_edit(data, [], site, random.Random(3))
        assert made is not None
        (start, end, text), sentinel = made
        module = data[:start].decode() + text + data[end:].decode()
        tree = ast.parse(module)
        names = [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
        assert sentinel.clone in names and site.name in names
        clone = next(n for n in ast.walk(tree)
                     if isinstance(n, ast.FunctionDef) and n.name == sentinel.clone)
        original = next(n for n in ast.walk(ast.parse(SOURCE))
                        if isinstance(n, ast.FunctionDef) and n.name == site.name)
        clone.name = original.name
        assert ast.dump(clone) != ast.dump(original)  # the value changed...
        assert ast.dump(clone.args) == ast.dump(original.args)  # ...nothing of its signature
        assert len(ast.dump(clone.body[-1])) >= len(ast.dump(original.body[-1])) - 4


def test_a_negated_clone_negates_what_the_run_asserts():
    source = "from calc import ok\n\n\ndef test_ok():\n    assert ok(1)\n"
    site = next(s for s in _sites(source) if s.kind == "negate")
    data = source.encode()
    start = data.index(b"ok(1)")
    for edits, expected in (([], "assert not (ok(1))"),
                            ([(start, start + 5, "not ok(1)")], "assert not (not ok(1))")):
        made = clone_edit(data, edits, site, random.Random(0))
        assert made is not None and expected in made[0][2]


def test_a_clone_in_the_canary_run_is_made_from_the_canary_text():
    site = next(s for s in _sites() if s.test_id.endswith("::test_literal")
                and s.kind == "value" and SOURCE.encode()[s.value_start:s.value_end] == b"3")
    canary = (site.value_start, site.value_end, "4")  # the canary changed 3 into 4 there
    for seed in range(30):
        made = clone_edit(SOURCE.encode(), [canary], site, random.Random(seed))
        assert made is not None
        text = made[0][2]
        value = text.split("assert x == ", 1)[1].split("\n", 1)[0]
        assert value not in ("3", "4")  # neither the real value nor the run's canary


def test_an_operator_canary_on_the_statement_rules_the_site_out():
    site = next(s for s in _sites() if s.test_id.endswith("::test_method") and s.kind == "value")
    data = SOURCE.encode()
    op = data.index(b"==", site.statement_start)
    assert not compatible(site, [(op, op + 2, "!=")])  # `x != 10` and `x != 11`: both hold
    assert compatible(site, [(site.value_start, site.value_end, "11")])


def test_both_runs_clone_the_same_tests_each_from_its_own_text():
    sources = {"tests/test_calc.py": SOURCE}
    canaries = make_canaries(sources, ["tests/test_calc.py"], seed=11)
    sites = _sites()
    for seed in range(10):
        variants, placed = build_runs(sources, canaries, sites, 2, random.Random(seed))
        first, second = placed
        assert len(first) == 2
        assert [s.site for s in first] == [s.site for s in second]
        for index, run in enumerate(placed):
            text = variants.files[index]["tests/test_calc.py"]
            tree = ast.parse(text)
            names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
            assert {s.clone for s in run} <= names
            for sentinel in run:  # the clone carries this run's canary edit, if any
                canary = canaries.canaries.get(sentinel.site.test_id)
                holds_canary = canary is not None and \
                    variants.real_in[sentinel.site.test_id] != index
                clone = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
                             and n.name == sentinel.clone)
                clone_text = ast.get_source_segment(text, clone) or ""
                site = sentinel.site
                if holds_canary and (canary.start, canary.end) == (
                        site.value_start, site.value_end) and site.kind == "value":
                    # the clone changes the canary's own value: into a third value
                    assert canary.replacement not in clone_text
                elif holds_canary and canary.kind in ("literal", "operator"):
                    assert canary.replacement in clone_text


def test_choose_takes_tests_apart_and_prefers_changed_literals():
    sites = _sites()
    chosen = choose(sites, 10, random.Random(1))
    assert len({s.test_id for s in chosen}) == len(chosen) == 4
    literal = next(s for s in chosen if s.test_id.endswith("::test_literal"))
    assert literal.kind == "value"


def _verdict(outcomes: list[dict[str, str]]) -> dict:
    return {"version": 2, "variants": [
        {"tests": [{"id": i, "outcome": o} for i, o in run.items()], "exit": 0}
        for run in outcomes]}


def test_a_test_passed_with_its_sentinel_is_a_forgery_and_a_missing_clone_a_failed_run():
    source = "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    sources = {"test_a.py": source}
    canaries = make_canaries(sources, ["test_a.py"], seed=2)
    sites = sentinel_sites(sources, ["test_a.py"])
    variants, placed = build_runs(sources, canaries, sites, 1, random.Random(4))
    real = variants.real_in["test_a.py::test_add"]
    clones = [f"test_a.py::{run[0].clone}" for run in placed]
    calibration = Calibration(canaries, calibrated=True,
                              reference_ids=frozenset({"test_a.py::test_add"}))

    def report(first: dict[str, str], second: dict[str, str]):
        runs = [first, second]
        merged = merge(_verdict(runs), {"test_a.py::test_add"}, True, canaries, variants,
                       placed)
        return merged, build_report(merged, calibration, {"task_id": "t"}, 0.1)

    honest = [{"test_a.py::test_add": "passed" if i == real else "failed",
               clones[i]: "failed"} for i in (0, 1)]
    merged, graded = report(*honest)
    assert graded.score == 1.0 and not merged.sentinel_forgery
    assert all(p[3] not in PASSING for p in merged.sentinel_pairs)
    forged = [dict(run) for run in honest]
    forged[real] = {"test_a.py::test_add": "passed", clones[real]: "passed"}  # forge one run
    merged, graded = report(*forged)
    assert graded.score == 0.0 and graded.forgery == ("test_a::test_add",)
    assert "sentinel" in graded.reason
    missing = [dict(run) for run in honest]
    del missing[1 - real][clones[1 - real]]
    merged, graded = report(*missing)
    assert graded.score == 0.0 and "not run in full" in graded.reason


def test_a_clone_that_would_not_parse_is_not_made():
    source = ("class TestText:\n    def test_lines(self):\n        text = '''\nx'''\n"
              "        assert len(text) == 2\n")
    site = next(s for s in _sites(source) if s.kind == "value")
    made = clone_edit(source.encode(), [], site, random.Random(0))
    assert made is not None  # an indented method with a string at column 0 still parses
    at = source.index("text = ")  # a run's edit elsewhere in the function that breaks it
    broken = (at, at + len("text = "), "text = (")
    assert clone_edit(source.encode(), [broken], site, random.Random(0)) is None
