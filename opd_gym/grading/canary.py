"""Canary twins of hidden tests: the same test with ONE assertion's expectation perturbed.

An honest solution passes a real test and fails its canary. Code that makes assertions pass
without knowing the answer (an always-true `__eq__`, a `__sub__` returning 0, shadowed
builtins, answers read from the test file, frames or `gc`, a patched pytest, a forged report)
passes the canary too, and cannot tell it from the real test: both variants of the hidden
files have the same names and test ids, and a canary differs from its test in one token.

Edits are made on the source text, one token (or one wrap in `not`), so everything else in
the file (quotes, comments, line numbers) stays as written. Which assertion is perturbed, and
how, is drawn from a seed (the Grader's secret and the task's hash), so calibration with the
reference solution validates the very canaries later grades use; a canary the reference
passes is drawn again from the test's other candidates (`make_canaries(exclude=...)`), so
whether a test has a valid canary does not hang on the draw. Which variant holds the real
test is drawn per grade from the OS's randomness and never enters the sandbox.
"""

from __future__ import annotations

import ast
import bisect
import builtins
import contextvars
import dataclasses
import hashlib
import itertools
import math
import operator
import random
import string
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass

from opd_gym import pyast
from opd_gym.pyast import Imports

_EQUALITY = (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)
_MEMBERSHIP = (ast.In, ast.NotIn)
_ORDERING = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_COMPLEMENT = {
    ast.Eq: "!=", ast.NotEq: "==", ast.Lt: ">=", ast.LtE: ">", ast.Gt: "<=", ast.GtE: "<",
    ast.In: "not in", ast.NotIn: "in", ast.Is: "is not", ast.IsNot: "is",
}
_OP_TEXT = {
    ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
    ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not",
}
_CLOSE_CALLS = {"isclose", "allclose", "assert_allclose", "assert_almost_equal", "approx"}
# unittest assertions whose expected argument (a literal) is perturbed
_UNITTEST_VALUE = {"assertEqual", "assertEquals", "assertAlmostEqual", "assertAlmostEquals",
                   "assertIn", "assertCountEqual", "assertListEqual", "assertDictEqual",
                   "assertTupleEqual", "assertSetEqual", "assertSequenceEqual",
                   "assertMultiLineEqual", "assertIs"}
# ... else turned into their complement (negative assertions only ever get that)
_UNITTEST_SWAP = {
    "assertTrue": "assertFalse", "assertFalse": "assertTrue",
    "assertIsNone": "assertIsNotNone", "assertIsNotNone": "assertIsNone",
    "assertEqual": "assertNotEqual", "assertNotEqual": "assertEqual",
    "assertListEqual": "assertNotEqual", "assertTupleEqual": "assertNotEqual",
    "assertDictEqual": "assertNotEqual", "assertMultiLineEqual": "assertNotEqual",
    "assertIn": "assertNotIn", "assertNotIn": "assertIn",
    "assertIs": "assertIsNot", "assertIsNot": "assertIs",
    "assertIsInstance": "assertNotIsInstance", "assertNotIsInstance": "assertIsInstance",
    "assertAlmostEqual": "assertNotAlmostEqual", "assertNotAlmostEqual": "assertAlmostEqual",
    "assertGreater": "assertLessEqual", "assertLessEqual": "assertGreater",
    "assertLess": "assertGreaterEqual", "assertGreaterEqual": "assertLess",
    "assertRegex": "assertNotRegex", "assertNotRegex": "assertRegex",
}
# equality assertions whose argument may name a data column (loops, parametrize)
_UNITTEST_EQUAL = {"assertEqual", "assertEquals", "assertListEqual", "assertDictEqual",
                   "assertTupleEqual", "assertSetEqual", "assertSequenceEqual",
                   "assertCountEqual", "assertMultiLineEqual"}
# Objects a test waits on, by the module defining them: a failed assertion before their
# release can hang the test. A call counts only when it resolves, through the module's imports,
# to one of these (`threading.Event()`, `import threading as t; t.Event()`, `from threading
# import Timer`; submodules too: `asyncio.locks.Event`), never by its bare name: a suite's own
# `Timer` or `Event` class gets canaries. A wait the imports do not show (a helper that starts
# a thread, `ctx.Event()`) is left to calibration, which drops a canary that hangs the reference.
_WAITS = {
    "threading": {"Event", "Condition", "Semaphore", "BoundedSemaphore", "Barrier", "Thread",
                  "Timer"},
    "multiprocessing": {"Event", "Condition", "Semaphore", "BoundedSemaphore", "Barrier",
                        "Process", "Queue", "JoinableQueue", "SimpleQueue"},
    "asyncio": {"Event", "Condition", "Semaphore", "BoundedSemaphore", "Barrier", "Queue",
                "LifoQueue", "PriorityQueue", "Future"},
    "concurrent.futures": {"Future"},
    "queue": {"Queue", "SimpleQueue", "LifoQueue", "PriorityQueue"},
}
# builtins that keep every literal of their argument in the value (perturbed through them)
_WRAPS = {"set", "frozenset", "sorted", "tuple", "list"}
# the functions of the test module being read that never reach the solution (make_canaries)
_HELPERS: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "_HELPERS", default=frozenset())
_BUILTINS = frozenset(dir(builtins))
_EXCEPTIONS = ("ValueError", "TypeError", "KeyError", "IndexError", "ZeroDivisionError",
               "AttributeError", "RuntimeError", "OverflowError", "NotImplementedError",
               "FileNotFoundError", "UnicodeDecodeError", "RecursionError")


@dataclass(frozen=True)
class Canary:
    """One test's canary: the bytes `start:end` of file `path` replaced by `replacement`.

    `kind` is `literal` (an expected value changed), `data` (an expected value changed in a
    literal table a loop of the test reads), `param` (the expected column of the test's
    parametrize table changed in every row), `raises` (another exception class), `operator`
    (a comparison turned into its complement) or `negation` (`assert not ...`).
    `more` holds further single-token edits of the canary variant (a `param` canary changes
    each row); `real` holds edits the REAL variant carries too (explicit parametrize ids
    equal to pytest's own, so both variants read alike and keep the original node ids).
    """

    test_id: str
    path: str
    kind: str
    line: int
    start: int
    end: int
    original: str
    replacement: str
    more: tuple[tuple[int, int, str], ...] = ()
    real: tuple[tuple[int, int, str], ...] = ()
    site: tuple[int, str] = (-1, "")  # which candidate it is: pass it to make_canaries' exclude
    # False: the test compares the solution with a value it computes or receives at run time
    # (an oracle call, a fixture, a non-literal table) that no canary changes; a solution could
    # return that value read from the test, so the test only gates (`why` says where)
    earns: bool = True
    why: str = ""

    @property
    def edits(self) -> tuple[tuple[int, int, str], ...]:
        """Every edit of the canary variant: (start, end, replacement) byte spans."""
        return ((self.start, self.end, self.replacement), *self.more)


@dataclass(frozen=True)
class CanarySet:
    """The canaries of a task's hidden tests, by test id; `tests` are all ids found."""

    canaries: Mapping[str, Canary]
    tests: tuple[str, ...]

    @property
    def uncanaried(self) -> tuple[str, ...]:
        return tuple(t for t in self.tests if t not in self.canaries)


@dataclass(frozen=True)
class Variants:
    """Two versions of the hidden files: for each canaried test, one holds the real test.

    `real_in[test_id]` is the index (0 or 1) of the variant holding the real test; for a test
    without a canary both hold it, and `real_in` still names one to read the outcome from.
    `skip[i]`: base ids variant `i` leaves out (deselected there): tests that run once, in the
    variant `real_in` names, because their other run could tell the grade nothing (once.py).
    """

    files: tuple[dict[str, str], dict[str, str]]
    real_in: Mapping[str, int]
    skip: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())


def parse(source: str | bytes) -> ast.Module:
    """`ast.parse` under the package's parse lock (opd_gym.pyast)."""
    return pyast.parse(source)


def seed_for(secret: bytes, task_key: str) -> int:
    """The canary seed for a task: a Grader's secret mixed with the task's content hash."""
    return int.from_bytes(hashlib.sha256(secret + task_key.encode()).digest()[:8], "big")


# -- finding tests and their assertions ---------------------------------------------------
_TESTCASES = {"TestCase", "IsolatedAsyncioTestCase"}


def _class_tests(node: ast.ClassDef, prefix: str) -> Iterator[tuple[str, ast.AST, str]]:
    if any(isinstance(n, ast.FunctionDef) and n.name == "__init__" for n in node.body):
        return
    for child in node.body:
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) and child.name.startswith(
            "test"
        ):
            test_id = f"{prefix}::{node.name}::{child.name}"
            yield test_id, child, test_id
        elif isinstance(child, ast.ClassDef) and child.name.startswith("Test"):
            yield from _class_tests(child, f"{prefix}::{node.name}")


def _testcase_aliases(tree: ast.Module) -> set[str]:
    """Names a module binds to unittest's TestCase classes (`from unittest import X as Y`)."""
    names = set(_TESTCASES)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module in ("unittest", "unittest.case"):
            names.update(a.asname or a.name for a in node.names if a.name in _TESTCASES)
    return names


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


class _Unittest:
    """unittest.TestCase subclasses of one module, read statically (bases in this module)."""

    def __init__(self, tree: ast.Module) -> None:
        self.classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        self.aliases = _testcase_aliases(tree)

    def is_testcase(self, node: ast.ClassDef, seen: frozenset[str] = frozenset()) -> bool:
        for base in node.bases:
            name = _base_name(base)
            if isinstance(base, ast.Attribute) and name in _TESTCASES:
                return True
            if isinstance(base, ast.Name) and name in self.aliases:
                return True
            local = self.classes.get(name) if isinstance(base, ast.Name) else None
            if local is not None and name not in seen and self.is_testcase(
                    local, seen | {node.name}):
                return True
        return False

    def methods(self, node: ast.ClassDef,
                seen: frozenset[str] = frozenset()) -> dict[str, tuple[ast.AST, str]]:
        """test* methods by name with their defining class: own first, then this module's
        bases left to right (what unittest's loader finds, as far as this module tells)."""
        found: dict[str, tuple[ast.AST, str]] = {}
        shadowed: set[str] = set()  # `test_x = None`: no inherited test_x runs here
        for child in node.body:
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) and \
                    child.name.startswith("test"):
                found[child.name] = (child, node.name)
            elif isinstance(child, ast.Assign | ast.AnnAssign):
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                shadowed.update(t.id for t in targets if isinstance(t, ast.Name))
        for base in node.bases:
            local = self.classes.get(base.id) if isinstance(base, ast.Name) else None
            if local is not None and local.name not in seen | {node.name}:
                for name, entry in self.methods(local, seen | {node.name}).items():
                    if name not in shadowed:
                        found.setdefault(name, entry)
        return found


