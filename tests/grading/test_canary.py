"""Canary twins: one assertion perturbed, same ids in both variants, seeded, and valid on every
built-in task (the reference passes each real test and fails each canary, graded for real)."""

from __future__ import annotations

import ast
import dataclasses
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
from opd_gym.grading import canary as canary_module
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


# -- data-driven tests: parametrize tables, loops, module tables, empty literals ---------------
def _collect_ids(files: dict[str, str]) -> list[str]:
    """Node ids real pytest (this interpreter's) collects from `files`, in a fresh folder."""
    import subprocess
    import sys

    with tempfile.TemporaryDirectory(prefix="opd-ids-") as folder:
        for rel, text in files.items():
            Path(folder, rel).write_text(text)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
             *files], cwd=folder, capture_output=True, text=True, timeout=120)
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    assert ids, done.stdout + done.stderr
    return ids


# values whose pytest id canary.py computes exactly (8.4 and 9.x alike) ...
PARAM_VALUES = [
    "0", "-3", "1_000", "0x1F", "2.5", "-0.0", "1e20", "True", "False", "None", "'abc'", "''",
    "'a b-c'", "b'raw'", "[1, 2]", "(3,)", "{'k': 1}", "set()", "'1'", "'1-2'", "1", "2.50",
    "'q\"uote'", "[]", "'日本x'", "'tab\\t'", "'publicité'", "'back\\\\slash'",
]
# ... and values it refuses (names, calls, text over 100 characters)
REFUSED = ["10**0", "float('inf')", "'x' * 3", "'" + "A" * 120 + "'", "abs"]


def _param_module(rows: list[tuple[str, str]], extra: str = "") -> str:
    table = ",\n    ".join(f"({a}, {b})" for a, b in rows)
    return (
        "import pytest\n\n\n"
        f"@pytest.mark.parametrize('given,expected', [\n    {table},\n]{extra})\n"
        "def test_table(given, expected):\n"
        "    assert given == expected  # the honest function here is the identity\n"
    )


def test_parametrize_canary_keeps_pytests_ids_and_perturbs_every_row():
    """ids= computed as pytest would, in both variants; every row's expected value changed.
    Proven against real pytest collection on many values (duplicates included)."""
    rng = random.Random(0)
    checked = 0
    for trial in range(7):
        values = rng.choices(PARAM_VALUES, k=8)  # duplicates too
        if trial % 3 == 2:
            values[rng.randrange(8)] = rng.choice(REFUSED)
        rows = [(v, v) for v in values]
        path = "test_param.py"
        sources = {path: _param_module(rows)}
        original = _collect_ids(sources)
        canaries = make_canaries(sources, [path], seed=trial)
        canary = canaries.canaries[f"{path}::test_table"]
        if trial % 3 == 2:
            assert canary.kind == "operator"  # refused: the complement, as before
            continue
        assert canary.kind == "param" and canary.real
        variants = build_variants(sources, canaries, random.Random(trial))
        for files in variants.files:
            assert _collect_ids(files) == original
        real = variants.files[variants.real_in[canary.test_id]][path]
        fake = variants.files[1 - variants.real_in[canary.test_id]][path]
        assert real.count("\n") == fake.count("\n") == sources[path].count("\n")
        ids_text = real[real.index(", ids="):real.index(")\ndef")]
        assert ids_text in fake  # the same ids text in both variants
        # the real table is the original one; the canary's expected column differs per row
        real_rows = ast.literal_eval(ast.parse(real).body[1].decorator_list[0].args[1])
        fake_rows = ast.literal_eval(ast.parse(fake).body[1].decorator_list[0].args[1])
        assert all(a == b for a, b in real_rows)
        changed = [a != b for a, b in fake_rows]
        perturbable = [ast.literal_eval(v) not in (None,) for v in values]
        assert changed == perturbable, (values, fake_rows)
        checked += 1
    assert checked == 5


