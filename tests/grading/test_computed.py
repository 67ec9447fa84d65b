"""Computed expectations held on the host (opd_gym/grading/computed.py, held.py): which sites
comparing with a value the test computes are held, how grades' texts lose the expectation, its
local and its helpers, and what calibration vouches for. Static, plus one Docker check that
expectations differing from one process to the next are never held against an honest fix."""

from __future__ import annotations

import pytest

from opd_gym.grading import held
from opd_gym.grading.computed import expected_index
from opd_gym.tasks import Task

SOLUTION = {"calc"}
TESTS = '''\
import calendar
import datetime

import pytest

from calc import double, echo, is_leap, total

TABLE = {3: 6}


def oracle(n):
    return _twice(n)


def _twice(n):
    return n + n


def shared(n):
    return n * 2


@pytest.fixture
def want():
    return 14


def test_oracle_local():
    for n in (3, 8):
        expected = oracle(n)
        assert double(n) == expected


def test_library_oracle():
    for year in (1900, 2000):
        assert is_leap(year) == calendar.isleap(year)


def test_builtin_on_inputs():
    xs = [3, 1, 2]
    assert total(xs) == sum(xs)


def test_read_twice():
    xs = [3, 1, 2]
    expected = sum(xs)
    assert total(xs) == expected
    assert total(list(reversed(xs))) == expected


def test_read_elsewhere():
    xs = [3, 1, 2]
    expected = sum(xs)
    assert total(xs) == expected
    print(expected)


def test_reversed():
    assert calendar.isleap(2024) == is_leap(2024)


def test_fixture_value(want):
    assert double(7) == want


def test_projection():
    case = {"n": 3, "want": 6}
    assert double(case["n"]) == int(case["want"])


def test_module_data():
    assert double(3) == int(TABLE[3])


def test_shared_helper():
    assert double(4) == shared(4)


def test_uses_shared_as_input():
    assert double(shared(1)) == 4


def test_reaches_the_solution():
    assert double(2) == total([2, 2])


def test_time_dependent(tmp_path):
    assert echo(str(tmp_path)) == str(tmp_path.resolve())


def test_now():
    assert echo(1) == datetime.datetime.now().microsecond


def test_operators_only():
    actual = double(5)
    expected = 5 * 2
    assert actual == expected


def test_round_trip():
    data = [3, 1]
    assert total(data) == data
'''
PATH = "test_calc.py"


def _id(name: str) -> str:
    return f"{PATH}::{name}"


def test_sites_comparing_with_what_the_test_computes_are_candidates():
    found = held.candidates({PATH: TESTS}, [PATH], solution=SOLUTION)
    names = {t.rpartition("::")[2] for t in found}
    # held: an oracle bound to a local, a library oracle in a loop, a builtin over inputs, a
    # test function whose readers are not yet known (calibration drops it: see below)
    assert {"test_oracle_local", "test_library_oracle", "test_builtin_on_inputs",
            "test_shared_helper", "test_time_dependent", "test_reversed",
            "test_operators_only"} <= names, names
    # never: the answer handed in (a fixture), a projection of an input, module data, the
    # solution reached on the expected side, a value only time tells (datetime is no input
    # but is computed: calibration, not this, rules it out)
    assert not {"test_fixture_value", "test_projection", "test_module_data",
                "test_reaches_the_solution", "test_round_trip"} & names, names
    # and nothing without the solution's modules (the old behaviour)
    assert not {"test_oracle_local", "test_library_oracle"} & {
        t.rpartition("::")[2] for t in held.candidates({PATH: TESTS}, [PATH])}


def _probes(sites, values):
    """Probes of a reference run: each site's solution and expected side emitting `values`."""
    out = {}
    for test_id, indices in sites.items():
        for index in indices:
            for value in values.get(test_id, [None]):
                out.setdefault(test_id, []).extend(
                    [(index, repr(value), True), (expected_index(index), repr(value), True)])
    return out


