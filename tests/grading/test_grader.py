"""Grading: hidden tests in a fresh sandbox, untrusted agent files, and every failure path."""

from __future__ import annotations

import pytest

from opd_gym.grading import (
    Grader,
    GradeReport,
    VerdictError,
    build_report,
    expected_tests,
    parse_verdict,
    select_files,
)

pytestmark = pytest.mark.filterwarnings("ignore:opd_gym local sandbox")

@pytest.fixture
def grader(local_pool):
    return Grader(local_pool)


def test_select_files_keeps_agent_files_but_not_reserved_or_test_paths(toy_task):
    agent = {"calc.py": b"a", "test_calc.py": b"b", "conftest.py": b"c",
             ".opd_grade/verdict.json": b"e", "notes.txt": b"f"}
    keep, dropped = select_files(toy_task, agent)
    # conftest.py is harmless now: the hidden tests run outside the workspace
    assert keep == {"calc.py": b"a", "conftest.py": b"c", "notes.txt": b"f"}
    assert dropped == [".opd_grade/verdict.json", "test_calc.py"]


def test_expected_tests_follow_pytest_rules():
    source = (
        "import pytest\n\ndef test_a():\n    pass\n\nasync def test_b():\n    pass\n\n"
        "def helper():\n    pass\n\nclass TestGroup:\n    def test_c(self):\n        pass\n"
        "    class TestInner:\n        def test_d(self):\n            pass\n\n"
        "class TestWithInit:\n    def __init__(self):\n        pass\n    def test_e(self):\n"
        "        pass\n\nclass Other:\n    def test_f(self):\n        pass\n"
    )
    assert expected_tests({"t/test_x.py": source}, ["t/test_x.py"]) == {
        "t/test_x.py::test_a", "t/test_x.py::test_b", "t/test_x.py::TestGroup::test_c",
        "t/test_x.py::TestGroup::TestInner::test_d",
    }


def _verdict(tests, **extra):
    import json

    data = {"version": 1, "exit": 0, "tests": tests, "collected": [], "collect_errors": [],
            "timed_out": False, "output": "", **extra}
    return parse_verdict(json.dumps(data).encode())


def test_verdict_must_report_exactly_the_hidden_tests():
    expected = {"test_x.py::test_a", "test_x.py::test_b"}
    ok = [{"id": "test_x.py::test_a", "outcome": "passed"},
          {"id": "test_x.py::test_b[1-2]", "outcome": "passed"}]
    report = build_report(_verdict(ok), expected, {"task_id": "t"}, 0.1)
    assert report.score == 1.0 and report.reason == ""
    assert [t.name for t in report.tests] == ["test_x::test_a", "test_x::test_b[1-2]"]
    missing = build_report(_verdict(ok[:1]), expected, {"task_id": "t"}, 0.1)
    assert missing.score == 0.0 and "did not run" in missing.reason and "test_b" in missing.reason
    extra = ok + [{"id": "test_x.py::test_planted", "outcome": "passed"}]
    report = build_report(_verdict(extra), expected, {"task_id": "t"}, 0.1)
    assert report.score == 0.0 and "not hidden tests" in report.reason
    assert "test_planted" in report.reason
    timed = build_report(_verdict(ok, timed_out=True), expected, {"task_id": "t"}, 0.1)
    assert timed.score == 0.0 and "timed out" in timed.reason


@pytest.mark.parametrize("raw", [
    b"", b"not json", b"[1, 2]", b'{"version": 2, "tests": []}',
    b'{"version": 1, "tests": [{"id": "a", "outcome": "won"}]}',
    b'{"version": 1, "tests": [{"id": 5, "outcome": "passed"}]}',
    b"[" * 100_000,
])
def test_malformed_verdicts_are_refused(raw):
    with pytest.raises(VerdictError):
        parse_verdict(raw)


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
    assert "test_calc.py" in report.dropped


def test_zero_tests_is_a_failure(grader, make_task):
    task = make_task(tests={"test_calc.py": "import calc\n"})
    report = grader.grade(task, {"calc.py": b"def add(a, b):\n    return a + b\n"})
    assert report.reason == "the task defines no hidden tests" and report.score == 0.0
    assert not report.all_passed


def test_timeout_is_a_failure(grader, make_task):
    slow = "import time\n\ndef test_slow():\n    time.sleep(30)\n"
    task = make_task(tests={"test_slow.py": slow}, timeout=1.5)
    report = grader.grade(task, {})
    assert report.timed_out and report.score == 0.0
    assert "timed out" in report.reason and report.duration < 20


def test_unavailable_sandbox_is_an_infra_failure(toy_task):
    from opd_gym.sandboxes import SandboxError

    class Broken:
        def acquire(self, timeout=None):
            raise SandboxError("engine down")

        def release(self, sandbox):
            raise AssertionError("nothing to release")

    report = Grader(Broken()).grade(toy_task, {})
    assert report.infra_error and "engine down" in report.reason and report.score == 0.0
