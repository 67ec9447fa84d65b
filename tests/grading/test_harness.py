"""The grading harness's proxy protocol, run for real as local processes (no sandbox needed).

Each test writes a solution and hidden tests, runs `sandbox/grade_harness.py` on them through
`run_harness_here` (the same harness and runner as in Docker, one uid), and reads the verdict.
"""

from __future__ import annotations

import os

import pytest

from opd_gym.grading import parse_verdict, run_harness_here
from opd_gym.tasks import Task


def run(tmp_path, solution: dict[str, str], tests: str, timeout: float = 20.0) -> dict:
    for name, text in solution.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    task = Task(id="t", prompt="p", tests={"test_it.py": tests}, timeout=timeout)
    verdict = parse_verdict(run_harness_here(task, tmp_path))
    return {e["id"].split("::")[-1]: (e["outcome"], e["message"]) for e in verdict["tests"]}


def outcomes(results: dict) -> dict:
    return {name: outcome for name, (outcome, _) in results.items()}


SHAPES = '''
import collections, dataclasses, decimal, enum, fractions


class Shape:
    registry = []

    def __init__(self, name):
        self.name = name

    def area(self):
        raise NotImplementedError

    def __repr__(self):
        return f"Shape({self.name!r})"


class Square(Shape):
    def __init__(self, side):
        super().__init__("square")
        self.side = side

    def area(self):
        return self.side ** 2

    def __eq__(self, other):
        return isinstance(other, Square) and other.side == self.side

    def __lt__(self, other):
        return self.area() < other.area()

    __hash__ = None


class ShapeError(ValueError):
    pass


class TooSmall(ShapeError):
    def __init__(self, size):
        super().__init__(f"too small: {size}")
        self.size = size


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int


class Color(enum.IntEnum):
    RED = 1
    BLUE = 2


Pair = collections.namedtuple("Pair", "a b")


def make(side):
    if side < 1:
        raise TooSmall(side)
    return Square(side)


def values():
    return {"t": (1, 2), "s": {3}, "f": frozenset({4}), "b": b"x", "c": 1 + 2j,
            "d": decimal.Decimal("1.5"), "q": fractions.Fraction(1, 3), "n": None,
            "big": 10 ** 5000, "nan": float("nan"), "k": {(1, 2): [3]}}


def count(n):
    yield from range(n)


def apply(fn, items):
    return [fn(x) for x in items]


def total(items):
    return sum(items[i] for i in range(len(items)))


def shout(text):
    print(text.upper())
    return len(text)


class Counter:
    def __init__(self):
        self.n = 0

    def __enter__(self):
        self.n += 1
        return self

    def __exit__(self, *exc):
        self.n += 10
        return False

    def __len__(self):
        return self.n
'''

SHAPE_TESTS = '''
import dataclasses, decimal, fractions, math

import pytest
from shapes import (Color, Counter, Pair, Point, Shape, ShapeError, Square, TooSmall, apply,
                    count, make, shout, total, values)
from shapes import make as make_again


def test_objects_and_attributes():
    sq = make(3)
    assert sq.area() == 9 and sq.side == 3 and sq.name == "square"
    sq.side = 4
    assert sq.area() == 16
    assert repr(sq) == "Shape('square')"


def test_classes_mirror_the_hierarchy():
    assert isinstance(make(2), Square) and isinstance(make(2), Shape)
    assert issubclass(Square, Shape) and not issubclass(Shape, Square)
    assert make is make_again and Square.registry == []


def test_exceptions_keep_their_classes_and_attributes():
    with pytest.raises(TooSmall) as caught:
        make(0)
    assert caught.value.size == 0 and "too small: 0" in str(caught.value)
    with pytest.raises(ShapeError):
        make(-1)
    with pytest.raises(ValueError, match="too small"):
        make(-2)
    with pytest.raises(NotImplementedError):
        Shape("x").area()


def test_equality_and_ordering_between_solution_objects():
    assert Square(2) == Square(2) and Square(2) != Square(3)
    assert Square(2) < Square(3)
    assert sorted([Square(3), Square(1)])[0].side == 1
    assert Square(2) != 4


def test_builtin_subclasses_compare_by_value():
    assert Color.RED == 1 and Color.BLUE > 1
    assert Pair(1, 2) == (1, 2) and Pair(1, 2).b == 2
    assert Point(1, 2) == Point(1, 2) and dataclasses.is_dataclass(Point)


def test_plain_values_round_trip():
    v = values()
    assert v["t"] == (1, 2) and type(v["t"]) is tuple
    assert v["s"] == {3} and v["f"] == frozenset({4}) and v["b"] == b"x"
    assert v["c"] == 1 + 2j and v["d"] == decimal.Decimal("1.5")
    assert v["q"] == fractions.Fraction(1, 3) and v["n"] is None
    assert v["big"] == 10 ** 5000 and math.isnan(v["nan"]) and v["k"] == {(1, 2): [3]}


def test_generators_and_iteration():
    assert list(count(4)) == [0, 1, 2, 3]
    assert [x * 2 for x in count(3)] == [0, 2, 4]


def test_callbacks_and_test_objects_reach_the_solution():
    assert apply(lambda x: x + 1, [1, 2]) == [2, 3]

    class Spy(list):
        reads = 0

        def __getitem__(self, i):
            Spy.reads += 1
            return super().__getitem__(i)

    assert total(Spy([1, 2, 3])) == 6 and Spy.reads == 3


def test_prints_reach_capsys(capsys):
    assert shout("hi") == 2
    assert capsys.readouterr().out == "HI\\n"


def test_context_managers():
    counter = Counter()
    with counter as inside:
        assert len(inside) == 1
    assert len(counter) == 11
'''


