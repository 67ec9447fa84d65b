"""The process boundary (issue 55, point 3): the codec of `opd_grading` (grade_harness.py's
OPD_GRADING_SOURCE) carries plain data exactly and nothing else, calls cross a real socket to a
real server loop, and the harness (run as a local process, one uid) lays a boundary task's
tests alone in their tree and serves the solution from a copy of the workspace. No sandbox."""

from __future__ import annotations

import json
import math
import socket
import struct
import sys
import threading

import pytest
from sandbox_module import opd_grading

from opd_gym.grading.grader import boundary_modules
from opd_gym.grading.launch import run_harness_here
from opd_gym.tasks import from_humaneval, from_mbpp

G = opd_grading()
encode, decode = G["encode"], G["decode"]
BoundaryError, SolutionError = G["BoundaryError"], G["SolutionError"]


def same(a, b) -> bool:
    """Equal with the same types all the way down, floats bit for bit (nan, -0.0)."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return struct.pack("<d", a) == struct.pack("<d", b)
    if type(a) is complex:
        return same(a.real, b.real) and same(a.imag, b.imag)
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict:
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


VALUES = [
    None, True, False, 0, -1, 7, 2**64 + 1, -(10**5000), 10**20000, 0.0, -0.0, 1.5, 1e-310,
    float("inf"), float("-inf"), float("nan"), 0.1 + 0.2, complex(1.5, -0.0),
    complex(float("nan"), float("inf")), "", "héllo\n\x00", "\ud800 lone surrogate", b"",
    b"\x00\xffbytes", bytearray(b"ab"), [], [1, [2, [3.5, None]]], (), (1,), (1, (2, "x")),
    {}, {"a": 1, 2: [3], (1, "t"): {frozenset({1}): -0.0}, None: b"x", 1.5: True},
    set(), {1, "a", (2, 3)}, frozenset(), frozenset({frozenset({1}), 2}),
    [{"k": ({1, 2}, frozenset([b"z"]))}] * 3,
]


@pytest.mark.parametrize("value", VALUES, ids=[f"{type(v).__name__}-{i}"
                                               for i, v in enumerate(VALUES)])
def test_the_codec_round_trips_every_kind_exactly(value):
    data = json.loads(json.dumps(encode(value)))  # as it crosses: JSON text
    back = decode(data)
    assert same(back, value) or (type(value) is set and back == value) \
        or (type(value) is frozenset and back == value)
    if type(value) in (set, frozenset):
        assert type(back) is type(value)


def test_big_ints_cross_as_hex_beyond_the_decimal_digit_limit():
    big = 7 ** 100_000  # ~85,000 decimal digits: int(str) refuses it on 3.11+
    assert decode(encode(big)) == big
    assert encode(255) == ["i", "ff"] and encode(-255) == ["i", "-ff"]


def test_subclasses_of_plain_kinds_cross_as_their_base_data():
    from collections import Counter, OrderedDict, namedtuple
    from enum import IntEnum

    class Color(IntEnum):
        RED = 3

    class AlwaysEqualInt(int):
        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    point = namedtuple("point", "x y")
    assert same(decode(encode(Color.RED)), 3)
    assert same(decode(encode(point(1, 2))), (1, 2))
    assert same(decode(encode(Counter("aab"))), {"a": 2, "b": 1})
    assert same(decode(encode(OrderedDict(b=1))), {"b": 1})
    crossed = decode(encode(AlwaysEqualInt(0)))  # its value, never its __eq__
    assert type(crossed) is int and crossed != 5


class Custom:
    def __eq__(self, other):
        return True


def _generator():
    yield 1


@pytest.mark.parametrize("value", [
    len, lambda: 1, Custom(), _generator(), iter([1]), map(str, [1]), object(), type,
    Custom, [1, Custom()], {"k": lambda: 0}, {len: 1}, sys, math.pi.hex,
    memoryview(b"x"), range(3), Ellipsis, NotImplemented,
], ids=lambda v: type(v).__name__)
def test_the_codec_refuses_everything_else(value):
    with pytest.raises(BoundaryError, match="cannot cross|nested"):
        encode(value)


def test_the_codec_has_limits():
    deep = []
    for _ in range(G["MAX_CODEC_DEPTH"] + 5):
        deep = [deep]
    with pytest.raises(BoundaryError, match="deeper"):
        encode(deep)
    looped: list = []
    looped.append(looped)
    with pytest.raises(BoundaryError):
        encode(looped)
    with pytest.raises(BoundaryError, match="values in one message"):
        encode([0] * (G["MAX_CODEC_ITEMS"] + 1))
    deep_data: list = ["n"]
    for _ in range(G["MAX_CODEC_DEPTH"] + 5):
        deep_data = ["l", [deep_data]]
    with pytest.raises(BoundaryError):
        decode(deep_data)


@pytest.mark.parametrize("data", [
    None, [], ["?"], ["i", 5], ["i", "zz"], ["f", "x"], ["s", 1], ["l", "x"], ["d", [[1]]],
    ["S", [["l", []]]], ["d", [[["l", []], ["n"]]]], ["b", 1], ["n", 1], ["c", "0x0p+0"],
    ["y", "abc"], {"tag": "n"},
], ids=repr)
def test_decoding_refuses_malformed_data(data):
    with pytest.raises(BoundaryError):
        decode(data)


# -- calls over a real socket to the real server loop --------------------------------------
SOLUTION = '''
class Mine(KeyError):
    pass


class Odd(Exception):
    pass


def add(x, y=0):
    return x + y


def grow(items, table, seen, flat):
    flat.append(len(flat))
    items[0].append("inner")
    table["new"] = 1
    seen.add(9)
    return None


def raises(kind):
    if kind == "value":
        raise ValueError("bad", 2)
    if kind == "mine":
        raise Mine("key")
    if kind == "odd":
        raise Odd("strange")
    if kind == "exit":
        raise SystemExit(3)
    raise ZeroDivisionError("zero")


def code():
    return add


def forged_equal():
    class Eq:
        def __eq__(self, other):
            return True
    return Eq()
'''


@pytest.fixture
def server(tmp_path, monkeypatch):
    """The server loop in a thread over a socketpair, serving a module `boundary_solution`;
    the `opd_grading` namespace's channel is the other end."""
    (tmp_path / "boundary_solution.py").write_text(SOLUTION)
    monkeypatch.syspath_prepend(str(tmp_path))
    ours, theirs = socket.socketpair()
    thread = threading.Thread(target=G["serve"], args=(theirs, ["boundary_solution"]),
                              daemon=True)
    thread.start()
    monkeypatch.setitem(G, "CHANNEL", ours)
    yield lambda name: G["entry"](name, "boundary_solution")
    ours.close()
    thread.join(5)
    theirs.close()
    sys.modules.pop("boundary_solution", None)


