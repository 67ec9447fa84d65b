"""Grading: hidden tests in a fresh sandbox, untrusted agent files, and every failure path."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from opd_gym.grading import (
    Calibration,
    Grader,
    GradeReport,
    VerdictError,
    build_report,
    build_variants,
    expected_tests,
    make_canaries,
    merge,
    parse_verdict,
    select_files,
)
from opd_gym.grading import grader as grader_module
from opd_gym.grading.verdict import HELD_FAILED

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


def _verdict(tests, other=None, **extra):
    import json

    def run(entries):
        return {"exit": 0, "tests": entries, "collect_errors": [], "timed_out": False,
                "output": "", **extra}

    data = {"version": 2, "variants": [run(tests), run(other if other is not None else tests)]}
    return parse_verdict(json.dumps(data).encode())


def _calibration(sources, seed=1, **fields):
    canaries = make_canaries(sources, list(sources), seed)
    return Calibration(canaries, **fields), canaries


def test_verdict_must_report_exactly_the_hidden_tests():
    sources = {"test_x.py": "def test_a():\n    assert f() == 1\n\n"
                            "def test_b():\n    assert f() == 2\n"}
    calibration, canaries = _calibration(sources)
    variants = build_variants(sources, canaries)
    expected = {"test_x.py::test_a", "test_x.py::test_b"}
    ok = [{"id": "test_x.py::test_a", "outcome": "passed"},
          {"id": "test_x.py::test_b[1-2]", "outcome": "passed"}]
    canary_failed = [{"id": "test_x.py::test_a", "outcome": "failed"},
                     {"id": "test_x.py::test_b[1-2]", "outcome": "failed"}]

    def report(real, canary, **extra):
        # the runs, laid out as the variants: the real outcome where the real test was
        firsts = [real[i] if variants.real_in.get(e["id"].split("[")[0], 0) == 0 else canary[i]
                  for i, e in enumerate(real)]
        seconds = [canary[i] if variants.real_in.get(e["id"].split("[")[0], 0) == 0 else real[i]
                   for i, e in enumerate(real)]
        merged = merge(_verdict(firsts, seconds, **extra), expected, False, canaries, variants)
        return build_report(merged, calibration, {"task_id": "t"}, 0.1)

    good = report(ok, canary_failed)
    assert good.score == 1.0 and good.reason == "" and good.canaried == 2 and good.earning == 2
    assert [t.name for t in good.tests] == ["test_x::test_a", "test_x::test_b[1-2]"]
    assert [t.canary for t in good.tests] == ["failed", "failed"]
    missing = report(ok[:1], canary_failed[:1])
    assert missing.score == 0.0 and "did not run" in missing.reason and "test_b" in missing.reason
    extra = [*ok, {"id": "test_x.py::test_planted", "outcome": "passed"}]
    planted = report(extra, [*canary_failed, extra[-1]])
    assert planted.score == 0.0 and "not hidden tests" in planted.reason
    assert "test_planted" in planted.reason
    timed = report(ok, canary_failed, timed_out=True)
    assert timed.score == 0.0 and "timed out" in timed.reason
    forged = report(ok, [{**e, "outcome": "passed"} for e in canary_failed])
    assert forged.score == 0.0 and forged.forgery == ("test_x::test_a", "test_x::test_b[1-2]")
    assert "a canary passed" in forged.reason and "test_x::test_a" in forged.reason
    # A wrong answer equal to the canary's changed value (off by one, say) fails the real test
    # and passes the canary: a wrong answer, not a forgery; the other test still earns.
    off_by_one = report([ok[0], {**ok[1], "outcome": "failed"}],
                        [canary_failed[0], {**canary_failed[1], "outcome": "passed"}])
    assert not off_by_one.forgery and off_by_one.reason == "" and off_by_one.score == 0.5


def test_gates_neutral_tests_and_tasks_without_earning_tests():
    sources = {"test_x.py": "def test_a():\n    assert f() == 1\n\n"
                            "def test_b():\n    assert f() == 2\n\n"
                            "def test_c():\n    assert f() == 3\n"}
    canaries = make_canaries(sources, ["test_x.py"], 1)
    variants = build_variants(sources, canaries)
    ids = ["test_x.py::test_a", "test_x.py::test_b", "test_x.py::test_c"]

    def report(outcomes, **fields):
        real = [{"id": i, "outcome": o} for i, o in zip(ids, outcomes, strict=True)]
        canary = [{"id": i, "outcome": "failed"} for i in ids]
        firsts = [real[k] if variants.real_in[i] == 0 else canary[k] for k, i in enumerate(ids)]
        seconds = [canary[k] if variants.real_in[i] == 0 else real[k] for k, i in enumerate(ids)]
        merged = merge(_verdict(firsts, seconds), set(ids), True, canaries, variants)
        return build_report(merged, Calibration(canaries, **fields), {"task_id": "t"}, 0.1)

    gate = {"starter_passed": frozenset(ids[:1])}
    assert report(["passed", "passed", "failed"], **gate).score == 0.5  # the gate earns nothing
    broken = report(["failed", "passed", "passed"], **gate)
    assert broken.score == 0.0 and broken.gates_failed == ("test_x::test_a",)
    assert "passed before the change and must keep passing" in broken.summary()
    assert "must make pass" not in broken.summary()
    invalid = report(["passed", "failed", "passed"], invalid=frozenset(ids[1:2]))
    assert invalid.score == 0.0 and invalid.gates_failed == ("test_x::test_b",)
    said = invalid.summary()  # a required test still failing is no regression
    assert "must make pass still fails (test_x::test_b" in said and "passed before" not in said
    neutral = report(["skipped", "passed", "xfailed"], neutral=frozenset([ids[0], ids[2]]))
    assert neutral.score == 1.0 and neutral.earning == 1 and neutral.all_passed
    assert "Neutral, not counted" in neutral.summary() and "test_x::test_c" in neutral.summary()
    skipped = report(["skipped", "passed", "passed"])  # a skip the reference never had
    assert skipped.score == pytest.approx(2 / 3) and not skipped.all_passed
    nothing = report(["passed"] * 3, starter_passed=frozenset(ids))
    assert nothing.score == 0.0 and "cannot be verified" in nothing.reason


@pytest.mark.parametrize("raw", [
    b"", b"not json", b"[1, 2]", b'{"version": 1, "tests": []}',
    b'{"version": 2, "variants": [{"tests": []}]}',
    b'{"version": 2, "variants": [{"tests": [{"id": "a", "outcome": "won"}]}, {"tests": []}]}',
    b'{"version": 2, "variants": [{"tests": [{"id": 5, "outcome": "passed"}]}, {"tests": []}]}',
    b"[" * 100_000,
])
def test_malformed_verdicts_are_refused(raw):
    with pytest.raises(VerdictError):
        parse_verdict(raw)


def test_reference_solution_passes(grader, toy_task):
    report = grader.grade(toy_task, {"calc.py": toy_task.solution["calc.py"].encode()})
    assert isinstance(report, GradeReport)
    assert (report.passed, report.total, report.score, report.all_passed) == (3, 3, 1.0, True)
    # each held site is an emission in the sandbox (held.py), so the run exits 0
    assert report.reason == "" and report.exit_code == 0 and not report.timed_out
    assert (report.earning, report.earned, report.canaried, report.calibrated) == (3, 3, 3, True)
    # every earning test is held: ONE run, every test real, so no canary outcome shows
    assert {t.canary for t in report.tests} == {""} and report.forgery == ()
    assert report.summary() == "Hidden tests: 3 of 3 passed."
    data = report.to_dict()
    assert data["score"] == 1.0 and data["total"] == 3 and isinstance(data["tests"], list)


@pytest.fixture
def harness_requests(monkeypatch) -> list[dict]:
    """Every harness request, in order (a spy: the real harness runs)."""
    from opd_gym.grading import launch

    requests: list[dict] = []
    real = launch.StartedHarness.run

    def spied(harness, request, timeout):
        requests.append(request)
        return real(harness, request, timeout)

    monkeypatch.setattr(launch.StartedHarness, "run", spied)
    return requests


def _runs(requests: list[dict]) -> list[int]:
    """The variant count of each harness request."""
    return [len(r["variants"]) for r in requests]


def test_a_task_whose_earning_tests_are_held_is_graded_in_one_run(local_pool, toy_task,
                                                                  harness_requests):
    """Plain pytest's cost: with every earning test held, a grade runs the hidden tests once
    (and so do the starter's and null submission's calibration runs, which have no canaries);
    the reference's calibration run, every run of `hold=False` and every grade of
    `single_run=False` keep the two variants."""
    right = {"calc.py": toy_task.solution["calc.py"].encode()}
    held = Grader(local_pool)
    assert held.grade(toy_task, right).score == 1.0
    assert _runs(harness_requests) == [1, 1, 2, 1]  # starter, null, reference; the grade
    wrong = held.grade(toy_task, {"calc.py": b"def add(a, b):\n    return a + b + 1\n"})
    assert wrong.score == 0.0 and _runs(harness_requests)[-1] == 1
    assert held.calibration(toy_task).held_only
    for twice in (Grader(local_pool, hold=False), Grader(local_pool, single_run=False)):
        report = twice.grade(toy_task, right)
        assert report.score == 1.0 and {t.canary for t in report.tests} == {"failed"}
        assert _runs(harness_requests)[-1] == 2
    assert not Grader(local_pool, hold=False).calibration(toy_task).held_only


FORGED_GATE = """\
import _pytest.python as _p