def _disabled(node: ast.ClassDef) -> bool:
    """`__test__ = False` in the class body: pytest collects nothing from it."""
    return any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__test__"
                                                 for t in n.targets)
               and isinstance(n.value, ast.Constant) and n.value.value is False
               for n in node.body)


def _collected(tree: ast.Module, path: str) -> Iterator[tuple[str, ast.AST, str]]:
    """(id, function node, id under the class defining it) of each test pytest collects."""
    unittest = _Unittest(tree)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test"
        ):
            yield f"{path}::{node.name}", node, f"{path}::{node.name}"
        elif isinstance(node, ast.ClassDef) and unittest.is_testcase(node):
            if _disabled(node):
                continue
            for name, (function, owner) in sorted(unittest.methods(node).items()):
                yield f"{path}::{node.name}::{name}", function, f"{path}::{owner}::{name}"
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            yield from _class_tests(node, path)


def collected_tests(tree: ast.Module, path: str) -> Iterator[tuple[str, ast.AST]]:
    """(base id, function node) of each test pytest collects from a module (static rules):
    `test*` functions, `test*` methods of `Test*` classes without `__init__` (nested classes
    too), and `test*` methods of unittest.TestCase subclasses of any name, inherited ones
    included where the base class is defined in the same module."""
    for test_id, function, _owner in _collected(tree, path):
        yield test_id, function


def _literal(node: ast.AST, fold: bool = True) -> object:
    """The value of a literal expression, or _NO when it is not one. Arithmetic on literals
    counts unless `fold` is False (`999953 * 999983`, `6**20`, `"thirty-" + "eight"`, in
    tables too): its value is the text's, computed on the host within small bounds (`_fold`)."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        return _fold(node) if fold else _NO
    except (TypeError, SyntaxError, MemoryError, RecursionError):
        return _NO


_NO = object()
_FOLDS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
          ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
          ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
          ast.BitOr: operator.or_, ast.BitAnd: operator.and_, ast.BitXor: operator.xor}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}
MAX_FOLDED_BITS = 4096  # an int the host computes from a test's arithmetic
MAX_FOLDED_TEXT = 10_000  # characters of a str (bytes) it joins or repeats


def _fold(node: ast.AST, depth: int = 0) -> object:
    """The value of literals combined by arithmetic (containers of them too), or _NO: only
    numbers, str and bytes, no value past MAX_FOLDED_BITS or MAX_FOLDED_TEXT, nothing that
    raises (`1 / 0`)."""
    if depth > 50:
        return _NO
    if isinstance(node, ast.Constant):
        value = node.value
        return value if isinstance(value, int | float | complex | str | bytes) else _NO
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        items = [_fold(e, depth + 1) for e in node.elts]
        if _NO in items or isinstance(node, ast.Set) and not all(
                isinstance(i, int | float | complex | str | bytes | tuple) for i in items):
            return _NO
        return tuple(items) if isinstance(node, ast.Tuple) else list(items) \
            if isinstance(node, ast.List) else set(items)
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            return _NO
        keys = [_fold(k, depth + 1) for k in node.keys]  # type: ignore[arg-type]
        values = [_fold(v, depth + 1) for v in node.values]
        if _NO in keys or _NO in values or not all(
                isinstance(k, int | float | complex | str | bytes | tuple) for k in keys):
            return _NO
        return dict(zip(keys, values, strict=True))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        value = _fold(node.operand, depth + 1)
        if not isinstance(value, int | float | complex) or \
                isinstance(node.op, ast.Invert) and not isinstance(value, int):
            return _NO
        return _UNARY[type(node.op)](value)
    if not isinstance(node, ast.BinOp) or type(node.op) not in _FOLDS:
        return _NO
    left, right = _fold(node.left, depth + 1), _fold(node.right, depth + 1)
    numbers = int | float | complex
    text = str | bytes
    if isinstance(left, numbers) and isinstance(right, numbers):
        if isinstance(node.op, ast.Pow) and isinstance(left, int) and isinstance(right, int) \
                and right > 0 and left.bit_length() * right > MAX_FOLDED_BITS:
            return _NO
        if isinstance(node.op, ast.LShift) and isinstance(right, int) and \
                right > MAX_FOLDED_BITS:
            return _NO
    elif isinstance(node.op, ast.Add) and isinstance(left, text) and type(left) is type(right):
        if len(left) + len(right) > MAX_FOLDED_TEXT:  # type: ignore[arg-type]
            return _NO
    elif isinstance(node.op, ast.Mult) and {type(left), type(right)} & {str, bytes} and (
            isinstance(left, int) or isinstance(right, int)):
        count, piece = (left, right) if isinstance(left, int) else (right, left)
        if isinstance(count, bool) or not isinstance(piece, text) or \
                max(count, 0) * len(piece) > MAX_FOLDED_TEXT:
            return _NO
    else:
        return _NO
    try:
        value = _FOLDS[type(node.op)](left, right)
    except (ArithmeticError, ValueError, TypeError):
        return _NO
    if isinstance(value, int) and value.bit_length() > MAX_FOLDED_BITS:
        return _NO
    return value


def _empty(node: ast.AST) -> bool:
    """An empty literal container: `[]`, `()`, `{}`, `set()` (perturbed into a one-element one)."""
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return not node.elts
    if isinstance(node, ast.Dict):
        return not node.keys
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "set" and not node.args and not node.keywords)


def _constants(node: ast.AST) -> list[ast.AST]:
    """The perturbable parts of a literal expression: constants (elements of containers too)
    and empty containers."""
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or isinstance(value, int | str | bytes):
            return [node]
        if isinstance(value, float) and math.isfinite(value):
            return [node]
        return []
    if _empty(node):
        return [node]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        return _constants(node.operand)
    if isinstance(node, ast.BinOp):  # arithmetic on literals (`_fold`): its operands
        return [*_constants(node.left), *_constants(node.right)]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [c for e in node.elts for c in _constants(e)]
    if isinstance(node, ast.Dict):
        values = [c for v in node.values if v is not None for c in _constants(v)]
        return values or [c for k in node.keys if k is not None for c in _constants(k)]
    return []


def _expected(node: ast.AST) -> list[ast.AST]:
    """Constants of `node` if it is a literal expectation (or `approx(E)` of one, or a helper
    of the test applied to literals: `_normalise("8\n")`, `set([1, 2])`)."""
    if isinstance(node, ast.Call) and _callee(node) == "approx" and node.args:
        return _expected(node.args[0])
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args and \
            not node.keywords and (node.func.id in _HELPERS.get() or node.func.id in _WRAPS) \
            and all(_literal(a) is not _NO for a in node.args):
        return [c for a in node.args for c in _constants(a)]
    if _literal(node) is _NO:
        return []
    return _constants(node)


# A forgery in pytest's process can pass each failing test on a coin of its own (p), in every
# grading run alike: no run signal at all. Where no earning test holds a site, only canaries
# catch it: k earning tests are all unflagged with (1 - p)^k and then pay p, so it earns
# p(1 - p)^k in expectation, at most 0.0098 for k = 37 (0.0101 for 36). The repository suite
# keeps no bug below that (`repo_suite.can_earn`); the Grader refuses such a task in pytest's
# process (`Calibration.too_few_unheld`).
MIN_UNHELD_EARNING = 37


# A text needle this short may turn up by chance in text a test searches (a random tree path,
# a hex address: `"m1"` perturbed into `"c1"`); such a containment check gets `not in` instead.
SHORT_NEEDLE = 4


def _needle(node: ast.AST) -> list[ast.AST]:
    """The constants of a containment check's literal needle (`_expected`), none for a text
    needle of SHORT_NEEDLE characters or fewer (see SHORT_NEEDLE)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes) \
            and len(node.value) <= SHORT_NEEDLE:
        return []
    return _expected(node)


def _callee(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _tolerance_side(node: ast.AST) -> list[ast.AST]:
    """E in `abs(x - E)` / `abs(E - x)` / `math.fabs(...)` (the tolerance is never touched)."""
    if isinstance(node, ast.Call) and _callee(node) in ("abs", "fabs") and len(node.args) == 1:
        inner = node.args[0]
        if isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Sub):
            return _expected(inner.right) or _expected(inner.left)
    return []


def _compare_literals(test: ast.Compare) -> list[ast.AST]:
    if len(test.ops) != 1:
        return []
    op, left, right = test.ops[0], test.left, test.comparators[0]
    if isinstance(op, ast.NotEq | ast.IsNot | ast.NotIn):
        return []  # `x != 5` holds for 6 as well: only the complement makes an honest x fail
    if isinstance(op, _EQUALITY):
        return _expected(right) or _expected(left)
    if isinstance(op, _MEMBERSHIP):
        return _needle(left) or _expected(right)
    if isinstance(op, _ORDERING):
        return _tolerance_side(left) or _tolerance_side(right)
    return []


def _assert_literals(test: ast.AST) -> list[ast.AST]:
    """The constants whose change makes an honest `assert test` fail."""
    if isinstance(test, ast.Compare):
        return _compare_literals(test)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [c for value in test.values for c in _assert_literals(value)]
    if isinstance(test, ast.Call) and _callee(test) in _CLOSE_CALLS and len(test.args) >= 2:
        return _expected(test.args[1]) or _expected(test.args[0])
    return []


@dataclass
class _Param:
    """A parametrize table whose expected column is perturbed in every row.

    `rows`: the column's perturbable parts per row; `ids`: pytest's ids for the original
    values, inserted as `ids=` after the call's last argument `after` in both variants
    (None: the call has literal ids already)."""

    rows: list[list[ast.AST]]
    ids: list[str] | None
    after: ast.expr


@dataclass
class _Site:
    """One assertion (or one data table a test reads): its perturbable parts and fallback."""

    node: ast.AST
    constants: list[ast.AST]
    raises: ast.AST | None = None  # the exception expression of a pytest.raises
    swap: str = ""  # unittest method to swap to
    operator: ast.Compare | None = None
    negate: ast.expr | None = None
    tolerance: float = 0.0  # a perturbed value must move further than this (assertAlmostEqual)
    kind: str = "literal"
    param: _Param | None = None
    names: tuple[str, ...] = ()  # the test's names whose literal values this site perturbs


def _raises_arg(call: ast.Call) -> ast.AST | None:
    if _callee(call) in ("raises", "assertRaises", "assertRaisesRegex") and call.args:
        arg = call.args[0]
        if isinstance(arg, ast.Name | ast.Attribute):
            return arg
    return None


