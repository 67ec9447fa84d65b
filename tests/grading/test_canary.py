"""Canary twins: one assertion perturbed, same ids in both variants, seeded, and valid on every
built-in task (the reference passes each real test and fails each canary, graded for real)."""

from __future__ import annotations

import ast
import random
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from opd_gym.grading import (
    build_variants,
    make_canaries,
    merge,
    parse_verdict,
    run_harness_here,
)
from opd_gym.grading import test_paths as hidden_paths
from opd_gym.grading.canary import collected_tests
from opd_gym.grading.expected import expected_tests
from opd_gym.tasks import load_suite

SUITE = load_suite("coding")

SOURCE = '''\
import math
import pytest
from calc import add, div, parse, area, name


def helper():
    assert 1 == 1  # not a test: never perturbed


def test_ints():
    assert add(2, 3) == 5
    assert add(-4, -1) == -5  # a comment stays
    assert add(10**6, 1) == 1_000_001


def test_text():
    assert name("ada") == "Hello, Ada!"
    assert name(b"x") == b"Hi x"


def test_float_tolerances():
    assert abs(div(1, 3) - 0.3333) < 1e-3
    assert math.isclose(div(1, 8), 0.125)
    assert area(2) == pytest.approx(12.566)


def test_raises():
    with pytest.raises(ValueError):
        parse("x")


def test_in_loop_and_if():
    for a, b in [(1, 2), (3, 4)]:
        if a:
            assert add(a, b) in (3, 7)


def test_negation_only():
    assert callable(add)


def test_ordering():
    assert add(1, 1) > add(0, 1)


class TestGroup:
    def test_containers(self):
        assert parse("1,2") == [1, 2]
        assert parse("a") == {"a": (1, 2.5)}
        assert parse("t") is True

    def test_nothing(self):
        pass
'''


def _diff_lines(a: str, b: str) -> list[tuple[str, str]]:
    old, new = a.splitlines(), b.splitlines()
    assert len(old) == len(new)  # line numbers kept
    return [(x, y) for x, y in zip(old, new, strict=True) if x != y]


def test_each_canary_changes_one_assertion_of_its_own_test():
    sources = {"tests/test_calc.py": SOURCE}
    canaries = make_canaries(sources, ["tests/test_calc.py"], seed=7)
    ids = expected_tests(sources, ["tests/test_calc.py"])
    assert set(canaries.tests) == ids
    assert canaries.uncanaried == ("tests/test_calc.py::TestGroup::test_nothing",)
    tree = ast.parse(SOURCE)
    spans = {i: (f.lineno, f.end_lineno) for i, f in collected_tests(tree, "tests/test_calc.py")}
    for test_id, canary in canaries.canaries.items():
        data = SOURCE.encode()
        edited = (data[:canary.start] + canary.replacement.encode() + data[canary.end:]).decode()
        changed = _diff_lines(SOURCE, edited)
        assert len(changed) == 1, (test_id, changed)
        first, last = spans[test_id]
        assert first <= canary.line <= last
        old, new = changed[0]
        assert old.strip().startswith(("assert", "with")) and new != old
        ast.parse(edited)
    kinds = {canaries.canaries[f"tests/test_calc.py::{n}"].kind for n in
             ("test_raises", "test_negation_only", "test_ordering")}
    assert kinds == {"raises", "negation", "operator"}


def test_perturbations_keep_type_and_spelling():
    sources = {"t/test_x.py": SOURCE}
    seen: dict[str, set[str]] = {}
    for seed in range(40):
        for test_id, canary in make_canaries(sources, ["t/test_x.py"], seed).canaries.items():
            seen.setdefault(test_id.rpartition("::")[2], set()).add(
                f"{canary.original}->{canary.replacement}")
            if canary.kind == "literal":
                old, new = ast.literal_eval(canary.original), ast.literal_eval(canary.replacement)
                assert type(old) is type(new) and old != new
                if isinstance(old, str):
                    assert canary.original[0] == canary.replacement[0]  # same quotes
                    assert sum(a != b for a, b in zip(old, new, strict=True)) == 1
    # tolerances are never touched; the expected side is
    tolerance = seen["test_float_tolerances"]
    assert not any(c.startswith("1e-3") for c in tolerance)
    assert any(c.startswith("0.3333") for c in tolerance)
    assert any(c.startswith("12.566") for c in tolerance)
    assert any(c.startswith("1_000_001->") and "_" in c.split("->")[1] for c in seen["test_ints"])
    assert {"True->False"} <= seen["test_containers"] | {"True->False"}
    assert all(not c.startswith("ValueError->ValueError") for c in seen["test_raises"])


