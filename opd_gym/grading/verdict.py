"""The harness's verdict, checked, and merged from its two variants into one GradeReport.

The verdict is validated field by field and capped. Each variant must report exactly the
hidden tests (a missing or an extra test fails the grade with a reason). The real outcome of
a test is read from the variant that held the real test, its canary's from the other; which
is which never left the host (see canary.py).
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from opd_gym.errors import GradingError
from opd_gym.grading.canary import MIN_UNHELD_EARNING, CanarySet, Variants
from opd_gym.grading.computed import Recorded
from opd_gym.grading.expected import base_id, display_name
from opd_gym.grading.held import MAX_HELD, HeldRuns, unmet
from opd_gym.grading.report import MESSAGE_CHARS, OUTCOMES, PASSING, GradeReport, TestOutcome
from opd_gym.grading.rules import EARNS, NEUTRAL, Facts, Rule, decide, earns_on_its_own
from opd_gym.grading.sentinel import Placed, Sentinel, SentinelSite

VERSION = 2
MAX_TESTS = 100_000
CASE_CHARS = 200  # the longest parametrize case an entry names (the harness's CASE_CHARS)
HELD_FAILED = "a held expectation was not met (the value the host holds for an assertion)"


class VerdictError(GradingError, ValueError):
    """The harness's output is not a verdict of the expected shape."""


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise VerdictError(f"{what} is not a string")
    return value


def _check_variant(data: Any) -> None:
    if not isinstance(data, dict):
        raise VerdictError("a verdict variant is not an object")
    tests = data.get("tests")
    if not isinstance(tests, list) or len(tests) > MAX_TESTS:
        raise VerdictError("the verdict's test list is missing or too long")
    for entry in tests:
        if not isinstance(entry, dict) or entry.get("outcome") not in OUTCOMES:
            raise VerdictError("a verdict entry has an unknown shape or outcome")
        _str(entry.get("id"), "a test id")
        _str(entry.get("message", ""), "a test message")
        held = entry.get("held", [])
        if not isinstance(held, list) or len(held) > MAX_HELD or not all(
                isinstance(h, list) and len(h) == 3 and type(h[0]) is int
                and isinstance(h[1], str) and type(h[2]) is bool for h in held):
            raise VerdictError("a verdict entry's held values have an unknown shape")
        delta = entry.get("delta", "")
        if not isinstance(delta, str) or len(delta) > 64:
            raise VerdictError("a verdict entry's state digest has an unknown shape")
        case = entry.get("case", "")
        if not isinstance(case, str) or len(case) > CASE_CHARS:
            raise VerdictError("a verdict entry's parametrize case has an unknown shape")
    if not isinstance(data.get("collect_errors", []), list):
        raise VerdictError("the verdict's collect_errors is not a list")
    running = data.get("running", [])
    if not isinstance(running, list) or not all(isinstance(i, str) for i in running):
        raise VerdictError("the verdict's running list is not a list of test ids")


def parse_verdict(raw: bytes, variants: int = 2) -> dict[str, Any]:
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
    runs = data.get("variants")
    if not isinstance(runs, list) or len(runs) != variants:
        raise VerdictError(f"the verdict does not hold {variants} variant runs")
    for run in runs:
        _check_variant(run)
    return data


@dataclass
class Merged:
    """Both variants of one run, merged: real outcome per node id, canary outcome per id."""

    real: dict[str, tuple[str, str]] = field(default_factory=dict)
    canary: dict[str, str] = field(default_factory=dict)
    collect_errors: list[tuple[str, str]] = field(default_factory=list)
    reason: str = ""
    timed_out: bool = False
    exit_code: int = -1
    output: str = ""
    hung_canaries: frozenset[str] = frozenset()  # node ids whose canary ran when time ran out
    # per sentinel clone item: (its Sentinel, the original's id, original outcome, clone
    # outcome), the two from the same run
    sentinel_pairs: list[tuple[Sentinel, str, str, str]] = field(default_factory=list)
    hung_sentinels: frozenset[SentinelSite] = frozenset()  # clones running at a timeout
    missing_sentinels: frozenset[SentinelSite] = frozenset()  # test ran, its clone did not
    # node id -> the held values (site, canonical value, plain) the run holding the real test
    # emitted (calibration's probes)
    probes: dict[str, list[tuple[int, str, bool]]] = field(default_factory=dict)
    # ... and those the other run emitted (the canary's or a second copy's: another uid, tree
    # and process computing the same expected sides, computed.py)
    other_probes: dict[str, list[tuple[int, str, bool]]] = field(default_factory=dict)
    # per variant, in the order it reported them: (node id, "real", "canary" or "sentinel"
    # (a clone item), outcome); and the site of each sentinel clone item
    order: tuple[tuple[tuple[str, str, str], ...], ...] = ()
    clone_sites: dict[str, SentinelSite] = field(default_factory=dict)
    clone_originals: dict[str, str] = field(default_factory=dict)  # clone item -> its test
    # per variant: node id -> digest of the module-level state the item left changed (a run
    # probing state)
    deltas: tuple[dict[str, str], ...] = ()

    @property
    def sentinel_forgery(self) -> list[str]:
        """Node ids of tests that passed together with their sentinel in one run."""
        return sorted({orig for _, orig, a, b in self.sentinel_pairs
                       if a in PASSING and b in PASSING})