_real = _p.Function.runtest


def _runtest(self):  # the broken gate itself (not a clone of it) "passes" without running
    if self.name != "test_mul" or not isinstance(self.parent, _p.Module):
        _real(self)


_p.Function.runtest = _runtest


def add(a, b):
    return a + b


def mul(a, b):
    return 0
"""


def test_a_gate_whose_canary_is_not_held_keeps_two_runs_and_a_forged_regression_pays_nothing(
        local_pool, make_task, harness_requests):
    """The earning test is held, but a gate (an assertion the host cannot hold) has a valid
    canary: its second run is judged, so the grade keeps two runs. A fix that breaks that gate
    and forges its pass (a no-op `runtest` for it alone) is caught by that canary on every
    grade; in one run only a sentinel drawn on that very gate (2 per grade, from up to 8
    sites) could catch it, which on a real suite's hundreds of gates it mostly is not."""
    mul = "def mul(a, b):\n    return a * b\n"
    task = make_task(
        "toy_gate", files={"calc.py": "def add(a, b):\n    raise NotImplementedError\n\n\n" + mul},
        tests={"test_calc.py": "from calc import add, mul\n\n\ndef test_add():\n"
                               "    assert add(1, 2) == 3\n\n\ndef test_mul():\n"
                               "    assert mul(2, 3) > 5\n"},
        solution={"calc.py": "def add(a, b):\n    return a + b\n\n\n" + mul})
    grader = Grader(local_pool)
    right = grader.grade(task, {"calc.py": task.solution["calc.py"].encode()})
    assert right.score == 1.0 and right.earning == 1, right
    assert grader.calibration(task).held_only and _runs(harness_requests)[-1] == 2
    forged = grader.grade(task, {"calc.py": FORGED_GATE.encode()})
    assert forged.score == 0.0 and forged.forgery == ("test_calc::test_mul",), forged
    assert _runs(harness_requests)[-1] == 2


def test_partial_solution_gives_a_fraction(grader, toy_task):
    code = "def add(a, b):\n    return a + b if a >= 0 else 0\n"
    report = grader.grade(toy_task, {"calc.py": code.encode()})
    assert (report.passed, report.failed, report.total) == (2, 1, 3)
    assert report.score == pytest.approx(2 / 3)
    assert "test_negative" in report.summary()
    failing = [t for t in report.tests if t.outcome == "failed"]
    assert failing[0].name.endswith("test_negative") and "assert" in failing[0].message


def test_starter_code_and_syntax_errors_score_zero(grader, toy_task):
    starter = grader.grade(toy_task, {"calc.py": toy_task.files["calc.py"].encode()})
    assert starter.score == 0.0 and starter.forgery == () and starter.reason == ""
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
    task = make_task(timeout=3.0)
    report = grader.grade(task, {"calc.py": b"import time\ndef add(a, b):\n    time.sleep(30)\n"})
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


def test_always_equal_result_is_caught_as_a_forgery(grader, local_pool, toy_task):
    liar = b"class A:\n    def __eq__(self, other):\n        return True\n\n" \
           b"def add(a, b):\n    return A()\n"
    # the default Grader holds each `add(...) == N` on the host: the liar's value is no
    # builtin data, so every held site fails before a canary could show the forgery
    report = grader.grade(toy_task, {"calc.py": liar})
    assert report.score == 0.0 and report.passed == 0 and report.failed == 3, report.tests
    assert all(t.message.startswith(HELD_FAILED) for t in report.tests), report.tests
    # the canary scheme alone (hold=False): the real tests did pass, only the canaries
    # expose it
    report = Grader(local_pool, hold=False).grade(toy_task, {"calc.py": liar})
    assert report.score == 0.0 and len(report.forgery) == 3 and "canary passed" in report.reason
    assert report.passed == 3


def test_starter_passing_tests_are_gates(grader, make_task):
    tests = ("from calc import add, sub\n\ndef test_sub():\n    assert sub(5, 3) == 2\n\n"
             "def test_add():\n    assert add(2, 3) == 5\n")
    task = make_task(tests={"test_calc.py": tests},
                     files={"calc.py": "def add(a, b):\n    return 0\n\n"
                                       "def sub(a, b):\n    return a - b\n"},
                     solution={"calc.py": "def add(a, b):\n    return a + b\n\n"
                                          "def sub(a, b):\n    return a - b\n"})
    untouched = grader.grade(task, {k: v.encode() for k, v in task.files.items()})
    assert untouched.score == 0.0 and untouched.passed == 1 and untouched.earning == 1
    gates = {t.name: t.earns for t in untouched.tests}
    assert gates == {"test_calc::test_sub": False, "test_calc::test_add": True}
    solved = grader.grade(task, {k: v.encode() for k, v in task.solution.items()})
    assert solved.score == 1.0 and solved.all_passed
    broke_gate = grader.grade(task, {"calc.py": b"def add(a, b):\n    return a + b\n\n"
                                                b"def sub(a, b):\n    return 0\n"})
    assert broke_gate.score == 0.0 and broke_gate.gates_failed == ("test_calc::test_sub",)


def test_a_canary_the_reference_passes_is_invalid(grader, make_task):
    # every candidate of test_unreached (perturb or complement its one assertion) is unreached:
    # its redraws run out and it stays a gate (test_an_invalid_canary_is_redrawn_...: one left)
    tests = ("from calc import add\n\ndef test_unreached():\n    result = add(1, 2)\n"
             "    if result == 99:\n        assert result == 99\n\n"
             "def test_add():\n    assert add(2, 3) == 5\n")
    task = make_task(tests={"test_calc.py": tests})
    report = grader.grade(task, {"calc.py": task.solution["calc.py"].encode()})
    assert report.score == 1.0 and report.canaried == 1 and report.forgery == ()
    earns = {t.name: t.earns for t in report.tests}
    assert earns == {"test_calc::test_unreached": False, "test_calc::test_add": True}


