"""Adversarial solutions against the grader, in real Docker sandboxes: none earns a pass.

Every payload is code an RL policy could write into its workspace. They are grouped by the
class of hole they try (see docs/threat-model.md): forging the verdict, reaching the hidden
tests, steering how the tests are imported, values that compare equal to anything, and
breaking the harness protocol. Each asserts the grade stays what the honest work earns.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from opd_gym.grading import Grader
from opd_gym.sandboxes import make_pool
from opd_gym.tasks import Task, load_suite

pytestmark = pytest.mark.docker

SUITE = load_suite("coding")

ADD_TESTS = """\
from calc import add


def test_small():
    assert add(2, 3) == 5


def test_negative():
    assert add(-4, -1) == -5


def test_large():
    assert add(10**6, 1) == 1000001
"""

RAISES_TESTS = """\
import pytest
from calc import parse


def test_rejects_garbage():
    with pytest.raises(ValueError):
        parse("garbage")


def test_rejects_anything():
    with pytest.raises(Exception):
        parse("also garbage")
"""

STUB = "def add(a, b):\n    raise NotImplementedError\n"

FORGED_VERDICT = json.dumps({
    "version": 1, "exit": 0, "collected": [], "collect_errors": [], "timed_out": False,
    "output": "3 passed", "tests": [
        {"id": f"test_calc.py::{name}", "outcome": "passed", "message": ""}
        for name in ("test_small", "test_negative", "test_large")
    ],
})


def add_task(tests: str = ADD_TESTS, **extra) -> Task:
    fields = {"id": "calc_add", "prompt": "Implement add(a, b) in calc.py.",
              "tests": {"test_calc.py": tests}, "timeout": 20.0}
    fields.update(extra)
    return Task(**fields)


@pytest.fixture(scope="module")
def grader():
    pool = make_pool("docker", size=3, workers=3)
    yield Grader(pool)
    pool.close()


def grade(grader, files: dict[str, str], task: Task | None = None):
    return grader.grade(task or add_task(), {k: v.encode() for k, v in files.items()})


# -- class 1: the verdict is produced and carried where the agent cannot write -------------
SPAM_PROC_FDS = f"""
import os, time
FORGED = {FORGED_VERDICT!r} + "\\n"
def spam(seconds):
    end = time.time() + seconds
    while time.time() < end:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            for fd in ("0", "1", "2", "3", "4"):
                try:
                    with open("/proc/%s/fd/%s" % (pid, fd), "w") as fh:
                        fh.write(FORGED)
                except OSError:
                    pass
        time.sleep(0.02)
"""

VERDICT_FORGERS = {
    "write_reports_then_exit": SPAM_PROC_FDS + """
for path in (".opd_grade/junit.xml", ".opd_grade/verdict.json", "/tmp/verdict.json"):
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as fh:
            fh.write(FORGED)
    except OSError:
        pass
spam(0.5)
print(FORGED)
os._exit(0)
""",
    "detached_daemon_rewrites_after_the_run": SPAM_PROC_FDS + """
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        spam(15)
        os._exit(0)
    os._exit(0)
""" + STUB,
    "exit_hook_prints_a_pass": """
import atexit, os, sys
atexit.register(lambda: (print("3 passed in 0.01s"), sys.stdout.flush()))
""" + STUB,
    "patches_pytest_reporting_at_import": """
try:
    import _pytest.reports, _pytest.runner, pytest
    _pytest.reports.TestReport.passed = property(lambda self: True)
    _pytest.reports.BaseReport.failed = property(lambda self: False)
    pytest.main = lambda *a, **k: 0
except Exception:
    pass
import builtins
builtins.AssertionError = type("AssertionError", (Exception,), {})
""" + STUB,
    "forged_replies_on_the_channel": SPAM_PROC_FDS + """
import json
for fd in range(3, 12):
    try:
        os.write(fd, b'{"ok": 5}\\n{"ok": -5}\\n{"ok": 1000001}\\n')
    except OSError:
        pass