def test_parametrize_duplicates_and_literal_ids_match_pytest():
    path = "test_param.py"
    for rows, extra in (([("1", "1"), ("1", "1"), ("'1'", "'1'"), ("[1]", "[1]")], ""),
                        ([("2", "2"), ("3", "3")], ", ids=['two', 'three']")):
        sources = {path: _param_module(rows, extra)}
        canaries = make_canaries(sources, [path], seed=1)
        canary = canaries.canaries[f"{path}::test_table"]
        assert canary.kind == "param"
        assert bool(canary.real) == (not extra)  # literal ids stay as written
        for files in build_variants(sources, canaries).files:
            assert _collect_ids(files) == _collect_ids(sources)


def test_parametrize_refused_when_ids_cannot_be_vouched_for():
    path = "test_param.py"
    cases = [
        _param_module([("1", "1")], ", ids=lambda v: str(v)"),  # ids from a function
        _param_module([("1", "1")], ", indirect=True"),
        _param_module([("1", "1"), ("2", "X")]),  # a name: its id needs the runtime value
        _param_module([("1", "1")]).replace("assert given == expected",
                                            "assert given == expected and expected"),
    ]
    for source in cases:
        canary = make_canaries({path: source}, [path], seed=3).canaries.get(f"{path}::test_table")
        assert canary is None or canary.kind != "param", source
    hook = {"conftest.py": "def pytest_make_parametrize_id(config, val, argname):\n"
                           "    return 'v'\n", path: _param_module([("1", "1")])}
    canary = make_canaries(hook, [path], seed=3).canaries[f"{path}::test_table"]
    assert canary.kind == "operator"  # a conftest renames ids: no table canary


LOOPS = '''\
import pytest
from calc import f

CASES = [(1, "one"), (2, "two"), (3, "three")]
SHARED = [(1, "one"), (2, "two")]


def test_module_table():
    for given, expected in CASES:
        assert f(given) == expected


def test_shared_a():
    for given, expected in SHARED:
        assert f(given) == expected


def test_shared_b():
    for given, expected in SHARED:
        assert f(given) == expected


def test_inline_loop():
    for given, expected in [(4, "four"), (5, "five")]:
        assert expected == f(given)


def test_local_expectation():
    expected = ["x", "y"]
    assert f(0) == expected


def test_local_table():
    pairs = ((6, "six"), (7, "seven"))
    for given, expected in pairs:
        result = f(given)
        assert expected == result


def test_expression_inputs():
    rows = [(int("9"), "nine"), (5 + 5, "ten")]
    for given, expected in rows:
        assert f(given) == expected


def test_expression_expected():
    rows = [(11, "ele" + "ven"), (12, "twelve")]
    for given, expected in rows:
        assert f(given) == expected


def test_call_expected():
    rows = [(13, str("thirteen"))]
    for given, expected in rows:
        assert f(given) == expected


def test_local_table_read_twice():
    pairs = [(8, "eight")]
    for given, expected in pairs:
        assert f(given) == expected
    assert len(pairs) == 1


def test_local_pairs():
    actual = f(13)
    expected = "thirteen"
    assert actual == expected
    actual = f(14)
    expected = "fourteen"
    assert actual == expected


def test_local_unpacked():
    given, expected = 16, "sixteen"
    assert f(given) == expected


def test_local_pairs_alike():
    expected = "fifteen"
    assert f(15) == expected
    expected = "fifteen"
    assert f(15) == expected


def test_local_pairs_equal_in_value():
    expected = 15
    assert f(15) == expected
    expected = 15.0
    assert f(15) == expected


def test_empties():
    assert f(None) == []
    assert f(None) == ""
    assert f(None) == {}
    assert f(None) == ()
    assert f(None) == set()
'''