def test_calibration_runs_once_per_task_even_when_grades_race(local_pool, toy_task):
    from concurrent.futures import ThreadPoolExecutor

    class Counting:
        def __init__(self):
            self.acquired = 0

        def acquire(self, timeout=None):
            self.acquired += 1
            return local_pool.acquire(timeout)

        def release(self, sandbox):
            local_pool.release(sandbox)

    source = Counting()
    grader = Grader(source)
    files = {"calc.py": toy_task.solution["calc.py"].encode()}
    with ThreadPoolExecutor(3) as workers:
        reports = list(workers.map(lambda _: grader.grade(toy_task, files), range(3)))
    assert [r.score for r in reports] == [1.0, 1.0, 1.0]
    # starter, null submission and reference once, then one run per grade
    assert source.acquired == 3 + 3
    grader.grade(toy_task, files)
    assert source.acquired == 7


def test_calibration_failure_is_an_infra_error(grader, make_task):
    task = make_task(solution={"calc.py": "import time\ntime.sleep(60)\n"}, timeout=2.0)
    report = grader.grade(task, {"calc.py": b"def add(a, b):\n    return a + b\n"})
    assert report.infra_error and report.score == 0.0 and "calibration" in report.reason


def test_exact_test_ids_are_enforced(grader, make_task):
    ids = ("test_calc.py::test_small", "test_calc.py::test_negative", "test_calc.py::test_zero")
    task = make_task(test_ids=ids)
    files = {"calc.py": task.solution["calc.py"].encode()}
    assert grader.grade(task, files).score == 1.0
    wrong = make_task(task_id="toy_ids", test_ids=(*ids, "test_calc.py::test_ghost"))
    report = grader.grade(wrong, files)
    assert report.score == 0.0 and "test_ghost" in report.reason


def test_a_refused_path_is_dropped_not_a_failed_grade(grader, toy_task):
    files = {"calc.py": toy_task.solution["calc.py"].encode(), "../outside.py": b"x = 1\n"}
    report = grader.grade(toy_task, files)
    assert report.score == 1.0 and "../outside.py" in report.dropped, report


def test_a_timed_out_variant_names_the_canaries_it_was_running():
    sources = {"test_x.py": "def test_a():\n    assert f() == 1\n\n"
                            "def test_b():\n    assert f() == 2\n"}
    calibration, canaries = _calibration(sources)
    variants = build_variants(sources, canaries)
    ids = ["test_x.py::test_a", "test_x.py::test_b"]
    canary_of_a = 1 - variants.real_in["test_x.py::test_a"]
    runs = [{"exit": 0, "tests": [{"id": i, "outcome": "passed"} for i in ids],
             "collect_errors": [], "timed_out": False, "output": "", "running": []}
            for _ in range(2)]
    runs[canary_of_a] = {**runs[canary_of_a], "timed_out": True, "running": [ids[0]],
                         "tests": [e for e in runs[canary_of_a]["tests"] if e["id"] != ids[0]]}
    import json

    raw = json.dumps({"version": 2, "variants": runs}).encode()
    merged = merge(parse_verdict(raw), set(ids), True, canaries, variants)
    assert merged.hung_canaries == {ids[0]} and merged.real[ids[0]][0] == "passed"
    assert merged.timed_out and "while running test_x::test_a" in merged.reason
    # The variant that held the real test hung: no canary to blame.
    runs[canary_of_a], runs[1 - canary_of_a] = runs[1 - canary_of_a], runs[canary_of_a]
    raw = json.dumps({"version": 2, "variants": runs}).encode()
    assert merge(parse_verdict(raw), set(ids), True, canaries, variants).hung_canaries == set()
    bad = json.dumps({"version": 2, "variants": [{**runs[0], "running": [3]}, runs[1]]})
    with pytest.raises(VerdictError):
        parse_verdict(bad.encode())


HANGING_CANARY_TESTS = '''\
import threading

from calc import add


def test_add_in_a_thread():
    ev = threading.Event()

    def worker():
        x = add(1, 2)
        assert x == 3
        ev.set()

    threading.Thread(target=worker, daemon=True).start()
    ev.wait()


def test_small():
    assert add(2, 2) == 4
'''


def test_a_canary_that_hangs_the_reference_is_dropped_and_its_test_gates(grader, local_pool,
                                                                         make_task):
    task = make_task(tests={"test_calc.py": HANGING_CANARY_TESTS}, timeout=4.0)
    calibration = grader.calibration(task)
    assert calibration.calibrated
    assert "test_calc.py::test_add_in_a_thread" not in calibration.canaries.canaries
    assert "test_calc.py::test_small" in calibration.canaries.canaries
    report = grader.grade(task, {"calc.py": task.solution["calc.py"].encode()})
    assert report.score == 1.0 and not report.timed_out, report
    earns = {t.name: t.earns for t in report.tests}
    assert earns == {"test_calc::test_add_in_a_thread": False, "test_calc::test_small": True}
    wrong_code = {"calc.py": b"def add(a, b):\n    return a - b\n"}
    # the worker's `assert x == 3` is held (the default Grader): the sandbox only emits the
    # value, so the wrong answer no longer hangs the test; the host fails it, a gate
    wrong = grader.grade(task, wrong_code)
    assert wrong.score == 0.0 and not wrong.timed_out, wrong
    assert wrong.gates_failed == ("test_calc::test_add_in_a_thread",), wrong
    assert {t.name: t.message.startswith(HELD_FAILED) for t in wrong.tests} == {
        "test_calc::test_add_in_a_thread": True, "test_calc::test_small": True}, wrong.tests
    # the canary scheme alone (hold=False): the assertion fails in the worker, which never
    # sets the event, and the grade times out naming the test
    wrong = Grader(local_pool, hold=False).grade(task, wrong_code)
    assert wrong.score == 0.0 and wrong.timed_out and "test_add_in_a_thread" in wrong.reason


SLOW_STARTER = """\
import time


def add(a, b):
    time.sleep(0.6)
    return a + b if a < 3 else 0
"""
SLOW_TESTS = """\
from calc import add


def test_one():
    assert add(1, 1) == 2


def test_two():
    assert add(2, 2) == 4


def test_three():
    assert add(3, 3) == 6
"""


def test_a_starter_run_cut_short_by_a_load_spike_runs_again(local_pool, make_task,
                                                            monkeypatch):
    # A load spike cannot be made on demand, so this one is simulated: the untouched
    # starter's first calibration run gets a budget too short to finish (the real harness
    # kills it in its second test, as a busy host would). Taken as it is, the tests it never
    # finished would earn, and the untouched starter, finishing them later, would be paid.
    task = make_task(files={"calc.py": SLOW_STARTER}, tests={"test_calc.py": SLOW_TESTS},
                     timeout=30.0)
    real_run, cut = Grader._run, []

    def run(self, task, *args, **options):
        if options.get("calibrating") == "the untouched starter" and not cut:
            cut.append(task.timeout)
            task = dataclasses.replace(task, timeout=0.9)
        return real_run(self, task, *args, **options)

    monkeypatch.setattr(Grader, "_run", run)
    grader = Grader(local_pool)
    calibration = grader.calibration(task)
    assert cut == [30.0]
    assert {"test_calc.py::test_one", "test_calc.py::test_two"} <= calibration.starter_passed
    assert calibration.earning == {"test_calc.py::test_three"}, calibration.earning
    base = grader.grade(task, {"calc.py": SLOW_STARTER.encode()})
    assert base.score == 0.0 and base.earning == 1, base
    assert grader.grade(task, {"calc.py": task.solution["calc.py"].encode()}).score == 1.0


