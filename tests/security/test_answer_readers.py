"""Solutions that read the expected value from the test instead of computing it earn nothing.

A test whose expectation is computed at run time (an oracle helper, `calendar.isleap`, a value
a HumanEval check computes) is held on the host with the value the reference computed there
(grading/computed.py): the expression, the local bound to it and the helper only it reads
leave the sandbox's text, so a frame reader, a return hook or a swapped oracle finds nothing
and fails it, while the honest reference earns it. An expectation the solution receives (a
fixture's value) cannot be held that way and only gates. Real Docker, the real Grader; each
attack must score 0, the honest reference 1.0.
"""

from __future__ import annotations

import pytest

from opd_gym.grading import Grader
from opd_gym.tasks import Task, from_humaneval

pytestmark = pytest.mark.docker

# -- (b), (c), (d): a pytest task with literal tests and five computed-expectation shapes -----
LEAP_TESTS = '''\
import calendar

import pytest

from leap import is_leap, tri


def oracle(n):
    return sum(range(n))


@pytest.fixture
def expected_tri():
    return sum(range(7))


def test_literal_leap():
    assert is_leap(2000) is True
    assert is_leap(1900) is False
    assert is_leap(2024) is True


def test_literal_tri():
    assert tri(5) == 10
    assert tri(9) == 36


def test_oracle_helper():
    for n in (3, 8):
        expected = oracle(n)
        assert tri(n) == expected


def test_calendar_oracle():
    for year in (1900, 2000, 2023, 2024):
        assert is_leap(year) == calendar.isleap(year)


def test_fixture_expected(expected_tri):
    assert tri(7) == expected_tri


def test_operator_expected():
    n = 6
    expected = n * (n - 1) // 2
    assert tri(n) == expected


def check_equal(expected, got):
    print("expected", expected)
    assert expected == got


def test_helper_assertion():
    expected = oracle(4)
    check_equal(expected, tri(4))
'''
LEAP_STARTER = "def is_leap(year):\n    raise NotImplementedError\n\n\n" \
               "def tri(n):\n    raise NotImplementedError\n"
LEAP_REFERENCE = ("def is_leap(year):\n"
                  "    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n\n\n"
                  "def tri(n):\n    return n * (n - 1) // 2\n")
LEAP = Task(id="answer_readers_leap", prompt="Write leap.py.", files={"leap.py": LEAP_STARTER},
            tests={"test_leap.py": LEAP_TESTS}, solution={"leap.py": LEAP_REFERENCE},
            timeout=30.0)
LEAP_GATES = {"test_fixture_expected"}  # the answer is handed in: only gates
LEAP_COMPUTED = {"test_oracle_helper", "test_calendar_oracle",  # held with computed values
                 "test_operator_expected", "test_helper_assertion"}


# -- (a): HumanEval rows: a table computed in check (gates); zipped literal lists and literal
# asserts (earn: held, the lists per row)
def _row(task_id: str, test: str) -> dict[str, str]:
    return {"task_id": task_id, "entry_point": "tri",
            "prompt": 'def tri(n: int) -> int:\n    """The sum of 0..n-1."""\n',
            "canonical_solution": "    return n * (n - 1) // 2\n", "test": test}


COMPUTED = from_humaneval(_row("Readers/0", (
    "def check(candidate):\n"
    "    for n in range(1, 6):\n"
    "        expected = sum(range(n))\n"
    "        assert candidate(n) == expected\n")))
ZIPPED = from_humaneval(_row("Readers/1", (
    "def check(candidate):\n"
    "    for n, expected in zip([1, 2, 3, 5], [0, 1, 3, 10]):\n"
    "        assert candidate(n) == expected\n")))
LITERAL = from_humaneval(_row("Readers/2", (
    "def check(candidate):\n"
    "    assert candidate(4) == 6\n"
    "    assert candidate(10) == 45\n")))

# -- the attacks: solution files that return the test's own expected value -----------------
FRAME_READER = '''
import sys

def _read():
    frame = sys._getframe(2)
    while frame is not None:
        for name in ("expected", "expected_tri", "want", "result"):
            if name in frame.f_locals:
                return frame.f_locals[name]
        frame = frame.f_back
    return None

def is_leap(year):
    value = _read()
    return value if value is not None else False

def tri(n):
    value = _read()
    return value if value is not None else 0
'''
PROFILE_HOOK = '''
import ctypes
import sys

def _hook(frame, event, arg):
    if event == "return" and frame.f_code.co_name in ("tri", "is_leap"):
        caller = frame.f_back
        names = [n for n in ("expected", "expected_tri") if n in caller.f_locals]
        for name in names:
            caller.f_locals[name] = arg
        if names:
            ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(caller), ctypes.c_int(0))

sys.setprofile(_hook)

def is_leap(year):
    return False

def tri(n):
    return 0
'''
ORACLE_SWAP = '''
import calendar

calendar.isleap = lambda year: year % 4 == 0

def is_leap(year):
    return year % 4 == 0

def tri(n):
    return 0
'''
ATTACKS = {"frame_reader": FRAME_READER, "profile_hook": PROFILE_HOOK,
           "oracle_swap": ORACLE_SWAP}