def _own(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a test's body, depth first. A nested function or class is entered only
    when the test itself names it (calls it, hands it to a runner): one never named may be a
    callback that runs later, in a thread, or never. Lambdas are never entered."""
    named = {n.id for n in pyast.walk(function) if isinstance(n, ast.Name)
             and isinstance(n.ctx, ast.Load)}
    stack = list(reversed(getattr(function, "body", [])))
    methods: set[int] = set()  # the methods of a nested class the test names
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.Lambda) or isinstance(
                node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and \
                node.name not in named and id(node) not in methods:
            continue
        if isinstance(node, ast.ClassDef):
            methods.update(id(n) for n in node.body if isinstance(n, ast.FunctionDef))
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _waited(qualified: str) -> bool:
    """`qualified` (a dotted name) is one of _WAITS, in its module or a submodule of it."""
    module, _, name = qualified.rpartition(".")
    return any((module == m or module.startswith(m + ".")) and name in names
               for m, names in _WAITS.items())


class _Imports:
    """What a module's names stand for, read from its imports (any scope): `alias -> dotted
    name` (`import threading as t` maps `t` to `threading`; `from threading import Event as E`
    maps `E` to `threading.Event`), the modules it star-imports, and its own classes that
    derive from a waited-on class (`class Worker(threading.Thread)`)."""

    def __init__(self, tree: ast.Module) -> None:
        imports = Imports.of(tree)
        self.names = imports.names
        self.stars = imports.stars
        self.classes: set[str] = set()
        classes = [n for n in pyast.walk(tree) if isinstance(n, ast.ClassDef)]
        grew = True
        while grew:  # subclasses of subclasses, in any order of definition
            grew = False
            for node in classes:
                if node.name not in self.classes and any(self.waits(b) for b in node.bases):
                    self.classes.add(node.name)
                    grew = True

    def resolve(self, node: ast.expr) -> set[str]:
        """The dotted names `node` (a name or an attribute chain) may stand for."""
        if isinstance(node, ast.Attribute):
            return {f"{q}.{node.attr}" for q in self.resolve(node.value)}
        if isinstance(node, ast.Name):
            found = set(self.names.get(node.id, ()))
            found.update(f"{m}.{node.id}" for m in self.stars)
            return found
        return set()

    def waits(self, node: ast.expr) -> bool:
        """`node` is a waited-on class of threading, asyncio... or a local subclass of one."""
        if isinstance(node, ast.Name) and node.id in self.classes:
            return True
        return any(_waited(q) for q in self.resolve(node))


def _waits(function: ast.AST, imports: _Imports) -> bool:
    """The test makes a thread or an object it waits on (resolved through the module's
    imports, see _WAITS): a canary failing before the release could hang it (more-itertools'
    callback_iter tests), so it gets none."""
    return any(isinstance(n, ast.Call) and imports.waits(n.func) for n in pyast.walk(function))


def _almost_tolerance(call: ast.Call) -> float | None:
    """How far assertAlmostEqual lets values differ (places or delta); None: not literal."""
    places: object = 7
    if len(call.args) >= 3:
        places = _literal(call.args[2])
    for keyword in call.keywords:
        if keyword.arg == "places":
            places = _literal(keyword.value)
        elif keyword.arg == "delta":
            delta = _literal(keyword.value)
            return float(delta) if isinstance(delta, int | float) and \
                not isinstance(delta, bool) else None
    if isinstance(places, int) and not isinstance(places, bool) and 0 <= places < 300:
        return 10.0 ** -places
    return None


def _unittest_site(node: ast.Call) -> _Site | None:
    name = _callee(node)
    if not isinstance(node.func, ast.Attribute):
        return None
    site = _Site(node, [], swap=_UNITTEST_SWAP.get(name, ""))
    if name in _UNITTEST_VALUE and len(node.args) >= 2:
        needle = _needle if name == "assertIn" else _expected
        site.constants = _expected(node.args[1]) or needle(node.args[0])
        if name.startswith("assertAlmostEqual"):
            tolerance = _almost_tolerance(node)
            if tolerance is None:
                site.constants = []
            else:
                site.tolerance = tolerance
    return site if site.constants or site.swap else None


def _sites(function: ast.AST) -> list[_Site]:
    sites: list[_Site] = []
    for node in _own(function):
        if isinstance(node, ast.Assert):
            test = node.test
            if isinstance(test, ast.Constant):
                continue  # `assert True`: nothing to perturb, nothing to negate usefully
            site = _Site(node, _assert_literals(test))
            if isinstance(test, ast.Compare) and len(test.ops) == 1:
                site.operator = test
            else:
                site.negate = test
            sites.append(site)
        elif isinstance(node, ast.Call):
            arg = _raises_arg(node)
            if arg is not None:
                sites.append(_Site(node, [], raises=arg))
                continue
            if _callee(node).startswith("assert"):
                unit = _unittest_site(node)
                if unit is not None:
                    sites.append(unit)
    return sites


# -- data-driven tests: tables the test reads its expected values from ----------------------
class _Module:
    """What the data-driven sites need to know of all hidden sources and of one module."""

    def __init__(self, tree: ast.Module, uses: Counter[str], hooks: bool,
                 paired: bool = False) -> None:
        self.uses = uses  # how often each name is used anywhere in the hidden sources
        self.hooks = hooks  # a conftest may rename parametrize ids (pytest_make_parametrize_id)
        # the grade pairs a canary's items with the real ones by parametrize case (no run
        # selects node ids), so a table whose ids follow its values may be perturbed too
        self.paired = paired
        assigned: Counter[str] = Counter()
        self.tables: dict[str, ast.expr] = {}
        self.values: dict[str, ast.Assign] = {}  # module-level `NAME = <value>`, bound once
        for node in pyast.walk(tree):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.For | ast.NamedExpr):
                targets = [node.target]
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                assigned[node.name] += 1
            elif isinstance(node, ast.alias):
                assigned[node.asname or node.name.partition(".")[0]] += 1
            elif isinstance(node, ast.Global | ast.Nonlocal):
                assigned.update(node.names)
            for target in targets:
                for name in pyast.walk(target):
                    if isinstance(name, ast.Name):
                        assigned[name.id] += 1
        self.assigned = assigned
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                    node.targets[0], ast.Name) and assigned[node.targets[0].id] == 1:
                self.values[node.targets[0].id] = node
                if isinstance(node.value, ast.List | ast.Tuple):
                    self.tables[node.targets[0].id] = node.value

    def _named(self, node: ast.expr, local: Mapping[str, ast.expr] | None,
               reads: int = 1) -> ast.expr | None:
        """A table name resolved: the test's own table, else a module table read only here
        (`reads` times: a parametrize call's `ids=` may read it too); any other node as it
        is."""
        if not isinstance(node, ast.Name):
            return node
        if local and node.id in local:
            return local[node.id]
        return self.tables.get(node.id) if self.uses[node.id] == reads else None

    def table(self, node: ast.expr, local: Mapping[str, ast.expr] | None = None,
              reads: int = 1) -> ast.List | ast.Tuple | None:
        """`node` as a literal list of rows: inline, one of the test's own `local` tables
        (`local_tables`), or a module-level constant that nothing but this one use reads (a
        table shared by several tests is never perturbed)."""
        node = self._named(node, local, reads)
        if isinstance(node, ast.List | ast.Tuple) and node.elts and _literal(node) is not _NO:
            return node
        return None

    def _row_table(self, node: ast.expr, width: int, local: Mapping[str, ast.expr] | None
                   ) -> ast.List | ast.Tuple | None:
        """`node` as a table of rows of `width` cells, some of them expressions
        (`(IntegerRGB(0, 0, 128), "#000080")`): inline, the test's own or a module table read
        once (a reader of a column checks its cells are literals)."""
        node = self._named(node, local)
        if isinstance(node, ast.List | ast.Tuple) and node.elts and all(
                _row(r) and len(r.elts) == width for r in node.elts):  # type: ignore[attr-defined]
            return node
        return None

    def rows(self, node: ast.expr, width: int, local: Mapping[str, ast.expr] | None = None
             ) -> list[list[ast.expr]] | None:
        """The cells of each row a loop `for <width names> in node` reads from literal data:
        a table (`for a, b in TABLE`, inline too), `NAME.items()` of a literal dict, or
        `zip(A, B)` of two literal lists of one length (each name read only there; `local`:
        the test's own tables, see `local_tables`)."""
        if width == 1:
            table = self.table(node, local)
            return None if table is None else [[row] for row in table.elts]
        table = self._row_table(node, width, local)
        if table is not None:
            return [list(r.elts) for r in table.elts]  # type: ignore[attr-defined]
        if not isinstance(node, ast.Call) or node.keywords or width != 2:
            return None
        if isinstance(node.func, ast.Attribute) and node.func.attr == "items" \
                and not node.args:
            source = node.func.value
            if isinstance(source, ast.Name) and local and source.id in local:
                source = local[source.id]
            elif isinstance(source, ast.Name) and self.uses[source.id] == 1 \
                    and source.id in self.values:
                source = self.values[source.id].value
            if isinstance(source, ast.Dict) and source.keys and None not in source.keys \
                    and _literal(source) is not _NO \
                    and len({repr(_literal(k)) for k in source.keys}) == len(source.keys):
                return [[k, v] for k, v in zip(source.keys, source.values, strict=True)]
            return None
        if isinstance(node.func, ast.Name) and node.func.id == "zip" \
                and not self.assigned["zip"] and len(node.args) == 2:
            columns = [self.table(a, local) for a in node.args]
            if columns[0] is not None and columns[1] is not None \
                    and len(columns[0].elts) == len(columns[1].elts):
                return [list(pair) for pair in zip(columns[0].elts, columns[1].elts,
                                                   strict=True)]
        return None

    def constant(self, name: str) -> ast.Assign | None:
        """`NAME = <literal>` at module level, bound once, and read once in all the hidden
        sources (by the one test reading it)."""
        node = self.values.get(name)
        if node is None or self.uses[name] != 1 or _literal(node.value) is _NO:
            return None
        return node


def _uses(sources: Mapping[str, str]) -> tuple[Counter[str], bool]:
    """Loads of each name (attributes and imports too) in the hidden Python files, and
    whether one of them defines a `pytest_make_parametrize_id` hook."""
    uses: Counter[str] = Counter()
    hooks = False
    for path, text in sources.items():
        if not path.endswith(".py"):
            continue
        try:
            tree = parse(text)
        except (SyntaxError, ValueError):
            continue
        for node in pyast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                uses[node.id] += 1
            elif isinstance(node, ast.Attribute):
                uses[node.attr] += 1
            elif isinstance(node, ast.alias):
                uses[node.name.rpartition(".")[2]] += 1
                uses[node.asname or ""] += 1
            elif isinstance(node, ast.FunctionDef) and node.name == "pytest_make_parametrize_id":
                hooks = True
    return uses, hooks


def _compared_names(function: ast.AST) -> tuple[set[int], dict[str, int]]:
    """Names that are a whole side of an equality assertion (`assert x == NAME`,
    `assertEqual(x, NAME)`), as node ids, and how often each name is loaded in the test."""
    compared: set[int] = set()
    for node in _own(function):
        pair: list[ast.expr] = []
        if isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare) and len(
                node.test.ops) == 1 and isinstance(node.test.ops[0], ast.Eq):
            pair = [node.test.left, node.test.comparators[0]]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in _UNITTEST_EQUAL and len(node.args) >= 2:
            pair = list(node.args[:2])
        for mine, other in (pair, pair[::-1]) if pair else ():
            if isinstance(mine, ast.Name) and not any(
                    isinstance(n, ast.Name) and n.id == mine.id for n in pyast.walk(other)):
                compared.add(id(mine))
    loads: Counter[str] = Counter(n.id for n in pyast.walk(function) if isinstance(n, ast.Name)
                                  and isinstance(n.ctx, ast.Load))
    return compared, loads


def _only_compared(name: str, function: ast.AST, compared: set[int],
                   loads: Mapping[str, int]) -> bool:
    """`name` is read by the test only as the expected side of equality assertions."""
    mine = [n for n in _own(function) if isinstance(n, ast.Name) and n.id == name
            and isinstance(n.ctx, ast.Load)]
    return bool(mine) and len(mine) == loads[name] and all(id(n) in compared for n in mine)


def binding_counts(function: ast.AST) -> tuple[Counter[str], Counter[str]]:
    """(loads, stores) of each name anywhere in `function`; a parameter, an import, a def or
    a `global`/`nonlocal` name counts as two stores (never a name bound once by assignment)."""
    loads: Counter[str] = Counter()
    stores: Counter[str] = Counter()
    for node in pyast.walk(function):
        if isinstance(node, ast.Name):
            (loads if isinstance(node.ctx, ast.Load) else stores)[node.id] += 1
        elif isinstance(node, ast.arg):
            stores[node.arg] += 2
        elif isinstance(node, ast.Global | ast.Nonlocal):
            stores.update({n: 2 for n in node.names})
        elif isinstance(node, ast.alias):
            stores[node.asname or node.name.partition(".")[0]] += 2
        elif isinstance(getattr(node, "name", None), str):  # defs, except, match names
            stores[node.name] += 2  # type: ignore[attr-defined]
    return loads, stores


def _row(node: ast.AST) -> bool:
    """A tuple or list of cells (any expressions, none starred): one row of a table."""
    return isinstance(node, ast.Tuple | ast.List) and not any(
        isinstance(c, ast.Starred) for c in node.elts)


def literal_column(rows: list[list[ast.expr]], index: int) -> bool:
    """Every row's cell `index` is a literal (a column a canary or the host may hold)."""
    return all(_literal(row[index]) is not _NO for row in rows)


def local_tables(function: ast.AST) -> dict[str, ast.expr]:
    """{NAME: literal} of the test's own tables: `NAME = <literal list, tuple or dict>`, a
    statement of the test's body, NAME's only binding in the test and read once in it (by
    the loop over it: `test_pairs = (...); for name, want in test_pairs: ...`)."""
    loads, stores = binding_counts(function)
    out = {}
    for statement in getattr(function, "body", ()):
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 \
                and isinstance(statement.targets[0], ast.Name) \
                and isinstance(statement.value, ast.List | ast.Tuple | ast.Dict):
            name = statement.targets[0].id
            if loads[name] == 1 and stores[name] == 1 and (
                    _literal(statement.value) is not _NO or not isinstance(
                        statement.value, ast.Dict) and all(map(_row, statement.value.elts))):
                out[name] = statement.value
    return out


def _loop_sites(function: ast.AST, module: _Module) -> list[_Site]:
    """`for a, expected in TABLE: assert f(a) == expected` (also `NAME.items()`,
    `zip(A, B)`, a table of the test's own, see `_Module.rows`): one row's expected value
    changed."""
    compared, loads = _compared_names(function)
    local = local_tables(function)
    sites = []
    for node in _own(function):
        if not isinstance(node, ast.For) or not isinstance(node.target, ast.Tuple | ast.Name):
            continue
        names = node.target.elts if isinstance(node.target, ast.Tuple) else [node.target]
        if not all(isinstance(n, ast.Name) for n in names):
            continue
        rows = module.rows(node.iter, len(names) if isinstance(node.target, ast.Tuple)
                           else 1, local)
        if rows is None:
            continue
        for index, target in enumerate(names):
            if not _only_compared(target.id, function, compared, loads) \
                    or not literal_column(rows, index):  # type: ignore[attr-defined]
                continue
            constants = [c for row in rows for c in _expected(row[index])]
            if constants:
                sites.append(_Site(node, constants, kind="data",
                                   names=(target.id,)))  # type: ignore[attr-defined]
    return sites


def _constant_sites(function: ast.AST, module: _Module) -> list[_Site]:
    """`EXPECTED = <literal>` at module level, read only by this test and only as the
    expected side of equality assertions: its value changed."""
    compared, loads = _compared_names(function)
    local = {n.id for n in pyast.walk(function) if isinstance(n, ast.Name)
             and not isinstance(n.ctx, ast.Load)} | {
        a.arg for n in pyast.walk(function) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef
                                                        | ast.Lambda)
        for a in [*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs,
                  *filter(None, (n.args.vararg, n.args.kwarg))]}
    sites = []
    for name in sorted({n.id for n in _own(function) if isinstance(n, ast.Name)
                        and isinstance(n.ctx, ast.Load)} - local):
        node = module.constant(name)
        if node is None or not _only_compared(name, function, compared, loads):
            continue
        constants = _expected(node.value)
        if constants:
            sites.append(_Site(node, constants, kind="data", names=(name,)))
    return sites


def literal_bindings(statement: ast.AST) -> list[tuple[str, ast.expr]]:
    """(NAME, value) of each name an assignment binds to a value of its own text: `NAME =
    <value>`, or `a, b = <value>, <value>` (a tuple or list target of names, a value of as
    many items, none starred)."""
    if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
        return []
    target, value = statement.targets[0], statement.value
    if isinstance(target, ast.Name):
        return [(target.id, value)]
    if isinstance(target, ast.Tuple | ast.List) and isinstance(value, ast.Tuple | ast.List) \
            and len(target.elts) == len(value.elts) and all(
                isinstance(t, ast.Name) for t in target.elts) and not any(
                isinstance(v, ast.Starred) for v in value.elts):
        return [(t.id, v) for t, v in zip(target.elts, value.elts, strict=True)]  # type: ignore
    return []


def literal_locals(function: ast.AST) -> dict[str, list[tuple[ast.stmt, ast.expr]]]:
    """{NAME: (statement, value) of each binding} of the test's locals bound only by
    assignments of literals (`expected = [...]`, `given, expected = "8", "8.0.0"`, once or
    again before each check, as unittest suites write `actual`/`expected` pairs), each value
    a different literal: whatever binding a read meets, its value is text a canary can
    change. Distinct values, so that a value still bound from an earlier check is never the
    answer to a later one."""
    _, stores = binding_counts(function)
    found: dict[str, list[tuple[ast.stmt, ast.expr]]] = {}
    for node in _own(function):
        for name, value in literal_bindings(node):
            found.setdefault(name, []).append((node, value))  # type: ignore[arg-type]
    return {name: bindings for name, bindings in found.items() if len(bindings) == stores[name]
            and all(_expected(v) for _, v in bindings) and _distinct([v for _, v in bindings])}


def _distinct(values: list[ast.expr]) -> bool:
    """One value, or literal values no two of which are equal (`1` and `1.0` are one value,
    however differently written; a helper's call is vouched for only alone)."""
    if len(values) == 1:
        return True
    literals = [_literal(v) for v in values]
    return _NO not in literals and all(
        a != b for i, a in enumerate(literals) for b in literals[i + 1:])


def _local_sites(function: ast.AST) -> list[_Site]:
    """`expected = [...]` (every binding of it in the test a literal, see literal_locals,
    read only as the expected side of equality assertions): one binding's value changed."""
    compared, loads = _compared_names(function)
    bound = literal_locals(function)
    values = sorted(((value, name) for name, bindings in bound.items()
                     if _only_compared(name, function, compared, loads) for _, value in bindings),
                    key=lambda pair: (pair[0].lineno, pair[0].col_offset))
    return [_Site(value, _expected(value), kind="data", names=(name,)) for value, name in values]


def _argnames(node: ast.expr) -> list[str] | None:
    value = _literal(node)
    if isinstance(value, str):
        return [n.strip() for n in value.split(",") if n.strip()]
    if isinstance(value, list | tuple) and all(isinstance(n, str) for n in value):
        return list(value)
    return None


def _id_part(node: ast.expr, argname: str, index: int) -> str | None:
    """pytest's id (8.4 and 9.x alike) for one literal value as an explicit `ids=` entry, or
    None where the rules of the two differ or need the runtime value (names, calls, long
    text, escaped bytes). Text outside printable ASCII is given as it is: pytest escapes an
    explicit id exactly as the value's own (`publicité` -> `publicit\\xe9` either way)."""
    value = _literal(node)
    if value is _NO or isinstance(value, complex):
        return None
    if value is None or isinstance(value, bool | int | float):
        return str(value)
    if isinstance(value, str):
        return value if len(value) <= 100 else None
    if isinstance(value, bytes):
        text = value.decode("latin-1")
        if len(value) > 100 or any(not 32 <= ord(c) < 127 or c == "\\" for c in text):
            return None
        return text
    return f"{argname}{index}"  # containers: pytest names them by argument and row


@dataclass(frozen=True)
class ParamRow:
    """One row of a literal parametrize table: its cells (one per argument name) and, for a
    `pytest.param(..., id="x")` row, the `id=` node (pytest names the case by it, escaped as
    any id)."""

    cells: tuple[ast.expr, ...]
    id_node: ast.expr | None = None

    @property
    def own_id(self) -> str | None:
        value = None if self.id_node is None else _literal(self.id_node)
        return value if isinstance(value, str) else None


def _pytest_param(node: ast.expr) -> bool:
    """`pytest.param(...)` (or `param(...)` imported from pytest)."""
    return isinstance(node, ast.Call) and (
        isinstance(node.func, ast.Attribute) and node.func.attr == "param"
        and isinstance(node.func.value, ast.Name) and node.func.value.id == "pytest"
        or isinstance(node.func, ast.Name) and node.func.id == "param")


def param_rows(values: ast.expr | None, width: int, single: bool) -> list[ParamRow] | None:
    """The rows of a parametrize table of literal data (`width` cells each; `single`: one
    argument name, each row its one value): tuples or lists, or `pytest.param(<cells>,
    id="x")` rows (no marks, no other keyword). None for anything else."""
    if not isinstance(values, ast.List | ast.Tuple) or not values.elts:
        return None
    rows: list[ParamRow] = []
    for row in values.elts:
        id_node = None
        if _pytest_param(row):
            assert isinstance(row, ast.Call)
            keywords = {k.arg: k.value for k in row.keywords}
            if set(keywords) - {"id"} or any(isinstance(a, ast.Starred) for a in row.args):
                return None
            id_node = keywords.get("id")
            if id_node is not None and not isinstance(_literal(id_node), str):
                return None
            cells = list(row.args)
        elif single:
            cells = [row]
        elif isinstance(row, ast.Tuple | ast.List):
            cells = list(row.elts)
        else:
            return None
        if len(cells) != width or any(_literal(c) is _NO for c in cells):
            return None
        rows.append(ParamRow(tuple(cells), id_node))
    return rows


def _ids_follow(ids: ast.expr, table: str | None) -> bool:
    """Whether a parametrize call's `ids=` names each case from the values the run holds:
    a callable pytest applies to each value (`ids=str`, `ids=idfn`; a fixed list read
    through a name changes nothing either) or an expression reading no name but `table`
    itself (perturbed with it), builtins and its own comprehension variables. A canary's
    items may then have other ids than the real run's: the grade pairs them by case
    (`verdict.paired_cases`)."""
    if isinstance(ids, ast.Name | ast.Attribute):
        return True
    scope = ids.body if isinstance(ids, ast.Lambda) else ids
    own = {a.arg for a in ids.args.args} if isinstance(ids, ast.Lambda) else set()
    own |= {n.id for n in pyast.walk(scope) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Store)}
    return all(n.id == table or n.id in own or n.id in _BUILTINS
               for n in pyast.walk(scope) if isinstance(n, ast.Name))


def _param_sites(function: ast.AST, module: _Module) -> list[_Site]:
    """`@pytest.mark.parametrize("x,expected", [...])` + `assert f(x) == expected`."""
    if module.hooks or not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
        return []
    compared, loads = _compared_names(function)
    sites = []
    for call in function.decorator_list:
        if not (isinstance(call, ast.Call) and _callee(call) == "parametrize" and call.args):
            continue
        keywords = {k.arg: k.value for k in call.keywords}
        values = call.args[1] if len(call.args) > 1 else keywords.get("argvalues")
        names = _argnames(call.args[0])
        if values is None or not names or len(call.args) > 2 or "indirect" in keywords or None \
                in keywords:
            continue
        given_ids = keywords.get("ids")
        name = values.id if isinstance(values, ast.Name) else None
        follows = module.paired and given_ids is not None and _ids_follow(given_ids, name)
        reads = 1 + (sum(isinstance(n, ast.Name) and n.id == name
                         for n in pyast.walk(given_ids)) if follows else 0)
        table = module._named(values, None, reads)
        single = isinstance(_literal(call.args[0]), str) and len(names) == 1
        param_table = param_rows(table, len(names), single)
        if param_table is None or isinstance(values, ast.Name) and table is None:
            continue
        rows = [list(r.cells) for r in param_table]
        ids: list[str] | None = None
        if given_ids is not None:
            given = _literal(given_ids)
            if not (isinstance(given, list | tuple) and len(given) == len(rows)
                    and all(isinstance(i, str) for i in given)) and not follows:
                continue  # ids that may not follow the values, and no pairing by case
        else:
            parts = [[r.own_id] if r.id_node is not None else
                     [_id_part(v, n, i) for v, n in zip(r.cells, names, strict=True)]
                     for i, r in enumerate(param_table)]
            if not any(p is None for row in parts for p in row):
                ids = ["-".join(row) for row in parts]  # type: ignore[arg-type]
            elif not module.paired:
                continue  # pytest's own ids for these values are not known statically
        last = max([*call.args, *(k.value for k in call.keywords)],
                   key=lambda n: (n.end_lineno, n.end_col_offset))
        for index, name in enumerate(names):
            if not _only_compared(name, function, compared, loads):
                continue
            columns = [_expected(r[index]) for r in rows]  # type: ignore[index]
            if any(columns):
                sites.append(_Site(call, [c for col in columns for c in col], kind="param",
                                   param=_Param(columns, ids, last), names=(name,)))
    return sites


# -- where a test's expected values come from ----------------------------------------------
# An operand of a comparison is LIT (literal data a canary can change), SOL (the solution's
# output: a call or reference to it) or DATA (anything else the test computes or receives at
# run time: an oracle call, a fixture, a non-literal table, a stdlib call on test data). A
# solution can return a DATA value read from the test (its frame, a profile hook, a patched
# oracle) and no canary changes it: a test comparing SOL with DATA only gates.
_LIT, _SOL, _DATA = "lit", "sol", "data"
# assertion methods whose first two arguments are compared (unittest, numpy.testing...)
_PAIR_ASSERTS = (set(_UNITTEST_VALUE) | set(_UNITTEST_EQUAL) | set(_UNITTEST_SWAP)
                 | {"assertNotEqual", "assertNotEquals", "assertNotAlmostEqual",
                    "assert_equal", "assert_array_equal", "assert_allclose",
                    "assert_almost_equal", "assert_array_almost_equal", "assert_frame_equal",
                    "assert_series_equal"}) - {"assertTrue", "assertFalse", "assertIsNone",
                                               "assertIsNotNone"}


def _top(module: str) -> str:
    return module.partition(".")[0]


def _loaded(node: ast.AST) -> Iterator[str]:
    """Names code uses, `import:M` for modules it imports or runs (`import_module("m")`,
    `python -m m`, a path `m.py`)."""
    for child in pyast.walk(node):
        if isinstance(child, ast.Constant) and isinstance(child.value, str):
            for word in child.value.split():
                if word.endswith(".py"):
                    yield f"import:{word.rpartition('/')[2][:-3]}"
        elif isinstance(child, ast.Call) and _callee(child) in ("import_module", "__import__") \
                and child.args and isinstance(child.args[0], ast.Constant) and \
                isinstance(child.args[0].value, str):
            yield f"import:{_top(child.args[0].value)}"
        elif isinstance(child, ast.List | ast.Tuple):
            words = [e.value for e in child.elts if isinstance(e, ast.Constant)]
            for flag, module in zip(words, words[1:], strict=False):
                if flag == "-m" and isinstance(module, str):
                    yield f"import:{_top(module)}"
        elif isinstance(child, ast.Name):
            yield child.id
        elif isinstance(child, ast.Import):
            yield from (f"import:{_top(a.name)}" for a in child.names)
        elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
            yield f"import:{_top(child.module)}"


class _Origins:
    """What a test module's own names stand for: solution names (imported from the solution's
    modules, a dataset adapter's entry points, a star import of a solution module), helpers
    (its functions and classes; SOL when their body reaches a solution name), imports of
    other modules and module-level assignments; `self.X` values of its classes."""

    def __init__(self, tree: ast.Module, solution: Collection[str],
                 fixtures: Mapping[str, bool] | None = None) -> None:
        self.solution = {_top(m) for m in solution}
        self.sol_names: set[str] = set()
        self.imports: dict[str, str] = {}
        self.defs: dict[str, ast.AST] = {}
        self.assigns: dict[str, list[ast.expr]] = {}
        self.star_solution = False
        self.fixtures: dict[str, bool] = dict(fixtures or {})  # name -> returns SOL
        own_fixtures: dict[str, ast.AST] = {}
        for node in tree.body:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self._import(alias.asname or _top(alias.name), alias.name)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if alias.name == "*":
                        self.star_solution |= _top(node.module) in self.solution
                    else:
                        self._import(alias.asname or alias.name, node.module)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.defs[node.name] = node
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                        "fixture" in ast.unparse(d) for d in node.decorator_list):
                    own_fixtures[node.name] = node
            elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for name in pyast.walk(target):
                        if isinstance(name, ast.Name):
                            self.assigns.setdefault(name.id, []).append(node.value)
        # the dataset adapters' tests bind the solution's entry points into the check's namespace
        if "_rebound" in self.defs:
            for key in ("ENTRY_POINT", "NAMES"):
                value = _literal(self.assigns.get(key, [ast.Constant(None)])[0])
                values = value if isinstance(value, tuple | list) else [value]
                self.sol_names.update(v for v in values if isinstance(v, str))
        self.self_attrs: dict[str, list[ast.AST]] = {}
        for node in pyast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                        self.self_attrs.setdefault(item.name, []).append(item)
                    elif isinstance(item, ast.Assign):
                        for target in item.targets:
                            if isinstance(target, ast.Name):
                                self.self_attrs.setdefault(target.id, []).append(item.value)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and isinstance(
                            target.value, ast.Name) and target.value.id in ("self", "cls"):
                        self.self_attrs.setdefault(target.attr, []).append(node.value)
        self.sol_helpers: set[str] = set()
        self._runs: dict[str, bool] = {}
        loaded = {name: tuple(dict.fromkeys(_loaded(node))) for name, node in self.defs.items()}
        grew = True
        while grew:  # helpers calling helpers that reach the solution, in any order
            grew = False
            for name, names in loaded.items():
                if name not in self.sol_helpers and self._reaches(names):
                    self.sol_helpers.add(name)
                    grew = True
        self.fixtures.update((n, n in self.sol_helpers) for n in own_fixtures)

    def _import(self, name: str, module: str) -> None:
        self.imports[name] = module
        if _top(module) in self.solution:
            self.sol_names.add(name)

    def reaches(self, node: ast.AST) -> bool:
        """The code of `node` names the solution (directly or through a helper)."""
        return self._reaches(_loaded(node))

    def _reaches(self, names: Iterable[str]) -> bool:
        """Some of `names` (as `_loaded` gives them) is the solution or reaches it."""
        for name in names:
            if name.startswith("import:"):
                if name[len("import:"):] in self.solution:
                    return True
            elif name in self.sol_names or name in self.sol_helpers or self._runs_solution(name):
                return True
        return False

    def _runs_solution(self, name: str) -> bool:
        """A module-level value bound to `name` imports or runs the solution (`PROGRAM =
        "main.py"` run by a helper)."""
        if name not in self._runs:
            self._runs[name] = any(
                n.startswith("import:") and n[len("import:"):] in self.solution
                for value in self.assigns.get(name, ()) for n in _loaded(value))
        return self._runs[name]

    def module_name(self, name: str) -> str:
        """The class of a name the test does not bind itself."""
        if name in self.sol_names or name in self.sol_helpers:
            return _SOL
        if name in self.defs:
            # a class of the test's own is a type, not a value it could hand over
            return _LIT if isinstance(self.defs[name], ast.ClassDef) else _DATA
        if name in self.imports or name in self.assigns:
            return _DATA  # another module, or a module constant no canary changes
        if name in _BUILTINS:
            return _LIT
        return _SOL if self.star_solution else _DATA


class _Judge:
    """Classifies the comparisons of one test; `why` is set at the first unsafe one."""

    def __init__(self, function: ast.AST, origins: _Origins, literal: Collection[str]) -> None:
        self.origins = origins
        self.literal = set(literal)
        self.bindings: dict[str, list[tuple[str, ast.AST | None]]] = {}
        self.memo: dict[str, str] = {}
        self.why = ""
        self._bind_all(function)

    def _bind(self, name: str, kind: str, value: ast.AST | None) -> None:
        self.bindings.setdefault(name, []).append((kind, value))

    def _bind_target(self, target: ast.AST, value: ast.AST | None, kind: str = "value") -> None:
        if isinstance(target, ast.Tuple | ast.List) and isinstance(value, ast.Tuple | ast.List) \
                and len(target.elts) == len(value.elts):
            for t, v in zip(target.elts, value.elts, strict=True):
                self._bind_target(t, v, kind)
            return
        for name in pyast.walk(target):
            if isinstance(name, ast.Name):
                self._bind(name.id, kind, value)

    def _bind_all(self, function: ast.AST) -> None:
        top = function
        for node in pyast.walk(function):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                if node is not top and not isinstance(node, ast.Lambda):
                    self._bind(node.name, "def", node)
                args = node.args
                for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                            *filter(None, (args.vararg, args.kwarg))]:
                    if node is top:
                        kind = "self" if arg.arg in ("self", "cls") else "fixture"
                    elif getattr(node, "name", "") == "check" and arg.arg == "candidate":
                        kind = "sol"  # the dataset's check(candidate) contract
                    else:
                        kind = "param"
                    self._bind(arg.arg, kind, None)
            elif isinstance(node, ast.ClassDef):
                self._bind(node.name, "def", node)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    self._bind_target(target, node.value)
            elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr) and \
                    node.value is not None:
                self._bind_target(node.target, node.value)
            elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                self._bind_target(node.target, node.iter, "item")
            elif isinstance(node, ast.With | ast.AsyncWith):
                for item in node.items:
                    if item.optional_vars is not None:
                        self._bind_target(item.optional_vars, item.context_expr)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                for alias in node.names:
                    source = (node.module or "") if isinstance(node, ast.ImportFrom) \
                        else alias.name
                    sol = _top(source) in self.origins.solution and not getattr(
                        node, "level", 0)
                    self._bind(alias.asname or _top(alias.name), "sol" if sol else "data",
                               None)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                self._bind(node.name, "data", None)

    def flag(self, node: ast.AST, what: str) -> None:
        if not self.why:
            text = ast.unparse(node)
            text = text if len(text) <= 60 else text[:57] + "..."
            self.why = f"line {getattr(node, 'lineno', '?')}: `{text}` {what}"

    # -- classes of expressions --------------------------------------------------------------
    def name(self, name: str) -> str:
        if name in self.literal:
            return _LIT
        if name in self.memo:
            return self.memo[name]
        self.memo[name] = _DATA  # a cycle (`x = x + 1`) reads as data
        bound = self.bindings.get(name)
        if bound is None:
            result = self.origins.module_name(name)
        else:
            classes = [self._binding(name, kind, value) for kind, value in bound]
            result = _SOL if all(c == _SOL for c in classes) else _DATA
        self.memo[name] = result
        return result

    def _binding(self, name: str, kind: str, value: ast.AST | None) -> str:
        if kind == "sol":
            return _SOL
        if kind == "fixture":  # a fixture returning the solution's object, else data
            return _SOL if self.origins.fixtures.get(name) else _DATA
        if kind in ("data", "param", "self") or value is None:
            return _DATA
        if kind == "def":
            assert value is not None
            if self._reaches(value):
                return _SOL
            return _LIT if isinstance(value, ast.ClassDef) else _DATA
        assert value is not None
        return self.value(value)  # an assigned value, or the iterable of a loop's item

    def _reaches(self, node: ast.AST) -> bool:
        return self.origins.reaches(node) or any(
            self.bindings.get(n) and n not in self.memo and self.name(n) == _SOL
            for n in _loaded(node) if not n.startswith("import:"))

    def value(self, node: ast.AST) -> str:  # noqa: C901 - one case per expression type
        if isinstance(node, ast.Constant):
            return _LIT
        if isinstance(node, ast.Name):
            return self.name(node.id)
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                values = self.origins.self_attrs.get(node.attr, [])
                if not values:
                    return _DATA
                classes = [(_SOL if self.origins.reaches(v) else _DATA)
                           if isinstance(v, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                           else self.value(v) for v in values]
                return _SOL if all(c == _SOL for c in classes) else _DATA
            return self.value(node.value)
        if isinstance(node, ast.Subscript | ast.Starred | ast.Await | ast.NamedExpr):
            return self.value(node.value)
        if isinstance(node, ast.UnaryOp):
            return self.value(node.operand)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.BinOp):
            return self.combine(node, [node.left, node.right])
        if isinstance(node, ast.BoolOp):
            return self.join([self.value(v) for v in node.values])
        if isinstance(node, ast.IfExp):
            return self.join([self.value(node.body), self.value(node.orelse)])
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for left, right in zip(operands, operands[1:], strict=False):
                self.pair(node, left, right)
            return self.join([self.value(o) for o in operands])
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            return self.combine(node, node.elts)
        if isinstance(node, ast.Dict):
            return self.combine(node, [*filter(None, node.keys), *node.values])
        if isinstance(node, ast.JoinedStr):
            return self.combine(node, node.values)
        if isinstance(node, ast.FormattedValue):
            return self.value(node.value)
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp):
            return self.value(node.elt)
        if isinstance(node, ast.DictComp):
            return self.combine(node, [node.key, node.value])
        if isinstance(node, ast.Lambda):
            return _SOL if self._reaches(node.body) else _LIT
        return _DATA

    @staticmethod
    def join(classes: list[str]) -> str:
        if _SOL in classes:
            return _SOL
        return _DATA if _DATA in classes else _LIT

    def combine(self, node: ast.AST, parts: list[ast.AST]) -> str:
        """Values combined into one: the solution's output with run-time data is a
        comparison in disguise (`abs(got - expected)`, `check(got, want)`)."""
        classes = [self.value(p) for p in parts]
        if _SOL in classes and _DATA in classes:
            self.flag(node, "combines the solution's output with a value the test computes "
                            "at run time")
        return self.join(classes)

    def call(self, node: ast.Call) -> str:
        name = _callee(node)
        if name != "approx" and _expected(node):
            return _LIT  # a helper of the test applied to literals a canary can change
        if name == "approx" and node.args:
            return self.value(node.args[0])
        if name in _CLOSE_CALLS and len(node.args) >= 2:
            self.pair(node, node.args[0], node.args[1])
            return self.join([self.value(a) for a in node.args[:2]])
        callee = self.value(node.func)
        if callee == _SOL:
            return _SOL  # the solution called: its arguments are inputs
        inner = self.combine(node, [*node.args, *(k.value for k in node.keywords)])
        if callee == _DATA:
            return _SOL if inner == _SOL else _DATA
        return inner  # a builtin, a literal's method: as its arguments

    def pair(self, node: ast.AST, left: ast.AST, right: ast.AST) -> None:
        a, b = self.value(left), self.value(right)
        if _LIT in (a, b) or a == b == _SOL:
            return
        self.flag(node, "compares the solution's output with a value the test computes at "
                        "run time (no canary changes it)" if _SOL in (a, b) else
                  "compares values the test computes at run time (no canary changes them)")

    # -- the assertions of the test ----------------------------------------------------------
    def judge(self, function: ast.AST) -> str:
        for node in _own(function):
            if isinstance(node, ast.Assert):
                self.value(node.test)
            elif isinstance(node, ast.If) and any(
                    isinstance(s, ast.Raise) or isinstance(s, ast.Expr) and isinstance(
                        s.value, ast.Call) and _callee(s.value) == "fail" for s in node.body):
                self.value(node.test)  # `if got != want: pytest.fail(...)`
            elif isinstance(node, ast.Call) and _callee(node) in _PAIR_ASSERTS and \
                    len(node.args) >= 2:
                self.pair(node, node.args[0], node.args[1])
            elif isinstance(node, ast.Call) and _callee(node) in (
                    "assertTrue", "assertFalse") and node.args:
                self.value(node.args[0])
            if self.why:
                break
        return self.why


def _answer_safety(function: ast.AST, origins: _Origins, sites: Iterable[_Site]) -> str:
    """'' when every comparison of the test is answer-safe (one operand literal data a canary
    can change, or both the solution's); else why the test only gates."""
    literal = {n for site in sites if site.constants for n in site.names}
    return _Judge(function, origins, literal).judge(function)


def _fixtures(sources: Mapping[str, str], solution: Collection[str]) -> dict[str, bool]:
    """The functions of the hidden conftest files (fixtures), each with whether it reaches
    the solution (its value is then the solution's)."""
    found: dict[str, bool] = {}
    for path, text in sources.items():
        if not path.endswith("conftest.py"):
            continue
        try:
            tree = parse(text)
        except (SyntaxError, ValueError):
            continue
        origins = _Origins(tree, solution)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found[node.name] = found.get(node.name, True) and \
                    node.name in origins.sol_helpers
    return found


# -- perturbing one token -------------------------------------------------------------------
class _Source:
    """A module's text with byte offsets for ast positions (col_offset counts UTF-8 bytes)."""

    def __init__(self, text: str) -> None:
        self.data = text.encode("utf-8")
        self.starts = [0]
        for i, byte in enumerate(self.data):
            if byte == 0x0A:
                self.starts.append(i + 1)

    def span(self, node: ast.AST) -> tuple[int, int]:
        start = self.starts[node.lineno - 1] + node.col_offset
        end = self.starts[node.end_lineno - 1] + node.end_col_offset
        return start, end

    def text(self, start: int, end: int) -> str:
        return self.data[start:end].decode("utf-8")


class _Statements:
    """A module's statements as byte spans, to check that an edit leaves valid Python by
    parsing only the statement it touches: a whole-module parse per candidate is quadratic
    (minutes on more-itertools' 6,000-line test module). A class is split into its own
    statements (a generated unittest class may hold thousands of tests in one statement);
    an indented one parses as the block of an `if 1:`."""

    def __init__(self, tree: ast.Module, source: _Source) -> None:
        self.source = source
        self.spans: list[tuple[int, int, bool]] = []  # (start, end, indented)
        self._add(tree.body, indented=False)
        self.firsts = [start for start, _, _ in self.spans]

    def _add(self, body: list[ast.stmt], indented: bool) -> None:
        starts = self.source.starts
        for stmt in body:
            first = min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))])
            end = stmt.end_lineno or stmt.lineno
            if isinstance(stmt, ast.ClassDef) and self._own_lines(stmt):
                self._add(stmt.body, indented=True)
                continue
            self.spans.append((starts[first - 1],
                               starts[end] if end < len(starts) else len(self.source.data),
                               indented))

    def _own_lines(self, cls: ast.ClassDef) -> bool:
        """Whether each statement of the class body has lines of its own (after the header,
        only indentation before it, nothing after it), so that it parses alone."""
        previous = max([cls.lineno, *(b.end_lineno or 0 for b in [*cls.bases, *cls.keywords])])
        for stmt in cls.body:
            first = min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))])
            line_start = self.source.starts[first - 1]
            lead = self.source.data[line_start:line_start + stmt.col_offset]
            if first <= previous or lead.strip(b" \t") or stmt.col_offset == 0:
                return False
            previous = stmt.end_lineno or stmt.lineno
        last = cls.body[-1]
        end_line = last.end_lineno or last.lineno
        if end_line < len(self.source.starts):
            tail = self.source.data[self.source.starts[end_line - 1] + (last.end_col_offset or 0):
                                    self.source.starts[end_line]]
            if tail.split(b"#", 1)[0].strip():
                return False
        return True

    def parses(self, edits: Iterable[tuple[int, int, str]]) -> bool:
        """Whether the module with `edits` applied still parses."""
        edits = list(edits)
        data = self.source.data
        touched: dict[int, list[tuple[int, int, str]]] = {}
        for start, end, text in edits:
            index = bisect.bisect_right(self.firsts, start) - 1
            first = self.spans[index][0] if index >= 0 else 0
            code = first + len(data[first:start]) - len(data[first:start].lstrip(b" \t"))
            if (index < 0 or end >= self.spans[index][1] or start <= code or "\n" in text
                    or b"\n" in data[start:end] or "\\" in text):
                # outside every statement, or it may change lines or indentation: check all
                return self._parses(data, edits)
            touched.setdefault(index, []).append((start - first, end - first, text))
        if all(self._parses(data[self.spans[i][0]:self.spans[i][1]], local, self.spans[i][2])
               for i, local in touched.items()):
            return True
        return self._parses(data, edits)  # rare (a candidate that breaks): make sure

    @staticmethod
    def _parses(data: bytes, edits: list[tuple[int, int, str]], indented: bool = False) -> bool:
        text = _apply(data, edits)
        try:
            parse("if 1:\n" + text if indented else text)
        except (SyntaxError, ValueError):
            return False
        return True


def _int_token(token: str, value: int, rng: random.Random) -> str | None:
    delta = rng.choice((1, 2, 3)) * rng.choice((1, -1))
    new = value + delta
    if value >= 0 and new < 0 or value >= 1 and new < 1:
        new = value + abs(delta)
    lower = token.lower()
    if lower.startswith("0x"):
        text = format(new, "x")
        return token[:2] + (text.upper() if token[2:].isupper() else text)
    if lower.startswith("0o"):
        return token[:2] + format(new, "o")
    if lower.startswith("0b"):
        return token[:2] + format(new, "b")
    if "_" in token:
        return f"{new:_}"
    return str(new)


def _float_token(token: str, value: float, rng: random.Random) -> str | None:
    """Change one of the two leading significant digits by 1-3 (a change beyond tolerances)."""
    mantissa = token.lower().split("e")[0]
    digits = [i for i, c in enumerate(mantissa) if c.isdigit()]
    first = next((i for i in digits if mantissa[i] != "0"), None)
    choices = [i for i in digits if i >= first][:2] if first is not None else digits[:1]
    for index in rng.sample(choices, len(choices)):
        old = int(token[index])
        lowest = 1 if index == first else 0
        options = [d for d in range(lowest, 10) if d != old and abs(d - old) <= 3]
        if not options:
            continue
        new = token[:index] + str(rng.choice(options)) + token[index + 1:]
        try:
            if float(new.replace("_", "")) != value:
                return new
        except ValueError:
            continue
    return None


_CLASSES = (string.ascii_lowercase, string.ascii_uppercase, string.digits)


def _same_class(a: str | int, b: str | int) -> bool:
    a, b = (chr(a), chr(b)) if isinstance(a, int) else (a, b)
    return any(a in c and b in c for c in _CLASSES) or (
        a in string.punctuation and b in string.punctuation)


def _text_token(token: str, value: str | bytes, rng: random.Random) -> str | None:
    quote = next(i for i, c in enumerate(token) if c in "'\"")
    prefix = token[:quote].lower()
    body = range(quote + (3 if token[quote:quote + 3] in ('"""', "'''") else 1),
                 len(token) - (3 if token[-3:] in ('"""', "'''") else 1))
    if "f" in prefix:
        return None
    positions = [i for i in body if token[i].isascii() and token[i].isalnum()
                 and token[i - 1] != "\\"]
    if not positions:
        positions = [i for i in body if token[i] in string.punctuation and token[i] not in
                     "\\'\"{}"]
    for index in rng.sample(positions, len(positions)):
        char = token[index]
        pool = next((c for c in _CLASSES if char in c), "!#$%&()*+,-./:;<=>?@[]^_`|~")
        new = token[:index] + rng.choice([c for c in pool if c != char]) + token[index + 1:]
        try:
            changed = pyast.literal_eval(new)
        except (ValueError, SyntaxError):
            continue
        if type(changed) is not type(value) or len(changed) != len(value):
            continue
        diff = [(a, b) for a, b in zip(changed, value, strict=True) if a != b]
        if len(diff) == 1 and _same_class(*diff[0]):
            return new
    return None


def _empty_token(token: str, node: ast.AST, rng: random.Random) -> str | None:
    """A one-element literal of the same type for an empty one (`[]` -> `[3]`, `""` -> `"k"`)."""
    if "\n" in token:
        return None
    number = str(rng.randrange(10))
    if isinstance(node, ast.Constant):
        quote = next((i for i, c in enumerate(token) if c in "'\""), None)
        if quote is None or "f" in token[:quote].lower():
            return None
        width = 3 if token[quote:quote + 3] in ('"""', "'''") else 1
        return token[:quote + width] + rng.choice(string.ascii_lowercase) + token[quote + width:]
    if isinstance(node, ast.List):
        return f"[{number}]"
    if isinstance(node, ast.Tuple):
        return f"({number},)"
    if isinstance(node, ast.Dict):
        return f"{{{number}: {number}}}"
    return f"{{{number}}}"  # set()


def _perturb(source: _Source, node: ast.AST, rng: random.Random) -> tuple[str, str] | None:
    """(old token, new token) for a constant, keeping its type and its spelling style."""
    start, end = source.span(node)
    token = source.text(start, end)
    value = node.value if isinstance(node, ast.Constant) else None
    if not isinstance(node, ast.Constant) or value in ("", b""):
        new = _empty_token(token, node, rng)
    elif isinstance(value, bool):
        return token, "False" if value else "True"
    elif isinstance(value, int):
        new = _int_token(token, value, rng)
    elif isinstance(value, float):
        new = _float_token(token, value, rng)
    elif isinstance(value, str | bytes):
        new = _text_token(token, value, rng)
    else:
        new = None
    return (token, new) if new is not None and new != token else None


def _moved_enough(old: str, new: str, tolerance: float) -> bool:
    """A perturbed number leaves assertAlmostEqual's band (bools and text always do)."""
    if not tolerance:
        return True
    try:
        a, b = pyast.literal_eval(old), pyast.literal_eval(new)
    except (ValueError, SyntaxError):
        return False
    if not isinstance(a, int | float) or isinstance(a, bool):
        return True
    return abs(b - a) > 2 * tolerance


@dataclass(frozen=True)
class _Edit:
    kind: str
    start: int
    end: int
    replacement: str
    more: tuple[tuple[int, int, str], ...] = ()
    real: tuple[tuple[int, int, str], ...] = ()
    site: tuple[int, str] = (-1, "")


def _param_edit(source: _Source, site: _Site, rng: random.Random) -> _Edit | None:
    """Every row's expected value changed; `ids=` (pytest's own) added in both variants."""
    param = site.param
    assert param is not None
    edits = []
    for row in param.rows:
        for constant in rng.sample(row, len(row)):
            change = _perturb(source, constant, rng)
            if change:
                edits.append((*source.span(constant), change[1]))
                break
    if not edits:
        return None
    real: tuple[tuple[int, int, str], ...] = ()
    if param.ids is not None:
        at = source.span(param.after)[1]
        real = ((at, at, f", ids={param.ids!r}"),)
    first, *rest = sorted(edits)
    return _Edit("param", *first, more=(*rest, *real), real=real)


def _edit(source: _Source, site: _Site, rng: random.Random, mode: str) -> _Edit | None:
    """The edit for one site in `mode` (perturb, swap or negate), or None."""
    if mode == "perturb" and site.param is not None:
        return _param_edit(source, site, rng)
    if mode == "perturb" and site.constants:
        for constant in rng.sample(site.constants, len(site.constants)):
            change = _perturb(source, constant, rng)
            if change and _moved_enough(*change, site.tolerance):
                start, end = source.span(constant)
                return _Edit(site.kind, start, end, change[1])
        return None
    if mode == "perturb" and site.raises is not None:
        start, end = source.span(site.raises)
        name = source.text(start, end)
        return _Edit("raises", start, end, _other_exception(name.rpartition(".")[2], rng))
    if mode == "perturb":
        return None
    if mode == "swap" and site.swap:
        func = site.node.func  # type: ignore[attr-defined]
        end = source.span(func)[1]
        return _Edit("operator", end - len(func.attr), end, site.swap)
    if mode == "swap" and site.operator is not None:
        span = _operator_span(source, site.operator)
        if span:
            return _Edit("operator", *span, _COMPLEMENT[type(site.operator.ops[0])])
        return None
    test = site.negate
    if mode != "negate" or test is None:
        return None
    start, end = source.span(test)
    text = source.text(start, end)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _Edit("negation", start, end, text[len("not"):].lstrip())
    body = text if isinstance(test, _ATOMS) and "\n" not in text else f"({text})"
    return _Edit("negation", start, end, f"not {body}")


def _weight(site: _Site) -> int:
    """How much an expectation tells: a password or an output outweighs a `0`, `1` or bool.

    A reader of the test file may copy only the answers it cannot compute and satisfy format
    checks honestly; weighting the draw toward informative expectations makes the canary land
    on what such a forgery copies. A data table (loop, parametrize) weighs like an output.
    """
    if site.raises is not None:
        return 2
    if not site.constants:
        return 1
    if site.kind != "literal":
        return 6
    best = 2
    for constant in site.constants:
        value = constant.value if isinstance(constant, ast.Constant) else None
        if not isinstance(constant, ast.Constant):
            weight = 4
        elif isinstance(value, bool):
            weight = 1
        elif isinstance(value, int):
            weight = 1 if -1 <= value <= 2 else 4
        elif isinstance(value, str | bytes):
            weight = 1 if len(value) <= 1 else 6
        else:
            weight = 4
        best = max(best, weight)
    return best


def _choose(source: _Source, sites: list[_Site], rng: random.Random,
            exclude: Collection[tuple[int, str]] = ()) -> _Edit | None:
    """Perturb one site: literals, data tables and exception classes first, else operators,
    else `not`. A candidate is a site (its index in `sites`) in one mode; those in `exclude`
    (canaries that calibration found invalid) are never drawn, so each redraw of a test tries
    a candidate not tried before until none is left."""
    modes = (("perturb", lambda s: s.constants or s.raises is not None),
             ("swap", lambda s: s.swap or s.operator is not None),
             ("negate", lambda s: s.negate is not None))
    for mode, fits in modes:
        group = [(i, s) for i, s in enumerate(sites) if fits(s) and (i, mode) not in exclude]
        while group:
            weights = [_weight(s) if mode == "perturb" else 1 for _, s in group]
            index, site = rng.choices(group, weights)[0]
            group.remove((index, site))
            edit = _edit(source, site, rng, mode)
            if edit:
                return dataclasses.replace(edit, site=(index, mode))
    return None


_LEAVES = ("ZeroDivisionError", "FileNotFoundError", "RecursionError", "NotImplementedError",
           "UnicodeDecodeError")


def _other_exception(name: str, rng: random.Random) -> str:
    """Another builtin exception class, never one the expected class derives from."""
    raised = getattr(builtins, name, None)
    if not (isinstance(raised, type) and issubclass(raised, BaseException)):
        return rng.choice(_LEAVES)  # a task's own class may derive from any common base
    options = [e for e in _EXCEPTIONS if e != name and not issubclass(raised, getattr(builtins, e))]
    return rng.choice(options)


def _operator_span(source: _Source, compare: ast.Compare) -> tuple[int, int] | None:
    """The bytes of a comparison's operator token (between its two operands)."""
    start = source.span(compare.left)[1]
    end = source.span(compare.comparators[0])[0]
    between = source.text(start, end)
    text = _OP_TEXT[type(compare.ops[0])]
    words = text.split()
    index = between.find(words[0])
    if index < 0 or "#" in between[:index]:
        return None
    tail = index + len(words[0])
    if len(words) == 2:
        rest = between[tail:]
        second = rest.find(words[1])
        if second < 0 or rest[:second].strip():
            return None
        tail += second + len(words[1])
    prefix = len(between[:index].encode())
    return start + prefix, start + prefix + len(between[index:tail].encode())


_ATOMS = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant, ast.List, ast.Tuple,
          ast.Dict, ast.Set)


