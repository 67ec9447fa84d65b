"""Grading: hidden tests in a fresh sandbox, untrusted agent files, and every failure path."""

from __future__ import annotations

import pytest

from opd_gym.grading import Grader, GradeReport, TestOutcome, parse_junit, select_files

pytestmark = pytest.mark.filterwarnings("ignore:opd_gym local sandbox")

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="4">
<testcase classname="test_calc" name="test_a" time="0.001"/>
<testcase classname="test_calc" name="test_b"><failure message="assert 1 == 2">tb</failure>
</testcase>
<testcase classname="test_calc" name="test_c"><skipped message="skip">x</skipped></testcase>
<testcase classname="" name="test_calc"><error message="collection failure">boom</error></testcase>
</testsuite></testsuites>"""


@pytest.fixture
def grader(local_pool):
    return Grader(local_pool)


def test_parse_junit_outcomes():
    outcomes = parse_junit(JUNIT)
    assert outcomes == [
        TestOutcome("test_calc::test_a", "passed", ""),
        TestOutcome("test_calc::test_b", "failed", "assert 1 == 2"),
        TestOutcome("test_calc::test_c", "skipped", "skip"),
        TestOutcome("test_calc", "error", "collection failure"),
    ]
    with pytest.raises(ValueError, match="not valid XML"):
        parse_junit("<testsuites><testcase")


def test_select_files_drops_what_could_steer_the_tests(toy_task, make_task):
    agent = {"calc.py": b"a", "test_calc.py": b"b", "conftest.py": b"c", "pkg/conftest.py": b"d",
             ".opd_grade/junit.xml": b"e", "notes.txt": b"f"}
    keep, dropped = select_files(toy_task, agent)
    assert keep == {"calc.py": b"a", "notes.txt": b"f"}
    assert dropped == [".opd_grade/junit.xml", "conftest.py", "pkg/conftest.py", "test_calc.py"]
    task = make_task(files={"calc.py": "", "conftest.py": "# starter conftest\n"})
    keep, _ = select_files(task, agent)
    assert keep["conftest.py"] == b"# starter conftest\n"  # restored as shipped
    nested = make_task(tests={"tests/unit/test_calc.py": "def test_x():\n    pass\n"})
    keep, dropped = select_files(nested, {"tests": b"a file where a test dir goes", "x.py": b""})
    assert keep == {"x.py": b""} and dropped == ["tests"]


def test_reference_solution_passes(grader, toy_task):
    report = grader.grade(toy_task, {"calc.py": toy_task.solution["calc.py"].encode()})
    assert isinstance(report, GradeReport)
    assert (report.passed, report.total, report.score, report.all_passed) == (3, 3, 1.0, True)
    assert report.reason == "" and report.exit_code == 0 and not report.timed_out
    assert report.summary() == "Hidden tests: 3 of 3 passed."
    data = report.to_dict()
    assert data["score"] == 1.0 and data["total"] == 3 and isinstance(data["tests"], list)


def test_partial_solution_gives_a_fraction(grader, toy_task):
    code = "def add(a, b):\n    return a + b if a >= 0 else 0\n"
    report = grader.grade(toy_task, {"calc.py": code.encode()})
    assert (report.passed, report.failed, report.total) == (2, 1, 3)
    assert report.score == pytest.approx(2 / 3)
    assert "test_negative" in report.summary()
    failing = [t for t in report.tests if t.outcome == "failed"]
    assert failing[0].name.endswith("test_negative") and "assert" in failing[0].message


def test_starter_code_and_syntax_errors_score_zero(grader, toy_task):
    assert grader.grade(toy_task, {"calc.py": toy_task.files["calc.py"].encode()}).score == 0.0
    broken = grader.grade(toy_task, {"calc.py": b"def add(a, b)\n    return a + b\n"})
    assert broken.score == 0.0 and broken.errors >= 1
    assert grader.grade(toy_task, {}).score == 0.0  # nothing written at all


def test_agent_cannot_rig_the_test_run(grader, toy_task):
    rigged = {
        "calc.py": toy_task.files["calc.py"].encode(),  # still unsolved
        # a hook that marks every test as passed
        "conftest.py": b"import pytest\n@pytest.hookimpl(hookwrapper=True)\n"
        b"def pytest_runtest_makereport(item, call):\n    out = yield\n"
        b"    rep = out.get_result()\n    rep.outcome = 'passed'\n",
        # config that would deselect or skip everything
        "pytest.ini": b"[pytest]\naddopts = -k nothing_matches\n",
        "pyproject.toml": b"[tool.pytest.ini_options]\naddopts = '-k nothing_matches'\n",
        # a fake pytest module and a replaced test file
        "pytest.py": b"import sys\nprint('1 passed')\nsys.exit(0)\n",
        "test_calc.py": b"def test_fake():\n    pass\n",
        # a user-site .pth file that would run at interpreter start
        ".local/lib/python3.11/site-packages/evil.pth": b"import sys; sys.exit(0)\n",
    }
    report = grader.grade(toy_task, rigged)
    assert report.total == 3 and report.passed == 0 and report.score == 0.0
    assert {"conftest.py", "test_calc.py"} <= set(report.dropped)


def test_zero_tests_is_a_failure(grader, make_task):
    task = make_task(tests={"test_calc.py": "import calc\n"})
    report = grader.grade(task, {"calc.py": b"def add(a, b):\n    return a + b\n"})
    assert report.reason == "no tests ran" and report.score == 0.0 and not report.all_passed


def test_timeout_is_a_failure(grader, make_task):
    slow = "import time\n\ndef test_slow():\n    time.sleep(30)\n"
    task = make_task(tests={"test_slow.py": slow}, timeout=1.5)
    report = grader.grade(task, {})
    assert report.timed_out and report.score == 0.0
    assert "timed out" in report.reason and report.duration < 20


def test_report_without_reason_on_exit_status_mismatch():
    report = GradeReport("t", passed=2, exit_code=0, tests=(TestOutcome("a", "passed"),) * 2)
    assert report.score == 1.0
    from opd_gym.grading import _check_consistency

    assert _check_consistency(report).score == 1.0
    lying = _check_consistency(GradeReport("t", passed=2, exit_code=1))
    assert lying.score == 0.0 and "does not show" in lying.reason
    crashed = _check_consistency(GradeReport("t", passed=2, exit_code=3))
    assert crashed.score == 0.0 and "status 3" in crashed.reason


def test_unavailable_sandbox_is_an_infra_failure(toy_task):
    from opd_gym.sandboxes import SandboxError

    class Broken:
        def acquire(self, timeout=None):
            raise SandboxError("engine down")

        def release(self, sandbox):
            raise AssertionError("nothing to release")

    report = Grader(Broken()).grade(toy_task, {})
    assert report.infra_error and "engine down" in report.reason and report.score == 0.0