def _outcome(entry: Mapping[str, Any], expect: Mapping[str, Mapping[int, Any]] | None
             ) -> tuple[str, str]:
    """A test's outcome, a pass turned into a failure where a held expectation of it was not
    met (an xpass into an xfail: the assertion failed, as the test expects)."""
    outcome, message = entry["outcome"], entry.get("message", "")[:MESSAGE_CHARS]
    expect = expect or {}  # a case held per parametrize argument has its own entry
    sites = expect.get(entry["id"], expect.get(base_id(entry["id"])))
    if sites and outcome in PASSING:
        why = unmet([(h[0], h[1], h[2]) for h in entry.get("held", [])], sites)
        if why is not None:
            return ("failed" if outcome == "passed" else "xfailed"), \
                f"{HELD_FAILED}: {why}"[:MESSAGE_CHARS]
    return outcome, message


def merge(data: Mapping[str, Any], expected: Collection[str], exact: bool, canaries: CanarySet,
          variants: Variants, sentinels: Placed = ((), ()), held: HeldRuns | None = None
          ) -> Merged:
    """Real and canary outcomes from a parsed verdict; `reason` set unless both runs are whole.

    `expected` holds base ids (static reading) or, with `exact`, the full node ids a run must
    report (a task's `test_ids`). `held`: the expectations the host holds per run (a pass
    that does not meet them is a failure).
    """
    runs = paired_cases(data["variants"], canaries, variants)
    merged = Merged()
    merged.timed_out = any(bool(r.get("timed_out")) for r in runs)
    exits = [r.get("exit") for r in runs]
    merged.exit_code = max((e for e in exits if isinstance(e, int)), default=-1)
    merged.output = "\n".join(str(r.get("output", ""))[-1000:] for r in runs)[-2000:]
    seen: set[tuple[str, str]] = set()
    for run in runs:
        for error in run.get("collect_errors", [])[:100]:
            if isinstance(error, list) and len(error) == 2 and all(
                isinstance(x, str) for x in error
            ) and (error[0], error[1]) not in seen:
                seen.add((error[0], error[1]))
                merged.collect_errors.append((error[0], error[1]))
    by_variant: list[dict[str, tuple[str, str]]] = []
    for index, run in enumerate(runs):
        entries: dict[str, tuple[str, str]] = {}
        expect = held.expect[index] if held is not None and index < 2 else None
        for entry in run["tests"]:
            entries.setdefault(entry["id"], _outcome(entry, expect))
            if entry.get("held"):
                real = variants.real_in.get(base_id(entry["id"]), 0) == index
                (merged.probes if real else merged.other_probes).setdefault(
                    entry["id"], [(h[0], h[1], h[2]) for h in entry["held"]])
        clones = {nodeid: sentinel for sentinel in (sentinels[index] if index < 2 else ())
                  for nodeid in entries if sentinel.is_clone(nodeid)}
        for nodeid, sentinel in clones.items():
            merged.clone_sites[nodeid] = sentinel.site
            merged.clone_originals[nodeid] = sentinel.original(nodeid)
        merged.deltas += ({entry["id"]: entry["delta"] for entry in run["tests"]
                           if entry.get("delta")},)
        merged.order += (tuple(
            (nodeid, "sentinel" if nodeid in clones else "canary"
             if base_id(nodeid) in canaries.canaries
             and variants.real_in.get(base_id(nodeid), 0) != index else "real", outcome)
            for nodeid, (outcome, _) in entries.items()),)
        _sentinels(merged, entries, sentinels[index] if index < 2 else (), run)
        by_variant.append(entries)
    # every id either run reported: a test missing from one variant (it hung there) still has
    # its outcome in the other
    for nodeid in _in_order(by_variant):
        base = base_id(nodeid)
        real = variants.real_in.get(base, 0)
        if nodeid in by_variant[real]:
            merged.real[nodeid] = by_variant[real][nodeid]
        if base in canaries.canaries and nodeid in by_variant[1 - real]:
            merged.canary[nodeid] = by_variant[1 - real][nodeid][0]
    hung: set[str] = set()
    for index, run in enumerate(runs):
        if not run.get("timed_out"):
            continue
        for nodeid in run.get("running", [])[:100]:
            base = base_id(nodeid)
            if base in canaries.canaries and variants.real_in.get(base, 0) != index:
                hung.add(nodeid)
    merged.hung_canaries = frozenset(hung)
    if merged.timed_out:
        running = sorted({i for r in runs if r.get("timed_out") for i in r.get("running", [])})
        merged.reason = "the test run timed out (the solution used up the time budget)" + (
            f" while running {_few(running)}" if running else "")
        return merged
    if not expected:
        merged.reason = "the task defines no hidden tests"
        return merged
    problems = []
    skip = variants.skip
    for index, entries in enumerate(by_variant):
        # a test that runs once (variants.skip) is expected in its one variant only
        wanted = {i for i in expected if index > 1 or base_id(i) not in skip[index]}
        ran = set(entries) if exact else {base_id(i) for i in entries}
        missing, extra = sorted(wanted - ran), sorted(ran - wanted)
        if not ran and wanted:  # a variant may run nothing: every test once, elsewhere
            problems.append("no tests ran")
        elif missing or extra:
            if missing:
                problems.append(f"{len(missing)} hidden test(s) did not run ({_few(missing)})")
            if extra:
                problems.append(
                    f"{len(extra)} test(s) ran that are not hidden tests ({_few(extra)})")
        if problems:
            break
        if index == 1:
            once = skip[0] | skip[1]
            if {i for i in entries if base_id(i) not in once} != {
                    i for i in by_variant[0] if base_id(i) not in once}:
                problems.append("the two runs of the hidden tests collected different test ids")
    merged.reason = "; ".join(problems)
    return merged