def test_calls_cross_and_values_come_back_decoded(server):
    add = server("add")
    assert add(2, 3) == 5 and add(1, y=2) == 3 and add.__name__ == "add"
    assert add([1], [2.5]) == [1, 2.5]
    assert same(add(10**5000, 1), 10**5000 + 1)
    assert same(add((1,), ("x",)), (1, "x"))


def test_arguments_changed_in_place_are_changed_in_the_test_too(server):
    inner: list = []
    items, table, seen, flat = [inner], {"old": 0}, {1}, [7]
    server("grow")(items, table, seen, flat=flat)
    assert items == [["inner"]] and items[0] is inner and inner == ["inner"]
    assert table == {"old": 0, "new": 1} and seen == {1, 9} and flat == [7, 1]


def test_exceptions_come_back_as_builtin_classes_or_solution_errors(server):
    raises = server("raises")
    with pytest.raises(ValueError) as info:
        raises("value")
    assert info.value.args == ("bad", "2")
    with pytest.raises(KeyError, match="Mine"):  # a KeyError subclass: its builtin base
        raises("mine")
    with pytest.raises(ZeroDivisionError, match="zero"):
        raises("zero")
    with pytest.raises(Exception, match=r"\(Odd\) strange") as odd:  # its builtin base
        raises("odd")
    assert type(odd.value) is Exception
    with pytest.raises(SolutionError, match="SystemExit"):  # no Exception: never re-raised
        raises("exit")
    with pytest.raises(AttributeError, match="missing"):
        server("missing")()
    try:  # a dataset's own try/except sees the builtin class
        raises("value")
    except ValueError:
        pass