def test_calibration_holds_only_values_another_process_computed_alike():
    sites = held.candidates({PATH: TESTS}, [PATH], solution=SOLUTION)
    computed = {t: s for t, s in sites.items() if t.rpartition("::")[2] in (
        "test_oracle_local", "test_library_oracle", "test_builtin_on_inputs",
        "test_time_dependent", "test_shared_helper", "test_now", "test_read_twice",
        "test_read_elsewhere")}
    values = {_id("test_oracle_local"): [6, 16], _id("test_library_oracle"): [False, True],
              _id("test_builtin_on_inputs"): [6], _id("test_shared_helper"): [8],
              _id("test_time_dependent"): ["/tmp/a/test0"], _id("test_now"): [123],
              _id("test_read_twice"): [6], _id("test_read_elsewhere"): [6]}
    probes = _probes(computed, values)
    # the starter computed the same expectations, but another tmp path and another time
    starter = _probes(computed, {**values, _id("test_time_dependent"): ["/tmp/b/test0"],
                                 _id("test_now"): [456]})
    starter[_id("test_oracle_local")] = starter[_id("test_oracle_local")][:2]  # stopped early
    recorded: dict = {}
    kept = held.calibrated(computed, {PATH: TESTS}, probes, list(computed), solution=SOLUTION,
                           witness=probes, others=[starter], recorded=recorded)
    names = {t.rpartition("::")[2] for t in kept}
    # a local read by two held sites is held at both; one read where nothing is held (a
    # print) would see None: not held
    assert names == {"test_oracle_local", "test_library_oracle", "test_builtin_on_inputs",
                     "test_read_twice"}, names
    assert len(kept[_id("test_read_twice")]) == 2
    # `shared` is read by another test as an input: taking it out would break that test
    assert _id("test_shared_helper") not in kept
    oracle = recorded[_id("test_oracle_local")]
    assert list(oracle.values()) and next(iter(oracle.values())).values == {
        _id("test_oracle_local"): (6, 16)}
    assert set(next(iter(oracle.values())).helpers) == {"oracle", "_twice"}
    # computed in one run only (the grade's other run never got there): not held
    assert held.calibrated(computed, {PATH: TESTS}, probes, list(computed), solution=SOLUTION,
                           witness={}, others=[probes], recorded={}) == {}


def test_a_grade_takes_the_expectation_its_local_and_its_helpers_out_of_the_text():
    sites = held.candidates({PATH: TESTS}, [PATH], solution=SOLUTION)
    computed = {t: s for t, s in sites.items() if t.rpartition("::")[2] in (
        "test_oracle_local", "test_library_oracle")}
    probes = _probes(computed, {_id("test_oracle_local"): [6, 16],
                                _id("test_library_oracle"): [False, True]})
    recorded: dict = {}
    kept = held.calibrated(computed, {PATH: TESTS}, probes, list(computed), solution=SOLUTION,
                           witness=probes, recorded=recorded)
    runs = held.rewrite(({PATH: TESTS}, {PATH: TESTS}), kept, ((), ()), solution=SOLUTION,
                        computed=recorded)
    text = runs.files[0][PATH]
    assert "def oracle" not in text and "def _twice" not in text and "n + n" not in text
    assert "expected = None" in text and "calendar.isleap(year)" not in text
    assert len(text.splitlines()) == len(TESTS.splitlines())  # line numbers kept
    compile(text, PATH, "exec")
    expect = runs.expect[0]
    assert expect[_id("test_oracle_local")] == {
        kept[_id("test_oracle_local")][0]: (held.ROWS, (("==", 6), ("==", 16)))}
    assert not runs.unheld
    # a canary editing the helper in one run: its text differs from what calibration recorded,
    # so the site is held in neither run (and calibration drops it)
    canary = TESTS.replace("return n + n", "return n + n + 1")
    runs = held.rewrite(({PATH: TESTS}, {PATH: canary}), kept, ((), ()), solution=SOLUTION,
                        computed=recorded)
    assert _id("test_oracle_local") in runs.unheld
    assert _id("test_library_oracle") not in runs.unheld
    # probes keep the text and emit both sides; "first" emits the expected side first
    probe = held.rewrite(({PATH: TESTS}, {PATH: TESTS}), kept, ((), ()), probe=True,
                         solution=SOLUTION).files[0][PATH]
    site = kept[_id("test_library_oracle")][0]
    assert "def oracle" in probe \
        and f"hold({expected_index(site)}, (calendar.isleap(year)))" in probe
    first = held.rewrite(({PATH: TESTS}, {PATH: TESTS}), kept, ((), ()), probe="first",
                         solution=SOLUTION).files[0][PATH]
    compile(first, PATH, "exec")
    assert first.index("calendar.isleap(year)") < first.index("is_leap(year)")


PROCESS_TESTS = '''\
import os
import random

from calc import echo


def test_tmp_path(tmp_path):
    assert echo(str(tmp_path)) == str(tmp_path)


def test_pid():
    assert echo(7) == 7 + os.getpid() * 0


def test_random():
    assert echo(1) == random.random() * 0 + 1


def test_uid_dependent():
    assert echo(os.getuid()) == int(os.getuid())


def test_failing_starter():
    assert echo(5) == abs(-5)
'''
PROCESS_TASK = Task(
    id="computed_per_process", prompt="Write calc.echo.",
    files={"calc.py": "def echo(x):\n    return None\n"},
    tests={"test_calc.py": PROCESS_TESTS},
    solution={"calc.py": "def echo(x):\n    return x\n"}, timeout=60.0)