def test_loops_module_tables_and_empty_literals_get_value_canaries():
    path = "tests/test_loops.py"
    sources = {path: LOOPS}
    seen: dict[str, set[tuple[str, str, str]]] = {}
    for seed in range(30):
        canaries = make_canaries(sources, [path], seed)
        for test_id, canary in canaries.canaries.items():
            seen.setdefault(test_id.rpartition("::")[2], set()).add(
                (canary.kind, canary.original, canary.replacement))
    assert {k for k, _, _ in seen["test_module_table"]} == {"data"}
    assert {o for _, o, _ in seen["test_module_table"]} == {'"one"', '"two"', '"three"'}
    assert {o for _, o, _ in seen["test_inline_loop"]} == {'"four"', '"five"'}
    assert {o for _, o, _ in seen["test_local_expectation"]} == {'"x"', '"y"'}
    # a table of the test's own, bound once and read once by its loop, is one too
    assert {(k, o) for k, o, _ in seen["test_local_table"]} == {("data", '"six"'),
                                                                ("data", '"seven"')}
    assert all(canaries.canaries[f"{path}::test_local_table"].earns for canaries in (
        make_canaries(sources, [path], seed, solution_modules=["calc"]) for seed in range(3)))
    assert "data" not in {k for k, _, _ in seen["test_local_table_read_twice"]}
    # a local bound again before each check: each binding is a data site, and the test earns
    assert {(k, o) for k, o, _ in seen["test_local_pairs"]} == {("data", '"thirteen"'),
                                                                ("data", '"fourteen"')}
    assert all(canaries.canaries[f"{path}::test_local_pairs"].earns for canaries in (
        make_canaries(sources, [path], seed, solution_modules=["calc"]) for seed in range(3)))
    # an unpacked binding too (`given, expected = 16, "sixteen"`), its expected item only
    assert {(k, o) for k, o, _ in seen["test_local_unpacked"]} == {("data", '"sixteen"')}
    # ... but not where two bindings have one value: a reader would find the earlier one
    assert "data" not in {k for k, _, _ in seen["test_local_pairs_alike"]}
    assert not any(canaries.canaries[f"{path}::test_local_pairs_alike"].earns for canaries in (
        make_canaries(sources, [path], seed, solution_modules=["calc"]) for seed in range(3)))
    # ... nor where they are written differently but equal (`15` and `15.0`)
    assert "data" not in {k for k, _, _ in seen["test_local_pairs_equal_in_value"]}
    # input cells may be any expressions
    assert {(k, o) for k, o, _ in seen["test_expression_inputs"]} == {("data", '"nine"'),
                                                                      ("data", '"ten"')}
    # expected cells may be arithmetic on literals (its operands perturbed), not calls
    assert {(k, o) for k, o, _ in seen["test_expression_expected"]} == {
        ("data", '"ele"'), ("data", '"ven"'), ("data", '"twelve"')}
    assert "data" not in {k for k, _, _ in seen["test_call_expected"]}
    # a table two tests read is never perturbed: they get the complement only
    assert {k for k, _, _ in seen["test_shared_a"] | seen["test_shared_b"]} == {"operator"}
    empties = seen["test_empties"]
    assert {k for k, _, _ in empties} == {"literal"}
    assert {o for _, o, _ in empties} == {"[]", '""', "{}", "()", "set()"}
    for _, old, new in empties:
        before, after = ast.literal_eval(old), ast.literal_eval(new)
        assert type(before) is type(after) and len(after) == 1


NEEDLES = """\
import unittest
from calc import message


def test_short_needle():
    assert "m1" in message()


def test_long_needle():
    assert "hook m1 yielded twice" in message()


def test_haystack_literal():
    assert message() in ["m1", "m2"]


class Units(unittest.TestCase):
    def test_short(self):
        self.assertIn("ab", message())

    def test_long(self):
        self.assertIn("abcdefgh", message())
"""


