"""Grade an agent's work with the task's hidden tests, in a fresh sandbox the agent never touched.

The agent's workspace snapshot is copied into a new sandbox from the pool, minus files that
could steer the test run (anything at a hidden test path, any `conftest.py`, our reserved
`.opd_grade/` dir); then the canonical tests are written and pytest runs from a clean shell
(`env -i`, `bash --noprofile --norc`, `python3 -I`) with our own empty ini file, so the
agent's pytest configuration, plugins and user site-packages are all ignored. Per-test
outcomes come from pytest's JUnit XML. No test run, zero tests, a timeout, or a report that
disagrees with pytest's exit status all count as failure.
"""

from __future__ import annotations

import shlex
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import PurePosixPath
from typing import Protocol

from opd_gym.sandboxes import Sandbox, SandboxDied, SandboxError, SandboxTimeout
from opd_gym.tasks.model import Task

GRADE_DIR = ".opd_grade"
JUNIT_PATH = f"{GRADE_DIR}/junit.xml"
INI_PATH = f"{GRADE_DIR}/pytest.ini"
MAX_REPORT_BYTES = 8 << 20
MESSAGE_CHARS = 500
OUTCOMES = ("passed", "failed", "error", "skipped")


class SandboxSource(Protocol):
    """Where the grader gets a fresh sandbox and gives it back (a `SandboxPool` fits)."""

    def acquire(self, timeout: float | None = None) -> Sandbox: ...

    def release(self, sandbox: Sandbox) -> None: ...


@dataclass(frozen=True)
class TestOutcome:
    """One hidden test: `outcome` is passed, failed, error or skipped."""

    __test__ = False  # not a pytest test class

    name: str
    outcome: str
    message: str = ""


@dataclass(frozen=True)
class GradeReport:
    """The verdict on one submission; `score` is the fraction of hidden tests that passed.

    `reason` is empty when the tests ran normally, else why the run counts as a failure (then
    `passed` is 0). `infra_error` marks failures of our machinery rather than of the code.
    """

    task_id: str
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    tests: tuple[TestOutcome, ...] = ()
    timed_out: bool = False
    duration: float = 0.0
    exit_code: int = -1
    output: str = ""
    reason: str = ""
    infra_error: bool = False
    dropped: tuple[str, ...] = field(default_factory=tuple)

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.errors + self.skipped

    @property
    def score(self) -> float:
        return self.passed / self.total if self.total and not self.reason else 0.0

    @property
    def all_passed(self) -> bool:
        return not self.reason and self.total > 0 and self.passed == self.total

    def summary(self) -> str:
        """One line for the agent and logs, e.g. `Hidden tests: 4 of 5 passed.`."""
        if self.reason:
            return f"Hidden tests: grading failed ({self.reason})."
        failing = [t.name for t in self.tests if t.outcome != "passed"]
        text = f"Hidden tests: {self.passed} of {self.total} passed."
        if failing:
            more = " ..." if len(failing) > 5 else ""
            text += f" Not passed: {', '.join(failing[:5])}{more}."
        return text

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-able dict (tests as a list of dicts, tuples as lists) plus `score`/`total`."""
        data = asdict(self)
        data["tests"] = [asdict(t) for t in self.tests]
        data["dropped"] = list(self.dropped)
        data["total"] = self.total
        data["score"] = self.score
        return data


def parse_junit(xml_text: str | bytes) -> list[TestOutcome]:
    """Per-test outcomes from pytest's JUnit XML; raises ValueError if it cannot be parsed."""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as exc:
        raise ValueError(f"the JUnit report is not valid XML ({exc})") from None
    outcomes = []
    for case in root.iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "?")
        full = f"{classname}::{name}" if classname else name
        outcome, message = "passed", ""
        for kind, label in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
            node = case.find(kind)
            if node is not None:
                outcome = label
                message = (node.get("message") or node.text or "").strip()[:MESSAGE_CHARS]
                break
        outcomes.append(TestOutcome(full, outcome, message))
    return outcomes


def test_paths(task: Task) -> list[str]:
    """The hidden test modules pytest is pointed at (all .py files if none look like tests)."""
    python = [p for p in task.tests if p.endswith(".py")]
    named = [
        p for p in python if PurePosixPath(p).name.startswith("test_") or p.endswith("_test.py")
    ]
    return sorted(named or python)


def select_files(task: Task, files: Mapping[str, bytes]) -> tuple[dict[str, bytes], list[str]]:
    """The agent files to copy into the grading sandbox, and the paths dropped (sorted)."""
    keep: dict[str, bytes] = {}
    dropped: list[str] = []
    test_dirs = {str(parent) for p in task.tests for parent in PurePosixPath(p).parents}
    for path, data in files.items():
        parts = PurePosixPath(path).parts
        if path in task.tests or path in test_dirs or (parts and parts[0] == GRADE_DIR):
            dropped.append(path)
        elif parts and parts[-1] == "conftest.py":
            dropped.append(path)
            if path in task.files:  # the task's own starter conftest, restored as shipped
                keep[path] = task.files[path].encode("utf-8")
        else:
            keep[path] = data
    return keep, sorted(dropped)