CLOCK = """\
import time

_frozen = []


def freeze(at):
    _frozen.append(at)


def unfreeze():
    _frozen.pop()


def frozen():
    return bool(_frozen)


def now():
    return _frozen[-1] if _frozen else time.time()


def elapsed(start, end):
    return end - start
"""


def frozen_clock_tests(freezers: int, followers: int) -> str:
    """freezegun's shape: a test freezes the clock, asserts, and unfreezes after the assertion
    (no try/finally), each followed by tests of the live clock."""
    tests = ["import clock\n"]
    for i in range(freezers):
        tests.append(f"\ndef test_frozen_{i}():\n    clock.freeze({i}00.5)\n"
                     f"    assert clock.now() == {i}00.5\n    clock.unfreeze()\n")
        tests += [f"\ndef test_live_{i}_{j}():\n    assert clock.now() > 1e9\n"
                  for j in range(followers)]
    return "\n".join(tests)


# a test whose expectation the host holds: tests that only canaries guard, and fewer than
# canary.MIN_UNHELD_EARNING, do not earn (a coin per test would be paid)
ELAPSED_TEST = "import clock\n\n\ndef test_elapsed():\n    assert clock.elapsed(1.5, 4.0) == 2.5\n"


def clock_task(make_task, tests: dict[str, str]):
    starter = CLOCK.replace("return _frozen[-1] if _frozen else time.time()",
                            "raise NotImplementedError").replace(
        "return end - start", "raise NotImplementedError")
    return make_task(task_id="frozen_clock", files={"clock.py": starter},
                     tests={**tests, "test_elapsed.py": ELAPSED_TEST},
                     solution={"clock.py": CLOCK})


def test_a_canary_whose_failure_leaves_state_behind_is_dropped(grader, make_task):
    """A canary fails before its test's cleanup (freezegun's `stop()`): the clock stays frozen
    and later tests of its run fail, where plain pytest passes them. Calibration finds those
    tests against a run of the reference without canaries, drops the canaries that failed
    before them (each round with its own layout of the runs), and an honest solution gets
    plain pytest's verdict on every grade (before: a failed test in most grades)."""
    task = clock_task(make_task, {"test_clock.py": frozen_clock_tests(3, 6)})
    calibration = grader.calibration(task)
    assert not {f"test_clock.py::test_frozen_{i}" for i in range(3)} \
        & set(calibration.canaries.canaries), calibration.canaries.canaries
    assert calibration.canaries.canaries  # the live tests keep theirs
    for _ in range(3):
        report = grader.grade(task, {"clock.py": CLOCK.encode()})
        assert report.score == 1.0, [(t.name, t.message) for t in report.tests
                                     if t.outcome != "passed"]
        assert {t.outcome for t in report.tests} == {"passed"}


def test_a_canary_whose_leftover_state_breaks_pytest_is_dropped(grader, make_task):
    """The leftover state breaks pytest itself in a later test (freezegun's suite reloads its
    module, which takes the frozen clock for the real one: RecursionError, INTERNALERROR):
    the run stops short of its tests, whichever holds the real ones. The canaries that failed
    before that point are dropped, and the reference's grade is whole (before: calibration
    failed, an infra error on every grade)."""
    conftest = ("import clock\n\n\ndef pytest_runtest_logreport(report):\n"
                "    if report.when == 'setup' and clock.frozen():\n"
                "        raise RuntimeError('a frozen clock broke the run')\n")
    task = clock_task(make_task, {"conftest.py": conftest,
                                  "test_clock.py": frozen_clock_tests(2, 1)})
    calibration = grader.calibration(task)
    assert not {"test_clock.py::test_frozen_0", "test_clock.py::test_frozen_1"} \
        & set(calibration.canaries.canaries), calibration.canaries.canaries
    report = grader.grade(task, {"clock.py": CLOCK.encode()})
    assert report.score == 1.0 and not report.infra_error, report


def test_a_canary_whose_leftover_state_surfaces_much_later_is_found_by_the_state_it_left(
        grader, make_task):
    """The leftover state shows only tests later, after passing tests that do not read it
    (freezegun's suite passes dozens of tests under a frozen clock, then reloads its module).
    The runs of the leak rounds probe state: each canary's digest of the module-level state
    it left changed, against its real test's, names the canary whatever ran in between."""
    conftest = ("import clock\n\n\ndef pytest_runtest_logreport(report):\n"
                "    if report.when == 'setup' and report.nodeid.endswith('test_z_reload') \\\n"
                "            and clock.frozen():\n"
                "        raise RuntimeError('a frozen clock broke the run')\n")
    tests = frozen_clock_tests(2, 0) + "".join(
        f"\n\ndef test_unrelated_{j}():\n    assert clock.double({j}) == {2 * j}\n"
        for j in range(1, 7)) + "\n\ndef test_z_reload():\n    assert clock.now() > 1e9\n"
    solution = CLOCK + "\n\ndef double(x):\n    return 2 * x\n"
    starter = solution.replace("return 2 * x", "raise NotImplementedError")
    task = make_task(task_id="frozen_clock", files={"clock.py": starter},
                     tests={"conftest.py": conftest, "test_clock.py": tests},
                     solution={"clock.py": solution})
    calibration = grader.calibration(task)
    assert not {"test_clock.py::test_frozen_0", "test_clock.py::test_frozen_1"} \
        & set(calibration.canaries.canaries), calibration.canaries.canaries
    report = grader.grade(task, {"clock.py": solution.encode()})
    assert report.score == 1.0 and not report.infra_error, report


INTERRUPT_TESTS = '''\
import pytest
from calc import add, stop


def test_stop_interrupts():
    with pytest.raises(KeyboardInterrupt):
        stop()


def test_add():
    assert add(1, 2) == 3


def test_add_more():
    assert add(2, 2) == 4
'''


def test_a_keyboard_interrupt_fails_its_test_and_the_run_goes_on(grader, make_task):
    """A KeyboardInterrupt escaping a test fails that test and later tests still run, instead
    of ending the variant: a canary of `pytest.raises(KeyboardInterrupt)` would otherwise stop
    every later test of its run (click's pager tests), and the task could never calibrate."""
    solution = "def add(a, b):\n    return a + b\n\n\ndef stop():\n    raise KeyboardInterrupt\n"
    starter = "def add(a, b):\n    raise NotImplementedError\n\n\ndef stop():\n    pass\n"
    task = make_task(files={"calc.py": starter}, tests={"test_calc.py": INTERRUPT_TESTS},
                     solution={"calc.py": solution})
    report = grader.grade(task, {"calc.py": solution.encode()})
    assert report.score == 1.0 and report.reason == "", report
    wrong = solution.replace("return a + b", "raise KeyboardInterrupt")
    report = grader.grade(task, {"calc.py": wrong.encode()})
    outcomes = {t.name: t.outcome for t in report.tests}
    assert outcomes == {"test_calc::test_stop_interrupts": "passed",
                        "test_calc::test_add": "failed", "test_calc::test_add_more": "failed"}
    # only stop() is right; held expectations (the default) hold both adds, so the
    # `pytest.raises` test, which holds no site, gates: nothing earned
    assert {t.name for t in report.tests if t.earns} == {"test_calc::test_add",
                                                         "test_calc::test_add_more"}, report
    assert report.earned == 0 and not report.infra_error, report
    assert all("KeyboardInterrupt" in t.message for t in report.tests if t.outcome == "failed")