def paired_cases(runs: list[dict[str, Any]], canaries: CanarySet, variants: Variants
                 ) -> list[dict[str, Any]]:
    """`runs` with each canary item named as its real test's item of the same parametrize
    case (the row of each parametrize call, which the harness reports): where a test's ids
    follow its values (`ids=` a function, or computed from the table), the canary's changed
    rows give its items other ids than the real run's. An item paired with none keeps its
    id, and the two runs then collect different ids: the grade fails, it is never paid."""
    if len(runs) < 2:
        return runs
    cases = [{(base_id(e["id"]), e["case"]): e["id"] for e in run["tests"] if e.get("case")}
             for run in runs]
    out = []
    for index, run in enumerate(runs):
        renamed: dict[str, str] = {}
        for entry in run["tests"]:
            base = base_id(entry["id"])
            real = variants.real_in.get(base, 0)
            if not entry.get("case") or base not in canaries.canaries or real == index \
                    or real >= len(cases):
                continue
            twin = cases[real].get((base, entry["case"]))
            if twin is not None and twin != entry["id"]:
                renamed[entry["id"]] = twin
        if renamed:
            run = {**run, "tests": [{**e, "id": renamed.get(e["id"], e["id"])}
                                    for e in run["tests"]]}
            if isinstance(run.get("running"), list):
                run["running"] = [renamed.get(i, i) for i in run["running"]]
        out.append(run)
    return out


def leak_culprits(run: Merged, alone: Merged
                  ) -> tuple[frozenset[str], frozenset[SentinelSite]]:
    """The canaries (base ids) and sentinel sites that most likely left state behind in `run`.

    A failing assertion skips the rest of its test, and with it any cleanup the test does
    after it (freezegun's `stop()` after a frozen-clock assertion): later tests would fail
    where plain pytest passes them. In each variant, the first real test that fails there
    although the same solution passes it `alone` (a run with neither), or the point where the
    variant stopped short of the tests that run reported (pytest itself broke), is blamed on
    the canaries and clones that failed since the last real test that passed there (or, with
    none, on the last one that failed before it).
    """
    passed = {i for i, (o, _) in alone.real.items() if o in PASSING}
    canaries, sites = set(), set()
    for ran in run.order:
        window: list[tuple[str, str]] = []
        last = None
        victim = False
        for nodeid, role, outcome in ran:
            if role != "real":
                if outcome not in PASSING:
                    last = (nodeid, role)
                    window.append(last)
            elif outcome in PASSING:
                window = []
            elif nodeid in passed:
                victim = True
                break
        if not victim and not set(alone.real) <= {nodeid for nodeid, _, _ in ran}:
            victim = True  # it stopped after them
        if not victim:
            continue
        for nodeid, role in window or ([last] if last else []):
            if role == "canary":
                canaries.add(base_id(nodeid))
            else:
                sites.add(run.clone_sites[nodeid])
    return frozenset(canaries), frozenset(sites)