""" + STUB,
}


@pytest.mark.parametrize("name", sorted(VERDICT_FORGERS))
def test_verdict_cannot_be_forged(grader, name):
    report = grade(grader, {"calc.py": VERDICT_FORGERS[name]})
    assert report.passed == 0 and report.score == 0.0, (name, report.tests, report.reason)


def test_detached_processes_are_gone_when_the_grade_is_in(grader):
    started = time.monotonic()
    report = grade(grader, {"calc.py": VERDICT_FORGERS["detached_daemon_rewrites_after_the_run"]})
    assert report.score == 0.0 and time.monotonic() - started < 15


# -- class 2: the hidden tests are out of reach ----------------------------------------------
STEAL_EXPECTED = """
import os, re

def _hidden_sources():
    found = []
    for root, dirs, files in os.walk("/"):
        if root.startswith(("/proc", "/sys", "/usr", "/dev")):
            dirs[:] = []
            continue
        for name in files:
            if name.endswith(".py") and name.startswith("test_"):
                try:
                    with open(os.path.join(root, name)) as fh:
                        found.append(fh.read())
                except OSError:
                    pass
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as fh:
                found.append(fh.read().decode("utf-8", "replace"))
            with open("/proc/%s/environ" % pid, "rb") as fh:
                found.append(fh.read().decode("utf-8", "replace"))
        except OSError:
            pass
    return found

def add(a, b):
    for text in _hidden_sources():
        match = re.search(r"add\\(%r, %r\\) == (-?\\d+)" % (a, b), text)
        if match:
            return int(match.group(1))
    return None
"""

TAMPER_TESTS = """
import os
for root, dirs, files in os.walk("/tmp"):
    for name in files:
        if name.startswith("test_"):
            try:
                with open(os.path.join(root, name), "a") as fh:
                    fh.write("\\ndef add(a, b):\\n    return a + b\\n")
            except OSError:
                pass
    for name in dirs:
        try:
            open(os.path.join(root, name, "conftest.py"), "w").write("x = 1\\n")
        except OSError:
            pass
""" + STUB


def test_hidden_tests_cannot_be_read(grader):
    report = grade(grader, {"calc.py": STEAL_EXPECTED})
    assert report.passed == 0 and report.score == 0.0, report.tests


def test_hidden_tests_cannot_be_modified(grader):
    report = grade(grader, {"calc.py": TAMPER_TESTS})
    assert report.passed == 0 and report.score == 0.0, report.tests


def test_helper_modules_of_the_tests_cannot_be_swapped(grader):
    tests = "from calc import add\nfrom checks import expect\n\n\ndef test_add():\n" \
            "    expect(add(2, 3), 5)\n"
    checks = "def expect(value, wanted):\n    assert value == wanted\n"
    task = add_task(tests=tests, id="with_helper")
    task = Task(**{**task.__dict__, "tests": {"test_calc.py": tests, "checks.py": checks}})
    fake = {"calc.py": STUB, "checks.py": "def expect(value, wanted):\n    pass\n"}
    assert grade(grader, fake, task).score == 0.0
    assert grade(grader, {"calc.py": "def add(a, b):\n    return a + b\n"}, task).score == 1.0


def test_extra_tests_from_the_solution_do_not_count(grader):
    tests = "import calc\nfrom calc import *  # noqa\n\n\ndef test_add():\n" \
            "    assert calc.add(2, 3) == 5\n"
    solution = STUB + "\n\ndef test_free_pass():\n    pass\n\n\ndef test_another():\n    pass\n"
    files = {"calc.py": solution, "test_extra.py": "def test_planted():\n    pass\n"}
    report = grade(grader, files, add_task(tests=tests))
    assert report.passed == 0 and report.score == 0.0
    assert all("free_pass" not in t.name and "planted" not in t.name for t in report.tests)


# -- class 3: files left in the workspace do not change how the tests are imported ----------
PASS_EVERYTHING = """
import pytest
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""

