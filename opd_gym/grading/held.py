"""Host-held expectations: at an equality site the expected literal never enters the sandbox.

`assert <expr> == <literal>` (also `!=`, `is`/`is not` with True, False or None, and
unittest `assertEqual`/`assertNotEqual(expr, literal)`) on a straight-line statement of a test
(its own body, or the body of a helper it defines there such as a dataset's `check`, with no
`return` before it) is replaced, in BOTH grading runs, by `opd_grading.hold(<number>, <expr>)`:
the sandbox emits a canonical form of the solution's value on its outcome pipe (builtin types
only, subclasses reduced through their base type's methods, see `grade_harness.canonical`) and
the HOST compares it with the literal it holds: the canary's changed literal in the run holding
the canary. A test passes only if pytest says so AND each of its held sites emitted exactly
once a value meeting its literal. Nothing in the sandbox knows the literal, so a forged pass
(a no-op `runtest`, a rewritten report, a coin per test, a split by uid or by test name) must
guess the value.

Calibration runs the reference with *probes* instead (`assert opd_grading.hold(i, expr) ==
literal`: plain pytest semantics, the value emitted too); a site is held only where the
reference's value there is plain builtin data meeting the literal, emitted exactly once.

An expectation that is a parametrize argument (`@pytest.mark.parametrize(("x", "want"),
TABLE)` then `assert f(x) == want`, TABLE literal data inline or a module-level constant, `want`
read nowhere else) is held per case: in both runs the `want` column of the table becomes a
placeholder and the decorator gets opaque `ids=` (pytest names cases by their values), and the
host holds each case's value under the node id plain pytest gives it (`HeldRuns.ids` maps the
runs' ids back; calibration, which runs the pristine table, checks those ids and vouches for
each case). A table other tests read too is held only where all of them hold the same columns.

Literal data the test reads by name is held the same way (`Data`): the expected column of a
`for` loop over literal rows (`for n, want in TABLE`, inline rows, `NAME.items()`, `zip(A, B)`;
the site run once per row) is a placeholder in every row in both runs and the host holds one
value per row, compared with the emissions in row order; a module-level or local
`EXPECTED = <literal>` read only at the site likewise (one value).

A tolerance check (`abs(f(x) - E) < tol`, `math.isclose`, `pytest.approx`,
`assertAlmostEqual`; near.py) is held like an equality: operator NEAR, its `Near` the literal
(or carried by the Column or Data whose cells are E), decided on the host by `Near.meets`.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from opd_gym import pyast
from opd_gym.grading import computed as _computed
from opd_gym.grading.canary import (
    _NO,
    _SOL,
    _apply,
    _argnames,
    _callee,
    _collected,
    _fixtures,
    _id_part,
    _Judge,
    _literal,
    _Module,
    _Origins,
    _runs_under_one_id,
    _Source,
    binding_counts,
    literal_bindings,
    literal_column,
    literal_locals,
    local_tables,
    module_names,
    param_rows,
    parse,
)
from opd_gym.grading.computed import Computed, Pending, Recorded, expected_index
from opd_gym.grading.near import NEAR, Bindings, Near
from opd_gym.grading.near import shape as near_shape
from opd_gym.grading.sentinel import Placed

HeldSites = Mapping[str, tuple[int, ...]]  # test base id -> indices of held body statements
Expect = tuple[str, object]  # (operator "==" or "!=", the literal's value)
MAX_EMITTED = 1 << 16  # characters of one emitted value the host reads
MAX_HELD = 64  # held values per test the host reads (grade_harness.MAX_HELD keeps as many)
ROWS = "rows"  # the operator of a loop site's expectation: ((op, value) per row, in order)
# unittest's equality assertions (the typed ones compare with `==` after an isinstance check
# the reference's plain value passes; calibration holds a site only where it does)
_EQUAL = {"assertEqual": "==", "assertEquals": "==", "assertNotEqual": "!=",
          "assertNotEquals": "!=", "assertListEqual": "==", "assertTupleEqual": "==",
          "assertDictEqual": "==", "assertSetEqual": "==", "assertMultiLineEqual": "=="}
_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Is: "is", ast.IsNot: "is not"}
_NOT = {"==": "!=", "!=": "==", "is": "is not", "is not": "is"}
# identity with a singleton is exact for any object: calibration vouches whatever the type
_IDENTITY = ("is", "is not")
NEVER = "never"  # the operator of an expectation nothing meets
TRUTHY, FALSY = "truthy", "falsy"  # `assert x` / `assert not x`: x's truth is the expectation
_TRUTH_CALLS = {"assertTrue": TRUTHY, "assertFalse": FALSY}
_UNKNOWN = -2  # the site of a test held per case: its id alone names no case
_Parts = tuple[ast.expr, str, object]


def asserts_equal(function: ast.AST) -> bool:
    """A test helper that only asserts its two arguments equal, printing them first at most
    (`def assert_equal(expected, result): print(...); assert expected == result`): a call of
    it is `assert a == b`, whatever its name."""
    if not isinstance(function, ast.FunctionDef) or function.decorator_list:
        return False
    args = function.args
    if args.posonlyargs or args.vararg or args.kwonlyargs or args.kwarg or args.defaults \
            or len(args.args) != 2:
        return False
    body = function.body[1:] if isinstance(function.body[0], ast.Expr) and isinstance(
        function.body[0].value, ast.Constant) else function.body  # a docstring
    if not body or any(isinstance(n, ast.NamedExpr | ast.Await | ast.Yield | ast.YieldFrom
                                  | ast.Lambda) for s in body for n in pyast.walk(s)):
        return False
    *before, last = body
    if not all(isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and isinstance(
            s.value.func, ast.Name) and s.value.func.id == "print" for s in before):
        return False
    if not isinstance(last, ast.Assert) or last.msg is not None \
            and not isinstance(last.msg, ast.Constant):
        return False
    test = last.test
    return isinstance(test, ast.Compare) and len(test.ops) == 1 \
        and isinstance(test.ops[0], ast.Eq) and isinstance(test.left, ast.Name) \
        and isinstance(test.comparators[0], ast.Name) \
        and {test.left.id, test.comparators[0].id} == {a.arg for a in args.args}


def _split(statement: ast.stmt, equalities: Collection[str] = ()
           ) -> tuple[ast.expr, str, ast.expr] | None:
    """(left, operator, right) of an equality or identity assertion (`assert a == b`, `assert
    not (a == b)` as `!=`, unittest's `assertEqual(a, b)`, a call `f(a, b)` of one of the
    module's `equalities`: helpers that only assert their arguments equal), or None."""
    if isinstance(statement, ast.Expr) and isinstance(call := statement.value, ast.Call) \
            and isinstance(call.func, ast.Name) and call.func.id in equalities \
            and len(call.args) == 2 and not call.keywords \
            and not any(isinstance(a, ast.Starred) for a in call.args):
        return call.args[0], "==", call.args[1]
    test = statement.test if isinstance(statement, ast.Assert) else None
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    if negated:  # `assert not (x == E)`, e.g. a negated canary: `x != E`
        test = test.operand  # type: ignore[union-attr]
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _OPS:
        op = _OPS[type(test.ops[0])]
        return test.left, _NOT[op] if negated else op, test.comparators[0]
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) \
            and isinstance(statement.value.func, ast.Attribute) \
            and statement.value.func.attr in _EQUAL and len(statement.value.args) == 2 \
            and not statement.value.keywords \
            and not any(isinstance(a, ast.Starred) for a in statement.value.args):
        return statement.value.args[0], _EQUAL[statement.value.func.attr], \
            statement.value.args[1]
    return None


def parts(statement: ast.stmt, columns: Collection[str] = (),
          data: Mapping[str, Data] | None = None, equalities: Collection[str] = (),
          names: Bindings | None = None) -> tuple[ast.expr, str, object] | None:
    """(solution-side expression, operator, literal value) of a holdable assertion; with
    `columns` (parametrize arguments the test reads only there), `Column(name)` stands for
    the value where the expectation is one of them (`==`/`!=` only); with `data` (names
    of literal data the test reads only there: a loop's expected column, a module or local
    constant), its `Data` does likewise; `equalities`: as `_split`. Given the module's
    `names`, a tolerance check (near.py) is held too: operator NEAR, its `Near` the value
    (or the Column or Data carrying it)."""
    if names is not None:
        found = near_shape(statement, names, [*columns, *(data or {})])
        if found is not None:
            expr, near, name = found
            if name is None:
                return expr, NEAR, near
            if data and name in data:
                if not all(near.accepts(_literal(c)) for c in data[name].cells):
                    return None
                return expr, NEAR, replace(data[name], near=near)
            return expr, NEAR, Column(name, near)
    truth = _truth(statement)
    if truth is not None:
        return truth
    split = _split(statement, equalities)
    if split is None:
        return None
    left, op, right = split
    # arithmetic written at the site (`== 10**100`) stays computed.py's: a test holding such a
    # site earns with a computed value, whatever its other comparisons (verdict._earns_unheld)
    value = _literal(right, fold=False)
    expr = left
    if value is _NO:
        value, expr = _literal(left, fold=False), right
    if value is _NO and op in ("==", "!="):
        for side, other in ((right, left), (left, right)):
            if isinstance(side, ast.Name) and side.id in columns:
                value, expr = Column(side.id), other
                break
            if isinstance(side, ast.Name) and data and side.id in data:
                value, expr = data[side.id], other
                break
    if value is _NO or _literal(expr) is not _NO:
        return None
    column = isinstance(value, Column | Data)
    if column and any(isinstance(n, ast.Name) and n.id == value.name  # type: ignore[union-attr]
                      for n in pyast.walk(expr)):
        return None
    if op in ("is", "is not") and (column or value not in (True, False, None)):
        return None  # identity only with the singletons (`x is True`, `y is None`)
    if op in ("is", "is not") and type(value) not in (bool, type(None)):
        return None
    if any(isinstance(n, ast.Await | ast.Yield | ast.YieldFrom | ast.NamedExpr)
           for n in pyast.walk(expr)):
        return None
    return expr, op, value


