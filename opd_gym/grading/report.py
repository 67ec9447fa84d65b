"""The verdict on one submission: per-test outcomes and the score they give.

`GradeReport` is what the env, the rewards and the exports read; `TestOutcome` is one hidden
test's result. Both are plain frozen data, built by the grader from the harness's verdict.

Scoring (see docs/threat-model.md): whether a test EARNS or is a GATE (it must pass but earns
nothing) is decided once per task by its calibration, and each test's `rule` names the row of
`opd_gym.grading.rules.RULES` that decided. The score is the fraction of earning tests passed;
it is 0 when a gate fails, when a test passed with its valid canary (`forgery`) or when the run
failed (`reason`). A task with no earning test at all cannot be verified: its grade is an infra
error (`unverifiable`), never a 0 a trainer would learn from.
Skipped and xfailed tests neither earn nor fail when the reference solution's run skips or
xfails them too; otherwise a skip or xfail counts as not passed. An xpass counts as a pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

MESSAGE_CHARS = 500
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
PASSING = ("passed", "xpassed")
# gates whose test passed on the untouched starter: a failure of one is a regression, where
# another gate's failure is a test the fix must make pass still failing (rules.RULES' names)
REGRESSION_RULES = ("starter-passes",)


def _names(names: list[str] | tuple[str, ...], at_most: int) -> str:
    more = " ..." if len(names) > at_most else ""
    return ", ".join(names[:at_most]) + more


@dataclass(frozen=True)
class TestOutcome:
    """One hidden test: `outcome` is one of OUTCOMES.

    `earns` is True for a test that counts toward the score (else it is a gate, or neutral
    when `neutral`); `canary` is the outcome of its canary twin ("" when it has none); `rule`
    names the scoring rule that decided (`opd_gym.grading.rules`; "" where none was applied).
    """

    __test__ = False  # not a pytest test class

    name: str
    outcome: str
    message: str = ""
    earns: bool = True
    canary: str = ""
    neutral: bool = False
    rule: str = ""


@dataclass(frozen=True)
class GradeReport:
    """The verdict on one submission; `score` is the fraction of earning tests that passed.

    `reason` is empty when the tests ran normally, else why the run counts as a failure (then
    the score is 0). `infra_error` marks failures of our machinery rather than of the code.
    `forgery` names the tests passed together with their canary (a forgery: the score is 0).
    `earning` and `earned` count the earning tests and those passed; `gates_failed` names
    failing gates; `canaried` counts the tests with a valid canary; `calibrated` says the
    canaries were validated with the reference solution and the gates taken from the starter's
    run. `unverifiable`: the task has no earning test, so no grade of it says anything about
    the code (an infra error too: masked in rows, summaries and exports). `reward`: a Harbor
    task's verifier reward (read from its reward file), which is then the score.
    """

    task_id: str
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    xfailed: int = 0
    xpassed: int = 0
    tests: tuple[TestOutcome, ...] = ()
    timed_out: bool = False
    duration: float = 0.0
    exit_code: int = -1
    output: str = ""
    reason: str = ""
    infra_error: bool = False
    dropped: tuple[str, ...] = field(default_factory=tuple)
    forgery: tuple[str, ...] = ()
    gates_failed: tuple[str, ...] = ()
    earning: int = 0
    earned: int = 0
    canaried: int = 0
    calibrated: bool = False
    unverifiable: bool = False
    reward: float | None = None  # a Harbor task's verifier reward (its reward file), the score

    @property
    def total(self) -> int:
        return (self.passed + self.failed + self.errors + self.skipped + self.xfailed
                + self.xpassed)

    @property
    def score(self) -> float:
        if self.reward is not None and not self.reason:
            return self.reward
        if self.reason or self.forgery or self.gates_failed or not self.earning:
            return 0.0
        return self.earned / self.earning

    @property
    def all_passed(self) -> bool:
        """Fully solved: every earning test and every gate passed, no forgery, no failure."""
        return self.score == 1.0 and self.earned == self.earning > 0

    def summary(self) -> str:
        """One line for the agent and logs, e.g. `Hidden tests: 4 of 5 passed.`: what did not
        pass, failing gates told apart (a regression of a test that passed before the change,
        or a test the fix must make pass that earns nothing itself), neutral tests named as
        such."""
        if self.reason:
            return f"Hidden tests: grading failed ({self.reason})."
        if self.reward is not None:
            return f"Hidden tests: the verifier (tests/test.sh) gave reward {self.reward:g}."
        failing = [t.name for t in self.tests if t.outcome not in PASSING and not t.neutral]
        text = f"Hidden tests: {self.passed + self.xpassed} of {self.total} passed."
        if failing:
            text += f" Not passed: {_names(failing, 5)}."
        rules = {t.name: t.rule for t in self.tests}
        regressions = [n for n in self.gates_failed if rules.get(n, "") in REGRESSION_RULES]
        required = [n for n in self.gates_failed if n not in regressions]
        if regressions:
            text += (f" A test that passed before the change and must keep passing failed "
                     f"({_names(regressions, 3)}): score 0.")
        if required:
            text += (f" A test the fix must make pass still fails ({_names(required, 3)}; it "
                     f"earns nothing itself but gates the grade): score 0.")
        neutral = [t.name for t in self.tests if t.neutral and t.outcome not in PASSING]
        if neutral:
            text += (f" Neutral, not counted (the reference solution does not pass them "
                     f"either): {_names(neutral, 3)}.")
        return text

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GradeReport:
        """Inverse of `to_dict` (its derived `score`/`total` and unknown keys ignored), for
        grades read back from a stored run or trajectory."""
        names = {f.name for f in fields(cls)}
        tests = tuple(TestOutcome(**{k: v for k, v in dict(t).items()
                                     if k in {f.name for f in fields(TestOutcome)}})
                      for t in data.get("tests") or ())
        values = {k: v for k, v in data.items() if k in names and k != "tests"}
        for key in ("dropped", "forgery", "gates_failed"):
            if key in values:
                values[key] = tuple(values[key] or ())
        return cls(**values, tests=tests)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-able dict (tests as a list of dicts, tuples as lists) plus `score`/`total`."""
        data = asdict(self)
        data["tests"] = [asdict(t) for t in self.tests]
        for key in ("dropped", "forgery", "gates_failed"):
            data[key] = list(getattr(self, key))
        data["total"] = self.total
        data["score"] = self.score
        return data
