"""Canaries for data-driven and unittest-style tests, in real Docker sandboxes (issue 22).

A consistent liar (an `__eq__` that always says True) passes `== expected` and fails `!=`, so
a complement canary cannot expose it: only a canary with the expected VALUE changed can. These
tasks read their expectations from a parametrize table, from an empty literal and from
unittest assertions; the liar must be caught as a forgery on each, the honest solution must
score 1.0, and the node ids the grader reports must be the ones plain pytest collects from the
original files in the sandbox image (the task's exact `test_ids` come from that collection).
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from concurrent.futures import ThreadPoolExecutor

import pytest

from opd_gym.grading import Grader, make_canaries
from opd_gym.grading import test_paths as hidden_paths
from opd_gym.grading.verdict import HELD_FAILED
from opd_gym.sandboxes import make_pool
from opd_gym.sandboxes.image import DEFAULT_IMAGE
from opd_gym.tasks import Task

pytestmark = pytest.mark.docker

WORDS_TESTS = '''\
import pytest

from words import plural, plurals


@pytest.mark.parametrize("word,expected", [
    ("cat", "cats"),
    ("box", "boxes"),
    ("fly", "flies"),
    ("", ""),
    ("cat", "cats"),
])
def test_plural(word, expected):
    assert plural(word) == expected


def test_plurals_of_nothing():
    assert plurals([]) == []
'''
WORDS_REFERENCE = '''\
def plural(word):
    if not word:
        return ""
    if word.endswith("x"):
        return word + "es"
    if word.endswith("y"):
        return word[:-1] + "ies"
    return word + "s"


def plurals(words):
    return [plural(w) for w in words]
'''
STACK_TESTS = '''\
import unittest

from stack import Stack


class StackTests(unittest.TestCase):
    def test_push_pop(self):
        s = Stack()
        s.push(3)
        s.push(4)
        self.assertEqual(s.pop(), 4)
        self.assertEqual(3, s.pop())

    def test_items(self):
        s = Stack()
        for x in (1, 2):
            s.push(x)
        self.assertListEqual(s.items(), [1, 2])

    def test_mean(self):
        s = Stack()
        for x in (1, 2, 4):
            s.push(x)
        self.assertAlmostEqual(s.mean(), 2.3333, places=3)

    def test_empty_pop(self):
        with self.assertRaises(IndexError):
            Stack().pop()
'''
STACK_REFERENCE = '''\
class Stack:
    def __init__(self):
        self._items = []

    def push(self, x):
        self._items.append(x)

    def pop(self):
        return self._items.pop()

    def items(self):
        return list(self._items)

    def mean(self):
        return sum(self._items) / len(self._items)
'''
STUB = "def _todo(*args, **kwargs):\n    raise NotImplementedError\n"
# A value equal to everything, consistently: `!=` says False, as a liar's would.
LIAR = '''
class _Liar:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = object.__hash__

'''
WORDS_LIAR = LIAR + "def plural(word):\n    return _Liar()\n\n\ndef plurals(words):\n" \
                    "    return _Liar()\n"
STACK_LIAR = LIAR + STACK_REFERENCE.replace("return self._items.pop()", "return _Liar()") \
    .replace("return list(self._items)", "return _Liar()") \
    .replace("return sum(self._items) / len(self._items)", "return _Liar()")


def _tar(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def plain_ids(files: dict[str, str]) -> tuple[str, ...]:
    """Node ids plain pytest collects from `files` in a networkless container of the image."""
    script = ("mkdir -p /tmp/w && cd /tmp/w && tar -x && "
              "python3 -m pytest --collect-only -q -p no:cacheprovider")
    done = subprocess.run(
        ["docker", "run", "--rm", "-i", "--network", "none", "--user", "1000:1000",
         "--entrypoint", "sh", DEFAULT_IMAGE, "-c", script],
        input=_tar(files), capture_output=True, timeout=300,
    )
    ids = tuple(sorted(line for line in done.stdout.decode().splitlines() if "::" in line))
    assert ids, done.stdout.decode() + done.stderr.decode()
    return ids


def _task(task_id: str, module: str, tests: str, reference: str) -> Task:
    test_file = f"test_{module}.py"
    ids = plain_ids({test_file: tests, f"{module}.py": reference})
    return Task(id=task_id, prompt=f"Implement {module}.py.", files={f"{module}.py": STUB},
                tests={test_file: tests}, solution={f"{module}.py": reference}, timeout=30.0,
                test_ids=ids)


@pytest.fixture(scope="module")
def tasks() -> dict[str, Task]:
    return {"words": _task("canary_words", "words", WORDS_TESTS, WORDS_REFERENCE),
            "stack": _task("canary_stack", "stack", STACK_TESTS, STACK_REFERENCE)}


@pytest.fixture(scope="module")
def grades(tasks):
    pool = make_pool("docker", size=2, workers=2)
    grader = Grader(pool)
    jobs = [("words", "honest", WORDS_REFERENCE), ("words", "liar", WORDS_LIAR),
            ("stack", "honest", STACK_REFERENCE), ("stack", "liar", STACK_LIAR)]

    def one(job):
        name, _, code = job
        return grader.grade(tasks[name], {f"{name}.py": code.encode()})

    try:
        with ThreadPoolExecutor(2) as workers:
            return {job[:2]: report for job, report in zip(jobs, workers.map(one, jobs),
                                                           strict=True)}
    finally:
        pool.close()


def test_the_canaries_are_value_canaries(tasks):
    """What this file relies on: each test's canary changes an expected value."""
    words = make_canaries(tasks["words"].tests, hidden_paths(tasks["words"]), seed=9)
    assert words.canaries["test_words.py::test_plural"].kind == "param"
    assert words.canaries["test_words.py::test_plurals_of_nothing"].kind == "literal"
    stack = make_canaries(tasks["stack"].tests, hidden_paths(tasks["stack"]), seed=9)
    kinds = {i.rpartition("::")[2]: c.kind for i, c in stack.canaries.items()}
    assert kinds == {"test_push_pop": "literal", "test_items": "literal",
                     "test_mean": "literal", "test_empty_pop": "raises"}


