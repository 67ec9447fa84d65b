"""Grade an agent's work: its files in a fresh sandbox, the hidden tests run twice with canaries.

The snapshot of the agent's workspace is written into a new sandbox from the pool; the harness
(`sandbox/grade_harness.py`) then runs two variants of the hidden tests there, one after the
other, each a plain pytest process with the agent's code in it under a uid of its own. For
each test one variant holds the real test and the other its canary (the same test with one
expectation perturbed, see canary.py); the host alone knows which. An honest solution passes
the real test and fails the canary; a test that passes together with its valid canary exposes
a forgery and zeroes the score.

Per task (content hash) and Grader, a calibration runs once: the reference solution with the
same canaries (canaries it passes are invalid, their tests become gates), the untouched
starter and the null submission (the starter with the files the reference writes emptied):
tests either passes become gates. A test that would earn but whose canary the reference passed
gets a canary redrawn from its other candidates (at most CANARY_REDRAWS rounds, one reference
run each), so whether it earns never hangs on the secret. A canary that hangs the reference's
run (it fails before the test releases a lock) while the reference passes the real test is
dropped and the calibration runs again (at most HUNG_CANARY_RETRIES times): that test becomes
a gate. So is a canary (or a sentinel site) whose failure skipped its test's cleanup, failing
later tests the reference passes in a run without canaries (LEAK_ROUNDS at most). No test
run, a timeout, an incomplete verdict, or a failed calibration all count as failure; the
machinery's own failures are flagged infra errors.

By default (`hold=True`; `hold=False` opts out) the literal of each calibrated equality site
stays on the host (held.py): the run emits the solution's value there and the host compares;
where a task holds a test that earns, only held tests earn. A grade whose second run would
judge nothing, every test's canary being held (the host comparing the same emitted value with
another literal), invalid or absent, is ONE run (plain pytest's cost), all tests real; so are
the starter's and the null submission's calibration runs, which have no canaries. A test with
a valid canary that is not held keeps the two variants: a gate among them is what catches a
regression whose failure a submission forges into a pass. The second run then holds only such
tests and those sentinels are cloned from (`Calibration.second`, vouched for by two reference
runs in that layout); the rest run once, real, in the first run, which holds the whole suite.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import pickle
import random
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from opd_gym.errors import CalibrationError, GradingError
from opd_gym.grading import held as held_sites
from opd_gym.grading import launch
from opd_gym.grading.canary import (
    CanarySet,
    Variants,
    make_canaries,
    module_names,
    seed_for,
)
from opd_gym.grading.expected import (
    base_id,
    doctest_sources,
    expected_tests,
    in_pytest_order,
    test_paths,
)
from opd_gym.grading.in_process import imports_any
from opd_gym.grading.inherited import materialize
from opd_gym.grading.once import run_once
from opd_gym.grading.report import PASSING, GradeReport
from opd_gym.grading.rules import canary_failed
from opd_gym.grading.sentinel import (
    Placed,
    SentinelSite,
    build_runs,
    choose,
    compatible,
    sentinel_sites,
)
from opd_gym.grading.verdict import (
    Calibration,
    Merged,
    VerdictError,
    build_report,
    leak_culprits,
    merge,
    parse_verdict,
    state_culprits,
)
from opd_gym.records.task import BOUNDARY_KEY, Task
from opd_gym.sandboxes import (
    FileTooLarge,
    PathRefused,
    Sandbox,
    SandboxDied,
    SandboxError,
    SandboxPool,
    SandboxTimeout,
)

GRADE_DIR = launch.GENERIC_DIR
HARNESS_MARGIN = 10.0  # seconds the harness gets beyond the task's budget (start-up, pytest)
VARIANTS = 2  # the harness runs them one after the other, each with the task's timeout
SINGLE = 1  # runs of a grade whose second run would judge nothing, or of a calibration without
# canaries
HUNG_CANARY_RETRIES = 3  # calibration re-runs after dropping canaries that hung the reference
LEAK_ROUNDS = 8  # calibration re-runs after dropping canaries whose failure failed later tests
CANARY_REDRAWS = 8  # calibration rounds redrawing canaries the reference passed (see _redraw)
SENTINELS = 2  # sentinel clones per grade, the same tests in both variants (sentinel.py)
GRADING_HARNESS = "grading harness"  # the pool's warm grading sandboxes (with_prepared)
PREPARED_TASKS = 8  # tasks whose next grade's runs `Grader.prepare` keeps drawn, at most
SENTINEL_CANDIDATES = 8  # sites (tests apart) calibration checks for grades to draw from


class SandboxSource(Protocol):
    """Where the grader gets a fresh sandbox and gives it back (a `SandboxPool` fits)."""

    def acquire(self, timeout: float | None = None) -> Sandbox: ...

    def release(self, sandbox: Sandbox) -> None: ...


def select_files(task: Task, files: Mapping[str, bytes]) -> tuple[dict[str, bytes], list[str]]:
    """The agent files to copy into the grading sandbox, and the paths dropped (sorted).

    Hidden-test paths are dropped (the variants' copies win anyway, and a stale copy must never
    confuse a reader of the workspace), and so is our reserved directory. Doctest sources are
    kept even when hidden: the agent's module is what their doctests run against.
    """
    keep: dict[str, bytes] = {}
    dropped: list[str] = []
    doctests = doctest_sources(task)
    for path, data in files.items():
        parts = PurePosixPath(path).parts
        if (path in task.tests and path not in doctests) or (parts and parts[0] == GRADE_DIR):
            dropped.append(path)
        else:
            keep[path] = data
    return keep, sorted(dropped)


def boundary_modules(task: Task) -> tuple[str, ...]:
    """The solution modules of a task graded across the process boundary (its
    `metadata["boundary"]`, set by the HumanEval and MBPP adapters), () for any other task.

    Such a task's tests run alone in their pytest process and call the solution, which runs
    in a process of its own, through `opd_grading.entry`: values cross as plain data only,
    so no solution can reach the test's frames, pytest or the other run, and the grader
    needs no canary or held expectation for it (`rules`: row "boundary")."""
    modules = task.metadata.get(BOUNDARY_KEY)
    if not isinstance(modules, list | tuple) or not all(
            isinstance(m, str) and m.isidentifier() for m in modules):
        return ()
    return tuple(modules)


def task_key(task: Task) -> str:
    """A hash of everything that decides a task's grade: tests, starter, reference, settings."""
    content = json.dumps(
        [sorted(task.tests.items()), sorted(task.files.items()), sorted(task.solution.items()),
         task.pytest_ini, list(task.test_ids or ()), task.timeout,
         sorted((p, hashlib.sha256(d).hexdigest()) for p, d in task.assets.items()),
         *([list(boundary_modules(task))] if boundary_modules(task) else [])],
        sort_keys=True,
    )
    return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()


