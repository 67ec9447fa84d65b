"""Fixtures shared by the env, tools, grading and wrapper tests: toy tasks and local sandboxes.

The local backend runs commands unisolated on this host and warns so; the tests using it run
only trusted toy code and silence that warning with a `filterwarnings` mark.
"""

from __future__ import annotations

import pytest

from opd_gym.sandboxes import make_pool
from opd_gym.tasks import Task

CALC_TESTS = """\
from calc import add


def test_small():
    assert add(1, 2) == 3


def test_negative():
    assert add(-1, -1) == -2


def test_zero():
    assert add(0, 0) == 0
"""


def make_toy_task(task_id: str = "toy_add", **overrides) -> Task:
    """A three-test task: implement add(a, b) in calc.py (starter raises NotImplementedError)."""
    fields = {
        "id": task_id,
        "prompt": "Implement add(a, b) in calc.py so it returns the sum.",
        "files": {"calc.py": "def add(a, b):\n    raise NotImplementedError\n"},
        "tests": {"test_calc.py": CALC_TESTS},
        "solution": {"calc.py": "def add(a, b):\n    return a + b\n"},
        "timeout": 60.0,
    }
    fields.update(overrides)
    return Task(**fields)


@pytest.fixture
def toy_task() -> Task:
    return make_toy_task()


@pytest.fixture
def make_task():
    """The toy-task factory, for tests that need variants (other tests, timeouts...)."""
    return make_toy_task


@pytest.fixture
def local_pool():
    """A warm pool of local (unisolated, fast) sandboxes, closed after the test."""
    pool = make_pool("local", size=2)
    yield pool
    pool.close()


@pytest.fixture
def local_sandbox(local_pool):
    sandbox = local_pool.acquire()
    yield sandbox
    local_pool.release(sandbox)