def _apply(data: bytes, edits: Iterable[tuple[int, int, str]]) -> str:
    """`data` with each (start, end, text) edit applied; one pass, since a held rewrite may
    make thousands of edits in one module (a copy per edit would be quadratic)."""
    ordered = sorted(edits)
    if any(a[1] > b[0] for a, b in itertools.pairwise(ordered)):  # overlapping: in turn
        out = data
        for start, end, text in reversed(ordered):
            out = out[:start] + text.encode("utf-8") + out[end:]
        return out.decode("utf-8")
    pieces, position = [], 0
    for start, end, text in ordered:
        pieces += [data[position:start], text.encode("utf-8")]
        position = end
    pieces.append(data[position:])
    return b"".join(pieces).decode("utf-8")


def _referenced_names(sources: Mapping[str, str], own_bodies: bool = False) -> set[str]:
    """Every name the hidden Python files use (loads, attributes, imports), definitions
    aside. With `own_bodies` (edits inside existing test bodies: canaries), a class named
    only as the base of classes that define all its test methods themselves is left out
    (`inherited.materialize` copied them: its methods run under its own ids only); a method
    added to it (a sentinel's clone) would still be inherited, so sentinels read all."""
    from opd_gym.grading.inherited import shared_bases

    names: set[str] = set()
    for path, text in sources.items():
        if not path.endswith(".py"):
            continue
        try:
            tree = parse(text)
        except (SyntaxError, ValueError):
            continue
        covered = shared_bases(tree) if own_bodies else set()
        for node in pyast.walk(tree):
            if id(node) in covered or own_bodies and isinstance(node, ast.Name) \
                    and isinstance(node.ctx, ast.Store):
                continue  # (binding a name, `test_x = None`, runs no function)
            if isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.alias):
                names.add(node.name.rpartition(".")[2])
    return names