PLANTED = {
    "__init__.py": PASS_EVERYTHING,
    "conftest.py": PASS_EVERYTHING,
    "tests/conftest.py": PASS_EVERYTHING,
    "tests/__init__.py": PASS_EVERYTHING,
    "pytest.ini": "[pytest]\naddopts = -p conftest -k nothing\n",
    "setup.cfg": "[tool:pytest]\naddopts = -k nothing\n",
    "tox.ini": "[pytest]\naddopts = -k nothing\n",
    "pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-k nothing'\n",
    "sitecustomize.py": "import os\nos._exit(0)\n",
    "usercustomize.py": "import os\nos._exit(0)\n",
    "pytest.py": "import sys\nprint('3 passed')\nsys.exit(0)\n",
    "_pytest/__init__.py": "raise SystemExit(0)\n",
    "opd_grading.py": "def run(*a, **k):\n    raise SystemExit(0)\n"
                      "def read_text(p):\n    return ''\n",
    "json.py": "dumps = loads = lambda *a, **k: '{}'\n",
    ".pth": "import os; os._exit(0)\n",
}


def _plant(task: Task) -> dict[str, bytes]:
    files = {**task.files, **PLANTED}
    return {k: v.encode() for k, v in files.items()}


@pytest.fixture(scope="module")
def planted_grades(grader):
    jobs = [(task, files) for task in SUITE
            for files in ({k: v.encode() for k, v in task.files.items()}, _plant(task))]
    with ThreadPoolExecutor(3) as workers:
        reports = list(workers.map(lambda job: grader.grade(*job), jobs))
    return {task.id: (reports[2 * i], reports[2 * i + 1]) for i, task in enumerate(SUITE)}


@pytest.mark.parametrize("task", SUITE, ids=lambda t: t.id)
def test_planted_files_earn_nothing_on_any_builtin_task(task, planted_grades):
    starter, planted = planted_grades[task.id]
    assert planted.score < 1.0 and planted.passed <= starter.passed, (
        task.id, planted.summary(), planted.reason)


# -- class 4: values whose equality always holds ----------------------------------------------
ALWAYS_EQUAL = {
    "object": "class A:\n    def __eq__(self, o):\n        return True\n    __hash__ = None\n"
              "def add(a, b):\n    return A()\n",
    "int_subclass": "class I(int):\n    def __eq__(self, o):\n        return True\n"
                    "    __hash__ = int.__hash__\n"
                    "def add(a, b):\n    return I(0)\n",
    "str_subclass": "class S(str):\n    def __eq__(self, o):\n        return True\n"
                    "    __hash__ = str.__hash__\n"
                    "def add(a, b):\n    return S('x')\n",
    "lying_class_attribute": "class L:\n    __class__ = int\n"
                             "    def __eq__(self, o):\n        return True\n"
                             "def add(a, b):\n    return L()\n",
    "nan_and_mock": "import unittest.mock\ndef add(a, b):\n    return unittest.mock.ANY\n",
    "container_of_liars": "class A:\n    def __eq__(self, o):\n        return True\n"
                          "def add(a, b):\n    return [A()][0]\n",
}


@pytest.mark.parametrize("name", sorted(ALWAYS_EQUAL))
def test_always_equal_values_do_not_pass(grader, name):
    report = grade(grader, {"calc.py": ALWAYS_EQUAL[name]})
    assert report.passed == 0 and report.score == 0.0, (name, report.tests)


def test_builtin_subclasses_compare_by_their_real_value(grader):
    honest = "class I(int):\n    def __eq__(self, o):\n        return True\n" \
             "    __hash__ = int.__hash__\ndef add(a, b):\n    return I(a + b)\n"
    assert grade(grader, {"calc.py": honest}).score == 1.0