def _truth(statement: ast.stmt) -> tuple[ast.expr, str, object] | None:
    """(expression, TRUTHY or FALSY, None) of a bare truth assertion: `assert x`, `assert not
    x` (any number of `not`s), unittest's `assertTrue(x)`/`assertFalse(x)`, where x is no
    comparison, no `and`/`or` and no literal (`_file_sites` holds it only where x calls the
    solution). Its expectation is only a bool, as for `x is True`: the host reads the truth
    of the emitted value (builtin data's own `bool`)."""
    if isinstance(statement, ast.Expr) and isinstance(call := statement.value, ast.Call) \
            and isinstance(call.func, ast.Attribute) and call.func.attr in _TRUTH_CALLS \
            and len(call.args) == 1 and not call.keywords \
            and not isinstance(call.args[0], ast.Starred):
        op, test = _TRUTH_CALLS[call.func.attr], call.args[0]
    elif isinstance(statement, ast.Assert):
        op, test = TRUTHY, statement.test
    else:
        return None
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        op, test = FALSY if op == TRUTHY else TRUTHY, test.operand
    if isinstance(test, ast.Compare | ast.BoolOp | ast.Starred) or _literal(test) is not _NO \
            or any(isinstance(n, ast.Await | ast.Yield | ast.YieldFrom | ast.NamedExpr)
                   for n in pyast.walk(test)):
        return None
    return test, op, None


def _straight(function: ast.AST) -> list[tuple[int, ast.stmt, ast.For | None]]:
    """(number, statement, loop) of the straight-line statements of a test: its own body up
    to the first statement holding a `return`, and likewise the bodies of functions defined
    on such statements (a dataset's `check(candidate)`, an `_assertion()` helper), and the
    statements of the body of a `for` loop among them and of a subTest block there (`loop`:
    that loop), numbered in one
    pre-order walk (the same in every run: edits change tokens, never statements). Whether
    such a helper runs exactly once is left to calibration (it counts emissions)."""
    found: list[tuple[int, ast.stmt, ast.For | None]] = []

    def walk(node: ast.AST) -> None:
        for statement in node.body if isinstance(node, ast.FunctionDef) else ():
            found.append((len(found), statement, None))
            if isinstance(statement, ast.FunctionDef) and not statement.decorator_list:
                walk(statement)
            if isinstance(statement, ast.For):
                for inner in statement.body:
                    found.append((len(found), inner, statement))
                    for nested in inner.body if _subtest(inner) else ():  # type: ignore
                        found.append((len(found), nested, statement))
            if not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef
                              | ast.ClassDef) and any(
                    isinstance(n, ast.Return | ast.Yield | ast.YieldFrom)
                    for n in _own_nodes(statement)):
                return  # this one still runs once; nothing after it is sure to

    walk(function)
    return found


def _repeated(function: ast.AST) -> set[int]:
    """The ids of the statements of nested helpers that may run more than once in a test
    (`_straight` walks them): the enclosing function names the helper more or less than
    once, or in a loop or comprehension (`check(A); check(B)`). Their sites would emit once
    per call, so calibration could never vouch for them; they are not candidates either."""
    out: set[int] = set()
    loops = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp,
             ast.GeneratorExp, ast.Lambda)

    def walk(node: ast.AST) -> None:
        for statement in node.body if isinstance(node, ast.FunctionDef) else ():
            if not isinstance(statement, ast.FunctionDef) or statement.decorator_list:
                continue
            looped = {id(n) for loop in pyast.walk(node) if isinstance(loop, loops)
                      for n in pyast.walk(loop)}
            loads = [n for n in pyast.walk(node) if isinstance(n, ast.Name)
                     and n.id == statement.name and isinstance(n.ctx, ast.Load)]
            if len(loads) != 1 or id(loads[0]) in looped:
                out.update(id(n) for n in pyast.walk(statement) if isinstance(n, ast.stmt))
            else:
                walk(statement)

    walk(function)
    return out


def _subtest(statement: ast.stmt) -> bool:
    """`with self.subTest(...):` (unittest) or `with subtests.test(...):` (pytest): a block
    whose failure is reported and the loop around it goes on, so its body runs once per row."""
    return isinstance(statement, ast.With) and len(statement.items) == 1 \
        and statement.items[0].optional_vars is None and isinstance(
            call := statement.items[0].context_expr, ast.Call) \
        and isinstance(call.func, ast.Attribute) and (
            call.func.attr == "subTest" or call.func.attr == "test"
            and isinstance(call.func.value, ast.Name) and call.func.value.id == "subtests")


def _own_nodes(statement: ast.stmt) -> list[ast.AST]:
    """The nodes of a statement outside the functions and lambdas it defines."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = [statement]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(c for c in ast.iter_child_nodes(node)
                     if not isinstance(c, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))
    return out


def candidates(sources: Mapping[str, str], paths: Iterable[str], *,
               solution: Collection[str] = ()) -> dict[str, tuple[int, ...]]:
    """Every holdable site of the test modules `paths`: {test base id: body indices}; given
    the `solution`'s modules, sites comparing with a value the test computes too."""
    found: dict[str, tuple[int, ...]] = {}
    context = _Context(sources, solution)
    for path in sorted(paths):
        if not path.endswith(".py") or path not in sources:
            continue
        sites, _ = _file_sites(path, context, None, {})
        for (test_id, index, _), (_, _, p) in sorted(sites.items()):
            if p is not None:
                found[test_id] = (*found.get(test_id, ()), index)
    return found


def parametrized(sources: Mapping[str, str], paths: Iterable[str]) -> frozenset[str]:
    """The tests of `paths` with a holdable site whose expectation is a parametrize argument
    or literal data read by name (a loop's column, a constant): no sentinel is cloned
    from them (a clone would copy the decorator, or read the data a second time)."""
    context = _Context(sources)
    out: set[str] = set()
    for path in sorted(paths):
        if path.endswith(".py") and path in sources:
            sites, _ = _file_sites(path, context, None, {})
            out.update(t for (t, _, _), (_, _, p) in sites.items()
                       if p is not None and isinstance(p[2], Column | Data))
    return frozenset(out)


# -- parametrize expectations: `@pytest.mark.parametrize("x,want", TABLE)` + `f(x) == want` --
# A site `assert <expr> == NAME` where NAME is a parametrize argument of the test, its table
# literal data and NAME read nowhere else in the test, is held per case: in both runs the
# NAME column of the table is replaced by a placeholder and the decorator gets opaque `ids=`
# (pytest names cases by their values), and the host holds each case's value under the node
# id plain pytest gives that case. Anything unclear leaves the test to the canary scheme.
PLACEHOLDER = "None"
_OPAQUE = "h{}"  # the sandbox's id of row i of a held decorator
_MAX_CASES = 10_000  # node ids of one test the host maps
_READERS = frozenset({"locals", "vars", "eval", "exec", "globals", "getfixturevalue",
                      "_getframe", "currentframe", "request"})


@dataclass(frozen=True)
class Column:
    """The expectation of a held site that is a parametrize argument (held per case)."""

    name: str
    near: Near | None = field(default=None, compare=False)  # a tolerance check of it


def cell_expect(op: str, near: Near | None, value: object) -> Expect:
    """What the host holds of one cell of a held column or row: `(op, value)`, or a
    tolerance check against it."""
    return (NEAR, near.at(value)) if near is not None else (op, value)


# -- literal data read by name: `for n, want in TABLE: assert f(n) == want`, `== EXPECTED` --
# A site `assert <expr> == NAME` inside a `for` loop over literal rows (a module-level table
# read only there, an inline list, `NAME.items()` of a literal dict, `zip(A, B)` of literal
# lists of one length), where NAME is the loop's expected column, read nowhere else and the
# site runs once per row (nothing before it in the body can skip it, no `break`), is held per
# row: in both runs the column is replaced by a placeholder in every row, the sandbox emits the
# solution's value each time the site runs, and the host compares the emissions in row order
# with the values it holds (exactly one per row). A module-level `NAME = <literal>` read only
# at one straight-line site, or a local one of the test (its only binding, in the body of the
# function holding the site), is held the same way (one value). Anything less clear is left
# as it is (the test gates where its task holds a site).
@dataclass(frozen=True)
class Data:
    """The expectation of a held site that is literal data the test reads by name: the
    expected column of a loop over literal rows (`loop`: one value per row, in row order), or
    a module-level or local constant. `cells`: this run's nodes holding the values (a
    placeholder in both runs; the host holds their values, the canary's changed row in its
    run)."""

    name: str
    loop: bool
    cells: tuple[ast.expr, ...] = field(compare=False, repr=False)
    near: Near | None = field(default=None, compare=False)  # a tolerance check of it

    def wants(self, op: str) -> list[Expect]:
        """What the host holds of each value, in row order."""
        return [cell_expect(op, self.near, _literal(cell)) for cell in self.cells]

    def expect(self, op: str) -> Expect:
        """What the host holds: (op, value) for a constant, (ROWS, per row) for a loop."""
        values = tuple(self.wants(op))
        return (ROWS, values) if self.loop else values[0]

    @property
    def count(self) -> int:
        """How many values the site emits in one run of its test."""
        return len(self.cells)