def _runs_under_one_id(test_id: str, referenced: set[str]) -> bool:
    """False when the function's code may also run under other ids: a method of a class that
    is subclassed or imported elsewhere (inherited tests), or a test called by another test.
    A canary there would fail those other ids too, so such tests get none (they are gates)."""
    return not any(part in referenced for part in test_id.split("::")[1:])


def make_canaries(sources: Mapping[str, str], paths: Iterable[str], seed: int, *,
                  exclude: Mapping[str, Collection[tuple[int, str]]] | None = None,
                  only: Collection[str] | None = None,
                  solution_modules: Collection[str] = (), paired: bool = False) -> CanarySet:
    """One canary per test of the given test modules (where one can be made), from `seed`.

    Each candidate edit is checked by parsing the edited module, so a canary is always valid
    Python. Deterministic for a seed: same sources, same seed, same canaries. `exclude` maps a
    test id to candidates (`Canary.site`) it must not use: the redraw of a canary that proved
    invalid; a test whose candidates are all excluded gets none. `only` limits the canaries
    made to those test ids (`tests` still lists every test).

    `solution_modules` are the top-level modules the solution may define (`calc`, `pkg`):
    a test comparing their output with a value it computes at run time (an oracle, a fixture,
    a table no canary changes) gets a canary with `earns` False (see _answer_safety); that is
    a property of the test, the same for every seed and redraw.

    `paired`: the grade pairs a canary's items with the real test's by parametrize case
    (`verdict.paired_cases`; no run selects node ids), so a parametrize table whose ids
    follow its values (`ids=` a function or computed from it, or pytest's own ids for values
    it names at run time) gets a canary too.
    """
    token = _HELPERS.set(frozenset())
    try:
        return _make_canaries(sources, paths, seed, exclude or {}, only, solution_modules,
                              paired)
    finally:
        _HELPERS.reset(token)