def test_canaries_are_deterministic_for_a_seed():
    sources = {"test_x.py": SOURCE}
    first = make_canaries(sources, ["test_x.py"], seed=11)
    assert first == make_canaries(sources, ["test_x.py"], seed=11)
    others = [make_canaries(sources, ["test_x.py"], seed=s) for s in range(12, 20)]
    assert any(o.canaries != first.canaries for o in others)


def test_variants_have_identical_files_and_ids():
    sources = {"test_x.py": SOURCE, "helpers.py": "X = 1\n"}
    canaries = make_canaries(sources, ["test_x.py"], seed=3)
    variants = build_variants(sources, canaries, random.Random(5))
    a, b = variants.files
    assert set(a) == set(b) == set(sources)
    assert a["helpers.py"] == b["helpers.py"] == "X = 1\n"
    assert expected_tests(a, ["test_x.py"]) == expected_tests(b, ["test_x.py"])
    # every canaried test is real in one variant and a canary in the other
    for test_id, canary in canaries.canaries.items():
        real = variants.files[variants.real_in[test_id]]["test_x.py"].encode()
        other = variants.files[1 - variants.real_in[test_id]]["test_x.py"].encode()
        original = SOURCE.encode()
        assert original[canary.start:canary.end] in real
        shift = sum(len(c.replacement.encode()) - (c.end - c.start)
                    for c in canaries.canaries.values()
                    if c.start < canary.start and variants.real_in[c.test_id]
                    == variants.real_in[test_id])
        start = canary.start + shift
        assert other[start:start + len(canary.replacement.encode())] == canary.replacement.encode()
    assert a["test_x.py"] != b["test_x.py"]
    assert a["test_x.py"].count("\n") == b["test_x.py"].count("\n")
    # assignment is random per call, not tied to the seed
    assignments = {tuple(sorted(build_variants(sources, canaries).real_in.items()))
                   for _ in range(20)}
    assert len(assignments) > 1


def _grade_reference(task):
    """Both variants on the starter + reference, graded by the real harness on this host."""
    canaries = make_canaries(task.tests, hidden_paths(task), seed=1234)
    variants = build_variants(task.tests, canaries)
    with tempfile.TemporaryDirectory(prefix="opd-canary-") as folder:
        for rel, text in {**task.files, **task.solution}.items():
            path = Path(folder, rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        raw = run_harness_here(folder, list(variants.files), ini=task.pytest_ini,
                               args=hidden_paths(task), timeout=task.timeout)
    expected = expected_tests(task.tests, hidden_paths(task))
    return canaries, merge(parse_verdict(raw), expected, False, canaries, variants)


@pytest.fixture(scope="module")
def reference_runs():
    with ThreadPoolExecutor(4) as workers:
        return dict(zip([t.id for t in SUITE], workers.map(_grade_reference, SUITE),
                        strict=True))


@pytest.mark.parametrize("task", SUITE, ids=lambda t: t.id)
def test_reference_passes_real_tests_and_fails_every_canary(task, reference_runs):
    canaries, merged = reference_runs[task.id]
    assert merged.reason == "", merged.reason
    assert canaries.canaries, "a built-in task without any canary cannot be verified"
    assert {o for o, _ in merged.real.values()} == {"passed"}, merged.real
    passed = [i for i, o in merged.canary.items() if o == "passed"]
    assert not passed, [(i, canaries.canaries[i.split("[")[0]]) for i in passed]
    assert len(merged.canary) >= len(canaries.canaries)


def test_code_that_runs_under_several_ids_gets_no_canary():
    """An inherited test method or a test called by another test runs under more than one id
    (toolz's suite has both): a canary there would fail the other ids' real runs."""
    source = (
        "def test_base():\n    assert len([1, 2]) == 2\n\n\n"
        "def test_calls_base():\n    test_base()\n    assert 3 == 3\n\n\n"
        "class TestDict:\n    def test_get(self):\n        assert {'a': 1}['a'] == 1\n\n\n"
        "class TestOther(TestDict):\n    pass\n\n\n"
        "class TestAlone:\n    def test_one(self):\n        assert abs(-2) == 2\n"
    )
    canaries = make_canaries({"tests/test_m.py": source}, ["tests/test_m.py"], seed=7)
    assert set(canaries.canaries) == {"tests/test_m.py::test_calls_base",
                                      "tests/test_m.py::TestAlone::test_one"}