def test_short_text_needles_get_the_complement_not_another_needle():
    # "m1" perturbed into "c1" may turn up by chance in text holding a random tree path or a
    # hex address, so an honest run would pass the canary: short needles get `not in` instead
    path = "tests/test_needles.py"
    seen: dict[str, set[str]] = {}
    for seed in range(30):
        for test_id, canary in make_canaries({path: NEEDLES}, [path], seed).canaries.items():
            seen.setdefault(test_id.split("::", 1)[1], set()).add(canary.kind)
    assert seen["test_short_needle"] == {"operator"}
    assert seen["Units::test_short"] == {"operator"}
    assert seen["test_long_needle"] == {"literal"}
    assert seen["Units::test_long"] == {"literal"}
    assert seen["test_haystack_literal"] == {"literal"}


# -- unittest.TestCase -----------------------------------------------------------------------
UNITTEST = '''\
import threading
import unittest
from unittest import TestCase as Case

from calc import add, parse


class Mixin:
    def test_shared(self):
        self.assertEqual(add(1, 1), 2)


class AddTests(unittest.TestCase):
    def test_equal(self):
        self.assertEqual(add(2, 3), 5)
        self.assertEqual(7, add(3, 4))

    def test_flags(self):
        self.assertTrue(add(1, 1))
        self.assertIsNone(parse(""))

    def test_raises_cm(self):
        with self.assertRaises(ValueError):
            parse("x")

    def test_raises_call(self):
        self.assertRaises(KeyError, parse, "k")

    def test_almost(self):
        self.assertAlmostEqual(add(0.1, 0.2), 0.3, places=2)

    def test_almost_delta(self):
        self.assertAlmostEqual(add(1, 1), 2.0, delta=5)

    def test_not_in(self):
        self.assertNotIn(3, parse("1,2"))

    def test_list(self):
        self.assertListEqual(parse("1,2"), [1, 2])

    def test_nested_only(self):
        def check():
            self.assertEqual(add(1, 2), 3)
        check()

    def test_waits(self):
        gate = threading.Event()
        self.assertEqual(add(1, 2), 3)
        gate.set()


class MixedTests(Mixin, Case):
    def test_own(self):
        self.assertIn(add(1, 1), [2, 4])


class BaseTests(unittest.TestCase):
    def test_base(self):
        self.assertEqual(add(0, 0), 0)


class DerivedTests(BaseTests):
    pass
'''


def test_unittest_ids_match_pytest_collection():
    path = "test_units.py"
    files = {path: UNITTEST, "calc.py": "def add(a, b):\n    return a + b\n\n"
                                         "def parse(s):\n    return s\n"}
    collected = set(_collect_ids(files))
    assert expected_tests(files, [path]) == collected
    canaries = make_canaries(files, [path], seed=1)
    assert set(canaries.tests) == collected


def test_unittest_assertions_get_canaries_where_one_id_runs_them():
    path = "test_units.py"
    sources = {path: UNITTEST}
    seen: dict[str, set[tuple[str, str, str]]] = {}
    for seed in range(30):
        canaries = make_canaries(sources, [path], seed)
        for test_id, canary in canaries.canaries.items():
            seen.setdefault(test_id.split("::", 1)[1], set()).add(
                (canary.kind, canary.original, canary.replacement))
    # mixin methods, inherited methods and waiting tests get none
    assert not {"MixedTests::test_shared", "BaseTests::test_base", "DerivedTests::test_base",
                "AddTests::test_waits"} & set(seen)
    # a nested function the test itself calls is part of the test (grading/canary.py `_own`)
    assert {k for k, _, _ in seen["AddTests::test_nested_only"]} == {"literal"}
    assert {o for k, o, _ in seen["AddTests::test_equal"]} == {"5", "7"}
    assert {(k, o, n) for k, o, n in seen["AddTests::test_flags"]} == {
        ("operator", "assertTrue", "assertFalse"), ("operator", "assertIsNone", "assertIsNotNone")}
    for test in ("AddTests::test_raises_cm", "AddTests::test_raises_call"):
        kinds = {k for k, _, _ in seen[test]}
        assert kinds == {"raises"}
        assert all(o != n for _, o, n in seen[test])
    for _, old, new in seen["AddTests::test_almost"]:
        assert abs(float(new) - float(old)) > 0.02  # beyond places=2
    # within delta=5 no perturbation of 2.0 by one or two digits is sure to leave the band
    assert {(k, n) for k, _, n in seen["AddTests::test_almost_delta"]} <= {
        ("operator", "assertNotAlmostEqual"), ("literal", "7.0"), ("literal", "8.0"),
        ("literal", "9.0"), ("literal", "5.0"), ("literal", "4.0")} and all(
        k == "operator" or abs(float(n) - 2.0) > 10 for k, _, n in
        seen["AddTests::test_almost_delta"])
    assert seen["AddTests::test_not_in"] == {("operator", "assertNotIn", "assertIn")}
    assert {k for k, _, _ in seen["AddTests::test_list"]} == {"literal"}
    assert {k for k, _, _ in seen["MixedTests::test_own"]} == {"literal"}