def test_test_ids_select_a_subset_of_the_hidden_file(grader, make_task):
    ids = ("test_calc.py::test_small", "test_calc.py::test_zero")
    task = make_task(test_ids=ids, tests={"test_calc.py": CALC_TESTS_WITH_A_BROKEN_ONE})
    report = grader.grade(task, {"calc.py": task.solution["calc.py"].encode()})
    assert report.score == 1.0 and report.reason == "", report
    assert sorted(t.name for t in report.tests) == ["test_calc::test_small",
                                                   "test_calc::test_zero"]


CALC_TESTS_WITH_A_BROKEN_ONE = '''\
from calc import add


def test_small():
    assert add(1, 2) == 3


def test_broken_upstream():
    assert add(1, 1) == 3


def test_zero():
    assert add(0, 0) == 0
'''


# -- doctests of package modules and writes in the cwd (issue: real project layouts) -------
def src_doctest_task():
    """The src-layout package of test_harness.py as a task: a bug in add(), its doctests
    (from the reference tree) and a test module hidden, plus a module caching in its cwd."""
    from test_harness import CWD_SOLUTION, CWD_TESTS, SRC_INI, SRC_PROJECT, SRC_TESTS

    from opd_gym.tasks import Task

    core = SRC_PROJECT["src/pkg/core.py"]
    ids = ("src/pkg/__init__.py::pkg", "src/pkg/core.py::pkg.core.Box",
           "src/pkg/core.py::pkg.core.Box.double", "src/pkg/core.py::pkg.core.Box.twice",
           "src/pkg/core.py::pkg.core.add", "src/pkg/time.py::pkg.time.now",
           "tests/test_core.py::test_add", "tests/test_core.py::test_clock",
           "tests/test_m.py::test_cache_in_cwd")
    return Task(
        id="src_doctests", prompt="Fix add() in src/pkg/core.py.",
        files={**SRC_PROJECT, "src/pkg/core.py": core.replace("return a + b", "return a - b"),
               "memo.py": CWD_SOLUTION},
        tests={**SRC_TESTS, "tests/test_m.py": CWD_TESTS},
        solution={"src/pkg/core.py": core}, pytest_ini=SRC_INI, test_ids=ids, timeout=60.0)


def test_doctest_sources_are_read_from_the_ids_and_kept_in_the_workspace():
    from opd_gym.grading.expected import doctest_sources
    from opd_gym.grading.expected import test_paths as hidden_test_paths
    from opd_gym.grading.grader import hidden_files

    task = src_doctest_task()
    sources = doctest_sources(task)
    assert sorted(sources) == ["src/pkg/__init__.py", "src/pkg/core.py", "src/pkg/time.py"]
    assert "return a + b" in sources["src/pkg/core.py"]  # pristine: the reference's text
    assert hidden_test_paths(task) == ["tests/test_core.py", "tests/test_m.py"]
    hidden = dataclasses.replace(task, tests={**task.tests, "src/pkg/time.py": "# hidden\n"})
    assert doctest_sources(hidden)["src/pkg/time.py"] == "# hidden\n"  # task.tests first
    assert "src/pkg/time.py" not in hidden_files(hidden)  # never laid over the workspace
    keep, dropped = select_files(hidden, {"src/pkg/time.py": b"x", "tests/test_m.py": b"y"})
    assert keep == {"src/pkg/time.py": b"x"} and dropped == ["tests/test_m.py"]


def _graded(grader, task, core):
    files = {**task.files, "src/pkg/core.py": core}
    return grader.grade(task, {p: t.encode() for p, t in files.items()})


def _check_doctest_task_grades(grader):
    task = src_doctest_task()
    core = task.solution["src/pkg/core.py"]
    honest = _graded(grader, task, core)
    assert honest.reason == "" and honest.score == 1.0, (honest.reason, honest.output)
    assert {t.outcome for t in honest.tests} == {"passed"} and len(honest.tests) == 9
    buggy = task.files["src/pkg/core.py"]
    lying = buggy.replace(">>> add(2, 3)\n    5", ">>> add(2, 3)\n    -1")
    assert lying != buggy
    report = _graded(grader, task, lying)
    assert report.score == 0.0
    failed = {t.name for t in report.tests if t.outcome == "failed"}
    assert "src.pkg.core::pkg.core.add" in failed, failed


def test_a_task_with_doctests_and_cwd_writes_grades_like_plain_pytest(grader):
    _check_doctest_task_grades(grader)


@pytest.mark.docker
def test_docker_a_task_with_doctests_and_cwd_writes_grades_like_plain_pytest():
    from opd_gym.sandboxes import make_pool

    pool = make_pool("docker", size=1)
    try:
        _check_doctest_task_grades(Grader(pool))
    finally:
        pool.close()


# -- verifiable by construction, nothing for nothing, public errors --------------------------
REDRAWN_TESTS = '''\
from calc import add


def test_unreached_first():
    result = add(1, 2)
    if result == 99:
        assert result == 99
    if result == 98:
        assert result == 98
    assert result > 0


def test_add():
    assert add(2, 3) == 5
'''


def _secret(grader, number):
    """A Grader with a fixed secret (a reproducible draw of canaries)."""
    import hashlib

    grader._secret = hashlib.sha256(f"secret-{number}".encode()).digest()
    return grader


def test_an_invalid_canary_is_redrawn_so_every_secret_earns_the_same(local_pool, make_task):
    # test_unreached_first has five candidates, four unreached: which one a secret draws first
    # decides nothing, the redraws find the reachable `result > 0` (its complement). The
    # canary scheme alone (hold=False): by default test_unreached_first, which holds no site,
    # gates wherever test_add holds one (below), whatever its canary
    task = make_task(tests={"test_calc.py": REDRAWN_TESTS})
    held = Grader(local_pool).grade(task, {"calc.py": task.solution["calc.py"].encode()})
    assert held.score == 1.0 and {t.name for t in held.tests if t.earns} == {
        "test_calc::test_add"}, held
    earning = set()
    for number in range(3):
        grader = _secret(Grader(local_pool, hold=False), number)
        calibration = grader.calibration(task)
        assert calibration.calibrated
        canary = calibration.canaries.canaries["test_calc.py::test_unreached_first"]
        assert (canary.original, canary.replacement) == (">", "<="), canary
        earning.add(calibration.earning)
        report = grader.grade(task, {"calc.py": task.solution["calc.py"].encode()})
        assert report.score == 1.0 and report.earning == 2, report
        wrong = grader.grade(task, {"calc.py": b"def add(a, b):\n    return -1\n"})
        assert wrong.score == 0.0 and wrong.forgery == ()
    assert earning == {frozenset({"test_calc.py::test_unreached_first",
                                  "test_calc.py::test_add"})}


WITNESSED_TESTS = """\
import pytest

from shout import shout


def test_shout_literal():
    assert shout("z") == "Z!"


@pytest.mark.parametrize("word", ["ab", "cd", "ef"])
def test_shout(word):
    assert shout("x") == "X!"
    assert shout(word) == word.upper() + "!"
    assert shout("y") == "Y!"
"""