def state_culprits(run: Merged) -> tuple[frozenset[str], frozenset[SentinelSite]]:
    """The canaries (base ids) and sentinel sites that failed and left the module-level state
    other than their test did when it passed, in a run probing state: a canary's digest
    against its real test's in the other variant, a clone's against its test's in the same
    run. What a test changes and keeps when it passes (a cache it fills, a class attribute)
    is alike in both; what differs, a failure skipped."""
    canaries, sites = set(), set()
    for index, ran in enumerate(run.order):
        if index >= len(run.deltas):
            break
        outcomes = {nodeid: outcome for nodeid, _, outcome in ran}
        for nodeid, role, outcome in ran:
            if role == "real" or outcome in PASSING or nodeid not in run.deltas[index]:
                continue
            if role == "canary":  # against its real test, whatever that one's outcome
                other = run.deltas[1 - index] if len(run.deltas) > 1 else {}
                if nodeid in other and other[nodeid] != run.deltas[index][nodeid]:
                    canaries.add(base_id(nodeid))
            else:
                original = run.clone_originals.get(nodeid, "")
                if outcomes.get(original) in PASSING and original in run.deltas[index] \
                        and run.deltas[index][original] != run.deltas[index][nodeid]:
                    sites.add(run.clone_sites[nodeid])
    return frozenset(canaries), frozenset(sites)


def _in_order(runs: list[dict[str, tuple[str, str]]]) -> list[str]:
    """Every id the runs reported, in an order that does not depend on which run a test that
    runs once was drawn into (a report is the same every grade): the tests every run
    reported, in the first run's order, each followed by the ids only one run reported after
    it (before the next such test), sorted."""
    both = set(runs[0]).intersection(*runs[1:]) if runs else set()
    after: dict[str | None, list[str]] = {}
    for run in runs:
        last = None
        for nodeid in run:
            if nodeid in both:
                last = nodeid
            else:
                after.setdefault(last, []).append(nodeid)
    order = sorted(after.get(None, []))
    for nodeid in (i for i in runs[0] if i in both) if runs else ():
        order += [nodeid, *sorted(after.get(nodeid, []))]
    return list(dict.fromkeys(order))


def _sentinels(merged: Merged, entries: dict[str, tuple[str, str]],
               placed: Collection[Sentinel], run: Mapping[str, Any]) -> None:
    """Take one run's sentinel clone items out of `entries` into `merged`: their outcomes
    paired with their tests', clones that hung or did not run."""
    for sentinel in placed:
        clones = [i for i in entries if sentinel.is_clone(i)]
        for nodeid in clones:
            outcome = entries.pop(nodeid)[0]
            original = sentinel.original(nodeid)
            if original in entries:
                merged.sentinel_pairs.append(
                    (sentinel, original, entries[original][0], outcome))
        if run.get("timed_out"):
            if any(sentinel.is_clone(str(i)) for i in run.get("running", [])[:100]):
                merged.hung_sentinels = merged.hung_sentinels | {sentinel.site}
        elif not clones and any(sentinel.is_original(i) for i in entries):
            merged.missing_sentinels = merged.missing_sentinels | {sentinel.site}


