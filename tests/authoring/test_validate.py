"""`tasks validate`: starter 0, reference 1.0, a well-formed wrong answer below 0.5.

The perturbation is checked on real code run in this process; the gradings use the real
Grader (local sandboxes for the small cases, Docker for the whole built-in suite in CI).
"""

from __future__ import annotations

import io
import sys
import types
from contextlib import redirect_stdout

import pytest

from opd_gym.authoring.validate import (
    WRONG_LIMIT,
    check_tasks,
    judge,
    perturb_python,
    perturb_text,
    table_header,
    table_row,
    wrong_answer,
)
from opd_gym.grading import Grader, GradeReport, TestOutcome
from opd_gym.sandboxes import make_pool
from opd_gym.tasks import Task, load_suite

MODULE = '''\
"""A docstring stays first."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import NamedTuple


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def words(text):
    return text.split()


def is_even(n):
    return n % 2 == 0


def pairs(n):
    for i in range(n):
        yield (i, i * i)


class Point(NamedTuple):
    x: int
    y: int


@dataclass(frozen=True)
class Box:
    w: int
    h: float


class Account:
    def __init__(self, owner, balance=0):
        self.owner = owner
        self.balance = balance
        self._log = []

    @property
    def doubled(self):
        return self.balance * 2

    def deposit(self, amount):
        self.balance += amount
        return self.balance

    def __add__(self, other):
        return Account(self.owner, self.balance + other.balance)

    def __eq__(self, other):
        return self.balance == other.balance


def report(value):
    print("total:", value)
    sys.stdout.write(f"{value}\\n")
'''