def test_a_computed_expectation_is_held_whatever_the_secret(local_pool, make_task):
    """`shout(word) == word.upper() + "!"` is held with the value the reference computed, once
    another process computed the same. That second computation used to be the test's canary
    copy, which stops at its canary's assertion: where the secret put the canary on `"X!"`,
    before the computed site, it was never witnessed and the site was not held. Calibration
    now witnesses it in a run holding every test real twice, so the site is held under every
    secret, wherever the canary sits."""
    solution = 'def shout(text):\n    return text.upper() + "!"\n'
    task = make_task("toy_witnessed", files={"shout.py": "def shout(text):\n    return text\n"},
                     tests={"test_shout.py": WITNESSED_TESTS},
                     solution={"shout.py": solution})
    helds, canary_lines = set(), set()
    for number in range(6):
        grader = _secret(Grader(local_pool), number)
        calibration = grader.calibration(task)
        canary_lines.add(calibration.canaries.canaries["test_shout.py::test_shout"].line)
        helds.add(tuple(sorted(calibration.held.items())))
        report = grader.grade(task, {"shout.py": solution.encode()})
        assert report.score == 1.0, report
        wrong = 'def shout(text):\n    return text.upper() + "?"\n'
        assert grader.grade(task, {"shout.py": wrong.encode()}).score == 0.0
    assert len(canary_lines) > 1  # the secrets put the canary before and after the site
    assert len(helds) == 1, helds
    assert dict(helds.pop())["test_shout.py::test_shout"] == (0, 1, 2)


UNRESOLVED_WAIT_TESTS = '''\
import _thread
import time

from calc import add


class Flag:
    """The suite's own latch: no import says it waits, so its test gets a canary."""

    def __init__(self):
        self.up = False

    def set(self):
        self.up = True

    def wait(self):
        while not self.up:
            time.sleep(0.01)


def test_add_in_a_thread():
    flag = Flag()

    def worker():
        assert add(1, 2) == 3
        flag.set()

    _thread.start_new_thread(worker, ())
    flag.wait()


def test_big():
    assert add(7, 1) == 8
'''


def test_a_wait_the_imports_do_not_show_is_left_to_the_hung_canary_retry(grader, make_task):
    # the starter passes the threaded test (no hang there); its canary hangs the reference
    task = make_task(tests={"test_calc.py": UNRESOLVED_WAIT_TESTS}, timeout=4.0,
                     files={"calc.py": "def add(a, b):\n    return a + b if a < 5 else 0\n"})
    calibration = grader.calibration(task)
    assert calibration.calibrated
    assert "test_calc.py::test_add_in_a_thread" not in calibration.canaries.canaries
    assert calibration.earning == {"test_calc.py::test_big"}
    report = grader.grade(task, {"calc.py": task.solution["calc.py"].encode()})
    assert report.score == 1.0 and not report.timed_out, report


def test_calibration_raises_a_public_error_and_grade_never_raises(toy_task):
    from opd_gym import CalibrationError as Exported
    from opd_gym.errors import CalibrationError, GradingError, OPDGymError
    from opd_gym.grading import CalibrationError as FromGrading
    from opd_gym.sandboxes import SandboxError

    assert Exported is CalibrationError is FromGrading
    assert issubclass(CalibrationError, GradingError) and issubclass(GradingError, OPDGymError)

    class Broken:
        def acquire(self, timeout=None):
            raise SandboxError("engine down")

        def release(self, sandbox):
            raise AssertionError("nothing to release")

    grader = Grader(Broken())
    with pytest.raises(CalibrationError, match="engine down") as caught:
        grader.calibration(toy_task)
    assert caught.value.infra_error and "engine down" in caught.value.reason
    assert caught.value.fields["infra_error"] is True
    report = grader.grade(toy_task, {})
    assert report.infra_error and "engine down" in report.reason and report.score == 0.0


def test_tests_a_null_submission_passes_are_gates(grader, make_task):
    tests = ("from calc import add, empty\n\n"
             "def test_nothing():\n    assert empty() == []\n\n"
             "def test_add():\n    assert add(2, 3) == 5\n")
    task = make_task(
        tests={"test_calc.py": tests},
        files={"calc.py": "def add(a, b):\n    raise NotImplementedError\n\n"
                          "def empty():\n    raise NotImplementedError\n",
               "helpers.py": "X = 1\n"},
        solution={"calc.py": "def add(a, b):\n    return a + b\n\n"
                             "def empty():\n    return []\n",
                  "helpers.py": "X = 1\n"})
    from opd_gym.grading.grader import NULL_MODULE, null_submission

    assert null_submission(task) == {"calc.py": NULL_MODULE, "helpers.py": "X = 1\n"}
    # a null that does nothing: `empty` returns [] by doing nothing at all
    nothing = ("def add(a, b):\n    return None\n\ndef empty():\n    return []\n")
    calibration = grader.calibration(task)
    assert calibration.null_passed == frozenset()  # the null calc.py's names all raise
    assert calibration.earning == {"test_calc.py::test_nothing", "test_calc.py::test_add"}
    from opd_gym.grading import Calibration

    gated = Calibration(calibration.canaries, null_passed=frozenset({"test_calc.py::test_add"}),
                        reference_ids=calibration.reference_ids, calibrated=True)
    assert gated.earning == {"test_calc.py::test_nothing"}
    assert grader.grade(task, {"calc.py": nothing.encode()}).score == 0.5


def _share_bare_runs(graders):
    """The calibration runs without canaries (the starter's, the null submission's) do not
    depend on the secret: the Graders share them, which keeps the three-secret test short."""
    import threading

    from opd_gym.grading import task_key

    done: dict = {}
    locks: dict = {}
    guard = threading.Lock()
    for grader in graders:
        def shared(task, keep, canaries, *args, _run=grader._run, **kwargs):
            what = kwargs.get("calibrating", args[0] if args else "")
            if not what or canaries.canaries:
                return _run(task, keep, canaries, *args, **kwargs)
            key = (task_key(task), what, tuple(sorted(keep.items())))
            with guard:
                lock = locks.setdefault(key, threading.Lock())
            with lock:
                if key not in done:
                    done[key] = _run(task, keep, canaries, *args, **kwargs)
                return done[key]

        grader._run = shared
    return graders


@pytest.fixture(scope="module")
def docker_graders():
    """Three Graders with different secrets over one shared Docker pool (closed with the
    module: the session's `docker_grader` would hold containers through tests/sandboxes,
    whose pool tests count what their process owns)."""
    from opd_gym.sandboxes import make_pool

    with make_pool("docker", size=4, workers=4) as pool:
        yield _share_bare_runs([_secret(Grader(pool), number) for number in range(3)])


@pytest.mark.docker
@pytest.mark.slow
def test_builtin_tasks_earn_the_same_tests_under_every_secret(docker_graders):
    """Verifiable by construction: built-in tasks have earning tests, the same ones under
    three secrets (the null submission's gates included). Every other task of the suite, for
    CI's time: the session grader's calibrations already require every task to earn
    (tests/security), and `test_an_invalid_canary_is_redrawn_so_every_secret_earns_the_same`
    pins the redraw that makes this hold."""
    from concurrent.futures import ThreadPoolExecutor

    from opd_gym.tasks import load_suite

    suite = load_suite("coding")[::2]
    jobs = [(grader, task) for grader in docker_graders for task in suite]
    with ThreadPoolExecutor(4) as workers:
        calibrations = list(workers.map(lambda job: job[0].calibration(job[1]), jobs))
    problems = []
    for index, task in enumerate(suite):
        mine = calibrations[index::len(suite)]
        earning = {c.earning for c in mine}
        if not all(c.calibrated for c in mine) or len(earning) != 1 or not mine[0].earning:
            problems.append((task.id, [sorted(e) for e in earning]))
    assert not problems, problems