# -- redraws: a canary that proved invalid is drawn again from the test's other candidates ---
REDRAW = '''\
from calc import add


def test_many():
    result = add(1, 2)
    if result == 99:
        assert result == 99
    assert result > 0
    assert add(2, 2) == 4


def test_one():
    assert add(0, 0) == 0
'''


def test_excluded_candidates_are_never_drawn_until_none_is_left():
    sources = {"test_x.py": REDRAW}
    for seed in range(10):
        exclude: dict[str, set] = {}
        seen = []
        while True:
            canaries = make_canaries(sources, ["test_x.py"], seed, exclude=exclude,
                                     only=["test_x.py::test_many"])
            assert set(canaries.tests) == {"test_x.py::test_many", "test_x.py::test_one"}
            canary = canaries.canaries.get("test_x.py::test_many")
            assert "test_x.py::test_one" not in canaries.canaries  # `only`
            if canary is None:
                break
            assert canary.site not in exclude.get(canary.test_id, ())
            seen.append(canary.site)
            exclude.setdefault(canary.test_id, set()).add(canary.site)
        # three assertions: each perturbed and each complemented, every one tried once
        assert sorted(seen) == [(0, "perturb"), (0, "swap"), (1, "swap"), (2, "perturb"),
                                (2, "swap")], seed
        # without exclusions the draw is the one it always was
        plain = make_canaries(sources, ["test_x.py"], seed)
        assert plain.canaries["test_x.py::test_many"].site == seen[0]


# -- waits: only what the imports say is threading's (asyncio's...) silences a canary -------
OWN_TIMER = '''\
from calc import add


class Timer:
    """The suite's own fake clock: nothing waits on it."""

    def __init__(self):
        self.now = 0

    def tick(self):
        self.now += 1


class Event:
    pass


def test_with_fake_timer():
    timer = Timer()
    timer.tick()
    assert add(timer.now, 1) == 2


def test_with_own_event():
    Event()
    assert add(1, 1) == 2


def test_with_module_attribute():
    import sched
    sched.Event = Event
    assert add(2, 3) == 5
'''

REAL_WAITS = '''\
import asyncio.locks
import queue as Q
import threading as t
from concurrent import futures
from threading import *
from threading import Event as Latch

from calc import add


class Worker(t.Thread):
    pass


class Nested(Worker):
    pass


def test_alias_module():
    gate = t.Event()
    assert add(1, 2) == 3
    gate.set()


def test_alias_name():
    gate = Latch()
    assert add(1, 2) == 3
    gate.set()


def test_star():
    Barrier(1)
    assert add(1, 2) == 3


def test_subclass():
    Nested()
    assert add(1, 2) == 3


def test_submodule():
    asyncio.locks.Event()
    assert add(1, 2) == 3


def test_futures_and_queues():
    futures.Future()
    Q.Queue()
    assert add(1, 2) == 3


def test_local_import():
    import multiprocessing as mp
    mp.Event()
    assert add(1, 2) == 3


def test_no_wait():
    assert add(1, 2) == 3
'''


