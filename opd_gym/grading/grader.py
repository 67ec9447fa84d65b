"""Grade an agent's work: its files in a fresh sandbox, the hidden tests in a harness apart.

The snapshot of the agent's workspace is written into a new sandbox from the pool; the harness
(`sandbox/grade_harness.py`) then runs the hidden tests there, under another uid than the
agent's code, which it reaches only through a plain-data protocol (`sandbox/grade_runner.py`).
The verdict is checked for shape and for exactly the hidden test ids before it becomes a
GradeReport. No test run, a timeout, or an incomplete verdict all count as failure.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Protocol

from opd_gym.grading.expected import expected_tests, test_paths
from opd_gym.grading.launch import GENERIC_DIR, agent_uid, harness_request, run_harness
from opd_gym.grading.report import GradeReport
from opd_gym.grading.verdict import VerdictError, build_report, parse_verdict
from opd_gym.sandboxes import (
    FileTooLarge,
    PathRefused,
    Sandbox,
    SandboxDied,
    SandboxError,
    SandboxTimeout,
)
from opd_gym.tasks.model import Task

GRADE_DIR = GENERIC_DIR
HARNESS_MARGIN = 10.0  # seconds the harness gets beyond the task's budget (start-up, pytest)


class SandboxSource(Protocol):
    """Where the grader gets a fresh sandbox and gives it back (a `SandboxPool` fits)."""

    def acquire(self, timeout: float | None = None) -> Sandbox: ...

    def release(self, sandbox: Sandbox) -> None: ...


def select_files(task: Task, files: Mapping[str, bytes]) -> tuple[dict[str, bytes], list[str]]:
    """The agent files to copy into the grading sandbox, and the paths dropped (sorted).

    The hidden tests live outside the workspace, so agent files cannot steer them; only our
    reserved directory is dropped (and hidden-test paths, so a stale copy never confuses a
    reader of the workspace).
    """
    keep: dict[str, bytes] = {}
    dropped: list[str] = []
    for path, data in files.items():
        parts = PurePosixPath(path).parts
        if path in task.tests or (parts and parts[0] == GRADE_DIR):
            dropped.append(path)
        else:
            keep[path] = data
    return keep, sorted(dropped)


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

        dropped = list(base["dropped"])
        try:
            for path, data in keep.items():
                try:
                    sandbox.write_file(path, data)
                except (FileTooLarge, PathRefused):
                    dropped.append(path)  # not a solution file: noted, never a failed grade
        except (SandboxDied, SandboxTimeout) as exc:
            return GradeReport(**base, reason=f"the grading sandbox failed: {exc}",
                               infra_error=True, duration=elapsed())
        except SandboxError as exc:
            return GradeReport(**base, reason=f"could not copy the files to grade: {exc}",
                               duration=elapsed())
        base = {**base, "dropped": tuple(sorted(dropped))}
        paths = test_paths(task)
        if not paths:
            return GradeReport(**base, reason="the task has no Python test files",
                               infra_error=True, duration=elapsed())
        request = harness_request(task, sandbox.workspace, agent_uid(sandbox))
        try:
            raw = run_harness(sandbox, request, task.timeout + HARNESS_MARGIN)
        except SandboxTimeout:
            return GradeReport(**base, timed_out=True, duration=elapsed(),
                               reason=f"the test run timed out after {task.timeout:g} s")
        except SandboxError as exc:
            return GradeReport(**base, reason=str(exc), infra_error=True, duration=elapsed())
        try:
            verdict = parse_verdict(raw)
        except VerdictError as exc:
            return GradeReport(**base, reason=str(exc), infra_error=True, duration=elapsed(),
                               output=raw[-self.output_chars:].decode("utf-8", "replace"))
        expected = expected_tests(task.tests, paths)
        return build_report(verdict, expected, base, elapsed())