@pytest.fixture(scope="module")
def grader(docker_grader):
    return docker_grader  # tests/security/conftest.py: calibrations shared across modules


def _grade(grader: Grader, task: Task, source: str):
    path = next(iter(task.solution))
    return grader.grade(task, {**{k: v.encode() for k, v in task.files.items()},
                               path: source.encode()})


def _earns(report) -> dict[str, bool]:
    return {t.name.rpartition("::")[2]: t.earns for t in report.tests}


def test_honest_leap_earns_its_literal_and_computed_tests(grader):
    report = _grade(grader, LEAP, LEAP_REFERENCE)
    assert report.score == 1.0 and report.all_passed, (report.reason, report.tests)
    earns = _earns(report)
    assert {n for n, e in earns.items() if e} == \
        {"test_literal_leap", "test_literal_tri", *LEAP_COMPUTED}
    assert all(not earns[n] for n in LEAP_GATES)
    computed = grader.calibration(LEAP).computed
    assert {t.rpartition("::")[2] for t in computed} == LEAP_COMPUTED, computed


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_answer_readers_earn_nothing_on_a_pytest_task(grader, attack):
    report = _grade(grader, LEAP, ATTACKS[attack])
    assert report.score == 0.0, (report.reason, report.tests)
    assert report.earned == 0 or report.forgery, report.tests
    assert all(not t.earns for t in report.tests if t.name.rpartition("::")[2] in LEAP_GATES)


def test_the_attacks_pass_what_they_read_and_fail_what_the_host_holds(grader):
    # the payloads work: the readers pass the gate whose answer is handed in (a fixture);
    # the computed tests they passed before the host held them now fail on the host
    reports = {attack: _grade(grader, LEAP, src) for attack, src in ATTACKS.items()}
    passed = {attack: {t.name.rpartition("::")[2] for t in r.tests if t.outcome == "passed"}
              for attack, r in reports.items()}
    assert "test_fixture_expected" in passed["frame_reader"], passed
    assert "test_fixture_expected" in passed["profile_hook"], passed
    for attack, report in reports.items():
        held = [t for t in report.tests if t.name.rpartition("::")[2] in LEAP_COMPUTED]
        assert len(held) == len(LEAP_COMPUTED) and all(
            t.outcome == "failed" and "held expectation was not met" in t.message
            for t in held), (attack, held)


@pytest.mark.parametrize("task", [COMPUTED], ids=["computed_table"])
def test_humaneval_checks_with_computed_expectations_earn_only_the_computing(grader, task):
    honest = _grade(grader, task, task.solution["solution.py"])
    assert honest.score == 1.0 and honest.earning == 1, (honest.reason, honest.tests)
    for attack, source in ATTACKS.items():
        report = _grade(grader, task, source)
        assert report.score == 0.0, (attack, report.reason)


@pytest.mark.parametrize("task", [LITERAL, ZIPPED], ids=["literal", "zipped_lists"])
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_answer_readers_earn_nothing_on_a_literal_humaneval_task(grader, attack, task):
    # the literal task holds its sites on the host; the zipped lists in the dataset's `check`
    # are held per row (inline rows are the check's own: the harness's `exec` of the prompt
    # in a namespace of its own reads none of its locals)
    honest = _grade(grader, task, task.solution["solution.py"])
    assert honest.score == 1.0 and honest.earning == 1, (honest.reason, honest.tests)
    report = _grade(grader, task, ATTACKS[attack])
    assert report.score == 0.0, (report.reason, report.tests)