def with_own_bodies(task: Task) -> Task:
    """`task` with each inherited test method given a body of its own in its hidden test
    modules (`inherited.materialize`; the same object when none changes): what the Grader
    calibrates and grades, so that one function runs under one node id."""
    tests = materialize(task.tests, test_paths(task))
    if all(tests[p] is task.tests[p] for p in tests):
        return task
    return dataclasses.replace(task, tests=tests)


def hidden_files(task: Task, doctests: Mapping[str, str] | None = None) -> dict[str, str]:
    """The hidden files laid over the workspace in each variant: `task.tests` without the
    doctest sources (`expected.doctest_sources`), which the harness gets apart."""
    doctests = doctest_sources(task) if doctests is None else doctests
    return {path: text for path, text in task.tests.items() if path not in doctests}


def solution_modules(task: Task) -> frozenset[str]:
    """The top-level modules the task's starter and reference files define, as the tests
    import them (`canary.module_names`)."""
    return module_names({**task.files, **task.solution})


# The stored calibrations' format: bumped when Calibration's fields or the rules deciding them
# change (in_process: 2; second: 3; a canary that errored on the reference is invalid: 4), so
# a store written by an older version is calibrated again, not read with a new field at its
# default; boundary: 5.
CALIBRATION_FORMAT = 5


def stored_name(secret: bytes, key: str, hold: bool) -> str:
    """The name (without suffix) of a task's calibration in a store (`Grader(calibrations=)`):
    a hash of the secret, the task key (`task_key`), `hold` and CALIBRATION_FORMAT, so another
    secret, setting or format never reads it."""
    return hashlib.sha256(b"%s\0%s\0hold=%d\0format=%d" % (
        secret, key.encode(), hold, CALIBRATION_FORMAT)).hexdigest()[:40]


def runs_in_process(task: Task) -> bool:
    """The task's solution can run in pytest's process: its docstrings run as doctests, or
    a hidden test, conftest or asset imports or loads it (`in_process.imports_any`)."""
    if doctest_sources(task):
        return True
    sources = [t for p, t in task.tests.items() if p.endswith(".py")]
    sources += [b.decode("utf-8", "replace") for p, b in task.assets.items()
                if p.endswith(".py")]
    return imports_any(sources, solution_modules(task))


@dataclasses.dataclass(frozen=True)
class _Layout:
    """The runs' texts of one grade, drawn (`Grader._layout`): what the host alone knows of
    them (the canaries, which variant holds each real test, the sentinels placed, the held
    sites' values) and whether it is one run."""

    canaries: CanarySet
    variants: Variants
    placed: Placed
    runs: held_sites.HeldRuns | None
    single: bool


class _Failed(GradingError):
    """A run that ended before outcomes: carries the report fields saying why (internal:
    `Grader.calibration` raises it on as the public CalibrationError, `grade` reports it)."""

    def __init__(self, **fields: Any) -> None:
        super().__init__(fields.get("reason", ""))
        self.fields = fields


NULL_MODULE = '''"""A submission that does nothing: every name it asks for exists, none works."""


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def missing(*args, **kwargs):
        raise NotImplementedError(name)

    return missing
'''


def null_submission(task: Task) -> dict[str, str]:
    """The starter with every file the reference solution changes or adds emptied: a program
    that does nothing (a Python module becomes NULL_MODULE: it imports, its names exist, and
    every one raises; a test that such a module passes, say one that only reads the source
    for a forbidden call, checks nothing of the task). Calibration runs it; any test it
    passes is a gate, never earns."""
    files = dict(task.files)
    for path, text in task.solution.items():
        if files.get(path) != text:
            files[path] = NULL_MODULE if path.endswith(".py") else ""
    return files


def _selected(task: Task, placed: Placed) -> list[str] | None:
    """The node ids a run may run: the task's own, and the sentinel clones of those."""
    if not task.test_ids:
        return None
    clones = [s.clone_id(i) for run in placed for s in run
              for i in task.test_ids if s.is_original(i)]
    return [*task.test_ids, *clones]


def _checked(sites: tuple[SentinelSite, ...], runs: tuple[Merged, ...]
             ) -> tuple[SentinelSite, ...]:
    """The sentinel sites calibration's runs vouch for: in some run a test passed while its
    clone failed (so the changed value is compared), and in none did both pass, hang, or the
    clone not run."""
    good: set[SentinelSite] = set()
    bad: set[SentinelSite] = set()
    for run in runs:
        bad.update(run.hung_sentinels, run.missing_sentinels)
        for sentinel, _, test, clone in run.sentinel_pairs:
            if test in PASSING and clone in PASSING:
                bad.add(sentinel.site)
            elif test in PASSING and clone == "failed":
                good.add(sentinel.site)
    return tuple(s for s in sites if s in good and s not in bad)