# names whose use in a module may read or rebind its data by another route than its name
_DATA_READERS = frozenset({"locals", "vars", "eval", "exec", "globals", "__dict__",
                           "_getframe", "currentframe", "setattr", "delattr", "f_globals",
                           "f_locals", "getfixturevalue"})
# ... and those that may read a function's locals (a local constant needs only these absent)
_LOCAL_READERS = frozenset({"locals", "vars", "eval", "exec", "_getframe", "currentframe",
                            "f_locals", "f_back", "stack", "settrace", "setprofile"})
# ... and the names by which code run through `exec` could reach a caller's frame
_FRAME_READERS = frozenset({"locals", "vars", "globals", "_getframe", "currentframe",
                            "f_locals", "f_globals", "f_back", "stack", "settrace",
                            "setprofile", "getfixturevalue"})
_FLOW = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.TryStar, ast.With,
         ast.AsyncWith, ast.Match)


def _labels(function: ast.AST) -> set[int]:
    """The names a subTest block only labels its reports with (`self.subTest(want=want)`,
    `subtests.test(msg=want)`): a placeholder there changes a failure's label, no verdict."""
    return {id(a) for node in pyast.walk(function) if isinstance(node, ast.With) and _subtest(
        node) for a in [*node.items[0].context_expr.args,  # type: ignore[attr-defined]
                        *(k.value for k in node.items[0].context_expr.keywords)]  # type: ignore
            if isinstance(a, ast.Name)}


def _bound_once_read_once(name: str, function: ast.AST, store: ast.AST) -> ast.Name | None:
    """The one load of `name` in the test where `store` (a loop target) is its only binding
    (besides subTest labels)."""
    loads: list[ast.Name] = []
    labels = _labels(function)
    for node in pyast.walk(function):
        if isinstance(node, ast.Name) and node.id == name:
            if id(node) in labels:
                continue
            if isinstance(node.ctx, ast.Load):
                loads.append(node)
            elif node is not store:
                return None
        elif isinstance(node, ast.arg) and node.arg == name or isinstance(
                node, ast.Global | ast.Nonlocal) and name in node.names or isinstance(
                node, ast.alias) and name in (node.asname, node.name) or isinstance(
                node, ast.ExceptHandler) and node.name == name or isinstance(
                node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) \
                and node.name == name or getattr(node, "name", None) == name:
            return None
    return loads[0] if len(loads) == 1 else None


def _once_per_row(loop: ast.For, statement: ast.stmt) -> bool:
    """`statement` (of `loop`'s body) runs exactly once per row: nothing in the body ends the
    loop early, and nothing before it in the body branches, loops, catches or skips."""
    body = loop.body
    at = next((i for i, s in enumerate(body) if s is statement), None)
    block: list[ast.stmt] = []  # the statements of a subTest block around it, before it
    if at is None:  # in a subTest block of the loop's body (`with self.subTest(n=n):`)
        at = next((i for i, s in enumerate(body) if _subtest(s) and any(
            inner is statement for inner in s.body)), None)  # type: ignore[attr-defined]
        if at is not None:
            inner = body[at].body  # type: ignore[attr-defined]
            block = inner[:next(i for i, s in enumerate(inner) if s is statement)]
    if at is None or any(isinstance(n, ast.Break | ast.Return | ast.Yield | ast.YieldFrom
                                    | ast.Await) for s in body for n in _own_nodes(s)):
        return False
    return not any(isinstance(s, _FLOW) or any(isinstance(n, ast.Continue | ast.Raise)
                                               for n in _own_nodes(s))
                   for s in [*body[:at], *block])


class _DataReader:
    """Which literal data one module's tests read by name at a holdable site (`Data`)."""

    def __init__(self, tree: ast.Module, context: _Context) -> None:
        self.tree = tree
        self.context = context
        self._module: _Module | None = None
        self._usable: dict[frozenset[str], bool] = {}

    def usable(self, readers: frozenset[str] = _DATA_READERS) -> bool:
        """No name of the module reads or rebinds data by another route (`globals()`...).
        `exec`/`eval` given a namespace of their own (a dataset harness running a prompt's
        setup code) read none of their caller's: only the code they run could, through a
        frame, so then no string of the module may name a frame reader."""
        if readers not in self._usable:
            own = {id(n.func) for n in pyast.walk(self.tree) if isinstance(n, ast.Call)
                   and isinstance(n.func, ast.Name) and n.func.id in ("exec", "eval")
                   and (len(n.args) >= 2 or any(k.arg == "globals" for k in n.keywords))}
            # `vars(obj)` reads an object's attributes; a function's locals only `vars()`
            objects = {id(n.func) for n in pyast.walk(self.tree) if isinstance(n, ast.Call)
                       and isinstance(n.func, ast.Name) and n.func.id == "vars" and n.args} \
                if readers is _LOCAL_READERS else set()
            self._usable[readers] = not any(
                isinstance(n, ast.Name) and n.id in readers and id(n) not in own | objects
                or isinstance(n, ast.Attribute) and n.attr in readers
                for n in pyast.walk(self.tree)) and not (own and any(
                    re.search(rf"(?<![\w]){name}(?![\w])", text)
                    for text in self.context.strings() for name in _FRAME_READERS
                    if name in text))
        return self._usable[readers]

    def module(self) -> _Module:
        if self._module is None:
            uses, _, hooks = self.context.get()
            self._module = _Module(self.tree, Counter(uses), hooks)
        return self._module

    def _unnamed(self, names: Iterable[str]) -> bool:
        """None of `names` appears in a string of the hidden files (`getattr(m, "T")`)."""
        strings = self.context.strings()
        return not any(re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text)
                       for name in names for text in strings if name in text)

    def constants(self, function: ast.AST) -> dict[str, Data]:
        """{NAME: Data} of the module constants the test reads once (each read nowhere else
        in the hidden files, bound once, literal)."""
        loads = Counter(n.id for n in pyast.walk(function) if isinstance(n, ast.Name)
                        and isinstance(n.ctx, ast.Load))
        local = {n.id for n in pyast.walk(function) if isinstance(n, ast.Name)
                 and not isinstance(n.ctx, ast.Load)} | {
            a.arg for n in pyast.walk(function) if isinstance(n, ast.arguments)
            for a in [*n.posonlyargs, *n.args, *n.kwonlyargs, *filter(None, (n.vararg,
                                                                            n.kwarg))]}
        top = {n.targets[0].id for n in self.tree.body if isinstance(n, ast.Assign)
               and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)}
        wanted = [n for n, c in loads.items() if c == 1 and n in top and n not in local]
        if not wanted or not self.usable():
            return {}
        out = {}
        for name in wanted:
            node = self.module().constant(name)
            if node is not None and self._unnamed([name]):
                out[name] = Data(name, False, (node.value,))
        return out

    def assigned(self, function: ast.AST) -> dict[int, dict[str, Data]]:
        """{id(statement): {NAME: Data}} of the test's locals `NAME = <literal>` (every
        binding of NAME in the test such a statement of one function's own body, the test's
        or a helper's, see `literal_locals`) at the statements of that body they reach: each
        binding read exactly once, before the next one, so a site holds the value it reads."""
        if not self.usable(_LOCAL_READERS):
            return {}
        loads, _ = binding_counts(function)
        bound = literal_locals(function)
        out: dict[int, dict[str, Data]] = {}
        for owner in pyast.walk(function):
            if not isinstance(owner, ast.FunctionDef):
                continue
            mine = {name for name, bindings in bound.items() if len(bindings) == loads[name]
                    and all(any(s is b for s in owner.body) and _literal(v) is not _NO
                            for b, v in bindings)}
            reads = {name: [0] for name in mine}  # loads of NAME since each binding
            current: dict[str, Data] = {}
            for statement in owner.body:
                for node in pyast.walk(statement):
                    if isinstance(node, ast.Name) and node.id in mine and isinstance(
                            node.ctx, ast.Load):
                        reads[node.id][-1] += 1
                binds = [(n, v) for n, v in literal_bindings(statement) if n in mine]
                for name, value in binds:
                    reads[name].append(0)
                    current[name] = Data(name, False, (value,))
                if current and not binds:
                    out[id(statement)] = dict(current)
            spoilt = {name for name, counts in reads.items() if counts[0] or any(
                c != 1 for c in counts[1:])}
            for names in out.values():
                for name in spoilt & names.keys():
                    del names[name]
        return {key: names for key, names in out.items() if names}

    def loop(self, function: ast.AST, loop: ast.For, statement: ast.stmt) -> dict[str, Data]:
        """{NAME: Data} of the loop's expected columns `statement` may compare with: the
        rows literal, NAME bound only by the loop and read only once, the statement run once
        per row, at most MAX_HELD rows."""
        target = loop.target
        names = target.elts if isinstance(target, ast.Tuple) else [target]
        if not all(isinstance(n, ast.Name) for n in names) or len(
                {n.id for n in names}) != len(names) or not _once_per_row(loop, statement):
            return {}
        local = local_tables(function)
        iterated = [n.id for n in pyast.walk(loop.iter) if isinstance(n, ast.Name)
                    and n.id != "zip"]
        # a table of the test's own (inline rows too) needs no reader of locals; any
        # other, none of data
        own = all(name in local for name in iterated)
        if not self.usable(_LOCAL_READERS if own else _DATA_READERS):
            return {}
        rows = self.module().rows(loop.iter, len(names) if isinstance(target, ast.Tuple) else 1,
                                  local)
        if not rows or len(rows) > MAX_HELD or not self._unnamed(iterated):
            return {}
        out = {}
        for column, name in enumerate(names):
            read = _bound_once_read_once(name.id, function, name)  # type: ignore[attr-defined]
            if read is not None and any(n is read for n in pyast.walk(statement)) \
                    and literal_column(rows, column):
                out[name.id] = Data(name.id, True,  # type: ignore[attr-defined]
                                    tuple(row[column] for row in rows))
        return out


