"""The harness's verdict, checked: plain JSON of a fixed shape turned into a GradeReport.

The verdict comes over a channel the agent's code cannot write (see docs/threat-model.md),
yet it is still validated field by field and capped, and the tests it reports must be
exactly the hidden tests: a missing or an extra test fails the grade with a reason.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from opd_gym.errors import GradingError
from opd_gym.grading.expected import base_id, display_name
from opd_gym.grading.report import MESSAGE_CHARS, OUTCOMES, GradeReport, TestOutcome

VERSION = 1
MAX_TESTS = 100_000


class VerdictError(GradingError, ValueError):
    """The harness's output is not a verdict of the expected shape."""


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise VerdictError(f"{what} is not a string")
    return value


def parse_verdict(raw: bytes) -> dict[str, Any]:
    """The verdict object from the harness's output (its last non-empty line)."""
    lines = [line for line in raw.splitlines() if line.strip()]
    if not lines:
        raise VerdictError("the grading harness wrote no verdict")
    try:
        data = json.loads(lines[-1])
    except (ValueError, RecursionError) as exc:
        raise VerdictError(f"the grading harness's verdict is not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise VerdictError("the grading harness's verdict has an unknown shape or version")
    tests = data.get("tests")
    if not isinstance(tests, list) or len(tests) > MAX_TESTS:
        raise VerdictError("the verdict's test list is missing or too long")
    for entry in tests:
        if not isinstance(entry, dict) or entry.get("outcome") not in OUTCOMES:
            raise VerdictError("a verdict entry has an unknown shape or outcome")
        _str(entry.get("id"), "a test id")
        _str(entry.get("message", ""), "a test message")
    for key in ("collected", "collect_errors"):
        if not isinstance(data.get(key, []), list):
            raise VerdictError(f"the verdict's {key} is not a list")
    return data


def build_report(data: Mapping[str, Any], expected: set[str], base: Mapping[str, Any],
                 duration: float) -> GradeReport:
    """A GradeReport from a parsed verdict, failed with a reason unless it is complete."""
    outcomes = [
        TestOutcome(display_name(e["id"]), e["outcome"], e.get("message", "")[:MESSAGE_CHARS])
        for e in data["tests"]
    ]
    for error in data.get("collect_errors", [])[:100]:
        if isinstance(error, list) and len(error) == 2 and all(isinstance(x, str) for x in error):
            outcomes.append(TestOutcome(display_name(error[0] or "<collection>"), "error",
                                        error[1][:MESSAGE_CHARS]))
    counts = {o: sum(t.outcome == o for t in outcomes) for o in OUTCOMES}
    common = dict(
        base, passed=counts["passed"], failed=counts["failed"], errors=counts["error"],
        skipped=counts["skipped"], tests=tuple(outcomes), duration=duration,
        exit_code=int(data.get("exit", -1)) if isinstance(data.get("exit"), int) else -1,
        output=str(data.get("output", ""))[-2000:], timed_out=bool(data.get("timed_out")),
    )
    ran = {base_id(e["id"]) for e in data["tests"]}
    missing, extra = sorted(expected - ran), sorted(ran - expected)
    if common["timed_out"]:
        return GradeReport(**common, reason="the test run timed out (the solution used up the "
                           "time budget)")
    if not expected:
        return GradeReport(**common, reason="the task defines no hidden tests")
    if not ran:
        return GradeReport(**{**common, "passed": 0}, reason="no tests ran")
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"{len(missing)} hidden test(s) did not run ({_few(missing)})")
        if extra:
            parts.append(f"{len(extra)} test(s) ran that are not hidden tests ({_few(extra)})")
        return GradeReport(**{**common, "passed": 0}, reason="; ".join(parts))
    return GradeReport(**common)


def _few(ids: list[str]) -> str:
    shown = ", ".join(display_name(i) for i in ids[:3])
    return shown + (", ..." if len(ids) > 3 else "")