@dataclass(frozen=True)
class Calibration:
    """What the reference solution, the untouched starter and the null submission showed
    about a task's tests.

    `invalid`: node ids whose canary the reference passes (a useless canary: the test becomes
    a gate); `starter_passed`: node ids the starter passes (gates); `null_passed`: node ids
    the null submission passes (the starter with every file the reference changes or adds
    emptied: a program that does nothing; gates too); `neutral`: node ids the reference does
    not pass (skipped, xfailed or failing: they neither earn nor fail); `calibrated`: a
    reference solution was run; `reference_ids`: the node ids its run reported;
    `sentinels`: the sentinel sites grades draw from (sentinel.py); `held`: the sites whose
    expected value the host holds (held.py; the Grader holds them unless `hold=False`);
    `in_process`: the solution runs in pytest's process (`in_process.imports_any`) and the
    Grader holds expectations, so a task that holds none of its earning tests needs at least
    MIN_UNHELD_EARNING of them (`too_few_unheld`); `second`: the base ids a grade's second run
    holds (those whose second run is judged, sentinels' tests among them: grader.py's partial
    second run), validated with the reference in that layout; None: every test runs twice.
    """

    canaries: CanarySet
    invalid: frozenset[str] = frozenset()
    starter_passed: frozenset[str] = frozenset()
    neutral: frozenset[str] = frozenset()
    calibrated: bool = False
    null_passed: frozenset[str] = frozenset()
    reference_ids: frozenset[str] = frozenset()
    sentinels: tuple[SentinelSite, ...] = ()  # sites no calibration run passed with its test
    # host-held expectations (held.py): {test base id: held statement numbers}; where any
    # test is held, only held tests earn (the others gate); None or empty (the Grader holds
    # none, or the task has no holdable site, e.g. stdin/stdout cases): every test with a
    # valid canary may earn, as without held expectations
    held: Mapping[str, tuple[int, ...]] | None = None
    # held sites whose expectation the test computes (computed.py): the values the reference
    # computed there, per test and site
    computed: Mapping[str, Mapping[int, Recorded]] | None = None
    in_process: bool = False
    second: frozenset[str] | None = None
    # the task is graded across the process boundary (grader.boundary_modules): no canary,
    # nothing held; every test the reference passes and the starter and null submission fail
    # earns (rules: "boundary")
    boundary: bool = False

    @property
    def earning(self) -> frozenset[str]:
        """The node ids that earn (empty: the task cannot be verified)."""
        return frozenset(i for i in self.reference_ids if self.earns(i))

    def earns(self, nodeid: str) -> bool:
        """The test earns (`rules.decide`: the first row of the scoring table that applies to
        what calibration showed of it)."""
        return self.rule(nodeid).role == EARNS

    def rule(self, nodeid: str) -> Rule:
        """The row of `rules.RULES` that decides whether `nodeid` earns, gates or is neutral."""
        return decide(self.facts(nodeid))

    def facts(self, nodeid: str) -> Facts:
        """What this calibration showed about `nodeid`, task-level facts included."""
        return dataclasses.replace(self._own_facts(nodeid), held_only=self.held_only,
                                   too_few_unheld=bool(self.too_few_unheld))

    def _own_facts(self, nodeid: str) -> Facts:
        base = base_id(nodeid)
        canary = self.canaries.canaries.get(base)
        return Facts(
            neutral=nodeid in self.neutral, starter_passed=nodeid in self.starter_passed,
            null_passed=nodeid in self.null_passed, canary=canary is not None,
            canary_earns=canary is not None and canary.earns,
            canary_why=canary.why if canary is not None else "",
            canary_invalid=nodeid in self.invalid,
            # a test comparing with what it computes earns where the host holds that value:
            # the answer is nowhere in the sandbox (computed.py), with or without a canary
            computed=base in (self.computed or {}), held=base in (self.held or {}),
            boundary=self.boundary)

    @cached_property
    def held_only(self) -> bool:
        """Only held tests earn: some held test would earn (else the task keeps the canary
        scheme for all its tests, e.g. stdin/stdout cases, which hold no site)."""
        return bool(self.held) and any(
            base_id(i) in (self.held or {}) and self._earns_unheld(i) for i in self.reference_ids)

    @cached_property
    def too_few_unheld(self) -> int:
        """How many tests would earn where the task is refused because only canaries guard
        them and they are too few (0: not refused). A forgery in pytest's process passing each
        failing test on a coin of its own would be paid more than 0.01 in expectation
        (`canary.MIN_UNHELD_EARNING`)."""
        if not self.in_process or self.held_only:
            return 0
        count = sum(self._earns_unheld(i) for i in self.reference_ids)
        return count if 0 < count < MIN_UNHELD_EARNING else 0

    def unverifiable(self) -> str:
        """Why no test earns (the report's reason)."""
        if self.too_few_unheld:
            return (f"the task cannot be verified: none of its {self.too_few_unheld} earning "
                    "test(s) holds an expectation on the host (each compares with a value the "
                    "solution could reach, or none the host could record), and fewer than "
                    f"{MIN_UNHELD_EARNING} earn on canaries alone, so a forgery passing each "
                    "failing test on a coin would be paid; add a test comparing the "
                    "solution's result with a literal, or more tests")
        counts = Counter(self.rule(i).name for i in self.reference_ids)
        seen = ", ".join(f"{name} {n}" for name, n in counts.most_common()) or "no test ran"
        if self.boundary:
            return ("the task cannot be verified: no hidden test passes on the reference "
                    "solution and fails on the untouched starter and on an empty solution "
                    f"(tests per rule: {seen})")
        return ("the task cannot be verified: no hidden test both has a valid canary and "
                f"fails on the untouched starter and on an empty solution (tests per rule: "
                f"{seen})")

    def _earns_unheld(self, nodeid: str) -> bool:
        return earns_on_its_own(self._own_facts(nodeid))


