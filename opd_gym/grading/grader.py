"""Grade an agent's work: its files in a fresh sandbox, the hidden tests run twice with canaries.

The snapshot of the agent's workspace is written into a new sandbox from the pool; the harness
(`sandbox/grade_harness.py`) then runs two variants of the hidden tests there, one after the
other, each a plain pytest process with the agent's code in it under a uid of its own. For
each test one variant holds the real test and the other its canary (the same test with one
expectation perturbed, see canary.py); the host alone knows which. An honest solution passes
the real test and fails the canary; a test that passes together with its valid canary exposes
a forgery and zeroes the score.

Per task (content hash) and Grader, a calibration runs once: the reference solution with the
same canaries (canaries it passes are invalid, their tests become gates) and the untouched
starter (tests it passes become gates). A canary that hangs the reference's run (it fails
before the test releases a lock) while the reference passes the real test is dropped and the
calibration runs again (at most HUNG_CANARY_RETRIES times): that test becomes a gate. No test
run, a timeout, an incomplete verdict, or a failed calibration all count as failure; the
machinery's own failures are flagged infra errors.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any, Protocol

from opd_gym.grading import launch
from opd_gym.grading.canary import CanarySet, Variants, build_variants, make_canaries, seed_for
from opd_gym.grading.expected import base_id, expected_tests, test_paths
from opd_gym.grading.report import PASSING, GradeReport
from opd_gym.grading.verdict import (
    Calibration,
    Merged,
    VerdictError,
    build_report,
    merge,
    parse_verdict,
)
from opd_gym.sandboxes import (
    FileTooLarge,
    PathRefused,
    Sandbox,
    SandboxDied,
    SandboxError,
    SandboxTimeout,
)
from opd_gym.tasks.model import Task

GRADE_DIR = launch.GENERIC_DIR
HARNESS_MARGIN = 10.0  # seconds the harness gets beyond the task's budget (start-up, pytest)
VARIANTS = 2  # the harness runs them one after the other, each with the task's timeout
HUNG_CANARY_RETRIES = 3  # calibration re-runs after dropping canaries that hung the reference


class SandboxSource(Protocol):
    """Where the grader gets a fresh sandbox and gives it back (a `SandboxPool` fits)."""

    def acquire(self, timeout: float | None = None) -> Sandbox: ...

    def release(self, sandbox: Sandbox) -> None: ...


def select_files(task: Task, files: Mapping[str, bytes]) -> tuple[dict[str, bytes], list[str]]:
    """The agent files to copy into the grading sandbox, and the paths dropped (sorted).

    Hidden-test paths are dropped (the variants' copies win anyway, and a stale copy must never
    confuse a reader of the workspace), and so is our reserved directory.
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


def task_key(task: Task) -> str:
    """A hash of everything that decides a task's grade: tests, starter, reference, settings."""
    content = json.dumps(
        [sorted(task.tests.items()), sorted(task.files.items()), sorted(task.solution.items()),
         task.pytest_ini, list(task.test_ids or ()), task.timeout], sort_keys=True,
    )
    return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()


class _Failed(Exception):
    """A run that ended before outcomes: carries the report fields saying why."""

    def __init__(self, **fields: Any) -> None:
        super().__init__(fields.get("reason", ""))
        self.fields = fields