@pytest.mark.docker
def test_a_grade_takes_a_sandbox_whose_harness_already_waits(docker_graders, toy_task,
                                                             monkeypatch):
    """The pool's grading sandboxes come with the harness started (pytest imported) before any
    grade asks; where none is ready, the grade acquires a plain one and starts it there."""
    from opd_gym.grading import launch

    grader = docker_graders[0]
    right = {"calc.py": toy_task.solution["calc.py"].encode()}
    grader.calibration(toy_task)
    started_here: list[launch.StartedHarness] = []
    ran: list[launch.StartedHarness] = []
    real_init, real_run = launch.StartedHarness.__init__, launch.StartedHarness.run

    def init(harness, sandbox):
        if threading.current_thread() is threading.main_thread():
            started_here.append(harness)
        real_init(harness, sandbox)

    def run(harness, request, timeout):
        ran.append(harness)
        return real_run(harness, request, timeout)

    monkeypatch.setattr(launch.StartedHarness, "__init__", init)
    monkeypatch.setattr(launch.StartedHarness, "run", run)
    assert grader.sandboxes.wait_ready(120)
    report = grader.grade(toy_task, right)
    assert report.score == 1.0, report
    assert len(ran) == 1 and started_here == []  # warm: started in the pool's background
    assert ran[0]._ran and ran[0]._exec is None  # the request went to the harness in Docker
    # none ready (taking is turned off): acquired plain, the harness started by the grade
    monkeypatch.setattr(type(grader.sandboxes), "take_prepared", lambda pool: None)
    wrong = grader.grade(toy_task, {"calc.py": b"def add(a, b):\n    return a + b + 1\n"})
    assert wrong.score == 0.0 and len(started_here) == 1 and ran[-1] is started_here[0]


@pytest.mark.docker
@pytest.mark.slow
def test_a_program_that_does_nothing_earns_nothing(docker_graders):
    from opd_gym.tasks import load_suite

    task = next(t for t in load_suite("coding") if t.id == "word_frequency_stdio")
    grader = docker_graders[0]
    for empty in ({"main.py": b""}, {"main.py": b"import sys\n"}):
        report = grader.grade(task, empty)
        assert report.score == 0.0 and report.reason == "", report
        assert report.passed >= 1  # the empty-input test passes, and is a gate
    reference = grader.grade(task, {p: t.encode() for p, t in task.solution.items()})
    assert reference.score == 1.0, reference
    assert "test_word_frequency_stdio.py::test_empty_input" in grader.calibration(task).null_passed


def test_a_missing_dependency_is_named_in_the_calibration_failure(grader, make_task):
    """A test module that imports a package the environment lacks: the calibration's reason
    names the module and the collection error, not just "no tests ran"."""
    from opd_gym.errors import CalibrationError

    task = make_task(tests={"test_calc.py": (
        "import opd_no_such_dependency\nfrom calc import add\n\n\n"
        "def test_add():\n    assert add(2, 3) == 5\n")})
    with pytest.raises(CalibrationError) as caught:
        grader.calibration(task)
    reason = caught.value.reason
    assert "no tests ran" in reason and "collection errors: test_calc.py" in reason
    assert "missing module(s) opd_no_such_dependency" in reason


def test_graders_of_one_secret_share_calibrations_through_a_folder(local_pool, make_task,
                                                                   tmp_path, monkeypatch):
    """Graders in other workers (here threads, each its own file lock) with the same secret
    and folder calibrate a task once; another secret calibrates its own."""
    from concurrent.futures import ThreadPoolExecutor

    calibrated = []
    real = Grader._calibrate
    monkeypatch.setattr(Grader, "_calibrate",
                        lambda self, task, key: calibrated.append(key) or real(self, task, key))
    task = make_task()
    graders = [Grader(local_pool, secret=b"s" * 32, calibrations=tmp_path) for _ in range(3)]
    with ThreadPoolExecutor(3) as workers:
        calibrations = list(workers.map(lambda grader: grader.calibration(task), graders))
    assert len(calibrated) == 1 and calibrations[0].calibrated
    assert calibrations[1] == calibrations[0] == calibrations[2]
    later = Grader(local_pool, secret=b"s" * 32, calibrations=tmp_path)
    assert later.grade(task, {"calc.py": task.solution["calc.py"].encode()}).score == 1.0
    Grader(local_pool, secret=b"t" * 32, calibrations=tmp_path).calibration(task)
    assert len(calibrated) == 2
    # a store another format of calibration wrote is not read: the task is calibrated again
    monkeypatch.setattr(grader_module, "CALIBRATION_FORMAT", grader_module.CALIBRATION_FORMAT + 1)
    Grader(local_pool, secret=b"s" * 32, calibrations=tmp_path).calibration(task)
    assert len(calibrated) == 3


BIG = "def big():\n    return 10 ** 10\n"


def big_task(make_task, tests: str, task_id: str = "unheld_big"):
    return make_task(task_id=task_id, files={"calc.py": "def big():\n    return 0\n"},
                     tests={"test_calc.py": tests}, solution={"calc.py": BIG})


def test_an_in_process_task_only_canaries_guard_needs_many_earning_tests(local_pool,
                                                                         make_task):
    """Three tests that import the solution, none holding an expectation on the host: a
    forgery in pytest's process passing each on a coin (p = 0.3) would be paid 0.3 * 0.7^3
    = 0.10 in expectation, so the task is refused with the cause named. The canary scheme
    alone (hold=False) pays it as before, and so does the same check of a program the tests
    start as a child process (it cannot reach pytest)."""
    in_process = big_task(make_task, "import calc\n" + "".join(
        f"\n\ndef test_big_{i}():\n    assert calc.big() > {i + 1}e9\n" for i in range(3)))
    report = Grader(local_pool).grade(in_process, {"calc.py": BIG.encode()})
    assert report.score == 0.0 and report.passed == 3, report
    assert "none of its 3 earning test(s) holds an expectation" in report.reason, report.reason
    assert Grader(local_pool, hold=False).grade(in_process, {"calc.py": BIG.encode()}).score \
        == 1.0
    child = big_task(make_task, "from opd_grading import run\n\n\ndef big():\n"
                     "    proc = run(['python3', '-c', 'import calc; print(calc.big())'],"
                     " timeout=10)\n    return int(proc.stdout)\n" + "".join(
                         f"\n\ndef test_big_{i}():\n    assert big() > {i + 1}e9\n"
                         for i in range(3)), task_id="unheld_big_child")
    report = Grader(local_pool).grade(child, {"calc.py": BIG.encode()})
    assert report.score == 1.0 and report.earning == 3, report


NAMED = '''\
from collections import namedtuple

Pair = namedtuple("Pair", "low high")


class Folded(str):
    """Equal to any text that differs only in case: not the str the host would compare."""

    def __eq__(self, other):
        return str.lower(self) == str.lower(other)

    __hash__ = str.__hash__


def span(values):
    return Pair(min(values), max(values))


def name(text):
    return Folded(text.upper())
'''

NAMED_TESTS = '''\
import calc


def test_span():
    assert calc.span([3, 1, 2]) == (1, 3)


def test_name():
    assert calc.name("ab") == "ab"
'''


def test_a_reference_value_of_a_subclass_keeping_its_bases_semantics_is_held(grader,
                                                                               make_task):
    """A namedtuple compares as its tuple does, so the reference's value vouches for its site;
    a str subclass with an `__eq__` of its own does not (the host's `==` on its text is not
    the test's), so that site stays unheld; a wrong tuple fails the held site."""
    task = make_task("named_values", files={"calc.py": "def span(values):\n    return None\n\n\n"
                                                      "def name(text):\n    return None\n"},
                     tests={"test_calc.py": NAMED_TESTS}, solution={"calc.py": NAMED})
    calibration = grader.calibration(task)
    assert set(calibration.held) == {"test_calc.py::test_span"}, calibration.held
    assert grader.grade(task, {"calc.py": NAMED.encode()}).score == 1.0
    wrong = grader.grade(task, {"calc.py": NAMED.replace("max(values)", "min(values)").encode()})
    failed = {t.name for t in wrong.tests if t.outcome == "failed"}
    assert failed == {"test_calc::test_span"}, wrong.tests
    assert all(t.message.startswith(HELD_FAILED) for t in wrong.tests if t.outcome == "failed")