def _collection_errors(run: Merged) -> str:
    """Why collection failed, for a calibration's reason: the first errors, and the module a
    test file could not import (a dependency the task's environment lacks)."""
    if not run.collect_errors:
        return ""
    shown = "; ".join(f"{path or '<collection>'}: {message.strip()[:200]}"
                      for path, message in run.collect_errors[:3])
    missing = sorted({m.group(1) for _, message in run.collect_errors
                      for m in re.finditer(r"No module named '([^']+)'", message)})
    hint = (f"; missing module(s) {', '.join(missing)}: install them in the task's "
            "environment (its setup steps)" if missing else "")
    return f"; collection errors: {shown}{hint}"


def _passed(run: Merged) -> frozenset[str]:
    """The node ids whose real test passed, even in a run cut short."""
    return frozenset(i for i, (o, _) in run.real.items() if o in PASSING)


class Grader:
    """Runs a task's hidden tests and their canaries against a workspace snapshot.

    Holds a secret that seeds the canaries (same task, same canaries within this Grader, so
    calibration validates what grades use) and the calibrations, cached per task hash.
    Thread-safe: concurrent grades of one task share one calibration run.
    """

    def __init__(self, sandboxes: SandboxSource, *, output_chars: int = 2000,
                 hold: bool = True, once: bool = False, single_run: bool = True,
                 secret: bytes | None = None, calibrations: str | os.PathLike | None = None
                 ) -> None:
        """`hold` (the default): host-held expectations (held.py): the literal of each
        calibrated equality site stays on the host, and where a task holds a site only tests
        holding one earn (the others gate). `hold=False` opts out (the canary scheme alone).

        `once` (off by default): a test whose second run judges nothing runs in one variant
        only (once.py), a few percent less wall time; a suite whose tests hand state to later
        ones (a test setting a class attribute the next ones read) then fails tests plain
        pytest passes, so it is for suites known to be order-independent.

        `single_run` (the default): a grade whose second run would judge nothing (every
        test's canary held, invalid or absent) is one run, every test real (plain pytest's
        cost), and one whose second run judges only some tests runs only those there (and
        the tests sentinels are cloned from) where calibration vouched for that layout
        (`Calibration.second`); `single_run=False` keeps both variants of every test, so
        that a forgery there is also named (`GradeReport.forgery`).

        `secret` (default: 32 random bytes) seeds the canaries; keep it from the agents.
        `calibrations`: a folder where calibrations persist, shared by Graders of the same
        secret in other processes on this host (xdist or Ray workers, a later run): each task
        is calibrated once, under a file lock. It holds pickles only Graders write: never a
        folder a sandbox or another user can write."""
        self.sandboxes = sandboxes
        self.output_chars = output_chars
        self.hold = hold
        self.once = once
        self.single_run = single_run
        self._secret = os.urandom(32) if secret is None else bytes(secret)
        self._store = None if calibrations is None else Path(calibrations)
        self._lock = threading.Lock()
        self._task_locks: dict[str, threading.Lock] = {}
        self._calibrations: dict[str, Calibration] = {}
        # {task key: (its calibration, (single_run, once), the next grade's layout drawn)}
        self._prepared: OrderedDict[str, tuple[Calibration, tuple[bool, bool],
                                               Future[_Layout]]] = OrderedDict()
        self._preparing: ThreadPoolExecutor | None = None
        self._children: dict[int, Grader] = {}  # for_sandboxes: {id(source): its Grader}

    # -- public -------------------------------------------------------------------------
    def grade(self, task: Task, files: Mapping[str, bytes]) -> GradeReport:
        """Grade `files` (e.g. `sandbox.snapshot()` of the agent's workspace); never raises."""
        started = time.monotonic()
        task = with_own_bodies(task)
        keep, dropped = select_files(task, files)
        base: dict[str, Any] = {"task_id": task.id, "dropped": tuple(dropped)}
        if not self._expected(task)[0]:
            return GradeReport(**base, reason="the task defines no hidden tests",
                               duration=time.monotonic() - started)
        try:
            calibration = self.calibration(task)
            merged, dropped_more = self._run(task, keep, calibration.canaries,
                                             sentinels=calibration.sentinels,
                                             held=calibration.held, calibration=calibration,
                                             layout=self._take_prepared(task, calibration))
        except (_Failed, CalibrationError) as failed:
            fields = {**base, **failed.fields}
            fields["dropped"] = tuple(sorted({*base["dropped"], *fields.get("dropped", ())}))
            return GradeReport(**fields, duration=time.monotonic() - started)
        except Exception as exc:  # never raise: a bug of ours is an infra error, not a score
            return GradeReport(**base, reason=f"grading failed: {type(exc).__name__}: {exc}",
                               infra_error=True, duration=time.monotonic() - started)
        base["dropped"] = tuple(sorted({*dropped, *dropped_more}))
        return build_report(merged, calibration, base, time.monotonic() - started)

    def prepare(self, task: Task) -> Future[Any] | None:
        """Draw the runs of `task`'s next grade now, in a thread of this Grader: its
        canaries, sentinels and the host's held rewrite of its tests, the host's share of a
        grade, which reads no submission. An env calls it at reset, so that the episode's
        turns hide that work and the grade's sandbox run starts at once. Only for a task
        already calibrated (a calibration runs sandboxes: it waits for the first grade).
        The draw's Future (done once it is made), None where none was started. A draw
        serves the task's next grade only, and one drawn under other settings (`single_run`,
        `once`) or another calibration none; at most PREPARED_TASKS tasks keep one (the
        oldest is dropped)."""
        task = with_own_bodies(task)
        key = task_key(task)
        with self._lock:
            calibration = self._calibrations.get(key)
            if calibration is None or key in self._prepared:
                return None
            if self._preparing is None:
                self._preparing = ThreadPoolExecutor(1, thread_name_prefix="opd-grade-draw")
            settings = (self.single_run, self.once)
            drawn = self._preparing.submit(self._grade_layout, task, calibration, settings)
            self._prepared[key] = (calibration, settings, drawn)
            while len(self._prepared) > PREPARED_TASKS:
                self._prepared.popitem(last=False)[1][2].cancel()
        return drawn

    def calibration(self, task: Task) -> Calibration:
        """The task's canaries, validated with its reference, starter and null submission
        (cached per hash).

        Raises CalibrationError (its `fields`: the report's reason, infra_error...) when a
        calibration run fails; nothing is cached then. Inherited test methods are given
        bodies of their own first (`inherited.with_own_bodies`), in grades alike.
        """
        task = with_own_bodies(task)
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
            try:
                done = self._stored(task, key)
            except _Failed as failed:
                raise CalibrationError(**failed.fields) from None
            with self._lock:
                self._calibrations[key] = done
            return done

    def unverifiable(self, task: Task) -> str:
        """Why no grade of `task` can vouch for an answer ("" where one can): no test could
        earn under its calibration (`rules`). Calibrates the task (once, cached), as its
        first grade would: a run asks this before its first episode (`opd-gym rollout`,
        `CodingEnv(verify_tasks=True)`), so that such a task is refused instead of paying
        every answer 0. Raises CalibrationError when the calibration could not finish (a
        sandbox died, a run timed out): no verdict on the task either way, and nothing is
        cached, so the caller decides whether to refuse or to try again later."""
        task = with_own_bodies(task)
        if not self._expected(task)[0]:
            return "the task defines no hidden tests"
        calibration = self.calibration(task)
        if calibration.calibrated:
            return "" if calibration.earning else calibration.unverifiable()
        # no reference solution: what earns is read from the canaries and the starter alone
        expected = self._expected(task)[0]
        return "" if any(calibration.earns(i) for i in expected) \
            else calibration.unverifiable()

    def for_sandboxes(self, sandboxes: SandboxSource) -> Grader:
        """A Grader like this one (secret, store, settings) on other sandboxes (an environment
        image's pool), made once per source and kept: envs and run slots sharing this Grader
        share those calibrations too."""
        if sandboxes is self.sandboxes:
            return self
        with self._lock:
            child = self._children.get(id(sandboxes))
            if child is None or child.sandboxes is not sandboxes:
                child = Grader(sandboxes, output_chars=self.output_chars, hold=self.hold,
                               once=self.once, single_run=self.single_run,
                               secret=self._secret, calibrations=self._store)
                self._children[id(sandboxes)] = child
            return child

    # -- internals ------------------------------------------------------------------------
    def _grade_layout(self, task: Task, calibration: Calibration,
                      settings: tuple[bool, bool]) -> _Layout:
        """A grade's runs, drawn afresh under `settings` (single_run, once)."""
        return self._layout(task, calibration.canaries, calibration.sentinels,
                            held=calibration.held, calibration=calibration, settings=settings)

    def _take_prepared(self, task: Task, calibration: Calibration) -> _Layout | None:
        """The draw `prepare` made for this grade (waited for where it is being made); None
        where there is none to use (none made, made under other settings or for another
        calibration, not started yet, failed): the grade draws its own then."""
        settings = (self.single_run, self.once)
        with self._lock:
            entry = self._prepared.pop(task_key(task), None)
        if entry is not None and entry[0] is calibration and entry[1] == settings \
                and not entry[2].cancel():  # not started yet: cancelled, drawn here
            try:
                return entry[2].result()
            except Exception:  # noqa: BLE001 - the grade draws again, where it fails for real
                return None
        return None

    def _stored(self, task: Task, key: str) -> Calibration:
        """The task's calibration from the store (computed and written there, under an
        exclusive lock, by the first process asking), or computed here without a store."""
        if self._store is None:
            return self._calibrate(task, key)
        name = stored_name(self._secret, key, self.hold)
        self._store.mkdir(parents=True, exist_ok=True)
        path = self._store / f"{name}.pickle"
        with open(self._store / f"{name}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            try:
                return pickle.loads(path.read_bytes())
            except (OSError, EOFError, pickle.UnpicklingError, AttributeError, TypeError):
                pass  # not there yet (or from another version): calibrate
            done = self._calibrate(task, key)
            partial = path.with_suffix(f".{os.getpid()}.part")
            partial.write_bytes(pickle.dumps(done))
            os.replace(partial, path)
            return done

    def _calibrate(self, task: Task, key: str) -> Calibration:
        """Starter and null submission run once, without canaries (only their real outcomes
        count: tests they pass are gates); the reference with the drawn canaries; then, for
        tests that would earn but whose canary the reference passed, redrawn canaries."""
        seed = seed_for(self._secret, key)
        paths = test_paths(task)
        canaries = make_canaries(task.tests, paths, seed, paired=not task.test_ids,
                                 solution_modules=solution_modules(task))
        bare = CanarySet({}, canaries.tests)  # both variants alike: no canary can hang them
        selected = {base_id(i) for i in task.test_ids or ()}
        boundary = bool(boundary_modules(task))
        if boundary:  # no solution code runs beside the tests: nothing for a twin to catch
            canaries = bare

        solution = solution_modules(task)
        probes = held_sites.candidates(hidden_files(task), paths, solution=solution) \
            if self.hold and not boundary else None
        # a clone copies its test's decorators: none of a test held per parametrize case
        per_case = held_sites.parametrized(hidden_files(task), paths) if probes else frozenset()

        def usable(site: SentinelSite) -> bool:  # a site the test's canary leaves alone
            canary = canaries.canaries.get(site.test_id)
            if probes and site.test_id in probes and site.kind != "value" \
                    or site.test_id in per_case:
                return False  # a negated clone of a held assertion would show its literal
            return (not selected or site.test_id in selected) and compatible(
                site, canary.edits if canary else ())

        candidates = () if boundary else tuple(choose(
            [s for s in sentinel_sites(hidden_files(task), paths) if usable(s)],
            SENTINEL_CANDIDATES, random.Random(seed)))

        def files(texts: Mapping[str, str]) -> dict[str, bytes]:  # beside the task's assets
            return select_files(task, {**task.assets,
                                       **{p: t.encode() for p, t in texts.items()}})[0]

        # the starter and the null submission compute what the tests compute too: a computed
        # expectation is held only where another process computed the same (computed.py)
        first = {"held": probes, "probe": "first"} if probes and task.solution else {}
        starter_run = self._finished(task, files(task.files), bare, sentinels=candidates,
                                     count=len(candidates), calibrating="the untouched starter",
                                     single=True, **first)
        # What the starter passed, even in a run cut short twice (it hangs): a gate too many
        # never pays.
        starter_passed = _passed(starter_run)
        if not task.solution:
            return Calibration(canaries, starter_passed=starter_passed, boundary=boundary)
        null_run = self._finished(task, files(null_submission(task)), bare, sentinels=candidates,
                                  count=len(candidates), calibrating="the null submission",
                                  single=True, **first)
        null_passed = _passed(null_run)
        reference = files({**task.files, **task.solution})
        ref_run, canaries, candidates = self._reference_run(
            task, reference, canaries, "the reference solution", candidates, probes)
        if not ref_run.timed_out and not boundary:  # without canaries, nothing can leak
            ref_run, canaries, candidates = self._without_leaks(
                task, reference, ref_run, canaries, candidates, probes)
        if ref_run.reason:
            raise _Failed(reason=f"calibration: the reference solution's run failed "
                                 f"({ref_run.reason}){_collection_errors(ref_run)}",
                          infra_error=True, output=ref_run.output)
        invalid = frozenset(i for i, o in ref_run.canary.items() if not canary_failed(o))
        neutral = frozenset(i for i, (o, _) in ref_run.real.items() if o not in PASSING)
        canaries, invalid = self._redraw(task, reference, seed, canaries, ref_run, invalid,
                                         neutral | starter_passed | null_passed)
        held = None
        computed: dict[str, dict[int, held_sites.Recorded]] = {}
        if probes is not None:
            witness = ref_run.other_probes
            if held_sites.computes(probes, hidden_files(task), solution):
                witness = self._witness(task, reference, canaries, probes, ref_run)
            held = held_sites.calibrated(probes, hidden_files(task), ref_run.probes,
                                         _passed(ref_run), ref_run.real, solution=solution,
                                         witness=witness,
                                         others=(starter_run.probes, null_run.probes),
                                         recorded=computed)
            # a site a canary leaves unholdable (it negates the assertion, or edits what a
            # computed site compares with) is not held, nor then a parametrize column of a
            # table that test reads too (another round); the test's other sites still are:
            # where its canary sits comes from the secret, whether it earns does not
            variants, _ = build_runs(hidden_files(task), canaries, (), 0)
            while held:
                unheld = held_sites.rewrite(variants.files, held, ((), ()), solution=solution,
                                            computed=computed).unheld_sites
                if not unheld:
                    break
                held = {t: kept for t, s in held.items()
                        if (kept := tuple(i for i in s if (t, i) not in unheld))}
                computed = {t: {i: r for i, r in s.items() if (t, i) not in unheld}
                            for t, s in computed.items() if t in held}
        done = Calibration(canaries, invalid=invalid, starter_passed=starter_passed,
                           null_passed=null_passed, neutral=neutral, calibrated=True,
                           reference_ids=frozenset(ref_run.real),
                           sentinels=_checked(candidates, (starter_run, null_run, ref_run)),
                           held=held, computed=computed, boundary=boundary,
                           in_process=self.hold and not boundary and runs_in_process(task))
        if boundary:  # every test real, in one run: there is no second run to shape
            return done
        return dataclasses.replace(done, second=self._second(task, reference, done, ref_run))

    def _witness(self, task: Task, reference: dict[str, bytes], canaries: CanarySet,
                 probes: Mapping[str, tuple[int, ...]], ref_run: Merged
                 ) -> dict[str, list[tuple[int, str, bool]]]:
        """The reference's emissions at the probed sites from another uid, tree and process
        than `ref_run`'s real copy of each test: a computed expectation is held only where
        that second computation agrees (held.calibrated). In `ref_run` a canaried test's other
        copy is its canary, which stops short of every site after the canary's, and where the
        canary sits comes from the secret: so one more run holds every test real in both
        runs, each one's second copy in the run its canary held, and a test's witness comes
        from there whatever its canary. A test without a canary already ran real twice. A
        failed run witnesses none of the canaried tests (their computed sites are not held)."""
        canaried = {base_id(nodeid) for ran in ref_run.order for nodeid, kind, _ in ran
                    if kind == "canary"}
        real_in = {base_id(nodeid): index for index, ran in enumerate(ref_run.order)
                   for nodeid, kind, _ in ran if kind == "real" and base_id(nodeid) in canaried}
        witness = {n: v for n, v in ref_run.other_probes.items() if base_id(n) not in canaried}
        twin, _ = self._run(task, reference, CanarySet({}, canaries.tests),
                            calibrating="the reference solution, every test real twice",
                            count=0, held=probes, probe=True,
                            second=frozenset(canaries.tests), fixed=real_in)
        if not twin.reason:
            witness.update((n, v) for n, v in twin.other_probes.items()
                           if base_id(n) in canaried)
        return witness

    def _second(self, task: Task, reference: dict[str, bytes], calibration: Calibration,
                ref_run: Merged) -> frozenset[str] | None:
        """The tests a grade's second run must hold (`Calibration.second`), or None where
        every test runs in both: those whose second run is judged (once.py's rule: a valid
        canary that is not held) and those a sentinel may be cloned from. The rest then run
        once, real, in the first run, which holds every test in pytest's order as plain
        pytest does; the second holds only these.

        Vouched for by two reference runs in that layout, all these real in the second run,
        then all in the first (a test handing state to a later one that the second run no
        longer holds shows there): every real outcome must be the reference's, no canary
        outside `invalid` may pass, no sentinel pass with its test. Anything else, a run
        that fails included, keeps every test in both runs."""
        variants, _ = build_runs(hidden_files(task), calibration.canaries, (), 0)
        runs = held_sites.rewrite(variants.files, calibration.held, ((), ()),
                                  solution=solution_modules(task),
                                  computed=calibration.computed) if calibration.held else None
        tests = frozenset(variants.real_in)
        judged = run_once(calibration.canaries, variants.real_in, (), calibration.reference_ids,
                          calibration.invalid, runs)
        once = run_once(calibration.canaries, variants.real_in, calibration.sentinels,
                        calibration.reference_ids, calibration.invalid, runs)
        need = tests - once[0] - once[1]
        if not tests - judged[0] - judged[1] or need == tests:
            return None  # one run anyway (a grade's own rule), or nothing to leave out
        first = dict.fromkeys(tests - need, 0)
        for layout in (1, 0):
            try:
                run, _ = self._run(task, reference, calibration.canaries,
                                   calibrating="the reference solution, second run partial",
                                   sentinels=calibration.sentinels,
                                   count=len(calibration.sentinels), held=calibration.held,
                                   calibration=calibration, second=need,
                                   fixed={**first, **dict.fromkeys(need, layout)})
            except _Failed:
                return None
            if run.reason or run.timed_out or any(
                    (run.real.get(i, ("missing", ""))[0] in PASSING) != (o in PASSING)
                    for i, (o, _) in ref_run.real.items()) or any(
                    o in PASSING and i not in calibration.invalid
                    for i, o in run.canary.items()) or any(
                    t in PASSING and c in PASSING for _, _, t, c in run.sentinel_pairs):
                return None
        return need

    def _reference_run(self, task: Task, reference: dict[str, bytes], canaries: CanarySet,
                       what: str, sentinels: tuple[SentinelSite, ...] = (),
                       probes: Mapping[str, tuple[int, ...]] | None = None,
                       probe_state: bool = False
                       ) -> tuple[Merged, CanarySet, tuple[SentinelSite, ...]]:
        """The reference with `canaries` (and clones of all `sentinels`). A canary that hangs
        the run while the reference passes its real test (it failed before the test released
        a lock, say) is invalid: it goes, the test is a gate, and the run is repeated
        (HUNG_CANARY_RETRIES times at most). So does a sentinel whose clone hung it."""
        for attempt in range(HUNG_CANARY_RETRIES + 1):
            run, _ = self._run(task, reference, canaries, calibrating=what, sentinels=sentinels,
                               count=len(sentinels), held=probes, probe=True,
                               probe_state=probe_state)
            hung = {i for i in run.hung_canaries if run.real.get(i, ("", ""))[0] in PASSING}
            if not run.timed_out or not (hung or run.hung_sentinels) \
                    or attempt == HUNG_CANARY_RETRIES:
                break
            drop = {base_id(i) for i in hung}
            canaries = dataclasses.replace(canaries, canaries={
                t: c for t, c in canaries.canaries.items() if t not in drop})
            sentinels = tuple(s for s in sentinels if s not in run.hung_sentinels)
        return run, canaries, sentinels

    def _without_leaks(self, task: Task, reference: dict[str, bytes], run: Merged,
                       canaries: CanarySet, sentinels: tuple[SentinelSite, ...],
                       probes: Mapping[str, tuple[int, ...]] | None
                       ) -> tuple[Merged, CanarySet, tuple[SentinelSite, ...]]:
        """The reference's run with no canary or sentinel clone failing tests after it.

        Either fails in the middle of its test, and what the test would undo after that point
        stays undone (a frozen clock, a patched module): later tests of its run fail where the
        reference passes them alone, or pytest itself breaks. When the reference fails a real
        test or its run is not whole, it runs once more with neither; if a run fails a test
        that one passed, or stops short of its tests, the reference runs again probing state,
        and every canary or clone that left the module-level state other than its test did is
        dropped (state_culprits), in every round after, whether or not its leak showed there.
        Only a probing run whose failures no digest explains drops the canaries and clones
        that failed since the last real test that passed (leak_culprits). Dropped tests gate,
        dropped sites are never cloned. Each run draws its own layout of which run holds which
        real test; once a leak was seen, two clean rounds in a row end it (LEAK_ROUNDS at
        most).
        """
        if not run.reason and not any(o in ("failed", "error") for o, _ in run.real.values()):
            return run, canaries, sentinels
        alone, _ = self._run(task, reference, canaries, calibrating="the reference "
                             "solution without canaries", single=True)
        if alone.reason:
            return run, canaries, sentinels
        seen, probed, clean = False, False, 0
        for _ in range(LEAK_ROUNDS):
            window, window_sites = leak_culprits(run, alone)
            state, state_sites = state_culprits(run)  # none unless the run probed state
            if state or state_sites:  # what changed state, whether or not it showed yet
                drop, sites = state, state_sites
            elif (window or window_sites) and probed:  # a leak no module attribute records
                drop, sites = window, window_sites
            else:
                drop, sites = frozenset(), frozenset()
            if window or window_sites or drop or sites:
                seen, clean = True, 0
            else:
                clean += 1
                if not seen or clean == 2:
                    break
            canaries = dataclasses.replace(canaries, canaries={
                t: c for t, c in canaries.canaries.items() if t not in drop})
            sentinels = tuple(s for s in sentinels if s not in sites)
            probed = True
            run, canaries, sentinels = self._reference_run(
                task, reference, canaries, "the reference solution, leaking canaries dropped",
                sentinels, probes, probe_state=True)
            if run.timed_out:
                break
        return run, canaries, sentinels

    def _redraw(self, task: Task, reference: dict[str, bytes], seed: int, canaries: CanarySet,
                ref_run: Merged, invalid: frozenset[str], gates: frozenset[str]
                ) -> tuple[CanarySet, frozenset[str]]:
        """Redraw the canaries the reference passed on tests that would earn with a valid one.

        A test is stuck when the reference passes some of its node ids that are no gate (the
        starter and the null submission fail them) and its canary is invalid on all of them.
        Each round draws one more candidate (site and mode) per stuck test, excluding those
        tried (`make_canaries(exclude=...)`), and checks the new ones in ONE reference run
        holding only them; a test leaves the rounds when its canary earns, or its candidates
        are exhausted, or its new canary hung the reference (a gate then). At most
        CANARY_REDRAWS rounds: whether a test earns depends on its candidates, not on the
        Grader's secret (which only picks among the valid ones). A round's run that fails
        ends the rounds with what was validated so far.
        """
        nodes: dict[str, list[str]] = {}
        for nodeid in ref_run.real:
            nodes.setdefault(base_id(nodeid), []).append(nodeid)
        chosen = dict(canaries.canaries)
        invalid_now = set(invalid)

        def stuck(test: str) -> bool:
            could = [n for n in nodes.get(test, ()) if n not in gates]
            return bool(could) and all(n in invalid_now for n in could)

        need = sorted(t for t in chosen if stuck(t))
        exclude: dict[str, set[tuple[int, str]]] = {}
        for _ in range(CANARY_REDRAWS):
            if not need:
                break
            for test in need:
                exclude.setdefault(test, set()).add(chosen[test].site)
            drawn = make_canaries(task.tests, test_paths(task), seed, exclude=exclude,
                                  only=need, solution_modules=solution_modules(task),
                                  paired=not task.test_ids).canaries
            trial = CanarySet({t: drawn[t] for t in need if t in drawn}, canaries.tests)
            if not trial.canaries:
                break
            try:
                run, kept, _ = self._reference_run(task, reference, trial,
                                                   "the reference solution, canaries redrawn")
            except _Failed:
                break
            if run.reason:
                break
            judged = []
            for test, canary in kept.canaries.items():
                outcomes = [run.canary.get(n) for n in nodes.get(test, ())]
                if None in outcomes:
                    continue  # not judged: the same candidate again next round
                chosen[test] = canary
                invalid_now.difference_update(nodes[test])
                invalid_now.update(n for n, o in zip(nodes[test], outcomes, strict=True)
                                   if not canary_failed(o))
                judged.append(test)
            need = [t for t in need if t in kept.canaries and (t not in judged or stuck(t))]
        return dataclasses.replace(canaries, canaries=chosen), frozenset(invalid_now)

    def _expected(self, task: Task) -> tuple[set[str], bool]:
        if task.test_ids:
            return set(task.test_ids), True
        return expected_tests(task.tests, test_paths(task)), False

    def _finished(self, task: Task, keep: dict[str, bytes], canaries: CanarySet,
                  **options: Any) -> Merged:
        """A calibration run of the starter or the null submission (`_run`), run once more
        where its timeout cut it short: a load spike (other grades, a busy host) can do that,
        and the tests such a run never finished would then earn, paying a later untouched
        submission that finishes them. A run cut short twice hangs for real (a bug that
        loops): the tests it did not pass earn, and a submission that still hangs times out."""
        run, _ = self._run(task, keep, canaries, **options)
        if run.timed_out:
            run, _ = self._run(task, keep, canaries, **options)
        return run

    def _run(self, task: Task, keep: dict[str, bytes], canaries: CanarySet,
             calibrating: str = "", sentinels: tuple[SentinelSite, ...] = (),
             count: int | None = None, held: Mapping[str, tuple[int, ...]] | None = None,
             probe: bool | str = False, calibration: Calibration | None = None,
             single: bool = False, probe_state: bool = False,
             second: frozenset[str] | None = None, fixed: Mapping[str, int] | None = None,
             layout: _Layout | None = None) -> tuple[Merged, list[str]]:
        """`_run_in` a grading sandbox whose harness has started (`_sandbox`), on `layout`
        (default: `_layout` of the other arguments, drawn while the harness starts)."""
        what = f"calibration ({calibrating}): " if calibrating else ""
        if not test_paths(task) and not doctest_sources(task):
            raise _Failed(reason="the task has no Python test files", infra_error=True)
        sandbox, harness = self._sandbox(what)
        try:
            with harness:
                if layout is None:
                    layout = self._layout(task, canaries, sentinels, count, held, probe,
                                          calibration, single, second, fixed)
                return self._run_in(sandbox, harness, task, keep, layout, calibrating,
                                    probe, probe_state)
        finally:
            self.sandboxes.release(sandbox)

    def _sandbox(self, what: str) -> tuple[Sandbox, launch.StartedHarness]:
        """A grading sandbox and its harness, started before the request exists: taken warm
        from the pool's harness pool (`SandboxPool.with_prepared`: Python's start and pytest's
        import already done) where one is ready, else acquired with the harness started now,
        its start-up overlapping the host's work on the runs (`launch.StartedHarness`)."""
        if isinstance(self.sandboxes, SandboxPool):
            try:
                taken = self.sandboxes.with_prepared(
                    GRADING_HARNESS, launch.StartedHarness).take_prepared()
            except SandboxError:
                taken = None
            if taken is not None and isinstance(taken[1], launch.StartedHarness):
                return taken[0], taken[1]
            if taken is not None:
                self.sandboxes.release(taken[0])
        try:
            sandbox = self.sandboxes.acquire()
        except SandboxError as exc:
            raise _Failed(reason=f"{what}no grading sandbox: {exc}", infra_error=True) from None
        try:
            return sandbox, launch.StartedHarness(sandbox)
        except SandboxError as exc:
            self.sandboxes.release(sandbox)
            raise _Failed(reason=f"{what}{exc}", infra_error=True) from None

    def _layout(self, task: Task, canaries: CanarySet, sentinels: tuple[SentinelSite, ...] = (),
                count: int | None = None, held: Mapping[str, tuple[int, ...]] | None = None,
                probe: bool | str = False, calibration: Calibration | None = None,
                single: bool = False, second: frozenset[str] | None = None,
                fixed: Mapping[str, int] | None = None,
                settings: tuple[bool, bool] | None = None) -> _Layout:
        """The runs' texts of one grade or calibration run, drawn afresh: both variants of the
        hidden tests with clones of `count` of `sentinels` and the `held` sites held by the
        host (`probe`: only their values reported). It reads no submission, so a grade's can
        be made before the grade (`prepare`). With `once`, tests whose second run tells
        nothing run once (once.py; given the task's `calibration`, a grade, also those with an
        invalid or held canary). `single`: one run instead, every test real (no canary), the
        sentinels in it. `settings`: (single_run, once), the Grader's where None.

        A partial second run (a grade given a `calibration` whose `second` is set, or
        `second` given): the second variant holds only the tests of `second`, the others run
        real in the first only (`fixed` places real tests; a grade fixes those outside
        `second` in the first and draws the rest). Those others are judged by the first run
        alone, as in a one-run grade: by the host's held values, or their real outcome where
        no canary of theirs is judged (none, or one the reference passes)."""
        single_run, once_mode = settings or (self.single_run, self.once)
        doctests = doctest_sources(task)
        if single:
            canaries = CanarySet({}, canaries.tests)
        if second is None and calibration is not None and calibration.second is not None \
                and single_run and not once_mode and not single:  # a grade's layout
            second = calibration.second
            fixed = {t: 0 for t in canaries.tests if t not in second}
        variants, placed = build_runs(hidden_files(task, doctests), canaries, sentinels,
                                      SENTINELS if count is None else count, fixed=fixed)
        if second is not None:
            variants = dataclasses.replace(variants, skip=(
                frozenset(), frozenset(variants.real_in) - second))
        if single:  # run 0 alone; run 1 mirrors it for the code that reads two
            variants = Variants((variants.files[0], variants.files[0]),
                                dict.fromkeys(variants.real_in, 0))
            placed = (placed[0], placed[0])
        runs = None
        if held:
            runs = held_sites.rewrite(
                variants.files, held, placed, probe=probe, solution=solution_modules(task),
                computed=calibration.computed if calibration is not None else None)
            variants = Variants(runs.files, variants.real_in, variants.skip)
        if calibration is not None and single_run and not single and second is None:
            # one run where the second judges nothing (once.py's rule, for every test)
            once = run_once(canaries, variants.real_in, (), calibration.reference_ids,
                            calibration.invalid, runs)
            if set(variants.real_in) <= once[0] | once[1]:
                return self._layout(task, canaries, sentinels, count, held, probe,
                                    calibration, single=True, settings=settings)
        if once_mode and not single and second is None:
            variants = dataclasses.replace(variants, skip=run_once(
                canaries, variants.real_in, sentinels,
                calibration.reference_ids if calibration else (),
                calibration.invalid if calibration else frozenset(), runs))
        return _Layout(canaries, variants, placed, runs, single)

    def _run_in(self, sandbox: Sandbox, harness: launch.StartedHarness, task: Task,
                keep: dict[str, bytes], layout: _Layout, calibrating: str = "",
                probe: bool | str = False, probe_state: bool = False
                ) -> tuple[Merged, list[str]]:
        """`layout`'s runs on `keep` in `sandbox`, merged; _Failed before outcomes."""
        what = f"calibration ({calibrating}): " if calibrating else ""
        paths = test_paths(task)
        doctests = doctest_sources(task)  # never laid over the workspace: the harness's apart
        canaries, variants, placed, runs = (layout.canaries, layout.variants, layout.placed,
                                            layout.runs)
        ids = dict(runs.ids) if runs is not None else {}
        count = SINGLE if layout.single else VARIANTS
        dropped = self._copy(sandbox, keep, what)
        raw = self._harness(task, harness, paths, variants, what, doctests, placed,
                            {v: k for k, v in ids.items()}, count, probe_state)
        try:
            data = parse_verdict(raw, count)
        except VerdictError as exc:
            raise _Failed(reason=f"{what}{exc}", infra_error=True,
                          output=raw[-self.output_chars:].decode("utf-8", "replace")) from None
        if ids:
            data = held_sites.restore_ids(data, ids)
        expected, exact = self._expected(task)
        return merge(data, expected, exact, canaries, variants, placed,
                     None if probe else runs), dropped

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

    def _harness(self, task: Task, harness: launch.StartedHarness, paths: list[str],
                 variants: Variants, what: str, doctests: Mapping[str, str] | None = None,
                 placed: Placed = ((), ()), renamed: Mapping[str, str] | None = None,
                 count: int = VARIANTS, probe_state: bool = False) -> bytes:
        """The harness's raw verdict from the first `count` variants; `renamed`: {pytest's own
        node id: the id a run names it by} (cases held per parametrize argument: the sandbox
        never sees their ids)."""
        doctests = dict(doctests or {})
        select = _selected(task, placed)
        if select is not None and renamed:
            select = [renamed.get(i, i) for i in select]
        request = launch.harness_request(
            workspace=harness.sandbox.workspace, uid=launch.agent_uid(harness.sandbox),
            timeout=task.timeout,
            ini=task.pytest_ini, args=in_pytest_order(task, [*paths, *doctests]),
            variants=list(variants.files)[:count],
            select=select,  # only these run; the others are deselected
            doctests=doctests,  # their examples come from the pristine text, the code is live
            skip=variants.skip[:count],  # tests that run in one variant only (once.py)
            probe_state=probe_state,
            boundary=boundary_modules(task) or None,  # the solution in a process of its own
        )
        limit = count * task.timeout + HARNESS_MARGIN
        try:
            return harness.run(request, limit)
        except SandboxTimeout:
            if what:
                raise _Failed(reason=f"{what}the test run timed out", infra_error=True) from None
            raise _Failed(timed_out=True,
                          reason=f"the test run timed out after {task.timeout:g} s") from None
        except SandboxError as exc:
            raise _Failed(reason=f"{what}{exc}", infra_error=True) from None


__all__ = [
    "BOUNDARY_KEY", "CANARY_REDRAWS", "GRADE_DIR", "NULL_MODULE", "CalibrationError", "Grader",
    "SandboxSource", "base_id", "boundary_modules", "null_submission", "select_files",
    "task_key",
]