def load(source: str) -> dict:
    """Run `source` as a module (registered while it runs: dataclasses look it up)."""
    module = types.ModuleType("opd_perturbed_module")
    sys.modules[module.__name__] = module
    try:
        exec(compile(source, "<perturbed>", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module.__dict__


def test_perturbed_module_returns_wrong_values_of_the_same_type():
    true, wrong = load(MODULE), load(perturb_python(MODULE))
    assert wrong["__doc__"] == "A docstring stays first."
    # recursion sees true values inside: only the outermost result is changed
    assert true["fib"](10) == 55 and wrong["fib"](10) == 56
    assert true["words"]("a b") == ["a", "b"] and wrong["words"]("a b") == ["b", "c"]
    assert wrong["is_even"](2) is False
    assert list(wrong["pairs"](2)) == [(1, 1), (2, 2)]
    point = wrong["Point"](1, 2)  # constructors are untouched
    assert point == (1, 2)
    account = wrong["Account"]("ann", 10)
    assert (account.owner, account.balance) == ("ano", 11)  # public state set by __init__
    assert account._log == []
    assert account.deposit(5) == 17 and account.balance == 16
    assert account.doubled == 33
    # __add__ builds Account(owner, 16 + 2), whose __init__ perturbs the balance again
    assert (account + wrong["Account"]("bo", 1)).balance == 19
    assert account == account  # comparisons keep working
    out = io.StringIO()
    with redirect_stdout(out):
        wrong["report"](41)
    assert out.getvalue() == "totam: 42\n42\n"  # printed and written answers


def test_namedtuples_and_dataclasses_are_perturbed_field_by_field():
    wrong = load(perturb_python(MODULE + '''

def origin():
    return Point(0, 0)


def box():
    return Box(2, 0.5)
'''))
    assert wrong["origin"]() == (1, 1) and type(wrong["origin"]()).__name__ == "Point"
    assert wrong["box"]() == wrong["Box"](3, 1.75)


def test_answer_text_is_perturbed_in_place():
    assert perturb_text("767646\n") == "767647\n"
    assert perturb_text("12489\n1436112\n") == "12490\n1436113\n"
    assert perturb_text("quiet-otter-1729") == "quiet-otter-1730"
    assert perturb_text("007") == "008"
    assert perturb_text("hello\n") == "hellp\n"
    assert perturb_text("") == "x"


def test_wrong_answer_keeps_unparsable_files_and_perturbs_every_solution_file():
    task = Task(id="t", prompt="p", tests={"test_x.py": "def test_x():\n    pass\n"},
                solution={"a.py": "def f():\n    return 1\n", "b.py": "def (:\n",
                          "answer.txt": "41\n"})
    wrong = wrong_answer(task)
    assert wrong["b.py"] == "def (:\n" and wrong["answer.txt"] == "42\n"
    assert load(wrong["a.py"])["f"]() == 2


def report(passed: int, total: int, reason: str = "") -> GradeReport:
    tests = tuple(TestOutcome(f"t{i}", "passed" if i < passed else "failed")
                  for i in range(total))
    return GradeReport("t", passed=passed, failed=total - passed, tests=tests, reason=reason,
                       earning=total, earned=passed)


def test_judge_names_each_problem():
    task = Task(id="t", prompt="p", tests={"test_x.py": "def test_x():\n    pass\n"})
    good = judge(task, report(4, 4), report(0, 4), report(1, 4))
    assert good.ok and not good.format_only
    bad = judge(task, report(3, 4), report(1, 4), report(2, 4))
    assert not bad.ok and bad.format_only
    assert bad.problems == ("reference scores 0.75", "starter scores 0.25",
                            "tests check format only: a wrong answer scores 0.50")
    none = judge(task, None, report(0, 4), None)
    assert none.problems == ("no reference solution",)
    failed = judge(task, report(0, 0, "the test run timed out"), report(0, 4), report(0, 4))
    assert failed.problems == ("no test ran on the reference (the test run timed out)",)
    width = 8
    assert table_header(width).split() == ["task", "reference", "starter", "wrong", "verdict"]
    assert table_row(good, width).endswith("  ok")
    assert "BAD: reference scores 0.75; starter" in table_row(bad, width)


FORMAT_ONLY_TESTS = """\
from calc import add


def test_returns_an_int():
    assert isinstance(add(1, 2), int)


def test_add():
    assert add(1, 2) == 3
"""


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the local backend's notice
def test_format_only_tests_and_fixed_builtin_tasks_on_the_real_grader(make_task):
    """A toy task whose tests mostly check the type is named; the three built-in answer-file
    tasks fixed for issue 22 pass every check."""
    format_only = make_task("format_only", tests={"test_calc.py": FORMAT_ONLY_TESTS})
    suite = {t.id: t for t in load_suite("coding")}
    tasks = [format_only, make_task()] + [suite[i] for i in
                                          ("decode_secret", "first_divisible", "mystery_checksum")]
    with make_pool("local", size=2) as pool:
        checks = {c.task_id: c for c in check_tasks(tasks, Grader(pool).grade, workers=2)}
        # the canary scheme alone (hold=False): the type check earns, a wrong int is paid
        [flagged] = check_tasks([format_only], Grader(pool, hold=False).grade, workers=2)
    assert flagged.format_only and flagged.wrong.score >= WRONG_LIMIT
    assert flagged.reference.score == 1.0 and flagged.starter.score == 0.0
    assert any("format only" in p for p in flagged.problems)
    # held expectations (the default): only test_add holds a site, the type check gates, so
    # the wrong answer earns nothing and the task is no longer format-only
    held = checks["format_only"]
    assert held.ok and not held.format_only and held.wrong.score == 0.0, held.problems
    assert {t.name for t in held.reference.tests if t.earns} == {"test_calc::test_add"}
    assert held.reference.score == 1.0 and held.starter.score == 0.0
    for task_id in ("toy_add", "decode_secret", "first_divisible", "mystery_checksum"):
        check = checks[task_id]
        assert check.ok, (task_id, check.problems)
        assert check.reference.score == 1.0 and check.starter.score == 0.0
        assert check.wrong.score < WRONG_LIMIT


@pytest.mark.docker
@pytest.mark.slow
def test_every_builtin_task_pays_for_solving_it_and_nothing_else(docker_grader):
    """CI: all 32 built-in tasks on Docker: starter 0, reference 1.0, wrong answer < 0.5.
    The session's Grader: its calibrations are shared with the other built-in-suite tests."""
    suite = load_suite("coding")
    assert len(suite) == 32
    width = max(len(t.id) for t in suite)
    checks = list(check_tasks(suite, docker_grader.grade, workers=3))
    table = "\n".join([table_header(width)] + [table_row(c, width) for c in checks])
    print(table)
    assert [c.task_id for c in checks] == [t.id for t in suite]
    assert all(c.ok for c in checks), table


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the local backend's notice
def test_a_task_that_cannot_be_verified_is_a_failure_line_with_the_reason(make_task):
    """A task without an earning test pays 0 for every answer: named, not `ok`."""
    from opd_gym.authoring.validate import UNVERIFIABLE

    solved = make_task("already_solved", files={"calc.py": "def add(a, b):\n    return a + b\n"})
    with make_pool("local", size=2) as pool:
        [check] = check_tasks([solved], Grader(pool).grade, workers=2)
    assert check.problems == (f"cannot be verified: {UNVERIFIABLE}",)
    assert check.reference.earning == 0 and "cannot be verified" in check.reference.reason
    assert f"BAD: cannot be verified: {UNVERIFIABLE}" in table_row(check, 16)
    # judged from the report alone: no earning test, whatever the other gradings say
    task = Task(id="t", prompt="p", tests={"test_x.py": "def test_x():\n    pass\n"})
    nothing = GradeReport("t", passed=4, tests=(TestOutcome("x", "passed", earns=False),) * 4,
                          reason="the task cannot be verified: no hidden test ...")
    assert judge(task, nothing, report(0, 4), report(0, 4)).problems == (
        f"cannot be verified: {UNVERIFIABLE}",)
    crashed = GradeReport("t", failed=4, reason="2 hidden test(s) did not run (...)")
    assert judge(task, crashed, report(0, 4), report(0, 4)).problems[0].startswith(
        "reference scores 0.00: 2 hidden")