@dataclass
class _Decorator:
    """One `parametrize` call of a test: its rows of cells and pytest's id of each row."""

    call: ast.Call
    names: list[str]
    rows: list[list[ast.expr]]
    table: str  # the table's key: `name:T` (a module-level constant) or `inline:<offset>`
    ids: list[str]
    ids_node: ast.expr | None  # the call's own literal `ids=`
    after: ast.expr  # the call's last argument (`ids=` goes after it)
    # each row's own `pytest.param(..., id=...)` node (it names the case over `ids=`)
    id_nodes: list[ast.expr | None] = field(default_factory=list)


@dataclass
class _ParamTest:
    """A test whose parametrize arguments may be held: its decorators in the order pytest
    applies them (the one nearest the `def` first), the arguments read once at a site."""

    function: ast.FunctionDef
    decorators: list[_Decorator]
    columns: dict[str, tuple[int, int]]  # argname -> (decorator index, column)

    def cases(self) -> list[tuple[str, tuple[int, ...]]] | None:
        """(pytest's id, row per decorator) of every case, or None (too many, or ids that
        would need pytest to make them unique)."""
        count = 1
        for decorator in self.decorators:
            count *= len(decorator.rows)
        if count > _MAX_CASES:
            return None
        out = _combined([decorator.ids for decorator in self.decorators])
        if len({i for i, _ in out}) != len(out):
            return None
        return out

    def opaque(self, held: Collection[int]) -> dict[tuple[int, ...], str]:
        """The sandbox's id of each case: rows of the `held` decorators named by position."""
        return {combo: i for i, combo in _combined([
            [_OPAQUE.format(r) for r in range(len(decorator.rows))] if index in held
            else decorator.ids for index, decorator in enumerate(self.decorators)])}


def _combined(ids: list[list[str]]) -> list[tuple[str, tuple[int, ...]]]:
    """(node id suffix, row per decorator) of every case of stacked decorators whose rows are
    named `ids[d]`, as pytest joins them (the first decorator's part first, `-` between)."""
    out: list[tuple[str, tuple[int, ...]]] = [("", ())]
    for parts in ids:
        out = [(f"{i}-{part}" if combo else part, (*combo, row))
               for i, combo in out for row, part in enumerate(parts)]
    return out


def _plain_id(text: object) -> bool:
    return isinstance(text, str) and 0 < len(text) <= 100 and all(
        32 <= ord(c) < 127 and c != "\\" for c in text)


def _escaped(text: str) -> str | None:
    """A text id as pytest reports it (text outside printable ASCII escaped, as pytest's
    `ascii_escaped` does), None for an empty or long one."""
    if _plain_id(text):
        return text
    if not 0 < len(text) <= 100:
        return None
    escaped = text.encode("unicode_escape").decode("ascii")
    return "".join(c if 32 <= ord(c) < 127 else f"\\x{ord(c):02x}" for c in escaped)


def _id_of(node: ast.expr, argname: str, index: int) -> str | None:
    """pytest's id for one literal value (canary._id_part, and text outside printable ASCII
    escaped as pytest escapes it); calibration checks it against the ids pytest gave."""
    value = _literal(node)
    if isinstance(value, str) and value and not _plain_id(value):
        return _escaped(value)
    return _id_part(node, argname, index)


def _decorator(call: ast.expr, tables: Mapping[str, ast.expr]) -> _Decorator | None:
    """A `parametrize` call whose table is literal data and whose ids are known statically."""
    if not isinstance(call, ast.Call) or len(call.args) != 2 \
            or any(k.arg != "ids" for k in call.keywords):
        return None
    names = _argnames(call.args[0])
    if not names or len(set(names)) != len(names):
        return None
    single = isinstance(_literal(call.args[0]), str) and len(names) == 1
    values = call.args[1]
    key = f"inline:{values.lineno}:{values.col_offset}"
    if isinstance(values, ast.Name):
        key = f"name:{values.id}"
        values = tables.get(values.id)  # type: ignore[assignment]
    table = param_rows(values, len(names), single)  # tuples, lists or pytest.param rows
    if table is None:
        return None
    rows = [list(row.cells) for row in table]
    ids_node = call.keywords[0].value if call.keywords else None
    if ids_node is not None:
        given = _literal(ids_node)  # explicit ids are escaped as values are (pytest 8, 9)
        if not isinstance(given, list | tuple) or len(given) != len(rows) \
                or not all(isinstance(i, str) and _escaped(i) for i in given):
            return None
        ids = [_escaped(i) for i in given]  # type: ignore[misc]
    else:
        ids = []
    parts = [[_escaped(row.own_id)] if row.own_id is not None else  # a row's own id wins
             [ids[i]] if ids else
             [_id_of(v, n, i) for v, n in zip(row.cells, names, strict=True)]
             for i, row in enumerate(table)]
    if any(p is None for row in parts for p in row):
        return None
    ids = ["-".join(row) for row in parts]  # type: ignore[arg-type]
    if len(set(ids)) != len(ids):
        return None  # pytest would make them unique: left to the canary scheme
    after = max([*call.args, *(k.value for k in call.keywords)],
                key=lambda n: (n.end_lineno, n.end_col_offset))
    return _Decorator(call, names, rows, key, ids, ids_node, after,
                      [row.id_node for row in table])


def _marks_only(decorator: ast.expr) -> bool:
    """`@pytest.mark.X` or `@mark.X(...)`: a mark, which leaves the function as it is."""
    node = decorator.func if isinstance(decorator, ast.Call) else decorator
    dotted = []
    while isinstance(node, ast.Attribute):
        dotted.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        dotted.append(node.id)
    dotted.reverse()
    return dotted[:2] == ["pytest", "mark"] and len(dotted) == 3 or \
        dotted[:1] == ["mark"] and len(dotted) == 2


def _read_once(name: str, function: ast.FunctionDef) -> ast.Name | None:
    """The one place the test's body reads `name` (None: read or bound anywhere else)."""
    found: list[ast.Name] = []
    for node in pyast.walk(ast.Module(body=function.body, type_ignores=[])):
        if isinstance(node, ast.Name) and node.id == name:
            found.append(node)
        elif isinstance(node, ast.arg) and node.arg == name or isinstance(
                node, ast.Global | ast.Nonlocal) and name in node.names or isinstance(
                node, ast.alias) and name in (node.asname, node.name) or isinstance(
                node, ast.ExceptHandler) and node.name == name or isinstance(
                node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) \
                and node.name == name:
            return None
        elif getattr(node, "name", None) == name:  # match patterns
            return None
    if len(found) != 1 or not isinstance(found[0].ctx, ast.Load):
        return None
    return found[0]


def _param_tests(tree: ast.Module, path: str, uses: Mapping[str, int], referenced: set[str]
                 ) -> dict[str, _ParamTest]:
    """The tests of one module whose parametrize arguments may be held (see `_ParamTest`),
    with the tables they read consistent: a module-level table is read only by decorators
    holding the same columns of it (it is edited once, for all of them)."""
    stores: dict[str, int] = {}
    for node in pyast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            stores[node.id] = stores.get(node.id, 0) + 1
        elif isinstance(node, ast.ClassDef) and any(
                "parametrize" in ast.dump(d) for d in node.decorator_list):
            return {}  # class-level parametrization: ids of more parts
    if stores.get("pytestmark"):
        return {}
    tables = {n.targets[0].id: n.value for n in tree.body if isinstance(n, ast.Assign)
              and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
              and stores.get(n.targets[0].id) == 1}
    found: dict[str, _ParamTest] = {}
    for test_id, function, owner in _collected(tree, path):
        if test_id != owner or not isinstance(function, ast.FunctionDef) \
                or not _runs_under_one_id(test_id, referenced):
            continue
        marks = [d for d in function.decorator_list
                 if isinstance(d, ast.Call) and _callee(d) == "parametrize"]
        if not marks or not all(_marks_only(d) for d in function.decorator_list):
            continue
        decorators = [_decorator(d, tables) for d in reversed(marks)]
        if None in decorators:
            continue
        args = function.args
        given = [a.arg for a in args.args]
        if "::" in test_id.partition("::")[2] and given[:1] == ["self"]:
            given = given[1:]
        argnames = [n for d in decorators for n in d.names]  # type: ignore[union-attr]
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs \
                or args.defaults or sorted(given) != sorted(argnames) \
                or len(set(argnames)) != len(argnames):
            continue
        if any(isinstance(n, ast.Name) and n.id in _READERS or isinstance(n, ast.Attribute)
               and n.attr in _READERS for n in pyast.walk(function)):
            continue
        columns = {}
        for index, decorator in enumerate(decorators):
            for column, name in enumerate(decorator.names):  # type: ignore[union-attr]
                read = _read_once(name, function)
                if read is not None:
                    columns[name] = (index, column)
        test = _ParamTest(function, decorators, columns)  # type: ignore[arg-type]
        if columns and test.cases() is not None:
            found[test_id] = test
    readers: dict[str, int] = {}
    for test in found.values():
        for decorator in test.decorators:
            readers[decorator.table] = readers.get(decorator.table, 0) + 1
    for key, count in readers.items():  # a constant read anywhere else is no held table
        name = key.partition(":")[2]
        if key.startswith("name:") and uses.get(name, 0) != count:
            for test in found.values():
                test.columns = {n: c for n, c in test.columns.items()
                                if test.decorators[c[0]].table != key}
    return {t: p for t, p in found.items() if p.columns}


