"""The verdict on one submission: per-test outcomes and the score they give.

`GradeReport` is what the env, the rewards and the exports read; `TestOutcome` is one hidden
test's result. Both are plain frozen data, built by the grader from the harness's verdict.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

MESSAGE_CHARS = 500
OUTCOMES = ("passed", "failed", "error", "skipped")


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
