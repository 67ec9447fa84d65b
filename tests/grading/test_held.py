"""Host-held expectations (opd_gym/grading/held.py): which sites are held, how both runs are
rewritten, and how the host judges emitted values. Static; the Docker side is in
tests/security/test_split_collusion.py."""

from __future__ import annotations

from opd_gym.grading import held

TESTS = '''\
from calc import add


def test_plain():
    x = add(1, 2)
    assert x == 3
    assert add(2,
               2) == 40, "message"
    assert 5 != add(1, 1)
    assert add(0, 0) is not None


def test_branchy():
    if add(1, 1):
        assert add(1, 1) == 2
    assert add(7, 0) == 7
    return
    assert add(8, 0) == 8


def test_helper():
    def check(candidate):
        assert candidate(3, 4) == 7
        for n in range(2):
            assert candidate(n, 0) == n

    check(add)


def test_nothing_literal():
    expected = add(1, 1)
    assert add(2, 0) == expected
'''


def test_candidates_are_straight_line_literal_comparisons():
    found = held.candidates({"test_calc.py": TESTS}, ["test_calc.py"])
    assert found == {"test_calc.py::test_plain": (1, 2, 3, 4),
                     "test_calc.py::test_branchy": (1,),
                     "test_calc.py::test_helper": (1,)}


def test_both_runs_hide_the_literal_and_differ_nowhere_at_a_held_site():
    canary = TESTS.replace("2) == 40", "2) == 41")
    runs = held.rewrite(({"test_calc.py": TESTS}, {"test_calc.py": canary}),
                        {"test_calc.py::test_plain": (1, 2)}, ((), ()))
    real, other = runs.files[0]["test_calc.py"], runs.files[1]["test_calc.py"]
    assert real == other  # the canary's literal is held on the host, not in the text
    assert "40" not in real and "41" not in real and "== 3\n" not in real
    assert real.count("\n") == TESTS.count("\n")  # line numbers kept
    assert runs.expect[0]["test_calc.py::test_plain"] == {1: ("==", 3), 2: ("==", 40)}
    assert runs.expect[1]["test_calc.py::test_plain"] == {1: ("==", 3), 2: ("==", 41)}
    assert not runs.unheld


def test_a_negated_canary_is_held_as_the_inverse_operator():
    negated = TESTS.replace("assert x == 3", "assert not (x == 3)")
    runs = held.rewrite(({"test_calc.py": TESTS}, {"test_calc.py": negated}),
                        {"test_calc.py::test_plain": (1,)}, ((), ()))
    assert runs.files[0]["test_calc.py"] == runs.files[1]["test_calc.py"]
    assert runs.expect[1]["test_calc.py::test_plain"] == {1: ("!=", 3)}
    assert not runs.unheld


def test_a_site_one_run_cannot_hold_is_held_in_neither_and_its_test_cannot_pass():
    other = TESTS.replace("assert x == 3", "assert x in (3,)")
    runs = held.rewrite(({"test_calc.py": TESTS}, {"test_calc.py": other}),
                        {"test_calc.py::test_plain": (1,)}, ((), ()))
    assert runs.files[0]["test_calc.py"] == TESTS and runs.files[1]["test_calc.py"] == other
    assert runs.unheld == {"test_calc.py::test_plain"}
    assert not held.met([(1, "3", True)], runs.expect[0]["test_calc.py::test_plain"])


def test_probes_keep_the_assertion():
    runs = held.rewrite(({"test_calc.py": TESTS}, {"test_calc.py": TESTS}),
                        {"test_calc.py::test_plain": (1,)}, ((), ()), probe=True)
    assert 'assert __import__("opd_grading").hold(1, (x)) == 3' in runs.files[0]["test_calc.py"]


def test_the_host_compares_as_python_does_on_plain_data():
    assert held.matches(held.read("3.0"), "==", 3)
    assert held.matches(held.read("[True, 2.5]"), "==", [1, 2.5])
    assert held.matches(held.read("{1, 2}"), "==", frozenset({1, 2}))
    assert not held.matches(held.read("1"), "is", True)  # `1 is True` is False
    assert held.matches(held.read("None"), "is", None)
    assert held.matches(held.read("4"), "!=", 3)
    assert not held.matches(held.read(""), "==", "")  # no value: never equal
    assert not held.matches(held.read("__import__('os')"), "==", 0)
    assert not held.met([], {1: ("==", 3)})  # not emitted
    assert not held.met([(1, "3", True), (1, "3", True)], {1: ("==", 3)})  # twice
    assert held.unmet([(1, "4", True)], {1: ("==", 3)}) == "the value compared was 4"


def test_calibration_holds_only_plain_values_meeting_the_literal_once():
    sites = {"test_calc.py::test_plain": (1, 2, 3, 4)}
    probes = {"test_calc.py::test_plain": [(1, "3", True), (2, "40", False), (3, "2", True),
                                           (3, "2", True), (4, "1", True)]}
    kept = held.calibrated(sites, {"test_calc.py": TESTS}, probes, ["test_calc.py::test_plain"])
    assert kept == {"test_calc.py::test_plain": (1, 4)}
    assert held.calibrated(sites, {"test_calc.py": TESTS}, probes, []) == {}