@dataclass(frozen=True)
class HeldRuns:
    """The variants' files with held sites rewritten, and what the host holds per run:
    {test base id as the run names it (clones too): {index: (operator, literal)}}."""

    files: tuple[dict[str, str], dict[str, str]]
    expect: tuple[dict[str, dict[int, Expect]], dict[str, dict[int, Expect]]]
    # the sites of `held` left as they are: (test id, index)
    unheld_sites: frozenset[tuple[str, int]] = frozenset()
    # {node id a run reports: pytest's own node id} of the cases of tests holding a
    # parametrize argument (the runs name them by opaque ids)
    ids: Mapping[str, str] = field(default_factory=dict)

    @property
    def unheld(self) -> frozenset[str]:
        """The tests of `held` a site of which was left as it is."""
        return frozenset(test_id for test_id, _ in self.unheld_sites)


def _clone_names(placed: Placed, run: int) -> dict[str, str]:
    """{clone base id: original base id} of the sentinels a run holds."""
    names: dict[str, str] = {}
    for sentinel in placed[run] if run < len(placed) else ():
        head = sentinel.site.test_id.rpartition("::")[0]
        names[f"{head}::{sentinel.clone}"] = sentinel.site.test_id
    return names


class _Context:
    """The hidden files of a run, each parsed once, and what reading one module's
    parametrize tables needs of all of them (read when a module has a parametrized test to
    hold): how often each name is used, the names referenced, whether a hook may rename
    parametrize ids (as canary._uses and canary._referenced_names read them)."""

    def __init__(self, sources: Mapping[str, str], solution: Collection[str] = (),
                 computed: Computed | None = None) -> None:
        """`solution`: the solution's modules (none: no computed expectation is held);
        `computed`: what calibration recorded of them (a grade), None while probing."""
        self.sources = sources
        self.solution = frozenset(solution)
        self.computed = computed
        self._trees: dict[str, ast.Module | None] = {}
        self._read: tuple[Mapping[str, int], set[str], bool] | None = None
        self._strings: list[str] | None = None
        self._facts: dict[str, _computed.ModuleFacts | None] = {}
        self._fixtures: dict[str, bool] | None = None
        self._equalities: dict[str, frozenset[str]] = {}
        self._bindings: dict[str, Bindings | None] = {}

    def bindings(self, path: str) -> Bindings | None:
        """What module `path`'s names stand for in a tolerance check (None: unparsable)."""
        if path not in self._bindings:
            tree = self.tree(path)
            self._bindings[path] = None if tree is None else Bindings(tree)
        return self._bindings[path]

    def facts(self, path: str) -> _computed.ModuleFacts | None:
        """What holding a computed expectation needs of module `path` (None: unparsable)."""
        if path not in self._facts:
            tree = self.tree(path)
            if tree is None or not self.solution:
                self._facts[path] = None
            else:
                if self._fixtures is None:
                    self._fixtures = _fixtures(self.sources, self.solution)
                origins = _Origins(tree, self.solution, self._fixtures)
                hidden = module_names(p for p in self.sources if p.endswith(".py"))
                self._facts[path] = _computed.ModuleFacts(
                    tree, self.solution, hidden, lambda f: _Judge(f, origins, ()))
        return self._facts[path]

    def equalities(self, path: str) -> frozenset[str]:
        """The names module `path` calls helpers that only assert their arguments equal
        (`asserts_equal`) by: its own functions, or ones it imports from a hidden module
        (`from common import assert_equal`), each name bound once in the module."""
        if path in self._equalities:
            return self._equalities[path]
        tree = self.tree(path)
        found: set[str] = set()
        bound: Counter[str] = Counter()
        for node in tree.body if tree is not None else ():
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                bound[node.name] += 1
                if asserts_equal(node):
                    found.add(node.name)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                for alias in node.names:
                    bound[alias.asname or alias.name.partition(".")[0]] += 1
                if isinstance(node, ast.ImportFrom) and node.module:
                    other = self._module_file(path, node.module, node.level)
                    tree_of = self.tree(other) if other is not None else None
                    defs = {n.name: n for n in tree_of.body if isinstance(
                        n, ast.FunctionDef)} if tree_of is not None else {}
                    found.update(alias.asname or alias.name for alias in node.names
                                 if asserts_equal(defs.get(alias.name)))
            else:
                bound.update(n.id for n in pyast.walk(node) if isinstance(n, ast.Name)
                             and not isinstance(n.ctx, ast.Load))
        self._equalities[path] = frozenset(n for n in found if bound[n] == 1)
        return self._equalities[path]

    def _module_file(self, path: str, module: str, level: int) -> str | None:
        """The hidden file `from <module> import ...` in `path` reads, where one file can be
        it (`common` from `test/test_x.py`: `test/common.py`), else None."""
        tail = module.replace(".", "/")
        if level:
            base = path.split("/")[:-level]
            wanted = {"/".join([*base, f"{tail}.py"]), "/".join([*base, tail, "__init__.py"])}
            found = [p for p in self.sources if p in wanted]
        else:
            found = [p for p in self.sources if p.endswith(".py") and (
                f"/{p}".endswith(f"/{tail}.py") or f"/{p}".endswith(f"/{tail}/__init__.py"))]
        return found[0] if len(found) == 1 else None

    def helper_text(self, path: str, name: str) -> str | None:
        """The source of the module's top-level function `name` in this run's text."""
        facts = self.facts(path)
        node = facts.functions.get(name) if facts is not None else None
        return None if node is None else ast.get_source_segment(self.sources[path], node)

    def strings(self) -> list[str]:
        """The string constants of the hidden Python files (a name read by its text)."""
        if self._strings is None:
            self._strings = sorted({n.value for path in self.sources if path.endswith(".py")
                                    for n in pyast.walk(self.tree(path) or ast.Module([], []))
                                    if isinstance(n, ast.Constant) and isinstance(n.value, str)})
        return self._strings

    def tree(self, path: str) -> ast.Module | None:
        if path not in self._trees:
            try:
                self._trees[path] = parse(self.sources[path])
            except (SyntaxError, ValueError):
                self._trees[path] = None
        return self._trees[path]

    def get(self) -> tuple[Mapping[str, int], set[str], bool]:
        if self._read is None:
            uses: dict[str, int] = {}
            referenced: set[str] = set()
            hooks = False
            for path in self.sources:
                tree = self.tree(path) if path.endswith(".py") else None
                for node in pyast.walk(tree) if tree is not None else ():
                    if isinstance(node, ast.Name):
                        referenced.add(node.id)
                        if isinstance(node.ctx, ast.Load):
                            uses[node.id] = uses.get(node.id, 0) + 1
                    elif isinstance(node, ast.Attribute):
                        referenced.add(node.attr)
                        uses[node.attr] = uses.get(node.attr, 0) + 1
                    elif isinstance(node, ast.alias):
                        name = node.name.rpartition(".")[2]
                        referenced.add(name)
                        uses[name] = uses.get(name, 0) + 1
                        uses[node.asname or ""] = uses.get(node.asname or "", 0) + 1
                    elif isinstance(node, ast.FunctionDef) \
                            and node.name == "pytest_make_parametrize_id":
                        hooks = True
            self._read = (uses, referenced, hooks)
        return self._read


def _parametrized(tree: ast.Module, path: str, held: HeldSites | None) -> bool:
    """Whether a test of `held` (any, where None) in the module is parametrized."""
    names = None if held is None else {t.rpartition("::")[2] for t in held
                                       if t.startswith(path + "::")}
    return any(isinstance(n, ast.FunctionDef) and (names is None or n.name in names) and any(
        isinstance(d, ast.Call) and _callee(d) == "parametrize" for d in n.decorator_list)
        for n in pyast.walk(tree))


_Found = dict[tuple[str, int, bool], tuple[str, ast.stmt | None, _Parts | None]]


def _file_sites(path: str, context: _Context, held: HeldSites | None,
                clones: Mapping[str, str]) -> tuple[_Found, dict[str, _ParamTest]]:
    """{(original test id, index, a clone): (this run's test id, statement, its parts)} in
    one file (every holdable site where `held` is None; a run holds at most one clone of a
    test, its name differs from run to run), and the tests whose parametrize arguments are
    read at a site. A site comparing with a parametrize argument has no parts where the
    table's other readers do not hold the same columns (the table is edited for all)."""
    tree = context.tree(path)
    if tree is None:
        return {}, {}
    params: dict[str, _ParamTest] = {}
    if _parametrized(tree, path, held):
        uses, referenced, hooks = context.get()
        params = {} if hooks else _param_tests(tree, path, uses, referenced)
    found: _Found = {}
    reader = _DataReader(tree, context)
    equalities = context.equalities(path)
    names = context.bindings(path)
    for test_id, function, owner in _collected(tree, path):
        original = clones.get(test_id, test_id)
        if test_id != owner or held is not None and original not in held:
            continue
        param = params.get(test_id) if test_id == original else None
        repeated = _repeated(function)
        body = {i: (statement, loop) for i, statement, loop in _straight(function)
                if id(statement) not in repeated}
        constants: dict[str, Data] | None = None
        assigned: dict[int, dict[str, Data]] | None = None
        budget = MAX_HELD  # values the test emits: a loop site that would pass it is not held
        for index in held[original] if held is not None else sorted(body):
            statement, loop = body.get(index, (None, None))
            p = None
            if statement is not None and loop is None:
                columns = param.columns if param is not None \
                    and statement in getattr(function, "body", ()) else ()
                if constants is None or assigned is None:  # a clone's are never held
                    constants = reader.constants(function) if test_id == original else {}
                    assigned = reader.assigned(function) if test_id == original else {}
                data = {**constants, **assigned.get(id(statement), {})}
                p = parts(statement, columns, data, equalities, names)
                if p is not None and isinstance(p[2], Column) and p[2].near is not None \
                        and param is not None and not _accepted(param, p[2]):
                    p = None
            elif statement is not None and test_id == original:
                data = reader.loop(function, loop, statement)  # type: ignore[arg-type]
                p = parts(statement, (), data, equalities, names) if data else None
                if p is not None and not isinstance(p[2], Data):
                    p = None  # in a loop only a column of its rows is held
            if p is not None and p[1] in (TRUTHY, FALSY) and not _solution_call(
                    context, path, function, p[0]):
                p = None  # only the truth of the solution's own answer is held
            if p is None and statement is not None and test_id == original and param is None:
                p = _computed_parts(context, path, function, statement, loop, original, index)
            if p is not None:
                count = p[2].count if isinstance(p[2], Data) else 2 if isinstance(
                    p[2], Pending) else 1
                if count > budget:
                    p = None
                else:
                    budget -= count
            if held is None and p is None:
                continue
            found[(original, index, test_id != original)] = (test_id, statement, p)
    held_columns: dict[str, set[tuple[int, int]]] = {}
    for (test_id, _, clone), (_, _, p) in found.items():
        if p is not None and isinstance(p[2], Column) and not clone:
            held_columns.setdefault(test_id, set()).add(params[test_id].columns[p[2].name])
    good = _consistent(params, held_columns)
    for key, (test_id, statement, p) in list(found.items()):
        if p is not None and isinstance(p[2], Column) and \
                params[key[0]].columns[p[2].name] not in good.get(key[0], ()):
            found[key] = (test_id, statement, None)
    return found, {t: params[t] for t in held_columns}