def test_a_suites_own_timer_or_event_class_gets_canaries():
    canaries = make_canaries({"test_own.py": OWN_TIMER}, ["test_own.py"], 3)
    assert set(canaries.canaries) == {"test_own.py::test_with_fake_timer",
                                      "test_own.py::test_with_own_event",
                                      "test_own.py::test_with_module_attribute"}


def test_real_waits_resolved_through_imports_get_no_canary():
    canaries = make_canaries({"test_waits.py": REAL_WAITS}, ["test_waits.py"], 3)
    assert set(canaries.canaries) == {"test_waits.py::test_no_wait"}
    assert len(canaries.tests) == 8


def _generated_unittest_module(count: int) -> str:
    """A module shaped like idna's generated uts46 suite: one TestCase, `count` methods."""
    methods = "".join(
        f"    def test_case_{i}(self):\n"
        f"        self.assertEqual(add({i}, 1), {i + 1})\n"
        f"        self.assertRaises(ValueError, add, 'x{i}', None)\n\n"
        for i in range(count))
    header = "import unittest\n\nfrom calc import add\n\n\nclass Generated(unittest.TestCase):\n\n"
    return header + methods


def test_a_generated_class_of_thousands_of_tests_gets_a_canary_per_test():
    """Each candidate is checked by parsing the one method it edits, not the whole class."""
    source = _generated_unittest_module(2000)
    canaries = make_canaries({"test_gen.py": source}, ["test_gen.py"], 5)
    assert len(canaries.canaries) == 2000
    for canary in list(canaries.canaries.values())[:50]:  # each one still a valid module
        text = source.encode()
        new = text[:canary.start] + canary.replacement.encode() + text[canary.end:]
        ast.parse(new.decode())


def test_the_statement_parse_check_agrees_with_a_whole_module_parse():
    """Edits that change a line's indentation, add a line or land between statements are
    judged on the whole module; every verdict equals a full parse."""
    from opd_gym.grading.canary import _apply, _Source, _Statements

    source = (_generated_unittest_module(4) + "x = [1,\n     2]; y = 3\n\n\n"
              "class Oneline: a = 1\n\n\nclass Sub(Generated):\n    '''doc\nat column 0'''\n"
              "    def test_more(self):  # trailing\n        assert add(1, 1) == 2\n")
    src = _Source(source)
    statements = _Statements(ast.parse(source), src)
    rng = random.Random(3)
    snippets = ["  ", "\n", "x", ")", "(", "#", "\\\n", "'a'", ":", "\t", "\n    y = 2\n", ""]
    for _ in range(3000):
        start = rng.randrange(len(src.data))
        end = min(len(src.data), start + rng.choice((0, 1, 2, 4)))
        edits = [(start, end, rng.choice(snippets))]
        try:
            ast.parse(_apply(src.data, edits))
            whole = True
        except (SyntaxError, ValueError):
            whole = False
        assert statements.parses(edits) == whole, (edits, src.data[start - 30:end + 30])


@pytest.mark.parametrize(("text", "value"), [
    ("6**20", 6**20), ("1 * 2**19 * 2 * 3**19", 2**20 * 3**19),
    ("999953 * 999983", 999953 * 999983), ('"thirty-" + "eight"', "thirty-eight"),
    ('[(1, 2 * 3), {"a": -2**3}]', [(1, 6), {"a": -8}]), ("10**-2", 0.01), ("~3", -4),
    ('b"ab" * 2', b"abab"), ("{1 + 1}", {2})])
def test_arithmetic_on_literals_is_a_literal(text, value):
    folded = canary_module._literal(ast.parse(text, mode="eval").body)
    assert folded == value and type(folded) is type(value)