@pytest.mark.parametrize("name", ["words", "stack"])
def test_the_honest_solution_scores_one_under_plain_pytests_ids(grades, tasks, name):
    report = grades[(name, "honest")]
    assert report.score == 1.0 and report.forgery == () and report.calibrated, (
        report.reason, report.summary())
    # every node id has a valid canary; by default (held expectations) those that hold a
    # site earn and the others gate, so at least one earns (the held test_plurals_of_nothing
    # and test_push_pop hold one)
    assert report.canaried == len(tasks[name].test_ids), report.tests
    assert 1 <= report.earning <= len(tasks[name].test_ids), report.tests
    # exact test_ids: both variants reported plain pytest's very ids (else a reason is set)
    assert report.reason == ""
    assert len(report.tests) == len(tasks[name].test_ids)
    if name == "words":  # the parametrized ids, duplicates made unique as pytest does
        assert {t.name for t in report.tests} >= {"test_words::test_plural[cat-cats0]",
                                                  "test_words::test_plural[cat-cats1]",
                                                  "test_words::test_plural[-]"}


def _caught(report) -> set[str]:
    """The tests a grade shows forged: named by a canary that passed with them, or (held
    expectations, the default) failed on the host at a held site."""
    return set(report.forgery) | {t.name for t in report.tests if t.outcome == "failed"
                                  and t.message.startswith(HELD_FAILED)}


@pytest.mark.parametrize("name", ["words", "stack"])
def test_a_consistent_eq_liar_is_caught(grades, name):
    report = grades[(name, "liar")]
    assert report.score == 0.0 and report.earned == 0, (report.reason, report.summary())
    assert not report.forgery or "a canary passed" in report.reason, report.reason
    assert not report.infra_error
    names = _caught(report)
    assert names, (report.reason, report.tests)
    if name == "words":
        assert "test_words::test_plurals_of_nothing" in names  # the empty-result test
        assert any(n.startswith("test_words::test_plural[") for n in names), names