def _solution_call(context: _Context, path: str, function: ast.AST, expr: ast.expr) -> bool:
    """`expr` calls the solution itself: a function of it by name (`candidate(x)`, `from calc
    import is_even`: computed.py's judge; given the solution's modules only) or through its
    module (`calc.is_even(x)`). Not a check of the test applied to the solution's value
    (`isinstance(f(x), int)`, `len(...)`, a helper), whose truth a wrong answer meets as well,
    nor a method of a value the solution returned (it may be a subclass that lies)."""
    facts = context.facts(path)
    if facts is None or not isinstance(expr, ast.Call):
        return False
    func = expr.func
    if isinstance(func, ast.Name):
        return facts.judge_for(function).value(func) == _SOL
    names = context.bindings(path)
    module = names.stands_for(func.value) if names is not None and isinstance(
        func, ast.Attribute) and isinstance(func.value, ast.Name) else None
    return module is not None and module.partition(".")[0] in context.solution


def _accepted(param: _ParamTest, column: Column) -> bool:
    """Every cell of a parametrize column a tolerance check is held against is a value it
    can be held against (a number...: `Near.accepts`)."""
    d, c = param.columns[column.name]
    return column.near is not None and all(
        column.near.accepts(_literal(row[c])) for row in param.decorators[d].rows)


def _containing(function: ast.AST, statement: ast.stmt) -> list[ast.stmt]:
    """The statement list of the test holding `statement` (a body, a loop's, a block's)."""
    for node in pyast.walk(function):
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list) and any(s is statement for s in block):
                return block
    return []


def _computed_parts(context: _Context, path: str, function: ast.AST, statement: ast.stmt,
                    loop: ast.For | None, test_id: str, index: int) -> _Parts | None:
    """(solution side, operator, Pending) of a site comparing with a value the test computes
    (computed.py); in a grade (`context.computed` set) only as calibration recorded it: the
    same expected text and the same helper functions' text in this run."""
    split = _split(statement, context.equalities(path))
    facts = context.facts(path) if split is not None else None
    if split is None or facts is None:
        return None
    if loop is not None and facts.judge_for(function).value(loop.iter) == _SOL:
        return None  # the rows come from the solution: their number is its to choose
    body = _containing(function, statement)
    pend = _computed.pending(split, statement, function, body, loop is not None, facts, _SOL)
    if pend is None:  # `assert expected == f(x)`: the expectation on the left
        split = (split[2], split[1], split[0])
        pend = _computed.pending(split, statement, function, body, loop is not None, facts,
                                 _SOL)
    if pend is None:
        return None
    if context.computed is not None:
        recorded = context.computed.get(test_id, {}).get(index)
        if recorded is None or recorded.text != pend.text or recorded.loop != pend.loop \
                or not pend.helpers <= set(recorded.helpers) or any(
                    context.helper_text(path, n) != t for n, t in recorded.helpers.items()):
            return None
    return split[0], split[1], pend


def _consistent(params: Mapping[str, _ParamTest], held: Mapping[str, set[tuple[int, int]]]
                ) -> dict[str, set[tuple[int, int]]]:
    """The held (decorator, column) pairs whose table every reader holds alike: each
    decorator reading a table holds the same columns of it (a table read by one that holds
    another column, or none, keeps its values: nothing of it is held)."""
    seen: dict[str, set[frozenset[int]]] = {}
    for test_id, test in params.items():
        for index, decorator in enumerate(test.decorators):
            mine = frozenset(c for d, c in held.get(test_id, ()) if d == index)
            seen.setdefault(decorator.table, set()).add(mine)
    bad = {key for key, sets in seen.items() if len(sets) != 1}
    return {t: {(d, c) for d, c in pairs if params[t].decorators[d].table not in bad}
            for t, pairs in held.items()}


def rewrite(files: tuple[dict[str, str], dict[str, str]], held: HeldSites, placed: Placed,
            probe: bool | str = False, *, solution: Collection[str] = (),
            computed: Computed | None = None) -> HeldRuns:
    """Both runs' files with every held site of `held` replaced by an emission (`probe`:
    wrapped in one, the assertion kept). A site is rewritten in both runs or in neither (its
    statement must be holdable in each run's text: a canary that negates it leaves it as it
    is), so the runs' texts differ only where they did before.

    A site comparing with a parametrize argument (not in probes) also takes that column out
    of the table (a placeholder in every row) and gives the decorator opaque `ids=`; the host
    holds each case's value under pytest's own node id for it, and `ids` maps the ids the
    runs report back to those. A site comparing with literal data read by name (`Data`: a
    loop's column, a constant) takes its values out likewise (not in probes); the host
    holds them, one per row in row order for a loop.

    A site comparing with a value the test computes (computed.py; only given the
    `solution`'s modules) is held with the value calibration recorded (`computed`): the
    expected side leaves the text with the local bound to it (None) and the helper functions
    only it reads. Probes emit the expected side too (`expected_index`); `probe="first"`
    (the starter's and the null submission's runs) emits it before the solution side runs,
    and rewrites nothing else."""
    grading = None if probe else (computed or {})
    context = (_Context(files[0], solution, grading), _Context(files[1], solution, grading))
    found: list[dict[str, _Found]] = []
    params: list[dict[str, dict[str, _ParamTest]]] = []
    for run in (0, 1):
        clones = _clone_names(placed, run)
        found.append({})
        params.append({})
        for path in files[run]:
            if path.endswith(".py"):
                found[run][path], params[run][path] = _file_sites(path, context[run],
                                                                  held, clones)
    out: list[dict[str, str]] = [dict(files[0]), dict(files[1])]
    expect: tuple[dict[str, dict[int, Expect]], dict[str, dict[int, Expect]]] = ({}, {})
    unheld: set[tuple[str, int]] = set()
    ids: dict[str, str] = {}
    pending: tuple[dict[str, dict[int, tuple[str, Recorded]]], ...] = ({}, {})
    for path in found[0]:
        ok = {key for key, (_, _, p) in found[0][path].items()
              if p is not None and found[1].get(path, {}).get(key, (0, 0, None))[2] is not None}
        shapes = [{t: [d.ids for d in p.decorators] for t, p in params[run].get(path, {}).items()}
                  for run in (0, 1)]
        if shapes[0] != shapes[1]:  # the runs read the tables apart: hold no column
            ok = {key for key in ok if not isinstance(found[0][path][key][2][2], Column)}
        for run in (0, 1):
            for key, (test_id, _, _) in found[run][path].items():
                if key not in ok:  # never passes: a test the host could not hold
                    unheld.add((key[0], key[1]))
                    expect[run].setdefault(test_id, {})[-1] = (NEVER, None)
        for run in (0, 1):
            source = _Source(files[run][path])
            edits = []
            columns: dict[str, dict[int, tuple[str, str, Near | None]]] = {}  # {site: (arg,
            # op, tolerance check)} per test
            removed: set[str] = set()  # helper functions taken out of this text
            unbound: set[tuple[int, int]] = set()  # bound locals' values taken out
            for key in ok:
                test_id, statement, found_parts = found[run][path][key]
                assert statement is not None and found_parts is not None
                expr, op, value = found_parts
                start, end = source.span(expr)
                text = source.text(start, end)
                call = f'__import__("opd_grading").hold({key[1]}, ({text}'
                if probe == "first":
                    if isinstance(value, Pending):
                        edits += _first(source, key[1], expr, value)
                    continue
                if probe:
                    edits.append((start, end, call + "))"))
                    if isinstance(value, Pending):
                        b_start, b_end = source.span(value.site)
                        edits.append((b_start, b_end, '__import__("opd_grading").hold('
                                      f'{expected_index(key[1])}, ('
                                      f'{source.text(b_start, b_end)}))'))
                    continue
                s_start, s_end = source.span(statement)
                pad = "\n" * (statement.end_lineno - statement.lineno - text.count("\n"))
                edits.append((s_start, s_end, f"{call}{pad}))"))
                if isinstance(value, Pending):  # its value recorded; its sources leave
                    recorded = (computed or {})[key[0]][key[1]]
                    pending[run].setdefault(test_id, {})[key[1]] = (op, recorded)
                    span = source.span(value.binding.value) if value.binding else None
                    if span is not None and span not in unbound:  # one local, several sites
                        unbound.add(span)
                        node = value.binding.value  # type: ignore[union-attr]
                        edits.append((*span, PLACEHOLDER
                                      + "\n" * (node.end_lineno - node.lineno)))  # type: ignore
                    facts = context[run].facts(path)
                    for name in sorted(value.helpers - removed):
                        removed.add(name)
                        node = facts.functions[name]  # type: ignore[union-attr]
                        edits.append((*source.span(node), "pass" + "\n" * (
                            node.end_lineno - node.lineno)))  # type: ignore[operator]
                    continue
                if isinstance(value, Column):
                    columns.setdefault(test_id, {})[key[1]] = (value.name, op, value.near)
                elif isinstance(value, Data):  # its values leave the text for the host
                    expect[run].setdefault(test_id, {})[key[1]] = value.expect(op)
                    for cell in value.cells:
                        pad = "\n" * (cell.end_lineno - cell.lineno)  # type: ignore[operator]
                        edits.append((*source.span(cell), PLACEHOLDER + pad))
                else:
                    expect[run].setdefault(test_id, {})[key[1]] = (op, value)
            if columns:
                edits += _table_edits(source, params[run][path], columns, expect[run], ids)
            out[run][path] = _apply(source.data, edits)
    for run in (0, 1):
        _computed_expect(expect[run], pending[run])
    for run in (0, 1):  # a test with no held site left in this grade cannot pass either
        for test_id in [t for t, sites in expect[run].items() if -1 in sites]:
            expect[run][test_id] = {-1: (NEVER, None)}
            for nodeid in [n for n in expect[run] if n.startswith(test_id + "[")]:
                del expect[run][nodeid]
    return HeldRuns((out[0], out[1]), expect, frozenset(unheld), ids)