def _partial_task(make_task, task_id: str, state: bool = False):
    """Twelve held earning tests, a test with no assertion (no canary: it runs once) and one
    gate the host cannot hold (`mul(2, 3) > 5`, a valid canary), so the gate's second run is
    judged; with `state`, the gate reads what the test with no assertion left in the module
    (a suite handing state from test to test)."""
    mul = "def mul(a, b):\n    return a * b\n"
    first = "\n\ndef test_prepare():\n    STATE['sum'] = add(1, 1)\n"
    held = "".join(f"\n\ndef test_add_{i}():\n    assert add({i}, {i + 1}) == {2 * i + 1}\n"
                   f"    assert add({i + 1}, {i + 3}) == {2 * i + 4}\n" for i in range(12))
    gate = "\n\ndef test_mul():\n" + ("    assert STATE['sum']\n" if state else "") \
        + "    assert mul(2, 3) > 5\n"
    return make_task(
        task_id, files={"calc.py": "def add(a, b):\n    raise NotImplementedError\n\n\n" + mul},
        tests={"test_calc.py": "from calc import add, mul\n\nSTATE = {}\n" + first + held
               + gate},
        solution={"calc.py": "def add(a, b):\n    return a + b\n\n\n" + mul})


def test_a_grades_second_run_holds_only_the_tests_it_judges(local_pool, make_task,
                                                             harness_requests):
    """The gate's second run is judged, the held tests' is not: calibration vouches for a
    partial second run (the gate, and the tests sentinels may be cloned from), and a grade's
    second run deselects every other test, which runs once, real, in the first run. The
    gate's canary still sits in either run at random, so a forged regression of it pays
    nothing on any grade; a wrong fix still scores 0."""
    task = _partial_task(make_task, "toy_partial")
    grader = Grader(local_pool)
    calibration = grader.calibration(task)
    assert calibration.second is not None
    assert "test_calc.py::test_mul" in calibration.second
    assert len(calibration.second) < len(calibration.canaries.tests)
    assert {s.test_id for s in calibration.sentinels} <= calibration.second
    right = {"calc.py": task.solution["calc.py"].encode()}
    placements = set()
    for _ in range(20):  # each grade draws the placement: 6 grades saw one side 1 in 32
        if len(placements) == 2:
            break
        report = grader.grade(task, right)
        assert report.score == 1.0 and report.earning == 12 and report.forgery == (), report
        request = harness_requests[-1]
        assert len(request["variants"]) == 2
        assert set(request["variants"][1]["skip"]) == \
            set(calibration.canaries.tests) - calibration.second
        assert not request["variants"][0].get("skip")
        gate = next(t for t in report.tests if t.name.endswith("::test_mul"))
        assert gate.outcome == "passed" and gate.canary == "failed"
        placements.add("assert mul(2, 3) > 5" in request["variants"][0]["files"]["test_calc.py"])
        held = [t for t in report.tests if "::test_add_" in t.name
                and t.name.rpartition("::")[2] not in {
                    s.test_id.rpartition("::")[2] for s in calibration.sentinels}]
        assert held and all(t.canary == "" for t in held)  # they ran once
        # no held literal shows in either run's text, the second's included, where the tests
        # it leaves out hold their canaries: a reader there learns no answer of a test it runs
        for files in (v["files"]["test_calc.py"] for v in request["variants"]):
            assert not [i for i in range(12) if f"== {2 * i + 1}\n" in files
                        or f"== {2 * i + 4}\n" in files]
    assert placements == {True, False}  # the gate's real test sat in either run
    wrong = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
    assert grader.grade(task, {"calc.py": wrong.encode()}).score == 0.0
    for _ in range(4):
        forged = grader.grade(task, {"calc.py": FORGED_GATE.encode()})
        assert forged.score == 0.0 and forged.forgery == ("test_calc::test_mul",), forged


def test_a_grade_drawn_before_it_is_used_once_and_judged_as_any(local_pool, make_task,
                                                                harness_requests,
                                                                monkeypatch):
    """`prepare` (an env's reset) draws a calibrated task's next grade in the Grader's own
    thread: the grade then runs that draw, the host's held rewrite already done, and scores
    as any grade (1.0 for the fix, 0 for a wrong one, 0 and named for a forged gate). A draw
    serves one grade: each is fresh, the next grade draws its own, and a draw made under
    other settings or before calibration is never used."""
    task = _partial_task(make_task, "toy_prepared")
    grader = Grader(local_pool)
    assert grader.prepare(task) is None  # not calibrated: calibrating runs sandboxes
    calibration = grader.calibration(task)
    drawn_in: list[str] = []  # the thread of each held rewrite
    real = grader_module.held_sites.rewrite

    def spied(*args, **kwargs):
        drawn_in.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(grader_module.held_sites, "rewrite", spied)
    here = threading.current_thread().name
    right = {"calc.py": task.solution["calc.py"].encode()}
    texts = set()
    for _ in range(3):
        drawn = grader.prepare(task)
        assert drawn is not None and grader.prepare(task) is None  # one draw per task
        drawn.result(timeout=60)  # made while the agent works (an episode's turns)
        report = grader.grade(task, right)
        assert report.score == 1.0 and report.earning == 12 and report.forgery == (), report
        assert here not in drawn_in and drawn_in[-1].startswith("opd-grade-draw")
        request = harness_requests[-1]
        assert set(request["variants"][1]["skip"]) == \
            set(calibration.canaries.tests) - calibration.second  # the grade's own layout
        texts.add(tuple(v["files"]["test_calc.py"] for v in request["variants"]))
    assert len(texts) == 3  # each draw fresh: its canaries and sentinels drawn anew
    assert grader.grade(task, right).score == 1.0 and drawn_in[-1] == here  # none left
    wrong = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
    assert grader.prepare(task) is not None
    assert grader.grade(task, {"calc.py": wrong.encode()}).score == 0.0
    for _ in range(3):
        assert grader.prepare(task) is not None
        forged = grader.grade(task, {"calc.py": FORGED_GATE.encode()})
        assert forged.score == 0.0 and forged.forgery == ("test_calc::test_mul",), forged
    drawn = grader.prepare(task)
    assert drawn is not None and drawn.result(timeout=60)
    grader.single_run = False  # a draw made under other settings is not this grade's
    report = grader.grade(task, right)
    assert report.score == 1.0 and drawn_in[-1] == here
    assert not any(v.get("skip") for v in harness_requests[-1]["variants"])


def test_a_suite_handing_state_to_the_second_runs_tests_keeps_both_runs_whole(
        local_pool, make_task, harness_requests):
    """The gate reads what a held test left behind: in a second run without that test it
    would fail, so calibration's reference runs in the partial layout disagree with the full
    run and every test keeps both runs; the reference still scores 1.0."""
    task = _partial_task(make_task, "toy_partial_state", state=True)
    grader = Grader(local_pool)
    assert grader.calibration(task).second is None
    report = grader.grade(task, {"calc.py": task.solution["calc.py"].encode()})
    assert report.score == 1.0, report
    assert not any(v.get("skip") for v in harness_requests[-1]["variants"])
