"""Why a hidden test earns, gates or is neutral: the scoring rule as one ordered table.

Calibration (grader.py) learns a handful of facts about each test: whether the reference
passes it, whether the untouched starter or an empty solution does, whether its canary failed
on the reference, whether an expectation of it is held on the host. `decide` reads them
against `RULES`, in order, and the first row that applies is the test's verdict: its role
(earns, gate or neutral), its name (what the grade report and `check-suite` print) and a
sentence saying why. A new reason is one row here, with a test of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

EARNS, GATE, NEUTRAL = "earns", "gate", "neutral"


@dataclass(frozen=True)
class Facts:
    """What calibration showed about one test (`Calibration.facts`).

    Per test: `neutral` (the reference does not pass it: skipped, xfailed or failing),
    `starter_passed`, `null_passed` (the untouched starter / an empty solution pass it),
    `canary` (it has a canary), `canary_earns` (every expectation of it is one a canary can
    change: `Canary.earns`), `canary_why` (else why not), `canary_invalid` (its canary did not
    fail on the reference: passed, errored or skipped), `computed` (the host holds a value it
    computes), `held` (an expectation of it is held on the host), `boundary` (its task is
    graded across the process boundary: the tests and the solution run in separate processes
    and only plain data crosses, grader.boundary_modules). Per task: `held_only` (only
    held tests earn), `too_few_unheld` (the tests that would earn on canaries alone are too
    few to pay nothing to a coin-flipping forgery).
    """

    neutral: bool = False
    starter_passed: bool = False
    null_passed: bool = False
    canary: bool = False
    canary_earns: bool = False
    canary_why: str = ""
    canary_invalid: bool = False
    computed: bool = False
    held: bool = False
    boundary: bool = False
    held_only: bool = False
    too_few_unheld: bool = False


@dataclass(frozen=True)
class Rule:
    """One row of the table: `name`, the `role` it gives, whether it is decided by the test's
    own facts (`own`: task-level rows read the whole calibration), when it `applies`, and
    `says`, the sentence a report shows."""

    name: str
    role: str
    own: bool
    applies: Callable[[Facts], bool]
    says: str

    def explain(self, facts: Facts) -> str:
        """The rule's sentence, with the canary's own reason where it has one."""
        if self.name == "reads-answer" and facts.canary_why:
            return f"{self.says} ({facts.canary_why})"
        return self.says


RULES: tuple[Rule, ...] = (
    Rule("neutral", NEUTRAL, True, lambda f: f.neutral,
         "the reference solution does not pass it (skipped, xfailed or failing): it neither "
         "earns nor gates"),
    Rule("starter-passes", GATE, True, lambda f: f.starter_passed,
         "the untouched starter passes it, so passing it shows no work: it must keep passing"),
    Rule("empty-passes", GATE, True, lambda f: f.null_passed,
         "an empty solution passes it, so passing it shows no work: it must keep passing"),
    Rule("boundary", EARNS, True, lambda f: f.boundary,
         "it runs in a process of its own and reaches the solution only through calls whose "
         "arguments and results cross as plain data, so no solution can touch the test, and "
         "passing it takes the answer"),
    Rule("canary-not-failed", GATE, True, lambda f: f.canary_invalid,
         "its canary (the test with one expectation changed) did not fail on the reference "
         "solution (it passed, errored or was skipped), so it cannot tell a forgery"),
    Rule("no-expectation", GATE, True, lambda f: not f.canary and not f.computed,
         "it has no expectation a canary can change and none the host holds"),
    Rule("reads-answer", GATE, True, lambda f: not f.canary_earns and not f.computed,
         "it compares the solution with a value the solution could read from the test"),
    Rule("too-few-unheld", GATE, False, lambda f: f.too_few_unheld,
         "only canaries guard the task's earning tests and they are too few: a forgery "
         "passing each failing test on a coin would be paid"),
    Rule("not-held", GATE, False, lambda f: f.held_only and not f.held,
         "other tests of the task hold their expectation on the host and this one holds "
         "none, so a forged pass of it needs no guess"),
    Rule("held", EARNS, False, lambda f: f.held_only and f.held,
         "an expectation of it is held on the host: the solution's value is compared there"),
    Rule("computed", EARNS, False, lambda f: f.computed,
         "the host holds the value it computes: the answer is nowhere in the sandbox"),
    Rule("canary", EARNS, False, lambda f: True,
         "it has a valid canary: the reference passes it and fails its canary, the starter "
         "and an empty solution fail it"),
)
BY_NAME = {rule.name: rule for rule in RULES}


CANARY_FAILURES = ("failed", "xfailed")  # a canary's outcomes that show its change failing


def canary_failed(outcome: str) -> bool:
    """A canary's outcome on the reference shows its changed expectation failing (an
    assertion failed, or an xfail test failed as marked). A canary that passed, errored (its
    setup or teardown broke: the run says nothing of the change) or was skipped is never
    used: its test gates."""
    return outcome in CANARY_FAILURES


def decide(facts: Facts) -> Rule:
    """The first rule of `RULES` that applies to `facts` (the last one always does)."""
    return next(rule for rule in RULES if rule.applies(facts))


def earns_on_its_own(facts: Facts) -> bool:
    """The first row decided by the test's own facts that applies, if any, makes it earn (the
    task-level rows count such tests): none applies, or it is "boundary"."""
    rule = next((rule for rule in RULES if rule.own and rule.applies(facts)), None)
    return rule is None or rule.role == EARNS


__all__ = ["BY_NAME", "CANARY_FAILURES", "EARNS", "GATE", "NEUTRAL", "RULES", "Facts", "Rule",
           "canary_failed", "decide", "earns_on_its_own"]
