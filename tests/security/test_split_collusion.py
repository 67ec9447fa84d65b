"""Split collusion (issue 29, point 2): a submission that forges in one grading run only earns
nothing, whatever tells the runs apart, in real Docker sandboxes.

The payload is the starter plus "make every test pass" (pytest's `runtest` a no-op, every
report turned into a pass), switched on by a signal one grading run sees and the other does not:
the uid (each variant runs under its own), or a fair coin per grading process (no signal at all).
Without a defence it is paid whenever the forged run holds the real test: the control below
shows it on these very tasks. With sentinels (opd_gym/grading/sentinel.py) every run holds a
clone of a test with one expected value changed, which the forgery passes together with the
test: the grade is a forgery, 0. The expectation is taken over at least 100 grades per strategy
on built-in, dataset and repository tasks.

Sentinels leave two strategies open, which host-held expectations close (the Grader's
default, opd_gym/grading/held.py; `Grader(hold=False)` opts out): a coin per test ITEM (a
forged pass is flagged only when both of a pair pass) and a name-aware split (forge, in one
run, only the tests a reader of the hidden files recognises as no clone). With held
expectations the expected literal of a held assertion never enters the sandbox, so a forged
pass of a held test fails on the host. The attack tests run against the DEFAULT Grader; the
controls (sentinels off, or `hold=False`) show the payloads are paid without the defence.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from opd_gym.grading import Grader
from opd_gym.grading import grader as grader_module
from opd_gym.grading.expected import base_id
from opd_gym.grading.verdict import HELD_FAILED
from opd_gym.sandboxes import make_pool
from opd_gym.tasks import Task, load_suite, load_tasks

pytestmark = [pytest.mark.docker, pytest.mark.slow]

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
GRADES = 104  # per strategy, spread over the tasks below
# built-in tasks whose solution module the hidden tests import (a stdin/stdout program never
# enters pytest's process, so it has nothing to patch)
BUILTIN = ("bank_account", "expression_eval", "fizzbuzz", "group_anagrams", "log_summary",
           "longest_common_prefix", "merge_intervals", "valid_parentheses")

PAYLOAD = '''

def _opd_split_forge():
    import os
    import random
    import sys
    if getattr(sys, "_opd_split_done", False):
        return
    sys._opd_split_done = True
    strategy, coin = {strategy!r}, random.SystemRandom()
    if strategy == "coin":
        forge = coin.random() < 0.5
    elif strategy in ("uid", "names"):
        forge = os.getuid() == {uid}
    else:  # "item", "failing": test items on coins of their own, in both runs; "swallow"
        forge = True
    if not forge:
        return
    import _pytest.doctest
    import _pytest.python
    import _pytest.reports
    import _pytest.unittest
    known = _tests_known() if strategy == "names" else None
    forged = set()

    def wants(item):
        if strategy == "item":
            return coin.random() < {p!r}
        if strategy == "failing":  # only tests it saw fail, each on a coin of its own
            name = getattr(item, "originalname", item.name).split("[")[0]
            return name in {failing!r} and coin.random() < {p!r}
        if known is not None:  # only the tests it recognises as no sentinel clone
            return getattr(item, "originalname", item.name).split("[")[0] in known
        return True

    for kind in (_pytest.python.Function, _pytest.unittest.TestCaseFunction,
                 _pytest.doctest.DoctestItem):
        def runtest(self, _real=kind.runtest):
            if strategy == "swallow":  # the body runs (what it emits counts); no assert fails
                try:
                    return _real(self)
                except AssertionError:
                    return None
            if wants(self):
                forged.add(self.nodeid)
                return None
            return _real(self)
        kind.runtest = runtest
    made = _pytest.reports.TestReport.from_item_and_call.__func__

    def passed(cls, item, call):
        report = made(cls, item, call)
        if report.failed and (item.nodeid in forged or strategy in ("uid", "coin")):
            report.outcome, report.longrepr = "passed", None
        return report

    _pytest.reports.TestReport.from_item_and_call = classmethod(passed)


def _tests_known():
    """The test names of the hidden files that are no clone: a clone is named after another
    test of its scope plus a word, with a body of the same shape."""
    import ast
    import os
    known = set()
    for root, _, names in os.walk("."):
        for name in names:
            if not (name.startswith("test") and name.endswith(".py")):
                continue
            try:
                with open(os.path.join(root, name), encoding="utf-8") as fh:
                    tree = ast.parse(fh.read())
            except (OSError, SyntaxError, ValueError):
                continue
            scopes = [tree.body] + [n.body for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
            for body in scopes:
                tests = {{n.name: n for n in body if isinstance(n, ast.FunctionDef)
                          and n.name.startswith("test")}}
                for test, node in tests.items():
                    if not any(test.startswith(other + "_") and len(node.body) == len(
                            tests[other].body) for other in tests if other != test):
                        known.add(test)
    return known


_opd_split_forge()


def __getattr__(name):  # the names a task imports, where it has no starter: unusable
    def missing(*args, **kwargs):
        raise NotImplementedError(name)
    return missing
'''


def split(task: Task, strategy: str, uid: int = 0, p: float = 0.5,
          failing: Collection[str] = ()) -> dict[str, bytes]:
    """The starter with the payload appended to every module the reference writes
    (`failing`: the test function names the "failing" strategy forges, each on a coin)."""
    files = dict(task.files)
    payload = PAYLOAD.format(strategy=strategy, uid=uid, p=p, failing=sorted(set(failing)))
    for path, text in task.solution.items():
        if path.endswith(".py") and files.get(path) != text:
            files[path] = files.get(path, "") + payload
    return {p: t.encode() for p, t in files.items()}


# repository tasks, pinned by id (the suite grows): the first earns only through parametrize
# cases (`@pytest.mark.parametrize(..., TABLE)` then `assert f(x) == want`), held one by one
# (held.py); the second through literal sites
REPO = ("inflection-004612abbc", "inflection-42ad2fd8b5")

PARAMETRIZED_TESTS = '''\
import pytest

from words import plural, shout

PLURALS = [
    ("cat", "cats"),
    ("box", "boxes"),
    ("city", "cities"),
    ("sheep", "sheep"),
]


@pytest.mark.parametrize(("word", "want"), PLURALS)
def test_plural(word, want):
    assert plural(word) == want


@pytest.mark.parametrize("text,loud", [("hi", "HI!"), ("ok", "OK!"), ("a b", "A B!")])
@pytest.mark.parametrize("times", [1, 2])
def test_shout(text, loud, times):
    assert shout(text, times)[:len(text) + 1] == loud
'''

PARAMETRIZED_REFERENCE = '''\
def plural(word):
    if word == "sheep":
        return word
    if word.endswith("y"):
        return word[:-1] + "ies"
    if word.endswith("x"):
        return word + "es"
    return word + "s"


def shout(text, times):
    return (text.upper() + "!") * times
'''


def parametrized_task() -> Task:
    """Expectations from a module-level table and an inline one, stacked decorators."""
    return Task(id="held_parametrize", prompt="Pluralise and shout.",
                files={"words.py": "def plural(word):\n    return word\n\n\n"
                                   "def shout(text, times):\n    raise NotImplementedError\n"},
                tests={"test_words.py": PARAMETRIZED_TESTS},
                solution={"words.py": PARAMETRIZED_REFERENCE}, timeout=60.0)


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    suite = {t.id: t for t in load_suite("coding")}
    chosen = [suite[i] for i in BUILTIN]
    chosen += list(load_tasks(FIXTURES / "humaneval.jsonl", schema="humaneval"))
    chosen += list(load_tasks(FIXTURES / "mbpp.jsonl", schema="mbpp"))
    repo = {t.id: t for t in load_tasks("repo")}
    return chosen + [repo[i] for i in REPO] + [parametrized_task()]


@pytest.fixture(scope="module")
def grader(docker_grader, tasks):
    """The session's Grader (tests/conftest.py), a default one (held expectations on): the
    built-in and dataset tasks are calibrated once for all security modules."""
    assert docker_grader.hold  # the default: the attacks below play against it
    with ThreadPoolExecutor(3) as workers:
        list(workers.map(docker_grader.calibration, tasks))
    return docker_grader


@pytest.fixture(scope="module")
def unheld_grader(tasks):
    """A Grader that opts out of held expectations (`hold=False`: the canary scheme and
    sentinels alone), for the controls; its built-in tasks calibrated for it."""
    pool = make_pool("docker", size=3, workers=3)
    grader = Grader(pool, hold=False)
    with ThreadPoolExecutor(3) as workers:
        list(workers.map(grader.calibration, [t for t in tasks if t.id in BUILTIN]))
    yield grader
    pool.close()


def _grades(grader: Grader, jobs: list[tuple[Task, dict[str, bytes]]]) -> list[float]:
    with ThreadPoolExecutor(3) as workers:
        return list(workers.map(lambda job: grader.grade(*job).score, jobs))


def _jobs(tasks: list[Task], strategy: str, count: int) -> list[tuple[Task, dict[str, bytes]]]:
    """`count` grades spread over `tasks`; a uid split picks the first run's uid or the
    second's (the agent's uid is 1000, variant i runs as 1001 + i) in turn."""
    return [(task, split(task, strategy, 1001 + (n // len(tasks)) % 2))
            for n in range(count) for task in [tasks[n % len(tasks)]]]


@pytest.mark.parametrize("strategy", ["uid", "coin"])
def test_a_split_earns_nothing_in_expectation(grader, tasks, strategy):
    scores = _grades(grader, _jobs(tasks, strategy, GRADES))
    assert len(scores) >= 100
    mean = statistics.fmean(scores)
    print(f"{strategy} split: mean correctness {mean:.4f} over {len(scores)} grades "
          f"({sum(s > 0 for s in scores)} paid)")
    assert mean <= 0.01, scores


def test_swallowed_assertion_failures_earn_nothing(grader, tasks):
    """The starter plus a `runtest` that runs every test and swallows its AssertionError, in
    every run: a test's held values are emitted before its failed assertion, so a held site
    sees the starter's value; a gate's canary, also swallowed, passes and names the forgery."""
    scores = _grades(grader, _jobs(tasks, "swallow", 2 * len(tasks)))
    print(f"swallowed assertions: mean correctness {statistics.fmean(scores):.4f} over "
          f"{len(scores)} grades ({sum(s > 0 for s in scores)} paid)")
    assert not any(scores), scores


def test_every_task_here_holds_sentinels_or_earns_only_through_held_sites(grader, tasks):
    """A defence against whole-run splits is in place on every task the expectation is taken
    over: sentinels, or held sites on every earning test (a case held per parametrize
    argument gets no clone: a clone would copy its decorator)."""
    for task in tasks:
        calibration = grader.calibration(task)
        assert calibration.earning, task.id
        # across the process boundary (the dataset rows) no code of the solution runs beside
        # the tests: there is no run to split
        assert calibration.boundary or calibration.sentinels or (calibration.held_only and all(
            base_id(i) in calibration.held for i in calibration.earning)), task.id


def test_without_sentinels_the_same_split_is_paid(unheld_grader, tasks, monkeypatch):
    """The control: the payload works; without held expectations only the sentinels stop
    it."""
    monkeypatch.setattr(grader_module, "SENTINELS", 0)
    builtin = [t for t in tasks if t.id in BUILTIN]
    scores = _grades(unheld_grader, _jobs(builtin, "uid", 2 * len(builtin)))
    assert statistics.fmean(scores) >= 0.1, scores


# -- host-held expectations (held.py): per-item coins and name-aware splits ----------------

def test_every_task_here_earns_only_through_held_sites(grader, tasks):
    """On every task here only tests with a held site earn: no forged pass of an earning
    test comes without guessing a value the host holds (the repository tasks' and the
    hand-made task's are parametrize cases, held one by one)."""
    for task in tasks:
        calibration = grader.calibration(task)
        assert calibration.earning, task.id
        if calibration.boundary:  # the dataset rows: nothing to hold, nothing beside the tests
            continue
        assert calibration.held_only, task.id
        assert all(base_id(i) in calibration.held for i in calibration.earning), task.id
    made = grader.calibration(tasks[-1])
    assert set(made.held) == {"test_words.py::test_plural", "test_words.py::test_shout"}
    assert len(made.earning) == 9, sorted(made.earning)  # the starter passes the sheep: a gate
    for task in (tasks[-3], tasks[-1]):  # they earn through cases held one by one
        assert all("[" in i for i in grader.calibration(task).earning), task.id
    assert "test_inflection.py::test_tableize" in {
        base_id(i) for i in grader.calibration(tasks[-3]).earning}


# When held expectations were added, coins at p = 0.5 and 0.2 were played too (104 grades
# each): both paid nothing, as did these two plays at 104 grades each. The issue asks 100
# grades of the uid and coin splits (above); these two play every task under both uids.
HELD_PASSES = 2


@pytest.mark.parametrize(("strategy", "p"), [("item", 0.3), ("names", 0.0)])
def test_held_expectations_pay_no_per_item_coin_or_name_aware_split(grader, tasks,
                                                                     strategy, p):
    """Each test item forged on its own coin (p = 0.3: no signal, flagged only when a
    pair passes together), or only the tests a reader of the hidden files recognises as no
    sentinel clone, in one uid's run: a held test passes only with the value the host holds,
    which no forgery knows."""
    jobs = [(task, split(task, strategy, 1001 + (n // len(tasks)) % 2, p))
            for n in range(HELD_PASSES * len(tasks)) for task in [tasks[n % len(tasks)]]]
    reports = _reports(grader, jobs)
    scores = [r.score for r in reports]
    assert len(scores) == HELD_PASSES * len(tasks)
    assert not any(r.infra_error for r in reports), [r.reason for r in reports if r.infra_error]
    mean = statistics.fmean(scores)
    print(f"{strategy} p={p}: mean correctness {mean:.4f} over {len(scores)} grades "
          f"({sum(s > 0 for s in scores)} paid)")
    assert mean <= 0.01, scores


def test_without_held_expectations_the_per_item_coin_is_paid(unheld_grader, tasks):
    """The control: on the built-in tasks a Grader that opts out (`hold=False`) pays the
    per-item coin."""
    builtin = [t for t in tasks if t.id in BUILTIN]
    scores = _grades(unheld_grader, [(t, split(t, "item", p=0.25)) for t in builtin * 3])
    mean = statistics.fmean(scores)
    print(f"item p=0.25 without held expectations: mean correctness {mean:.4f} over "
          f"{len(scores)} grades ({sum(s > 0 for s in scores)} paid)")
    assert mean >= 0.02, scores


def _reports(grader: Grader, jobs: list[tuple[Task, dict[str, bytes]]]) -> list:
    with ThreadPoolExecutor(3) as workers:
        return list(workers.map(lambda job: grader.grade(*job), jobs))


HELD_TESTS = '''\
import unittest

from values import answer, pair, ratio, colour, table, members, maybe, flag


def test_int():
    assert answer() == 42


def test_tuple():
    assert pair() == (1, "b")


def test_float_equal_to_an_int_literal():
    assert ratio() == 2


def test_str_enum():
    assert colour() == "red"


def test_nested_containers():
    assert table() == {"a": [1, 2.5], "b": (None, b"x")}
    assert members() == {1, 2, 3}


def test_identity_and_inequality():
    assert maybe() is None
    assert flag() is True
    assert answer() != 41


class TestUnit(unittest.TestCase):
    def test_equal(self):
        self.assertEqual(answer(), 42)
        self.assertNotEqual(pair(), (1, "c"))
'''

HELD_REFERENCE = '''\
def answer():
    return 42


def pair():
    return (1, "b")


def ratio():
    return 2


def colour():
    return "red"


def table():
    return {"a": [1, 2.5], "b": (None, b"x")}


def members():
    return {1, 2, 3}


def maybe():
    return None


def flag():
    return True
'''

# the same answers through subclasses and other types plain pytest also accepts
HELD_EXOTIC = '''\
import enum
from collections import namedtuple


class Number(int):
    def __repr__(self):
        return "Number()"


Pair = namedtuple("Pair", "x y")


class Colour(str, enum.Enum):
    RED = "red"


class Listy(list):
    pass


def answer():
    return Number(42)


def pair():
    return Pair(1, "b")


def ratio():
    return 2.0


def colour():
    return Colour.RED


def table():
    return {"a": Listy([True, 2.5]), "b": (None, b"x")}


def members():
    return frozenset({3, 2, 1})


def maybe():
    return None


def flag():
    return 1 == 1
'''


def held_task() -> Task:
    return Task(id="held_values", prompt="Return the values.",
                files={"values.py": "def __getattr__(name):\n    raise AttributeError(name)\n"},
                tests={"test_values.py": HELD_TESTS}, solution={"values.py": HELD_REFERENCE},
                timeout=60.0)


def test_held_sites_keep_honest_fidelity(grader):
    """Honest answers of other types than the literal's score as under plain pytest: an int
    subclass, a namedtuple against a tuple, a float equal to an int literal, a str Enum, a
    list subclass inside a dict, a frozenset against a set, a computed True; a wrong answer
    fails its held site, and a no-op `runtest` passes nothing."""
    task = held_task()
    calibration = grader.calibration(task)
    assert set(calibration.held) == {base_id(i) for i in calibration.reference_ids}
    assert calibration.held_only and len(calibration.earning) == 7
    exotic = grader.grade(task, {"values.py": HELD_EXOTIC.encode()})
    assert exotic.score == 1.0, (exotic.reason, exotic.tests)
    wrong = HELD_EXOTIC.replace("return Pair(1, \"b\")", "return Pair(1, \"c\")")
    report = grader.grade(task, {"values.py": wrong.encode()})
    failed = {t.name for t in report.tests if t.outcome == "failed"}
    assert failed == {"test_values::test_tuple", "test_values.TestUnit::test_equal"}, failed
    assert all(t.message == f"{HELD_FAILED}: the value compared was (1, 'c')"
               for t in report.tests if t.outcome == "failed"), report.tests
    assert report.score == pytest.approx(5 / 7) and not report.forgery
    noop = grader.grade(task, split(task, "item", p=1.0))
    assert noop.score == 0.0, noop.tests


def test_parametrized_references_score_one_and_starters_zero(grader, tasks):
    """Cases held per parametrize argument keep plain pytest's verdicts for honest code."""
    for task in tasks[-3:]:
        files = {**task.files, **task.solution}
        reference = grader.grade(task, {p: t.encode() for p, t in files.items()})
        assert reference.score == 1.0, (task.id, reference.reason, [
            (t.name, t.outcome, t.message) for t in reference.tests if t.outcome != "passed"])
        starter = grader.grade(task, {p: t.encode() for p, t in task.files.items()})
        assert starter.score == 0.0 and not starter.infra_error, (task.id, starter.reason)