def test_proxies_behave_like_the_objects(tmp_path):
    results = run(tmp_path, {"shapes.py": SHAPES}, SHAPE_TESTS)
    failed = {name: message for name, (outcome, message) in results.items()
              if outcome != "passed"}
    assert failed == {} and len(results) == 10


def test_a_crash_fails_only_what_it_touches(tmp_path):
    solution = "import os\n\ndef boom():\n    os._exit(3)\n\ndef ok():\n    return 1\n"
    tests = ("import pytest\nfrom sol import boom, ok\n\n\ndef test_boom():\n    boom()\n\n\n"
             "def test_stale_handle_is_not_an_ordinary_error():\n"
             "    with pytest.raises(Exception):\n        ok()\n\n\n"
             "def test_fresh_import_works():\n    import sol\n    assert sol.ok() == 1\n")
    results = run(tmp_path, {"sol.py": solution}, tests)
    assert results["test_boom"][0] == "failed" and "exited" in results["test_boom"][1]
    assert results["test_stale_handle_is_not_an_ordinary_error"][0] == "failed"
    assert "restarted" in results["test_stale_handle_is_not_an_ordinary_error"][1]


def test_objects_without_a_wire_form_are_refused_clearly(tmp_path):
    tests = ("import pytest, threading\nfrom sol import echo\n\n\ndef test_lock():\n"
             "    with pytest.raises(TypeError, match='cannot be passed'):\n"
             "        echo(threading.Lock())\n")
    results = run(tmp_path, {"sol.py": "def echo(x):\n    return x\n"}, tests)
    assert outcomes(results) == {"test_lock": "passed"}


def test_the_time_budget_covers_the_whole_run(tmp_path):
    tests = "from sol import spin\n\n\ndef test_a():\n    spin()\n\n\ndef test_b():\n    spin()\n"
    solution = "def spin():\n    while True:\n        pass\n"
    task = Task(id="t", prompt="p", tests={"test_it.py": tests}, timeout=2.0)
    (tmp_path / "sol.py").write_text(solution)
    verdict = parse_verdict(run_harness_here(task, tmp_path))
    assert verdict["timed_out"] and verdict["duration"] < 15
    assert {e["outcome"] for e in verdict["tests"]} == {"failed"}


@pytest.mark.parametrize("name", ["pytest", "json", "opd_grading"])
def test_solution_modules_never_shadow_the_harness(tmp_path, name):
    tests = f"import {name}\n\n\ndef test_real():\n    assert hasattr({name}, '__file__') " \
            f"or {name}.__name__ == 'opd_grading'\n    assert not hasattr({name}, 'FAKE')\n"
    results = run(tmp_path, {f"{name}.py": "FAKE = True\n"}, tests)
    assert outcomes(results) == {"test_real": "passed"}


def test_the_solution_never_gets_a_dangerous_harness_callable(tmp_path):
    solution = (
        "def give_eval():\n    return eval\n\n"
        "def poke(box):\n    return box.runner('echo pwned > /tmp/opd-pwned')\n\n"
        "def use(fn):\n    return fn('abc')\n"
    )
    tests = (
        "import os\nfrom sol import give_eval, poke, use\n\n\n"
        "class Box:\n    runner = staticmethod(os.system)\n\n\n"
        "EARLY = use(lambda text: text.upper())  # callbacks work during collection too\n\n\n"
        "def test_eval_is_not_handed_over():\n    assert give_eval()('1 + 1') == 2\n\n\n"
        "def test_harness_functions_stay_out_of_reach():\n    assert poke(Box()) == 0\n\n\n"
        "def test_pure_builtin_methods_are_fine():\n    assert use(str.upper) == 'ABC'\n"
        "    assert EARLY == 'ABC'\n"
    )
    results = run(tmp_path, {"sol.py": solution}, tests)
    assert outcomes(results) == {
        "test_eval_is_not_handed_over": "failed",
        "test_harness_functions_stay_out_of_reach": "failed",
        "test_pure_builtin_methods_are_fine": "passed",
    }, results
    assert "malformed" in results["test_eval_is_not_handed_over"][1]
    assert not os.path.exists("/tmp/opd-pwned")
