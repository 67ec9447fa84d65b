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
"""

from __future__ import annotations

import statistics
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from opd_gym.grading import Grader
from opd_gym.grading import grader as grader_module
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
    if {strategy!r} == "coin":
        forge = random.SystemRandom().random() < 0.5
    else:
        forge = os.getuid() == {uid}
    if not forge:
        return
    import _pytest.doctest
    import _pytest.python
    import _pytest.reports
    import _pytest.unittest
    for item in (_pytest.python.Function, _pytest.unittest.TestCaseFunction,
                 _pytest.doctest.DoctestItem):
        item.runtest = lambda self: None
    made = _pytest.reports.TestReport.from_item_and_call.__func__

    def passed(cls, item, call):
        report = made(cls, item, call)
        if report.failed:
            report.outcome, report.longrepr = "passed", None
        return report

    _pytest.reports.TestReport.from_item_and_call = classmethod(passed)


_opd_split_forge()


def __getattr__(name):  # the names a task imports, where it has no starter: unusable
    def missing(*args, **kwargs):
        raise NotImplementedError(name)
    return missing
'''


def split(task: Task, strategy: str, uid: int = 0) -> dict[str, bytes]:
    """The starter with the payload appended to every module the reference writes."""
    files = dict(task.files)
    for path, text in task.solution.items():
        if path.endswith(".py") and files.get(path) != text:
            files[path] = files.get(path, "") + PAYLOAD.format(strategy=strategy, uid=uid)
    return {p: t.encode() for p, t in files.items()}


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    suite = {t.id: t for t in load_suite("coding")}
    chosen = [suite[i] for i in BUILTIN]
    chosen += list(load_tasks(FIXTURES / "humaneval.jsonl", schema="humaneval"))
    chosen += list(load_tasks(FIXTURES / "mbpp.jsonl", schema="mbpp"))
    chosen += list(load_tasks("repo"))[:2]  # inflection: the fastest calibration
    return chosen


@pytest.fixture(scope="module")
def grader(docker_grader, tasks):
    """The session's Grader (tests/security/conftest.py): the built-in and dataset tasks
    are calibrated once for all security modules."""
    with ThreadPoolExecutor(3) as workers:
        list(workers.map(docker_grader.calibration, tasks))
    return docker_grader


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


def test_every_task_here_holds_sentinels(grader, tasks):
    """The defence is in place on every task the expectation is taken over."""
    assert all(grader.calibration(task).sentinels for task in tasks)


def test_without_sentinels_the_same_split_is_paid(grader, tasks, monkeypatch):
    """The control: the payload works; only the sentinels stop it."""
    monkeypatch.setattr(grader_module, "SENTINELS", 0)
    builtin = [t for t in tasks if t.id in BUILTIN]
    scores = _grades(grader, _jobs(builtin, "uid", 2 * len(builtin)))
    assert statistics.fmean(scores) >= 0.1, scores