def _first(source: _Source, index: int, expr: ast.expr, value: Pending
           ) -> list[tuple[int, int, str]]:
    """A probe emitting the expected side before the solution side runs (a starter raising
    there still shows what the test computes), the comparison kept."""
    a_start, a_end = source.span(expr)
    b_start, b_end = source.span(value.site)
    hold = '__import__("opd_grading").hold'
    if b_end <= a_start:  # `assert expected == f(x)`: it runs first as it is
        return [(b_start, b_end, f"{hold}({expected_index(index)}, "
                                 f"({source.text(b_start, b_end)}))")]
    if a_end > b_start:
        return []
    return [(a_start, a_end, f"(_opd_expected := {hold}({expected_index(index)}, "
                             f"({source.text(b_start, b_end)})), {hold}({index}, "
                             f"({source.text(a_start, a_end)})))[1]"),
            (b_start, b_end, "_opd_expected")]


def _computed_expect(expect: dict[str, dict[int, Expect]],
                     sites: Mapping[str, Mapping[int, tuple[str, Recorded]]]) -> None:
    """The host's expectations of held computed sites, per node id (a parametrized test's
    cases differ; the base id alone then names no case)."""
    for test_id, held in sites.items():
        base = expect.get(test_id, {})
        nodeids = {n for _, recorded in held.values() for n in recorded.values}
        per_node = {n: {i: _recorded_expect(op, recorded, n) for i, (op, recorded)
                        in held.items()} for n in nodeids}
        if nodeids == {test_id}:
            expect[test_id] = {**base, **per_node[test_id]}
            continue
        for nodeid, mine in per_node.items():
            expect[nodeid] = {**{i: e for i, e in base.items() if i != _UNKNOWN}, **mine}
        expect[test_id] = {**base, _UNKNOWN: (NEVER, None)}


def _recorded_expect(op: str, recorded: Recorded, nodeid: str) -> Expect:
    values = recorded.values.get(nodeid)
    if values is None:
        return (NEVER, None)
    if recorded.loop:
        return (ROWS, tuple((op, v) for v in values))
    return (op, values[0])


def _table_edits(source: _Source, params: Mapping[str, _ParamTest],
                 columns: Mapping[str, Mapping[int, tuple[str, str, Near | None]]],
                 expect: dict[str, dict[int, Expect]], ids: dict[str, str]
                 ) -> list[tuple[int, int, str]]:
    """The edits taking the held columns of `columns` ({test id: {site: (argname, op)}}) out of
    their tables and giving their decorators opaque ids, in one run's text; the host's
    expectation per case (under the case's own node id, the test's other held sites with
    it; the test id alone then never passes) and the case ids as the run reports them."""
    edits: dict[tuple[int, int], str] = {}
    for test_id, sites in columns.items():
        test = params[test_id]
        held = {test.columns[name] for name, _, _ in sites.values()}
        for index in {d for d, _ in held}:
            decorator = test.decorators[index]
            opaque = repr([_OPAQUE.format(r) for r in range(len(decorator.rows))])
            if decorator.ids_node is not None:
                edits[source.span(decorator.ids_node)] = opaque
            else:
                at = source.span(decorator.after)[1]
                edits[(at, at)] = f", ids={opaque}"
            for row, id_node in enumerate(decorator.id_nodes):  # pytest.param's own id wins
                if id_node is not None:
                    edits[source.span(id_node)] = repr(_OPAQUE.format(row))
            for row in decorator.rows:
                for d, column in held:
                    if d == index:
                        start, end = source.span(row[column])
                        pad = "\n" * (row[column].end_lineno - row[column].lineno)
                        edits[(start, end)] = PLACEHOLDER + pad
        cases = test.cases()
        assert cases is not None  # _param_tests keeps only tests whose cases are known
        sandbox = test.opaque({d for d, _ in held})
        base = expect.get(test_id, {})
        for case, combo in cases:
            nodeid = f"{test_id}[{case}]"
            ids[f"{test_id}[{sandbox[combo]}]"] = nodeid
            expect[nodeid] = {**base, **{
                site: cell_expect(op, near, _literal(
                    test.decorators[test.columns[name][0]]
                    .rows[combo[test.columns[name][0]]][test.columns[name][1]]))
                for site, (name, op, near) in sites.items()}}
        expect[test_id] = {_UNKNOWN: (NEVER, None)}  # a case id the host does not know
    return [(start, end, text) for (start, end), text in edits.items()]


def restore_ids(data: Mapping[str, Any], ids: Mapping[str, str]) -> dict[str, Any]:
    """A parsed verdict with the ids its runs gave held parametrize cases (`HeldRuns.ids`)
    turned back into pytest's own; an id of such a test the host does not know stays as it
    is (it names no case: an extra test, and its held site never passes)."""
    variants = []
    for run in data["variants"]:
        run = dict(run)
        run["tests"] = [{**e, "id": ids.get(e["id"], e["id"])} for e in run["tests"]]
        if isinstance(run.get("running"), list):
            run["running"] = [ids.get(i, i) for i in run["running"]]
        variants.append(run)
    return {**data, "variants": variants}


def read(emitted: str) -> object:
    """The value an emission stands for, or _NO when it is no literal."""
    if len(emitted) > MAX_EMITTED:
        return _NO
    try:  # parsed under the package's lock (threads grade at once: opd_gym.pyast)
        return pyast.literal_eval(emitted)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NO


def matches(value: object, op: str, literal: object) -> bool:
    """Whether an emitted value meets a held expectation (Python's own `==` on plain data).
    An emission that is no literal still stood for some object, and never for None, True or
    False (always emitted as themselves): it is not the singleton an `is not` site names."""
    if value is _NO:
        return op == "is not" and any(literal is s for s in (None, True, False))
    if op == NEVER:
        return False
    if op == NEAR:
        return isinstance(literal, Near) and literal.meets(value)
    if op in (TRUTHY, FALSY):  # builtin data's own truth
        return bool(value) is (op == TRUTHY)
    if op in ("is", "is not"):  # the singletons: the same type and value is the same object
        same = type(value) is type(literal) and value == literal
        return same if op == "is" else not same
    try:
        equal = bool(value == literal)
    except Exception:  # noqa: BLE001 - plain data compares; anything else is a mismatch
        return False
    return equal if op == "==" else not equal


def unmet(emissions: Iterable[tuple[int, str, bool]], expect: Mapping[int, Expect]
          ) -> str | None:
    """Why a test's held sites are not met (None: each emitted exactly once a value meeting
    its expectation); it names the solution's own value, never the held one."""
    seen: dict[int, list[str]] = {}
    for index, emitted, _plain in emissions:
        seen.setdefault(index, []).append(emitted)
    for index, (op, literal) in sorted(expect.items()):
        values = seen.get(index, [])
        if op == NEVER and index == _UNKNOWN:
            return "a case of the test the host holds no value for"
        if op == NEVER:
            return "the assertion could not be held in this grade"
        if op == ROWS:
            why = _rows_unmet(values, literal)  # type: ignore[arg-type]
            if why is not None:
                return why
            continue
        if len(values) != 1:
            return f"an assertion ran {len(values)} times, not once"
        if not matches(read(values[0]), op, literal):
            got = values[0][:200] or "a value that is no builtin data"
            return f"the value compared was {got}"
    return None


def _rows_unmet(values: list[str], rows: tuple[Expect, ...]) -> str | None:
    """Why a loop site's emissions do not meet its rows (one value per row, in order)."""
    if len(values) != len(rows):
        return f"an assertion in a loop over {len(rows)} rows ran {len(values)} times"
    for row, (value, (op, literal)) in enumerate(zip(values, rows, strict=True)):
        if not matches(read(value), op, literal):
            got = value[:200] or "a value that is no builtin data"
            return f"the value compared in row {row + 1} was {got}"
    return None