def pytest_command(workspace: str, paths: list[str]) -> str:
    """A clean-shell pytest invocation writing JUnit XML into the reserved grading dir."""
    pytest_args = [
        "-q", "-p", "no:cacheprovider", "-c", INI_PATH, "--rootdir", ".",
        f"--junitxml={JUNIT_PATH}", "--", *paths,
    ]
    inner = 'cd "$1" && shift && exec python3 -I -m pytest "$@"'
    env = (
        'env -i PATH="$PATH" HOME=/tmp LANG=C.UTF-8 LC_ALL=C.UTF-8 '
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONHASHSEED=0"
    )
    argv = " ".join(shlex.quote(a) for a in [workspace, *pytest_args])
    return f"{env} bash --noprofile --norc -c {shlex.quote(inner)} opd-grade {argv}"


class Grader:
    """Runs a task's hidden tests against a workspace snapshot in a fresh sandbox."""

    def __init__(self, sandboxes: SandboxSource, *, output_chars: int = 2000) -> None:
        self.sandboxes = sandboxes
        self.output_chars = output_chars

    def grade(self, task: Task, files: Mapping[str, bytes]) -> GradeReport:
        """Grade `files` (e.g. `sandbox.snapshot()` of the agent's workspace); never raises."""
        started = time.monotonic()
        keep, dropped = select_files(task, files)
        base = {"task_id": task.id, "dropped": tuple(dropped)}
        try:
            sandbox = self.sandboxes.acquire()
        except SandboxError as exc:
            return GradeReport(**base, reason=f"no grading sandbox: {exc}", infra_error=True,
                               duration=time.monotonic() - started)
        try:
            return self._run(task, sandbox, keep, base, started)
        finally:
            self.sandboxes.release(sandbox)

    def _run(self, task: Task, sandbox: Sandbox, keep: dict[str, bytes], base: dict,
             started: float) -> GradeReport:
        def elapsed() -> float:
            return time.monotonic() - started

        try:
            for path, data in keep.items():
                sandbox.write_file(path, data)
            for path, text in task.tests.items():
                sandbox.write_file(path, text)
            sandbox.write_file(INI_PATH, "[pytest]\n")
        except (SandboxDied, SandboxTimeout) as exc:
            return GradeReport(**base, reason=f"the grading sandbox failed: {exc}",
                               infra_error=True, duration=elapsed())
        except SandboxError as exc:
            return GradeReport(**base, reason=f"could not copy the files to grade: {exc}",
                               duration=elapsed())
        paths = test_paths(task)
        if not paths:
            return GradeReport(**base, reason="the task has no Python test files",
                               infra_error=True, duration=elapsed())
        try:
            run = sandbox.run(pytest_command(sandbox.workspace, paths), timeout=task.timeout)
        except (SandboxDied, SandboxTimeout) as exc:
            reason = f"the grading sandbox died during the test run: {exc}"
            return GradeReport(**base, reason=reason, duration=elapsed())
        tail = run.output[-self.output_chars:]
        common = {**base, "exit_code": run.exit_code, "output": tail, "timed_out": run.timed_out}
        if run.timed_out:
            return GradeReport(**common, reason=f"the test run timed out after {task.timeout:g} s",
                               duration=elapsed())
        try:
            tests = parse_junit(sandbox.read_file(JUNIT_PATH, max_bytes=MAX_REPORT_BYTES))
        except (SandboxDied, SandboxTimeout) as exc:
            reason = f"the grading sandbox died: {exc}"
            return GradeReport(**common, reason=reason, duration=elapsed())
        except (SandboxError, ValueError) as exc:
            return GradeReport(**common, reason=f"pytest wrote no readable report "
                               f"(exit code {run.exit_code}): {exc}", duration=elapsed())
        counts = {o: sum(t.outcome == o for t in tests) for o in OUTCOMES}
        report = GradeReport(
            **common, passed=counts["passed"], failed=counts["failed"], errors=counts["error"],
            skipped=counts["skipped"], tests=tuple(tests), duration=elapsed(),
        )
        return _check_consistency(report)


def _check_consistency(report: GradeReport) -> GradeReport:
    """Turn runs that cannot be trusted into failures: no tests, or report vs exit status."""
    if report.total == 0:
        return replace(report, reason="no tests ran")
    clean = report.failed == report.errors == 0
    if report.exit_code not in (0, 1):
        if clean:
            return replace(report, passed=0,
                           reason=f"pytest exited with status {report.exit_code} "
                                  "(interrupted or internal error)")
        return report
    if report.exit_code == 1 and clean:
        return replace(report, passed=0,
                       reason="pytest reported failures that the JUnit report does not show")
    return report