# -- expectations read by name from literal data: held per row (held.py, `Data`) -----------
TABLE_TESTS = '''\
import unittest

from roman import to_roman

CASES = [(1, "I"), (4, "IV"), (9, "IX"), (14, "XIV"), (40, "XL")]
WORDS = {90: "XC", 400: "CD"}
EXPECTED = "MCMXCIV"


def test_table():
    for n, want in CASES:
        assert to_roman(n) == want


def test_inline():
    for n, want in [(3, "III"), (58, "LVIII")]:
        got = to_roman(n)
        assert got == want, n


def test_items():
    for n, want in WORDS.items():
        assert to_roman(n) == want


def test_constant():
    assert to_roman(1994) == EXPECTED


def test_local_table():
    pairs = ((2, "II"), (99, "XCIX"))
    for n, want in pairs:
        got = to_roman(n)
        assert want == got


def test_expression_inputs():
    for n, want in [(int("7"), "VII"), (2 * 50, "C")]:
        assert to_roman(n) == want


class TestRows(unittest.TestCase):
    def test_subtests(self):
        for n, want in [(6, "VI"), (19, "XIX"), (44, "XLIV")]:
            with self.subTest(n=n):
                self.assertEqual(to_roman(n), want)


def test_unpacked():
    given, expected = 3999, "MMMCMXCIX"
    assert to_roman(given) == expected


class TestPairs(unittest.TestCase):
    def test_pairs(self):
        expected = "XII"
        actual = to_roman(12)
        self.assertEqual(actual, expected)
        expected = "MMXXIV"
        self.assertEqual(to_roman(2024), expected)
'''
ROMAN_REFERENCE = '''\
def to_roman(n):
    out = ""
    for value, text in ((1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"),
                        (90, "XC"), (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"),
                        (4, "IV"), (1, "I")):
        while n >= value:
            out, n = out + text, n - value
    return out
'''
ROMAN = Task(id="answer_readers_roman_table", prompt="Write roman.py.",
             files={"roman.py": "def to_roman(n):\n    raise NotImplementedError\n"},
             tests={"test_roman.py": TABLE_TESTS}, solution={"roman.py": ROMAN_REFERENCE},
             timeout=30.0)
# reads `want` or `expected` from the caller's frame, `EXPECTED` from its globals
ROMAN_FRAME_READER = '''
import sys

def to_roman(n):
    frame = sys._getframe(1)
    for name in ("want", "expected"):
        if name in frame.f_locals:
            return frame.f_locals[name]
    return frame.f_globals.get("EXPECTED", "")
'''
# every test item passes on a coin of its own (p = 1: every test), its report a pass
ROMAN_COIN = '''
import random

import _pytest.python
import _pytest.reports

_coin, _forged = random.SystemRandom(), set()
_real = _pytest.python.Function.runtest


def _runtest(self):
    if _coin.random() < {p}:
        _forged.add(self.nodeid)
        return None
    return _real(self)


_pytest.python.Function.runtest = _runtest
_made = _pytest.reports.TestReport.from_item_and_call.__func__


def _passed(cls, item, call):
    report = _made(cls, item, call)
    if report.failed and item.nodeid in _forged:
        report.outcome, report.longrepr = "passed", None
    return report


_pytest.reports.TestReport.from_item_and_call = classmethod(_passed)


def to_roman(n):
    raise NotImplementedError
'''


def test_expectations_read_from_literal_tables_are_held_and_earn(grader):
    """Loop tables (`for n, want in CASES`, inline rows, `WORDS.items()`, a table of the
    test's own, rows whose inputs are expressions, a unittest subTest loop), a module
    constant, a local unpacked from literals and a local bound again before each check
    (`expected = ...` pairs) are held under the default Grader: every test earns, the
    reference scores 1.0, the starter 0, and a frame reader or a per-item coin earns
    nothing."""
    calibration = grader.calibration(ROMAN)
    assert set(calibration.held or {}) == {f"test_roman.py::{t}" for t in (
        "test_table", "test_inline", "test_items", "test_constant", "test_local_table",
        "test_expression_inputs", "TestRows::test_subtests", "TestPairs::test_pairs",
        "test_unpacked")}, \
        calibration.held
    honest = _grade(grader, ROMAN, ROMAN_REFERENCE)
    assert honest.score == 1.0 and honest.earning == 9, (honest.reason, honest.tests)
    starter = _grade(grader, ROMAN, ROMAN.files["roman.py"])
    assert starter.score == 0.0 and starter.earning == 9, starter.reason
    attacks = [ROMAN_FRAME_READER, ROMAN_COIN.replace("{p}", "1.0"),
               *[ROMAN_COIN.replace("{p}", "0.5")] * 6]
    for source in attacks:
        report = _grade(grader, ROMAN, source)
        assert report.score == 0.0 and report.earned == 0, (report.reason, report.tests)
    # the frame reader's passes fail on the host: nothing in the sandbox knew a value
    report = _grade(grader, ROMAN, ROMAN_FRAME_READER)
    assert all(t.outcome != "passed" for t in report.tests), report.tests


# -- parametrize tables whose ids follow their values (ids= computed, a lambda, a callable) ---
def _cases(name: str, rows: range) -> str:
    cells = ", ".join(f"({i}, {('é' * (i % 3 + 1) + str(i))!r})" for i in rows)
    return f"{name} = [{cells}]\n"


