"""Grading across the process boundary (issue 55, point 3) on real Docker, the real Grader.

HumanEval checks that compute their expectation at run time (HumanEval/32, /38, /50, /53,
/151: random inputs, `x + y`, `poly(coeffs, root)`, `decode(encode(s))`) could not be verified
in one process; across the boundary their canonical solutions score 1.0, the starters 0, a
wrong answer below 1. Forgeries, which now run in a process of their own, earn 0: an object
equal to everything, a reader of frames and of the garbage collector, a killer of other
processes, a writer of files, a sleeper, a printer of fake pytest output.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from opd_gym.grading.grader import boundary_modules
from opd_gym.tasks import Task, from_humaneval, from_mbpp

pytestmark = pytest.mark.docker

ROWS = [json.loads(line) for line in
        (Path(__file__).parents[1] / "fixtures" / "humaneval_computed.jsonl").read_text()
        .splitlines() if line.strip()]
TASKS = {row["task_id"]: from_humaneval(row) for row in ROWS}
WRONG = {  # a wrong answer that passes some of the check's cases, never all
    "HumanEval/53": "def add(x: int, y: int):\n    return x + y if x < 500 else x - y\n",
    "HumanEval/38": "def decode_cyclic(s: str):\n    return s\n",
}


@pytest.fixture(scope="module")
def grader(docker_grader):
    return docker_grader


def _grade(grader, task: Task, source: str | None):
    files = {k: v.encode() for k, v in task.files.items()}
    if source is not None:
        files["solution.py"] = source.encode()
    return grader.grade(task, files)


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_computed_humaneval_checks_earn_across_the_boundary(grader, task_id):
    task = TASKS[task_id]
    assert boundary_modules(task) == ("solution",)
    honest = _grade(grader, task, task.solution["solution.py"])
    assert honest.score == 1.0 and not honest.unverifiable, (honest.reason, honest.tests)
    assert [t.rule for t in honest.tests] == ["boundary"]
    starter = _grade(grader, task, None)
    assert starter.score == 0.0 and not starter.infra_error, (starter.reason, starter.tests)
    if task_id in WRONG:
        wrong = _grade(grader, task, WRONG[task_id])
        assert wrong.score < 1.0 and not wrong.infra_error, wrong.reason


MBPP_ROW = {
    "task_id": 9001, "text": "Scale every item by the factor the tests set up.",
    "code": "def scale(items, factor):\n    return [item * factor for item in items]\n",
    "test_setup_code": "FACTOR = 3\nITEMS = [1, 2, 5]\n",
    "test_list": ["assert scale(ITEMS, FACTOR) == [3, 6, 15]",
                  "assert scale([], FACTOR) == []",
                  "assert scale(ITEMS, 0) == [0] * len(ITEMS)"],
}


def test_an_mbpp_row_with_setup_code_earns_across_the_boundary(grader):
    task = from_mbpp(MBPP_ROW)
    assert boundary_modules(task) == ("solution",)
    honest = _grade(grader, task, task.solution["solution.py"])
    assert honest.score == 1.0 and honest.earning == 3, (honest.reason, honest.tests)
    empty = _grade(grader, task, None)  # no solution.py at all
    assert empty.score == 0.0 and not empty.infra_error, (empty.reason, empty.tests)


ATTACKS = {
    "always_equal": '''
class Everything:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = object.__hash__


class EqualInt(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__


def add(x, y):
    return Everything() if x % 2 else EqualInt(0)
''',
    "frame_and_gc_reader": '''
import gc
import sys


def add(x, y):
    frame = sys._getframe()
    while frame is not None:
        for name in ("expected", "x", "y"):
            pass
        frame = frame.f_back
    for obj in gc.get_objects():
        if type(obj) is dict and "ENTRY_POINT" in obj:
            return obj.get("expected", 0)
    return 0
''',
    "process_killer": '''
import os
import signal


def add(x, y):
    for pid in [os.getppid(), 1, *[int(p) for p in os.listdir("/proc") if p.isdigit()]]:
        if pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    return 0
''',
    "file_planter": '''
import os
import tempfile

FORGED = "def pytest_runtest_makereport(item, call):\\n    call.excinfo = None\\n"


def add(x, y):
    for folder in (".", "..", "/tmp", tempfile.gettempdir(), os.environ.get("HOME", ".")):
        for name in ("conftest.py", "sitecustomize.py", "test_solution.py"):
            try:
                with open(os.path.join(folder, name), "w") as fh:
                    fh.write(FORGED)
            except OSError:
                pass
    return 0
''',
    "fake_output": '''
import sys


def add(x, y):
    sys.stdout.write("test_solution.py::test_check PASSED\\n== 1 passed in 0.01s ==\\n")
    sys.stdout.flush()
    import os
    try:
        os.write(3, b'{"id": "test_solution.py::test_check", "outcome": "passed", '
                    b'"message": ""}\\n')
    except OSError:
        pass
    return 0
''',
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_forgeries_across_the_boundary_earn_nothing(grader, attack):
    report = _grade(grader, TASKS["HumanEval/53"], ATTACKS[attack])
    assert report.score == 0.0 and not report.infra_error, (report.reason, report.tests)


def test_a_sleeping_solution_times_out_and_earns_nothing(grader):
    task = dataclasses.replace(TASKS["HumanEval/53"], timeout=8.0)
    report = _grade(grader, task, "import time\n\n\ndef add(x, y):\n    time.sleep(3600)\n")
    assert report.score == 0.0 and not report.infra_error, (report.reason, report.tests)


UIDS_TEST = '''
import os
import sys

from opd_grading import entry


def test_the_solution_runs_apart():
    assert not [n for n in os.listdir(".") if n.endswith(".py") and n != "test_apart.py"]
    assert "apart" not in sys.modules
    uid, cwd, files = entry("where", "apart")()
    assert uid not in (os.getuid(), 0) and cwd != os.getcwd() and "apart.py" in files
'''


def test_the_solution_server_has_a_uid_and_a_tree_of_its_own(grader):
    reference = ("import os\n\n\ndef where():\n"
                 "    return os.getuid(), os.getcwd(), sorted(os.listdir('.'))\n")
    task = Task(id="boundary_apart", prompt="Write apart.py.", files={"apart.py": ""},
                tests={"test_apart.py": UIDS_TEST}, solution={"apart.py": reference},
                metadata={"boundary": ["apart"]}, timeout=30.0)
    report = _grade(grader, task, None)
    assert report.score == 0.0  # the empty starter: where() is missing
    files = {"apart.py": reference.encode()}
    honest = grader.grade(task, files)
    assert honest.score == 1.0, (honest.reason, honest.tests, honest.output[-2000:])
