"""Tolerance checks held on the host (opd_gym/grading/near.py, through held.py): which shapes
are held, that neither the expected value nor the tolerance enters the sandbox, and that the
host's verdict on a value's canonical form is the check's own, measured against the real
`abs`, `math.isclose`, `pytest.approx` and `unittest` on random values. Static; the Docker
side is tests/security/test_grading_forgery.py (the float HumanEval row) and
tests/security/test_answer_readers.py."""

from __future__ import annotations

import math
import random
import unittest

import pytest
from sandbox_module import opd_grading

from opd_gym.grading import held
from opd_gym.grading.near import NEAR, Near

TOL = '''\
import math
import unittest
from math import fabs, isclose as close

import pytest
from pytest import approx

from calc import mean


def test_abs():
    assert abs(mean([1, 2]) - 1.5) < 1e-6
    assert abs(2.0 / 3.0 - mean([0, 1, 1])) <= 1e-9
    assert 1e-6 > abs(mean([3]) - 3)
    assert fabs(mean([1, 3]) - 2) < 0.5


def test_close():
    assert math.isclose(mean([1, 2]), 1.5, rel_tol=1e-9)
    assert close(1.25, mean([2, 0.5]), abs_tol=1e-3)


def test_approx():
    assert mean([1, 2]) == pytest.approx(1.5)
    assert approx(1.75, rel=1e-3) == mean([2, 3])
    assert [mean([1]), mean([2])] == approx([1, 2])


def test_rows():
    for xs, want in [([1, 2], 3.5), ([4], 4.5)]:
        assert mean(xs) == approx(want)


@pytest.mark.parametrize("xs, want", [([1, 2], 5.5), ([4], 6.5)])
def test_param(xs, want):
    assert abs(mean(xs) - want) < 1e-6


class TestAlmost(unittest.TestCase):
    def test_almost(self):
        self.assertAlmostEqual(mean([1, 2]), 7.5)
        self.assertAlmostEqual(mean([1, 2]), 8.5, places=3)
        self.assertAlmostEqual(9.5, mean([1, 2]), delta=0.1)


def test_not_held():
    tol = 1e-6
    assert abs(mean([1, 2]) - 1.5) < tol
    assert abs(mean([1, 2]) - 1.5) > 1e-6
    assert mean([1, 2]) == approx(1.5, nan_ok=True)
    assert mean([1, 2]) == approx(True)
    assert abs(mean([1, 2]) - mean([2, 1])) < 1e-6
    assert math.isclose(mean([1, 2]), 1.5, rel_tol=-1)
'''
HELD = {"test_m.py::test_abs": (0, 1, 2, 3), "test_m.py::test_close": (0, 1),
        "test_m.py::test_approx": (0, 1, 2), "test_m.py::test_rows": (1,),
        "test_m.py::test_param": (0,), "test_m.py::TestAlmost::test_almost": (0, 1, 2)}
# expected values and tolerances: none may be left in the sandbox's text
SECRETS = ("1.5", "2.0 / 3.0", "1e-6", "1e-9", "0.5)", "1.25", "1.75", "3.5", "4.5",
           "5.5", "6.5", "7.5", "8.5", "9.5", "delta", "places", "approx([1, 2])")


def test_tolerance_checks_on_literals_tables_and_parametrize_columns_are_candidates():
    sources = {"test_m.py": TOL}
    assert held.candidates(sources, ["test_m.py"]) == HELD
    # a module of its own `abs` gets none of its abs checks held (the rest still are)
    shadowed = TOL.replace("def test_abs", "def abs(x):\n    return 0\n\n\ndef test_abs")
    assert held.candidates({"test_m.py": shadowed}, ["test_m.py"]) == {
        **{t: s for t, s in HELD.items() if t not in (
            "test_m.py::test_abs", "test_m.py::test_param")}, "test_m.py::test_abs": (3,)}
    # a star import may bind `abs` too: no builtin is known then
    starred = "from numpy import *\n" + TOL
    assert held.candidates({"test_m.py": starred}, ["test_m.py"]) == {
        **{t: s for t, s in HELD.items() if t not in (
            "test_m.py::test_abs", "test_m.py::test_param")}, "test_m.py::test_abs": (3,)}


def test_no_expected_value_or_tolerance_enters_the_sandbox():
    sources = {"test_m.py": TOL}
    runs = held.rewrite((sources, sources), HELD, ((), ()))
    text = runs.files[0]["test_m.py"]
    assert text.count("\n") == TOL.count("\n") and not runs.unheld
    body = text[:text.index("def test_not_held")]
    for secret in SECRETS:
        assert secret not in body, secret
    assert 'hold(2, ([mean([1]), mean([2])]))' in text
    expect = runs.expect[0]
    assert expect["test_m.py::test_abs"][1] == (NEAR, Near("abs", 2.0 / 3.0, False,
                                                             (1e-9, False)))
    assert expect["test_m.py::test_close"][1] == (NEAR, Near("isclose", 1.25, False,
                                                               (1e-9, 1e-3)))
    rows = expect["test_m.py::test_rows"][1]
    assert rows[0] == held.ROWS and [near.expected for _, near in rows[1]] == [3.5, 4.5]
    assert expect["test_m.py::test_param[xs1-6.5]"] == {
        0: (NEAR, Near("abs", 6.5, True, (1e-6, True)))}
    assert expect["test_m.py::TestAlmost::test_almost"][2] == (
        NEAR, Near("almost", 9.5, False, (7, 0.1)))