def met(emissions: Iterable[tuple[int, str, bool]], expect: Mapping[int, Expect]) -> bool:
    """Each held site emitted exactly once, a value meeting its expectation."""
    return unmet(emissions, expect) is None


def calibrated(held: HeldSites, pristine: Mapping[str, str],
               probes: Mapping[str, list[tuple[int, str, bool]]],
               passed: Iterable[str], reported: Iterable[str] = (), *,
               solution: Collection[str] = (),
               witness: Mapping[str, list[tuple[int, str, bool]]] | None = None,
               others: Iterable[Mapping[str, list[tuple[int, str, bool]]]] = (),
               recorded: dict[str, dict[int, Recorded]] | None = None
               ) -> dict[str, tuple[int, ...]]:
    """The sites of `held` the reference vouches for: on every node id of the test it passed,
    the site emitted once a plain value meeting the pristine literal (`probes`: the
    reference's emissions per node id, from the run holding the real test). A site holding a
    parametrize argument is vouched for per case (the case's own value) and kept only where
    every node id of the test the reference reported (`reported`, `passed` too) is a case
    the host names alike, and where every other reader of its table keeps its column too.

    A site comparing with a value the test computes (given the `solution`'s modules) is
    vouched for where the reference emitted plain values on both sides meeting each other
    (one pair, or one per iteration of its loop), the other run of the reference's grade
    (`witness`: another uid, tree and process) computed the same values as far as it got,
    and so did every run of `others` that got there (the starter's, the null submission's,
    expected side first), and the test module's helpers it reads are read nowhere else; what
    it records goes to `recorded`."""
    from opd_gym.nodeids import base_id

    context = _Context(pristine, solution)
    witnesses = [witness or {}, *others]
    pendings: dict[tuple[str, int], tuple[str, Pending]] = {}  # -> (path, its Pending)
    literals: dict[tuple[str, int], Expect] = {}
    cases: dict[str, dict[str, tuple[int, ...]]] = {}  # test id -> {node id: rows}
    params: dict[str, _ParamTest] = {}
    for path in pristine:
        if not path.endswith(".py"):
            continue
        found, tests = _file_sites(path, context, held, {})
        params.update(tests)
        for test_id, test in tests.items():
            cases[test_id] = {f"{test_id}[{i}]": combo for i, combo in test.cases() or ()}
        for (test_id, index, _), (_, _, p) in found.items():
            if p is not None:
                literals[(test_id, index)] = (p[1], p[2])
                if isinstance(p[2], Pending):
                    pendings[(test_id, index)] = (path, p[2])
    nodes: dict[str, list[str]] = {}
    for nodeid in passed:
        nodes.setdefault(base_id(nodeid), []).append(nodeid)
    others: dict[str, set[str]] = {}
    for nodeid in reported:
        others.setdefault(base_id(nodeid), set()).add(nodeid)
    kept: dict[str, tuple[int, ...]] = {}
    found_computed: dict[str, dict[int, Recorded]] = {}
    for test_id, indices in held.items():
        good = []
        for index in indices:
            if (test_id, index) not in literals or not nodes.get(test_id):
                continue
            op, literal = literals[(test_id, index)]
            known = cases.get(test_id, {})
            if isinstance(literal, Column) and not all(
                    n in known for n in {*nodes[test_id], *others.get(test_id, ())}):
                continue  # a case pytest names otherwise than the host: not held
            if isinstance(literal, Pending):
                vouched = _vouched(index, op, literal, nodes[test_id], probes, witnesses,
                                   pristine[pendings[(test_id, index)][0]])
                if vouched is not None:
                    good.append(index)
                    found_computed.setdefault(test_id, {})[index] = vouched
                continue
            ok = True
            for nodeid in nodes[test_id]:
                wants: list[Expect] = [(op, literal)]
                if isinstance(literal, Column):
                    d, c = params[test_id].columns[literal.name]
                    wants = [cell_expect(op, literal.near, _literal(
                        params[test_id].decorators[d].rows[known[nodeid][d]][c]))]
                elif isinstance(literal, Data):  # each row's value, in row order
                    wants = literal.wants(op)
                values = [(e, plain) for i, e, plain in probes.get(nodeid, ()) if i == index]
                if len(values) != len(wants) or not all(
                        (plain or o in _IDENTITY) and matches(read(e), o, w)
                        for (e, plain), (o, w) in zip(values, wants, strict=True)):
                    ok = False
                    break
            if ok:
                good.append(index)
        if good:
            kept[test_id] = tuple(good)
    for test_id, index in _read_elsewhere(found_computed, pendings, context):
        kept[test_id] = tuple(i for i in kept[test_id] if i != index)
        del found_computed[test_id][index]
    if recorded is not None:
        recorded.update({t: s for t, s in found_computed.items() if s})
    # a table is held only where all its readers keep their columns of it
    for path in pristine:
        if path.endswith(".py"):
            found, _ = _file_sites(path, context, kept, {})
            for (test_id, index, _), (_, _, p) in found.items():
                if p is None:
                    kept[test_id] = tuple(i for i in kept[test_id] if i != index)
    return {t: s for t, s in kept.items() if s}


def computes(held: HeldSites, pristine: Mapping[str, str], solution: Collection[str]) -> bool:
    """Whether a site of `held` compares with a value its test computes (computed.py): its
    calibration then needs that value computed a second time by the reference (`calibrated`'s
    witness)."""
    context = _Context(pristine, solution)
    return bool(solution) and any(
        p is not None and isinstance(p[2], Pending)
        for path in pristine if path.endswith(".py")
        for _, _, p in _file_sites(path, context, held, {})[0].values())


def _vouched(index: int, op: str, pending: Pending, nodeids: Iterable[str],
             probes: Mapping[str, list[tuple[int, str, bool]]],
             others: list[Mapping[str, list[tuple[int, str, bool]]]], source: str
             ) -> Recorded | None:
    """What the host holds of a computed site, where the reference's probes vouch for it
    and another run computed the same (see `calibrated`)."""
    values: dict[str, tuple[object, ...]] = {}
    for nodeid in nodeids:
        emitted = probes.get(nodeid, [])
        if len(emitted) >= MAX_HELD:
            return None  # the harness may have cut its values short
        solved = [e for i, e, _ in emitted if i == index]
        wanted = [(read(e), plain) for i, e, plain in emitted if i == expected_index(index)]
        if not wanted or len(solved) != len(wanted) or (not pending.loop and len(wanted) != 1):
            return None
        if not all(plain and v is not _NO for v, plain in wanted) or not all(
                matches(read(e), op, v) for e, (v, _) in zip(solved, wanted, strict=True)):
            return None
        mine = tuple(v for v, _ in wanted)
        seen = [tuple(read(e) for i, e, _ in other.get(nodeid, ()) if i == expected_index(index))
                for other in others]
        if not seen[0] or not all(_computed.prefix(mine, s) for s in seen):
            return None  # computed once only, or otherwise elsewhere: not the test's own
        values[nodeid] = mine
    tree = parse(source)
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    helpers = {}
    for name in pending.helpers:
        text = ast.get_source_segment(source, functions[name]) if name in functions else None
        if text is None:
            return None
        helpers[name] = text
    return Recorded(pending.text, helpers, pending.loop, values) if values else None


def _read_elsewhere(found: Mapping[str, Mapping[int, Recorded]],
                    pendings: Mapping[tuple[str, int], tuple[str, Pending]],
                    context: _Context) -> list[tuple[str, int]]:
    """The computed sites to drop because a helper they would take out of the text is read
    elsewhere (another test, an unheld site, a string naming it), or a local whose value
    they would take out is read where nothing is held: until none is."""
    uses, _, _ = context.get()
    strings = context.strings()
    keep = {(t, i) for t, sites in found.items() for i in sites}
    dropped: list[tuple[str, int]] = []
    while True:
        removed: dict[str, set[str]] = {}  # path -> helpers taken out
        for key in keep:
            path, pend = pendings[key]
            removed.setdefault(path, set()).update(pend.helpers)
        loads: Counter[str] = Counter()
        for key in keep:
            path, pend = pendings[key]
            nodes = [pend.value]
            loads.update(n.id for node in nodes for n in pyast.walk(node)
                         if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))
        for path, names in removed.items():
            facts = context.facts(path)
            for name in names:
                node = facts.functions[name]  # type: ignore[union-attr]
                loads.update(n.id for n in pyast.walk(node)
                             if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))
        bad = {name for names in removed.values() for name in names
               if uses.get(name, 0) != loads[name] or any(
                   re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text)
                   for text in strings if name in text)}
        drop = {key for key in keep if pendings[key][1].helpers & bad}
        readers: Counter[tuple[str, int]] = Counter()  # (test, binding) -> held reads
        for key in keep:
            pend = pendings[key][1]
            if pend.binding is not None:
                readers[(key[0], id(pend.binding))] += 1
        drop |= {key for key in keep if pendings[key][1].binding is not None
                 and readers[(key[0], id(pendings[key][1].binding))] != pendings[key][1].reads}
        if not drop:
            return dropped
        keep -= drop
        dropped.extend(sorted(drop))


__all__ = ["MAX_HELD", "ROWS", "Column", "Computed", "Data", "HeldRuns", "HeldSites",
           "Pending", "Recorded", "calibrated",
           "candidates", "matches", "met", "parametrized", "parts", "read", "restore_ids",
           "rewrite", "unmet"]