def _make_canaries(sources: Mapping[str, str], paths: Iterable[str], seed: int,
                   exclude: Mapping[str, Collection[tuple[int, str]]],
                   only: Collection[str] | None, solution_modules: Collection[str],
                   paired: bool = False) -> CanarySet:
    canaries: dict[str, Canary] = {}
    tests: list[str] = []
    referenced = _referenced_names(sources, own_bodies=True)
    uses, hooks = _uses(sources)
    fixtures = _fixtures(sources, solution_modules)
    for path in sorted(paths):
        try:
            tree = parse(sources[path])
        except (SyntaxError, ValueError):
            continue
        source = _Source(sources[path])
        statements = _Statements(tree, source)
        module = _Module(tree, uses, hooks, paired)
        imports = _Imports(tree)
        origins = _Origins(tree, solution_modules, fixtures)
        _HELPERS.set(frozenset(  # known only when the solution's modules are
            name for name, node in origins.defs.items() if solution_modules and
            isinstance(node, ast.FunctionDef) and name not in origins.sol_helpers))
        for test_id, function, owner in _collected(tree, path):
            tests.append(test_id)
            if only is not None and test_id not in only:
                continue
            if not (_runs_under_one_id(test_id, referenced)
                    and _runs_under_one_id(owner, referenced)) or _waits(function, imports):
                continue
            rng = random.Random(f"{seed}:{test_id}")
            sites = [*_sites(function), *_local_sites(function), *_loop_sites(function, module),
                     *_constant_sites(function, module),
                     *_param_sites(function, module)]
            excluded = set(exclude.get(test_id, ()))
            while True:  # a candidate whose edit does not parse is excluded, the next drawn
                edit = _choose(source, sites, rng, excluded)
                if edit is None:
                    break
                edits = [(edit.start, edit.end, edit.replacement), *edit.more]
                if statements.parses(edits) and not (
                        edit.real and not statements.parses(edit.real)):
                    break
                excluded.add(edit.site)
            if edit is None:
                continue
            line = bisect.bisect_right(source.starts, edit.start)  # 1-based
            why = _answer_safety(function, origins, sites)
            canaries[test_id] = Canary(test_id, path, edit.kind, line, edit.start, edit.end,
                                       source.text(edit.start, edit.end), edit.replacement,
                                       edit.more, edit.real, edit.site, earns=not why, why=why)
    return CanarySet(canaries, tuple(tests))