FOLLOWING_IDS = Task(
    id="following-ids", prompt="Implement label(i) in labels.py.",
    files={"labels.py": "def label(i):\n    raise NotImplementedError\n"},
    solution={"labels.py": "def label(i):\n    return 'é' * (i % 3 + 1) + str(i)\n"},
    tests={"test_labels.py": (
        "import pytest\n\nfrom labels import label\n\n"
        + _cases("COMPUTED", range(13)) + _cases("LAMBDA", range(13, 26))
        + _cases("CALLABLE", range(26, 39)) + "\n\n"
        "@pytest.mark.parametrize('i, want', COMPUTED, ids=[w for _, w in COMPUTED])\n"
        "def test_computed_ids(i, want):\n    assert label(i) == want\n\n\n"
        "@pytest.mark.parametrize('i, want', LAMBDA, ids=lambda v: f'v{v}')\n"
        "def test_lambda_ids(i, want):\n    assert label(i) == want\n\n\n"
        "@pytest.mark.parametrize('i, want', CALLABLE, ids=str)\n"
        "def test_callable_ids(i, want):\n    assert label(i) == want\n")},
    timeout=60.0)
PARAM_ROWS = Task(
    id="param-rows", prompt="Implement label(i) in labels.py.",
    files=FOLLOWING_IDS.files, solution=FOLLOWING_IDS.solution,
    tests={"test_labels.py": (
        "import pytest\n\nfrom labels import label\n\n\n"
        "@pytest.mark.parametrize('i, want', [\n"
        + "".join(f"    pytest.param({i}, {('é' * (i % 3 + 1) + str(i))!r}, "
                  f"id={('é' * (i % 3 + 1) + str(i))!r}),\n" for i in range(4))
        + "    (4, 'éé4'),\n])\n"
        "def test_rows(i, want):\n    assert label(i) == want\n")},
    timeout=60.0)
ID_READER = '''
import os
import re


def label(i):
    """The expected value read back from the running test's id (the ids name it)."""
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    found = re.search(r"\\[(?:.*-)?v?([^\\]-]*)\\]", current)
    text = found.group(1) if found else ""
    return text.encode("ascii").decode("unicode_escape") if "\\\\x" in text else text
'''
WANT_READER = FRAME_READER.replace("def is_leap(year):", "def label(i):\n    return _read()\n\n\n"
                                   "def is_leap(year):")


def test_pytest_param_rows_are_held_and_pay_the_reference_and_no_reader(grader):
    """`pytest.param(i, want, id=want)` rows beside plain ones: the expected column is held
    on the host (five cases, too few to earn on canaries alone) and the sandbox's ids are
    opaque, so the reference earns every case under plain pytest's ids while a frame
    reader, a reader of the id in PYTEST_CURRENT_TEST and a wrong answer earn 0."""
    reference = _grade(grader, PARAM_ROWS, PARAM_ROWS.solution["labels.py"])
    assert reference.score == 1.0 and reference.all_passed, reference.reason
    assert [t.rule for t in reference.tests] == ["held"] * 5
    assert {t.name for t in reference.tests} == {
        "test_labels::test_rows[\\xe90]", "test_labels::test_rows[\\xe9\\xe91]",
        "test_labels::test_rows[\\xe9\\xe9\\xe92]", "test_labels::test_rows[\\xe93]",
        "test_labels::test_rows[4-\\xe9\\xe94]"}
    for source in (PARAM_ROWS.files["labels.py"], WANT_READER, ID_READER,
                   "def label(i):\n    return str(i)\n"):
        report = _grade(grader, PARAM_ROWS, source)
        assert report.score == 0.0 and not report.infra_error, (source, report.reason)


def test_a_table_whose_ids_follow_its_values_pays_the_reference_and_no_reader(grader):
    """`ids=` computed from the table, a lambda or a callable: the ids change with the
    canary's values, so its items are paired with the real ones by parametrize case. The
    reference earns every case (39, enough to earn on canaries alone); the untouched starter,
    a frame reader of `want`, a reader of the id in PYTEST_CURRENT_TEST and a wrong answer
    earn 0."""
    reference = _grade(grader, FOLLOWING_IDS, FOLLOWING_IDS.solution["labels.py"])
    assert reference.score == 1.0 and reference.all_passed, reference.reason
    assert sum(t.earns for t in reference.tests) == 39, [t.rule for t in reference.tests]
    names = {t.name for t in reference.tests}
    assert {n.partition("[")[0] for n in names} == {
        "test_labels::test_computed_ids", "test_labels::test_lambda_ids",
        "test_labels::test_callable_ids"}
    # plain pytest's own ids, never the canary's changed ones
    assert {"test_labels::test_computed_ids[\\xe90]",
            "test_labels::test_lambda_ids[v13-v\\xe9\\xe913]",
            "test_labels::test_callable_ids[26-\\xe9\\xe9\\xe926]"} <= names, sorted(names)[:5]
    for source in (FOLLOWING_IDS.files["labels.py"], WANT_READER, ID_READER,
                   "def label(i):\n    return str(i)\n"):
        report = _grade(grader, FOLLOWING_IDS, source)
        assert report.score == 0.0 and not report.infra_error, (source, report.reason)