def build_report(merged: Merged, calibration: Calibration, base: Mapping[str, Any],
                 duration: float) -> GradeReport:
    """A GradeReport from merged outcomes under the scoring rules of report.py."""
    canaries = calibration.canaries.canaries
    outcomes: list[TestOutcome] = []
    forgery: list[str] = []
    gates_failed: list[str] = []
    earning = earned = canaried = 0
    for nodeid, (outcome, message) in merged.real.items():
        name = display_name(nodeid)
        valid = base_id(nodeid) in canaries and nodeid not in calibration.invalid
        canary = merged.canary.get(nodeid, "")
        rule = calibration.rule(nodeid)
        neutral = rule.role == NEUTRAL
        earns = rule.role == EARNS
        canaried += valid
        if valid and canary in PASSING and outcome in PASSING:
            # A contradiction: no code passes `x == E` and `x == E'` honestly. A canary passed
            # alone is a wrong answer that happens to equal the changed value: no forgery.
            forgery.append(name)
        if earns:
            earning += 1
            earned += outcome in PASSING
        elif not neutral and outcome not in PASSING:
            gates_failed.append(name)
        outcomes.append(TestOutcome(name, outcome, message, earns=earns, canary=canary,
                                    neutral=neutral, rule=rule.name))
    forgery.extend(display_name(i) for i in merged.sentinel_forgery
                   if display_name(i) not in forgery)
    for path, message in merged.collect_errors:
        outcomes.append(TestOutcome(display_name(path or "<collection>"), "error",
                                    message[:MESSAGE_CHARS], earns=False))
    counts = {o: sum(t.outcome == o for t in outcomes) for o in OUTCOMES}
    reason = merged.reason
    if not reason and merged.missing_sentinels:  # a run left out a test it was given
        missing = sorted(s.test_id for s in merged.missing_sentinels)
        reason = (f"{len(missing)} hidden test(s) were not run in full: a twin of "
                  f"{_few(missing)} that ran in the same grading run did not")
    if not reason and forgery:
        reason = (f"a canary passed with its test ({_few_names(forgery)}): a hidden test and "
                  "a twin of it with one expected value changed both passed (its canary in "
                  "the other grading run or its sentinel in the same one), which no code does "
                  "honestly (forged result)")
    # no test could earn: no grade of this task says anything about the code, so it is not a
    # 0 but an infra error (masked in rows, summaries and exports), whatever the run did; a
    # task without a reference (not calibrated) shows it in this run's ids
    unverifiable = not calibration.earning if calibration.calibrated else (
        not earning and not merged.reason)
    if unverifiable:
        reason = calibration.unverifiable()
    failed_run = bool(merged.reason) or bool(merged.missing_sentinels)
    return GradeReport(
        **base, passed=0 if failed_run else counts["passed"], failed=counts["failed"],
        errors=counts["error"], skipped=counts["skipped"], xfailed=counts["xfailed"],
        xpassed=0 if failed_run else counts["xpassed"], tests=tuple(outcomes),
        duration=duration, exit_code=merged.exit_code, output=merged.output,
        timed_out=merged.timed_out, reason=reason, forgery=tuple(forgery),
        gates_failed=tuple(gates_failed), earning=earning, earned=0 if failed_run else earned,
        canaried=canaried, calibrated=calibration.calibrated,
        unverifiable=unverifiable, infra_error=unverifiable,
    )


def _few(ids: list[str]) -> str:
    return _few_names([display_name(i) for i in ids])


def _few_names(names: list[str]) -> str:
    shown = ", ".join(names[:3])
    return shown + (", ..." if len(names) > 3 else "")