class Grader:
    """Runs a task's hidden tests and their canaries against a workspace snapshot.

    Holds a secret that seeds the canaries (same task, same canaries within this Grader, so
    calibration validates what grades use) and the calibrations, cached per task hash.
    Thread-safe: concurrent grades of one task share one calibration run.
    """

    def __init__(self, sandboxes: SandboxSource, *, output_chars: int = 2000) -> None:
        self.sandboxes = sandboxes
        self.output_chars = output_chars
        self._secret = os.urandom(32)
        self._lock = threading.Lock()
        self._task_locks: dict[str, threading.Lock] = {}
        self._calibrations: dict[str, Calibration] = {}

    # -- public -------------------------------------------------------------------------
    def grade(self, task: Task, files: Mapping[str, bytes]) -> GradeReport:
        """Grade `files` (e.g. `sandbox.snapshot()` of the agent's workspace); never raises."""
        started = time.monotonic()
        keep, dropped = select_files(task, files)
        base: dict[str, Any] = {"task_id": task.id, "dropped": tuple(dropped)}
        if not self._expected(task)[0]:
            return GradeReport(**base, reason="the task defines no hidden tests",
                               duration=time.monotonic() - started)
        try:
            calibration = self.calibration(task)
            merged, dropped_more = self._run(task, keep, calibration.canaries)
        except _Failed as failed:
            fields = {**base, **failed.fields}
            fields["dropped"] = tuple(sorted({*base["dropped"], *fields.get("dropped", ())}))
            return GradeReport(**fields, duration=time.monotonic() - started)
        except Exception as exc:  # never raise: a bug of ours is an infra error, not a score
            return GradeReport(**base, reason=f"grading failed: {type(exc).__name__}: {exc}",
                               infra_error=True, duration=time.monotonic() - started)
        base["dropped"] = tuple(sorted({*dropped, *dropped_more}))
        return build_report(merged, calibration, base, time.monotonic() - started)

    def calibration(self, task: Task) -> Calibration:
        """The task's canaries, validated with its reference and starter (cached per hash).

        Raises _Failed (an infra error) when a calibration run fails; nothing is cached then.
        """
        key = task_key(task)
        with self._lock:
            done = self._calibrations.get(key)
            if done is not None:
                return done
            lock = self._task_locks.setdefault(key, threading.Lock())
        with lock:
            with self._lock:
                done = self._calibrations.get(key)
            if done is not None:
                return done
            done = self._calibrate(task, key)
            with self._lock:
                self._calibrations[key] = done
            return done

    # -- internals ------------------------------------------------------------------------
    def _calibrate(self, task: Task, key: str) -> Calibration:
        canaries = make_canaries(task.tests, test_paths(task), seed_for(self._secret, key))
        starter = {p: t.encode() for p, t in task.files.items()}
        reference = {p: t.encode() for p, t in {**task.files, **task.solution}.items()}
        for attempt in range(HUNG_CANARY_RETRIES + 1):
            starter_run, _ = self._run(task, select_files(task, starter)[0], canaries,
                                       calibrating="the untouched starter")
            # What the starter passed, even in a run cut short: a gate too many never pays.
            starter_passed = frozenset(
                i for i, (o, _) in starter_run.real.items() if o in PASSING)
            if not task.solution:
                return Calibration(canaries, starter_passed=starter_passed)
            ref_run, _ = self._run(task, select_files(task, reference)[0], canaries,
                                   calibrating="the reference solution")
            hung = {i for i in ref_run.hung_canaries
                    if ref_run.real.get(i, ("", ""))[0] in PASSING}
            if not (ref_run.timed_out and hung) or attempt == HUNG_CANARY_RETRIES:
                break
            # The reference passes the real test but its canary hung (it failed before the
            # test released a lock, say): the canary is invalid and goes; the test is a gate.
            drop = {base_id(i) for i in hung}
            canaries = dataclasses.replace(canaries, canaries={
                t: c for t, c in canaries.canaries.items() if t not in drop})
        if ref_run.reason:
            raise _Failed(reason=f"calibration: the reference solution's run failed "
                                 f"({ref_run.reason})", infra_error=True)
        invalid = frozenset(i for i, o in ref_run.canary.items() if o in PASSING)
        neutral = frozenset(i for i, (o, _) in ref_run.real.items() if o not in PASSING)
        return Calibration(canaries, invalid=invalid, starter_passed=starter_passed,
                           neutral=neutral, calibrated=True)

    def _expected(self, task: Task) -> tuple[set[str], bool]:
        if task.test_ids:
            return set(task.test_ids), True
        return expected_tests(task.tests, test_paths(task)), False

    def _run(self, task: Task, keep: dict[str, bytes], canaries: CanarySet,
             calibrating: str = "") -> tuple[Merged, list[str]]:
        """Both variants of the hidden tests on `keep`, merged; _Failed before outcomes."""
        what = f"calibration ({calibrating}): " if calibrating else ""
        paths = test_paths(task)
        if not paths:
            raise _Failed(reason="the task has no Python test files", infra_error=True)
        variants = build_variants(task.tests, canaries)
        try:
            sandbox = self.sandboxes.acquire()
        except SandboxError as exc:
            raise _Failed(reason=f"{what}no grading sandbox: {exc}", infra_error=True) from None
        try:
            dropped = self._copy(sandbox, keep, what)
            raw = self._harness(task, sandbox, paths, variants, what)
        finally:
            self.sandboxes.release(sandbox)
        try:
            data = parse_verdict(raw)
        except VerdictError as exc:
            raise _Failed(reason=f"{what}{exc}", infra_error=True,
                          output=raw[-self.output_chars:].decode("utf-8", "replace")) from None
        expected, exact = self._expected(task)
        return merge(data, expected, exact, canaries, variants), dropped

    def _copy(self, sandbox: Sandbox, keep: dict[str, bytes], what: str) -> list[str]:
        dropped: list[str] = []
        try:
            bulk = getattr(sandbox, "write_files", None)
            try:
                if not callable(bulk):
                    raise PathRefused("no bulk write")
                bulk(keep)  # one archive (Docker); refuses all if one path is refused
            except (FileTooLarge, PathRefused):
                for path, data in keep.items():
                    try:
                        sandbox.write_file(path, data)
                    except (FileTooLarge, PathRefused):
                        dropped.append(path)  # not a solution file: noted, never a failed grade
        except (SandboxDied, SandboxTimeout) as exc:
            raise _Failed(reason=f"{what}the grading sandbox failed: {exc}",
                          infra_error=True) from None
        except SandboxError as exc:
            raise _Failed(reason=f"{what}could not copy the files to grade: {exc}",
                          infra_error=bool(what)) from None
        return dropped

    def _harness(self, task: Task, sandbox: Sandbox, paths: list[str], variants: Variants,
                 what: str) -> bytes:
        request = launch.harness_request(
            workspace=sandbox.workspace, uid=launch.agent_uid(sandbox), timeout=task.timeout,
            ini=task.pytest_ini, args=paths, variants=list(variants.files),
            select=task.test_ids or None,  # only these ids run; the others are deselected
        )
        limit = VARIANTS * task.timeout + HARNESS_MARGIN
        try:
            return launch.run_harness(sandbox, request, limit)
        except SandboxTimeout:
            if what:
                raise _Failed(reason=f"{what}the test run timed out", infra_error=True) from None
            raise _Failed(timed_out=True,
                          reason=f"the test run timed out after {task.timeout:g} s") from None
        except SandboxError as exc:
            raise _Failed(reason=f"{what}{exc}", infra_error=True) from None


__all__ = ["GRADE_DIR", "Grader", "SandboxSource", "base_id", "select_files", "task_key"]
