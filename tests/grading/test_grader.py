"""Grading: hidden tests in a fresh sandbox, untrusted agent files, and every failure path."""

from __future__ import annotations

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
    assert "must keep passing" in broken.summary()
    invalid = report(["passed", "failed", "passed"], invalid=frozenset(ids[1:2]))
    assert invalid.score == 0.0 and invalid.gates_failed == ("test_x::test_b",)
    neutral = report(["skipped", "passed", "xfailed"], neutral=frozenset([ids[0], ids[2]]))
    assert neutral.score == 1.0 and neutral.earning == 1 and neutral.all_passed
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
    assert report.reason == "" and report.exit_code == 1 and not report.timed_out  # canaries
    assert (report.earning, report.earned, report.canaried, report.calibrated) == (3, 3, 3, True)
    assert {t.canary for t in report.tests} == {"failed"} and report.forgery == ()
    assert report.summary() == "Hidden tests: 3 of 3 passed."
    data = report.to_dict()
    assert data["score"] == 1.0 and data["total"] == 3 and isinstance(data["tests"], list)


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


def test_always_equal_result_is_caught_as_a_forgery(grader, toy_task):
    liar = b"class A:\n    def __eq__(self, other):\n        return True\n\n" \
           b"def add(a, b):\n    return A()\n"
    report = grader.grade(toy_task, {"calc.py": liar})
    assert report.score == 0.0 and len(report.forgery) == 3 and "canary passed" in report.reason
    assert report.passed == 3  # the real tests did pass: only the canaries expose it


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
    tests = ("from calc import add\n\ndef test_unreached():\n    result = add(1, 2)\n"
             "    if result == 99:\n        assert result == 99\n    assert result > 0\n\n"
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
    assert source.acquired == 2 + 3  # starter + reference once, then one run per grade
    grader.grade(toy_task, files)
    assert source.acquired == 6


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


def test_a_canary_that_hangs_the_reference_is_dropped_and_its_test_gates(grader, make_task):
    task = make_task(tests={"test_calc.py": HANGING_CANARY_TESTS}, timeout=4.0)
    calibration = grader.calibration(task)
    assert calibration.calibrated
    assert "test_calc.py::test_add_in_a_thread" not in calibration.canaries.canaries
    assert "test_calc.py::test_small" in calibration.canaries.canaries
    report = grader.grade(task, {"calc.py": task.solution["calc.py"].encode()})
    assert report.score == 1.0 and not report.timed_out, report
    earns = {t.name: t.earns for t in report.tests}
    assert earns == {"test_calc::test_add_in_a_thread": False, "test_calc::test_small": True}
    wrong = grader.grade(task, {"calc.py": b"def add(a, b):\n    return a - b\n"})
    assert wrong.score == 0.0 and wrong.timed_out and "test_add_in_a_thread" in wrong.reason


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