@pytest.mark.docker
def test_expectations_that_differ_between_processes_are_never_held_against_an_honest_fix(
        docker_grader):
    # a tmp path, a uid: each grading run (its own uid, its own tree) computes its own; held
    # with the reference's value they would fail an honest fix. Calibration holds only what
    # the starter computed alike, and every honest grade passes every test
    calibration = docker_grader.calibration(PROCESS_TASK)
    computed = {t.rpartition("::")[2] for t in calibration.computed or {}}
    assert "test_failing_starter" in computed, computed
    for _ in range(3):
        report = docker_grader.grade(PROCESS_TASK, {"calc.py": PROCESS_TASK.solution[
            "calc.py"].encode()})
        assert report.score == 1.0 and report.all_passed, (report.reason, report.tests)


HELPER_COMMON = '''\
def assert_equal(expected, result):
    """Print both, then compare."""
    print("Expected:\\n%r\\n" % (expected,))
    print("Got:\\n%r\\n" % (result,))
    assert expected == result


def assert_stripped(expected, result):
    assert expected.strip() == result.strip()


def assert_first(a, b, c):
    assert a == b
'''
HELPER_TESTS = '''\
from common import assert_equal, assert_first, assert_stripped

from calc import render


def local_equal(a, b):
    assert b == a


def test_imported_helper():
    expected = "\\n".join(["a", "b"])
    result = render()
    assert_equal(expected, result)


def test_literal_through_helper():
    assert_equal("a\\nb", render())


def test_local_helper():
    local_equal(render(), "ab" + "c")


def test_normalising_helper():
    expected = "\\n".join(["a", "b"])
    assert_stripped(expected, render())


def test_three_arguments():
    expected = "\\n".join(["a", "b"])
    assert_first(expected, render(), 0)
'''


def test_helpers_that_only_assert_equality_are_equality_sites():
    # a suite's own `assert_equal(expected, result)` (tabulate's test/common.py: print both,
    # then `assert expected == result`) is `assert expected == result`, whatever its name;
    # a helper that normalises first, or takes more arguments, is not
    sources = {"test/common.py": HELPER_COMMON, "test/test_render.py": HELPER_TESTS}
    found = held.candidates(sources, ["test/test_render.py"], solution=SOLUTION | {"calc"})
    names = {t.rpartition("::")[2] for t in found}
    assert names == {"test_imported_helper", "test_literal_through_helper",
                     "test_local_helper"}, names
    # a grade's text: the helper call becomes the emission, the literal and the computed
    # expectation leave it
    probes = {}
    for test_id, indices in found.items():
        for index in indices:
            probes[test_id] = [(index, repr("a\nb"), True),
                               (expected_index(index), repr("a\nb"), True)]
    probes["test/test_render.py::test_local_helper"] = [
        (i, repr("abc"), True) for i in (found["test/test_render.py::test_local_helper"][0],
                                         expected_index(found[
                                             "test/test_render.py::test_local_helper"][0]))]
    recorded: dict = {}
    kept = held.calibrated(found, sources, probes, list(found), solution={"calc"},
                           witness=probes, recorded=recorded)
    assert set(kept) == set(found), kept
    runs = held.rewrite((sources, sources), kept, ((), ()), solution={"calc"},
                        computed=recorded)
    text = runs.files[0]["test/test_render.py"]
    compile(text, "test_render.py", "exec")
    assert "assert_equal(" not in text.split("def local_equal")[1] and "a\\nb" not in text
    assert '"ab" + "c"' not in text and "expected = None" in text
    assert 'hold(' in text and "assert_stripped(expected, render())" in text


def test_what_counts_as_an_equality_helper():
    import ast

    def helper(text: str) -> bool:
        return held.asserts_equal(ast.parse(text).body[0])

    assert helper("def eq(a, b):\n    assert a == b\n")
    assert helper("def eq(a, b):\n    '''doc'''\n    print(a)\n    assert b == a, 'differ'\n")
    assert not helper("def eq(a, b):\n    assert a != b\n")
    assert not helper("def eq(a, b):\n    a = a.strip()\n    assert a == b\n")
    assert not helper("def eq(a, b=1):\n    assert a == b\n")
    assert not helper("def eq(a, b):\n    print(a := 1)\n    assert a == b\n")
    assert not helper("@decorated\ndef eq(a, b):\n    assert a == b\n")
    assert not helper("def eq(a, b):\n    assert a == b\n    return a\n")