def test_code_and_forged_objects_never_cross(server):
    with pytest.raises(BoundaryError, match="function"):
        server("code")()
    with pytest.raises(BoundaryError, match="Eq"):
        server("forged_equal")()
    with pytest.raises(BoundaryError, match="cannot cross"):  # the test's own arguments too
        server("add")(lambda: 0)
    assert server("add")(1, 1) == 2  # the channel still works


def test_a_server_that_is_gone_fails_the_call(monkeypatch):
    ours, theirs = socket.socketpair()
    theirs.close()
    monkeypatch.setitem(G, "CHANNEL", ours)
    with pytest.raises(BoundaryError, match="ended|gone"):
        G["call"]("add", (1, 2))
    ours.close()


# -- the adapters mark their tasks, the harness honours it ---------------------------------
HUMANEVAL = {"task_id": "Boundary/0", "entry_point": "add",
             "prompt": 'def add(x: int, y: int) -> int:\n    """x + y"""\n',
             "canonical_solution": "    return x + y\n",
             "test": ("def check(candidate):\n    import random\n"
                      "    for _ in range(20):\n"
                      "        x, y = random.randint(0, 99), random.randint(0, 99)\n"
                      "        assert candidate(x, y) == x + y\n")}


def test_the_adapters_grade_humaneval_and_mbpp_across_the_boundary():
    task = from_humaneval(HUMANEVAL)
    assert boundary_modules(task) == ("solution",)
    text = task.tests["test_solution.py"]
    assert "_entry(" in text and "import_module" not in text
    assert boundary_modules(from_humaneval(HUMANEVAL, boundary=False)) == ()
    row = {"task_id": 1, "text": "Add.", "code": "def add(a, b):\n    return a + b\n",
           "test_list": ["assert add(1, 2) == 3"], "test_setup_code": "BASE = 3"}
    assert boundary_modules(from_mbpp(row)) == ("solution",)
    classy = {**row, "code": "class Box:\n    def __init__(self, v):\n        self.v = v\n\n"
                             "def add(a, b):\n    return a + b\n",
              "test_list": ["assert add(Box(1).v, 2) == 3"]}
    assert boundary_modules(from_mbpp(classy)) == ()  # an object of its class could not cross


TREE_TEST = '''
import os
import sys

from opd_grading import entry


def test_the_tests_are_alone_and_the_solution_is_elsewhere():
    assert sorted(n for n in os.listdir(".") if not n.startswith(".")) == ["test_tree.py"]
    assert "solution" not in sys.modules
    where, files = entry("where")()
    assert where != os.getcwd() and "solution.py" in files and "notes.txt" in files
    assert entry("double")([1, 2]) == [1, 2, 1, 2]
'''


def test_the_harness_serves_the_solution_from_its_own_copy_of_the_workspace(tmp_path):
    (tmp_path / "solution.py").write_text(
        "import os\n\ndef where():\n    return os.getcwd(), sorted(os.listdir('.'))\n\n"
        "def double(x):\n    return x * 2\n")
    (tmp_path / "notes.txt").write_text("agent's file\n")
    raw = run_harness_here(tmp_path, [{"test_tree.py": TREE_TEST}], args=["test_tree.py"],
                           timeout=60, boundary=["solution"])
    [variant] = json.loads(raw.splitlines()[-1])["variants"]
    assert [(t["id"], t["outcome"]) for t in variant["tests"]] == [
        ("test_tree.py::test_the_tests_are_alone_and_the_solution_is_elsewhere", "passed")], \
        variant["output"][-3000:]