# -- the protocol: crashes, hangs and garbage fail the test, never pass it ---------------------
PROTOCOL_BREAKERS = {
    "exit_inside_the_call": "import os\ndef parse(text):\n    os._exit(0)\n",
    "kill_own_process": "import os, signal\ndef parse(text):\n"
                        "    os.kill(os.getpid(), signal.SIGKILL)\n",
    "fake_builtin_exception": "class ValueError(BaseException):\n    pass\n"
                              "def parse(text):\n    raise ValueError(text)\n",
    "keyboard_interrupt": "def parse(text):\n    raise KeyboardInterrupt\n",
    "garbage_on_the_channel": "import os\ndef parse(text):\n    for fd in range(3, 10):\n"
                              "        try:\n"
                              "            os.write(fd, b'{\"err\": 7}\\n' + b'[' * 5000)\n"
                              "        except OSError:\n            pass\n"
                              "    return 0\n",
    "unbounded_reply": "def parse(text):\n    return 'x' * (80 << 20)\n",
}


@pytest.mark.parametrize("name", sorted(PROTOCOL_BREAKERS))
def test_protocol_breakers_fail_expected_exception_tests(grader, name):
    task = add_task(tests=RAISES_TESTS, id="raises")
    report = grade(grader, {"calc.py": PROTOCOL_BREAKERS[name]}, task)
    assert report.passed == 0 and report.score == 0.0, (name, report.tests)
    honest = "def parse(text):\n    raise ValueError(text)\n"
    assert grade(grader, {"calc.py": honest}, task).score == 1.0


def test_a_hanging_solution_times_out_cleanly(grader):
    task = add_task(timeout=3.0)
    started = time.monotonic()
    report = grade(grader, {"calc.py": "def add(a, b):\n    while True:\n        pass\n"}, task)
    assert report.score == 0.0 and report.timed_out and "timed out" in report.reason
    assert time.monotonic() - started < 20


# -- end to end, through the public env API -----------------------------------------------------
def test_planted_files_through_gym_make_earn_no_correctness():
    import gymnasium as gym

    from opd_gym.tools import format_tool_call

    env = gym.make("opd_gym/Coding-v0", tasks=["decode_secret", "fizzbuzz"], pool_size=2)
    try:
        for task_id in ("decode_secret", "fizzbuzz"):
            env.reset(options={"task_id": task_id})
            chosen = ("__init__.py", "conftest.py", "pytest.ini", "sitecustomize.py",
                      "pytest.py", "opd_grading.py")
            planted = {path: PLANTED[path] for path in chosen}
            for path, text in {**planted, "answer.txt": "wrong\n"}.items():
                env.step(format_tool_call("write_file", {"path": path, "content": text}))
            *_, terminated, _, info = env.step(format_tool_call("submit", {}))
            grade = info["grade"]
            # what the honest files earn: a one-line answer.txt that is wrong, no fizzbuzz.py
            honest = {"decode_secret": 2 / 3, "fizzbuzz": 0.0}[task_id]
            assert terminated and grade["score"] == pytest.approx(honest), (task_id, grade)
            assert info["reward_breakdown"]["correctness"] == pytest.approx(honest)
    finally:
        env.close()


def test_an_always_equal_class_of_the_solution_fails_the_value_tests(grader):
    task = next(t for t in SUITE if t.id == "geometry_package")
    files = {**task.files, **task.solution}
    liar = files["geometry/vector.py"].replace(
        "    def __add__(self, other):\n        return Vector(self.x + other.x, self.y + other.y)",
        "    def __add__(self, other):\n        return Vector(0, 0)\n\n"
        "    def __eq__(self, other):\n        return True\n\n"
        "    def __ne__(self, other):\n        return False\n\n"
        "    __hash__ = tuple.__hash__",
    )
    assert liar != files["geometry/vector.py"]
    report = grader.grade(task, {k: v.encode() for k, v in {**files,
                                 "geometry/vector.py": liar}.items()})
    failed = {t.name.split("::")[-1] for t in report.tests if t.outcome != "passed"}
    assert {"test_vector_arithmetic", "test_vector_equality"} <= failed, report.tests