@pytest.mark.parametrize("text", [
    "2**100000", "1 << 10**6", '"a" * 10**9', 'b"a" * 10**6', "1 / 0", "10.0**400",
    "x + 1", "[1] * 3", "(1, 2) + (3,)", "len('ab') + 1", '"a" * True', "not 0"])
def test_arithmetic_the_host_would_not_compute_is_no_literal(text):
    # too large, raising, naming anything, or not numbers and text: left to the test
    assert canary_module._literal(ast.parse(text, mode="eval").body) is canary_module._NO


FOLLOWING = '''\
import pytest

from labels import label

ROWS = [(1, "a1"), (2, "aa2"), (3, "aaa3")]


@pytest.mark.parametrize("i, want", ROWS, ids=[w for _, w in ROWS])
def test_computed(i, want):
    assert label(i) == want


@pytest.mark.parametrize("i, want", [(4, "aaaa4"), (5, "aaaaa5")], ids=lambda v: f"v{v}")
def test_lambda(i, want):
    assert label(i) == want


@pytest.mark.parametrize("want", ["a" * 120 + "6"])
def test_long_auto_id(want):
    assert label(6) == want
'''


def test_tables_whose_ids_follow_their_values_pair_their_canary_items_by_case():
    """A parametrize table whose ids change with its values (computed from the table, a
    lambda, pytest's own id of a value only the run names) gets a canary where the grade
    pairs items by case, none where a run selects node ids; the harness's real run names
    plain pytest's ids, and `merge` reads each canary under its real item's id (so the
    reference fails every canary and passes every real test)."""
    sources = {"test_labels.py": FOLLOWING}
    unpaired = make_canaries(sources, ["test_labels.py"], seed=3, solution_modules=["labels"])
    assert not any(c.earns or c.kind == "param" for c in unpaired.canaries.values())
    canaries = make_canaries(sources, ["test_labels.py"], seed=3, solution_modules=["labels"],
                             paired=True)
    assert set(canaries.canaries) == {"test_labels.py::test_computed",
                                      "test_labels.py::test_lambda",
                                      "test_labels.py::test_long_auto_id"}
    assert all(c.earns for c in canaries.canaries.values()), canaries.canaries
    canaries = dataclasses.replace(canaries, canaries={  # the table's canary, whatever drawn
        t: c for t, c in canaries.canaries.items() if c.kind == "param"})
    assert canaries.canaries
    variants = build_variants(sources, canaries)
    with tempfile.TemporaryDirectory(prefix="opd-canary-") as folder:
        Path(folder, "labels.py").write_text(
            "def label(i):\n    return 'a' * (i if i < 6 else 120) + str(i)\n")
        raw = run_harness_here(folder, list(variants.files), args=["test_labels.py"])
    data = parse_verdict(raw)
    real_ids = {e["id"] for run, index in zip(data["variants"], (0, 1), strict=True)
                for e in run["tests"] if variants.real_in[e["id"].partition("[")[0]] == index}
    assert {"test_labels.py::test_computed[a1]", "test_labels.py::test_lambda[v4-vaaaa4]"} \
        <= real_ids
    merged = merge(data, expected_tests(sources, ["test_labels.py"]), False, canaries,
                   variants)
    assert not merged.reason, merged.reason
    assert set(merged.canary) == set(merged.real) == real_ids
    assert all(o == "passed" for o, _ in merged.real.values())
    assert all(o == "failed" for o in merged.canary.values()), merged.canary
    broken = {**data, "variants": [data["variants"][0], {**data["variants"][1], "tests": [
        {k: v for k, v in e.items() if k != "case"} for e in data["variants"][1]["tests"]]}]}
    unpaired_run = merge(broken, expected_tests(sources, ["test_labels.py"]), False,
                         canaries, variants)
    assert "collected different test ids" in unpaired_run.reason  # never paid unpaired