def test_calibration_vouches_for_values_within_the_tolerance_only():
    sites = {"test_m.py::test_abs": (0, 1, 2, 3)}
    probes = {"test_m.py::test_abs": [(0, "1.5000000001", True), (1, "0.7", True),
                                      (2, "3", True), (3, "2.25", False)]}
    kept = held.calibrated(sites, {"test_m.py": TOL}, probes, ["test_m.py::test_abs"])
    assert kept == {"test_m.py::test_abs": (0, 2)}  # 0.7 is no 2/3; 2.25 no plain float


# -- the host's verdict against the checks themselves -----------------------------------------
def _canonical():
    """`opd_grading.canonical`, the form a held value leaves the sandbox in."""
    return opd_grading()["canonical"]


def _values(rng: random.Random, expected: float) -> list[object]:
    """Values around `expected` at every scale of gap, and some that are no number."""
    out: list[object] = [expected, int(expected), True, False, "1.5", None, [expected]]
    for _ in range(40):
        gap = 10.0 ** rng.uniform(-14, 1) * rng.choice((-1, 1))
        out.append(expected + gap)
        out.append(expected * (1 + gap))
    out += [expected + 0.5, expected - 0.5, expected + 0.25]  # on a tolerance's edge
    out += [float("inf"), -float("inf"), complex(expected, 1e-9), 2 ** 60]
    return out


def _reference(near: Near, value: object) -> bool:
    """The check itself, run in this process on the value."""
    a, b = (value, near.expected) if near.first else (near.expected, value)
    try:
        if near.kind == "abs":
            gap = abs(a - b)  # type: ignore[operator]
            return gap < near.bounds[0] if near.bounds[1] else gap <= near.bounds[0]
        if near.kind == "fabs":
            gap = math.fabs(a - b)  # type: ignore[operator]
            return gap < near.bounds[0] if near.bounds[1] else gap <= near.bounds[0]
        if near.kind == "isclose":
            return math.isclose(a, b, rel_tol=near.bounds[0],  # type: ignore[arg-type]
                                abs_tol=near.bounds[1])
        if near.kind == "approx":
            return bool(value == pytest.approx(near.expected, rel=near.bounds[0],
                                               abs=near.bounds[1]))
        places, delta = near.bounds
        case = unittest.TestCase()
        if delta is None:
            case.assertAlmostEqual(a, b, places=places)
        else:
            case.assertAlmostEqual(a, b, delta=delta)
        return True
    except (AssertionError, TypeError, ValueError, OverflowError):
        return False


CHECKS = [Near("abs", 1.5, True, (1e-6, True)), Near("abs", 0.1, False, (1e-9, False)),
          Near("fabs", 2, True, (0.5, True)), Near("abs", 1.5, False, (0.5, True)),
          Near("abs", 1.5, True, (0.25, False)), Near("isclose", 1.5, True, (1e-9, 0.0)),
          Near("isclose", 0.25, False, (1e-4, 1e-3)), Near("approx", 1.5, True, (None, None)),
          Near("approx", 3, True, (1e-3, None)), Near("approx", 0.5, True, (None, 1e-4)),
          Near("approx", 1e-3, True, (1e-2, 1e-8)), Near("almost", 1.5, True, (7, None)),
          Near("almost", 2.5, False, (3, None)), Near("almost", 1.5, True, (7, 0.1))]


@pytest.mark.parametrize("near", CHECKS, ids=lambda n: f"{n.kind}-{n.expected}-{n.bounds}")
def test_the_host_meets_a_value_exactly_where_the_check_passes_on_it(near):
    canonical = _canonical()
    rng = random.Random(f"{near}")
    values = _values(rng, float(near.expected))  # type: ignore[arg-type]
    passing = 0
    for value in values:
        emitted, _ = canonical(value)
        got = held.matches(held.read(emitted), NEAR, near)
        assert got == _reference(near, value), (near, value, emitted)
        passing += got
    assert 0 < passing < len(values)  # the values straddle the tolerance


def test_approx_of_a_list_meets_as_pytest_does():
    canonical = _canonical()
    near = Near("approx", [1.0, 2.5], True, (None, None))
    for value in ([1.0, 2.5], (1.0, 2.5 + 1e-7), [1.0, 2.6], [1.0], [1.0, 2.5, 3.0], "ab",
                  {1.0: 0, 2.5: 1}, [1, 2.5000001], [[1.0], 2.5]):
        emitted, _ = canonical(value)
        assert held.matches(held.read(emitted), NEAR, near) == bool(
            value == pytest.approx([1.0, 2.5])), value