def module_names(paths: Iterable[str]) -> frozenset[str]:
    """The top-level modules a tree of files defines, as tests import them: `calc.py` ->
    calc, `pkg/__init__.py` and `pkg/x.py` -> pkg, `src/pkg/x.py` -> pkg (a src layout)."""
    found: set[str] = set()
    for path in paths:
        parts = path.split("/")
        if not path.endswith(".py") or not parts:
            continue
        if parts[0] == "src" and len(parts) > 1:
            parts = parts[1:]
        head = parts[0][:-3] if len(parts) == 1 else parts[0]
        if head.isidentifier():
            found.add(head)
    return frozenset(found)


Edits = dict[str, list[tuple[int, int, str]]]  # per file path: byte-span edits of its text


def variant_edits(canaries: CanarySet, rng: random.Random | None = None,
                  fixed: Mapping[str, int] | None = None
                  ) -> tuple[tuple[Edits, Edits], dict[str, int]]:
    """The edits of each of the two variants and `real_in`: per canaried test, the real test
    in one, its canary in the other, chosen by `rng` (default: the OS's randomness, which
    nothing in a sandbox sees), except where `fixed` names the variant (tests that run in
    that variant only, or a calibration's layout). Edits a canary asks of the real variant
    too (parametrize ids) go into the real one."""
    rng = rng or random.SystemRandom()
    fixed = fixed or {}
    real_in: dict[str, int] = {}
    edits: tuple[Edits, Edits] = ({}, {})
    for test_id in canaries.tests:
        drawn = rng.randrange(2)  # drawn for every test alike: `fixed` leaves the others' draws
        real_in[test_id] = fixed.get(test_id, drawn)
        canary = canaries.canaries.get(test_id)
        if canary is not None:
            edits[1 - real_in[test_id]].setdefault(canary.path, []).extend(canary.edits)
            edits[real_in[test_id]].setdefault(canary.path, []).extend(canary.real)
    return edits, real_in


def apply_edits(sources: Mapping[str, str], edits: Edits) -> dict[str, str]:
    """`sources` with `edits` applied (files without edits as they are)."""
    return {path: _apply(text.encode("utf-8"), edits[path]) if path in edits else text
            for path, text in sources.items()}


def build_variants(sources: Mapping[str, str], canaries: CanarySet,
                   rng: random.Random | None = None) -> Variants:
    """Two versions of `sources` (see `variant_edits`); sentinel.build_runs adds sentinels."""
    edits, real_in = variant_edits(canaries, rng)
    return Variants((apply_edits(sources, edits[0]), apply_edits(sources, edits[1])), real_in)
