"""Tolerance checks held on the host: the check's own arithmetic, replayed on plain data.

`assert abs(f(x) - 1.5) < 1e-6` (also `<=`, `math.fabs`, the tolerance on the left),
`assert math.isclose(f(x), 1.5, rel_tol=...)`, `assert f(x) == pytest.approx(1.5, abs=...)`
(a number or a flat list or tuple of numbers) and unittest's `assertAlmostEqual(f(x), 1.5,
places=...)` compare the solution's value with a literal the way `==` does, only within a
tolerance. `held` takes such a site out of the sandbox like an equality: the solution side is
emitted, and the host decides with `Near.meets`, which repeats what Python, `math`, pytest
8.4 (`ApproxScalar`, `ApproxSequenceLike`) and unittest compute on the value's canonical
builtin form. The expected value and the tolerance never enter the sandbox, so a value
whose `__sub__` or `__abs__` lies, or a reader of the test's frame, finds nothing to return.
"""

from __future__ import annotations

import ast
import cmath
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from opd_gym import pyast
from opd_gym.pyast import Imports

NEAR = "near"  # the operator of a held tolerance check (its literal: a `Near`)

# the callables a tolerance check may name, by what an import binds them to
_ISCLOSE = {"math.isclose": "math", "cmath.isclose": "cmath"}
_APPROX = "pytest.approx"
_ALMOST = {"assertAlmostEqual", "assertAlmostEquals"}
_FOLDED = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)


@dataclass(frozen=True)
class Near:
    """A held tolerance check: `kind` ("abs", "fabs", "isclose", "cmath", "approx",
    "almost"), the `expected` literal, whether the solution's value is the `first` operand
    (`abs(x - E)`, `isclose(x, E)`), and the kind's literal bounds: (tolerance, strict) for
    abs/fabs, (rel_tol, abs_tol) for isclose, (rel, abs) for approx (None: pytest's
    default), (places, delta) for almost."""

    kind: str
    expected: object
    first: bool
    bounds: tuple[Any, ...]

    def at(self, expected: object) -> Near:
        """The same check against another expected value (a table's row)."""
        return replace(self, expected=expected)

    def accepts(self, expected: object) -> bool:
        """`expected` is a value the check is held against: a number (never a bool), or for
        approx a flat, non-empty list or tuple of numbers."""
        if isinstance(expected, list | tuple) and self.kind == "approx":
            return bool(expected) and all(self.accepts(e) for e in expected)
        return isinstance(expected, int | float | complex) and not isinstance(expected, bool)

    def meets(self, value: object) -> bool:
        """Whether the check passes on `value` (plain data read from the sandbox)."""
        try:
            return bool(self._meets(value))
        except Exception:  # noqa: BLE001 - the check would raise too: the test fails
            return False

    def _meets(self, value: object) -> bool:
        a, b = (value, self.expected) if self.first else (self.expected, value)
        if self.kind in ("abs", "fabs"):
            tolerance, strict = self.bounds
            gap = abs(a - b) if self.kind == "abs" else math.fabs(a - b)  # type: ignore
            return gap < tolerance if strict else gap <= tolerance
        if self.kind in ("isclose", "cmath"):
            rel_tol, abs_tol = self.bounds
            close = math.isclose if self.kind == "isclose" else cmath.isclose
            return close(a, b, rel_tol=rel_tol, abs_tol=abs_tol)  # type: ignore[arg-type]
        if self.kind == "almost":
            places, delta = self.bounds
            if a == b:
                return True
            gap = abs(a - b)  # type: ignore[operator]
            return gap <= delta if delta is not None else round(gap, places) == 0
        rel, tol = self.bounds  # approx
        if isinstance(self.expected, list | tuple):
            if isinstance(value, set | frozenset) and len(value) > 1:
                return False  # iterated in the sandbox's order, which the host cannot see
            if len(value) != len(self.expected):  # type: ignore[arg-type]
                return False
            return all(_approx_scalar(x, e, rel, tol)
                       for x, e in zip(value, self.expected, strict=True))  # type: ignore
        return _approx_scalar(value, self.expected, rel, tol)


def _approx_scalar(actual: Any, expected: Any, rel: float | None, tol: float | None) -> bool:
    """pytest 8.4's `actual == approx(expected)` for a number `expected` (never a bool) and
    plain `actual` (ApproxScalar.__eq__ and .tolerance)."""
    if actual == expected:
        return True
    if not isinstance(actual, int | float | complex):  # a bool is a number to pytest too
        return False
    if math.isinf(abs(expected)):
        return False
    absolute = 1e-12 if tol is None else tol
    if rel is None and tol is not None:
        bound = absolute
    else:
        bound = max((1e-6 if rel is None else rel) * abs(expected), absolute)
    return abs(expected - actual) <= bound


def number(node: ast.AST | None) -> int | float | complex | None:
    """The value of a literal number, with constant arithmetic folded (`2.0 / 3.0`,
    `10 ** -6`, `-1.5`) as Python folds it; None for anything else (a bool too)."""
    if isinstance(node, ast.Constant):
        value = node.value
        return value if isinstance(value, int | float | complex) \
            and not isinstance(value, bool) else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = number(node.operand)
        return None if inner is None else -inner if isinstance(node.op, ast.USub) else +inner
    if isinstance(node, ast.BinOp) and isinstance(node.op, _FOLDED):
        left, right = number(node.left), number(node.right)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.Pow) and (not isinstance(right, int | float)
                                             or abs(right) > 64):
            return None  # no huge powers evaluated on the host
        try:
            op = {ast.Add: lambda: left + right, ast.Sub: lambda: left - right,  # type: ignore
                  ast.Mult: lambda: left * right, ast.Div: lambda: left / right,  # type: ignore
                  ast.Pow: lambda: left ** right}[type(node.op)]  # type: ignore[operator]
            return op()  # type: ignore[no-any-return]
        except (ArithmeticError, ValueError, TypeError):
            return None
    return None


def _tolerance(node: ast.AST | None) -> float | int | None:
    """A literal non-negative real tolerance, or None."""
    value = number(node) if node is not None else None
    if isinstance(value, int | float) and not isinstance(value, bool) \
            and value >= 0 and not math.isnan(value):
        return value
    return None


class Bindings:
    """What a module's names stand for where a tolerance check reads them: a name bound
    nowhere in the module is the builtin; one bound only by imports, the dotted names they
    import (`import math` -> math, `from pytest import approx` -> pytest.approx)."""

    def __init__(self, tree: ast.AST) -> None:
        imports = Imports.of(tree)
        self._imports = imports.names
        self._stars = bool(imports.stars)
        self._other: set[str] = set()
        for node in pyast.walk(tree):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                self._other.add(node.id)
            elif isinstance(node, ast.arg):
                self._other.add(node.arg)
            elif isinstance(node, ast.Global | ast.Nonlocal):
                self._other.update(node.names)
            elif isinstance(getattr(node, "name", None), str) and not isinstance(
                    node, ast.alias):
                self._other.add(node.name)  # type: ignore[attr-defined]

    def builtin(self, name: str) -> bool:
        """`name` is never bound in the module: it is the builtin of that name (a star import
        may bind any name: then none is known to be)."""
        return not self._stars and name not in self._other and name not in self._imports

    def stands_for(self, node: ast.expr) -> str | None:
        """The one dotted name `node` (a name or `module.attr`) stands for, or None."""
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            head = self.stands_for(node.value)
            return None if head is None else f"{head}.{node.attr}"
        if isinstance(node, ast.Name) and node.id not in self._other:
            targets = self._imports.get(node.id, set())
            return next(iter(targets)) if len(targets) == 1 else None
        return None


def shape(statement: ast.stmt, names: Bindings, data: Iterable[str] = ()
          ) -> tuple[ast.expr, Near, str | None] | None:
    """(solution-side expression, Near, the data name standing for the expected value or
    None) of a tolerance check on a literal (or on one name of `data`), else None."""
    data = frozenset(data)
    if isinstance(statement, ast.Assert):
        test = statement.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            return _compare(test, names, data)
        if isinstance(test, ast.Call):
            return _isclose(test, names, data)
        return None
    if isinstance(statement, ast.Expr) and isinstance(call := statement.value, ast.Call) \
            and isinstance(call.func, ast.Attribute) and call.func.attr in _ALMOST:
        return _almost(call, data)
    return None


def _sides(a: ast.expr, b: ast.expr, data: frozenset[str]
           ) -> tuple[ast.expr, object, bool, str | None] | None:
    """(solution side, expected value, the solution side is first, data name) of two
    operands one of which is a literal number (or a data name) and the other no literal."""
    for expr, other, first in ((a, b, True), (b, a, False)):
        if not _plain(expr) or number(expr) is not None:
            continue
        value = number(other)
        if value is not None:
            return expr, value, first, None
        if isinstance(other, ast.Name) and other.id in data and not _reads(expr, other.id):
            return expr, None, first, other.id
    return None


def _plain(expr: ast.expr) -> bool:
    """The solution side holds nothing that runs out of order or binds a name."""
    return not any(isinstance(n, ast.Await | ast.Yield | ast.YieldFrom | ast.NamedExpr)
                   for n in pyast.walk(expr))


def _reads(expr: ast.expr, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in pyast.walk(expr))


def _compare(test: ast.Compare, names: Bindings, data: frozenset[str]
             ) -> tuple[ast.expr, Near, str | None] | None:
    op, left, right = test.ops[0], test.left, test.comparators[0]
    if isinstance(op, ast.Eq):  # `x == approx(E)` or `approx(E) == x`
        for call, expr in ((right, left), (left, right)):
            found = _approx(call, expr, names, data)
            if found is not None:
                return found
        return None
    if isinstance(op, ast.Lt | ast.LtE):
        gap, bound, strict = left, right, isinstance(op, ast.Lt)
    elif isinstance(op, ast.Gt | ast.GtE):
        gap, bound, strict = right, left, isinstance(op, ast.Gt)
    else:
        return None
    tolerance = _tolerance(bound)
    if tolerance is None or not isinstance(gap, ast.Call) or len(gap.args) != 1 \
            or gap.keywords or not isinstance(gap.args[0], ast.BinOp) \
            or not isinstance(gap.args[0].op, ast.Sub):
        return None
    if isinstance(gap.func, ast.Name) and gap.func.id == "abs" and names.builtin("abs"):
        kind = "abs"
    elif names.stands_for(gap.func) == "math.fabs":
        kind = "fabs"
    else:
        return None
    sides = _sides(gap.args[0].left, gap.args[0].right, data)
    if sides is None:
        return None
    expr, value, first, name = sides
    return expr, Near(kind, value, first, (tolerance, strict)), name


def _isclose(call: ast.Call, names: Bindings, data: frozenset[str]
             ) -> tuple[ast.expr, Near, str | None] | None:
    kind = _ISCLOSE.get(names.stands_for(call.func) or "")
    if kind is None or len(call.args) != 2 or any(
            isinstance(a, ast.Starred) for a in call.args):
        return None
    bounds = {"rel_tol": 1e-09, "abs_tol": 0.0}
    for keyword in call.keywords:
        if keyword.arg not in bounds or (value := _tolerance(keyword.value)) is None:
            return None
        bounds[keyword.arg] = value
    sides = _sides(call.args[0], call.args[1], data)
    if sides is None:
        return None
    expr, value, first, name = sides
    near = Near("isclose" if kind == "math" else "cmath", value, first,
                (bounds["rel_tol"], bounds["abs_tol"]))
    return expr, near, name


def _approx(call: ast.expr, expr: ast.expr, names: Bindings, data: frozenset[str]
            ) -> tuple[ast.expr, Near, str | None] | None:
    if not isinstance(call, ast.Call) or names.stands_for(call.func) != _APPROX \
            or len(call.args) != 1 or isinstance(call.args[0], ast.Starred) \
            or not _plain(expr):
        return None
    bounds: dict[str, float | int | None] = {"rel": None, "abs": None}
    for keyword in call.keywords:
        if keyword.arg not in bounds or (value := _tolerance(keyword.value)) is None:
            return None  # nan_ok, a computed tolerance: not held
        bounds[keyword.arg] = value
    near = Near("approx", None, True, (bounds["rel"], bounds["abs"]))
    arg = call.args[0]
    if isinstance(arg, ast.Name) and arg.id in data:
        return None if _reads(expr, arg.id) else (expr, near, arg.id)
    expected: object = number(arg)
    if expected is None and isinstance(arg, ast.List | ast.Tuple) and arg.elts:
        cells = [number(e) for e in arg.elts]
        if any(c is None for c in cells):
            return None
        expected = cells if isinstance(arg, ast.List) else tuple(cells)
    if expected is None or number(expr) is not None or isinstance(expr, ast.List | ast.Tuple) \
            and all(number(e) is not None for e in expr.elts):
        return None
    return expr, near.at(expected), None


def _almost(call: ast.Call, data: frozenset[str]) -> tuple[ast.expr, Near, str | None] | None:
    if len(call.args) < 2 or len(call.args) > 4 or any(
            isinstance(a, ast.Starred) for a in call.args):
        return None
    places: object = 7
    delta: object = None
    given = dict(zip(("places", "msg"), call.args[2:], strict=False))
    given.update({k.arg: k.value for k in call.keywords if k.arg})
    if len(given) != len(call.args[2:]) + len(call.keywords) or set(given) - {
            "places", "msg", "delta"}:
        return None
    if "places" in given:
        places = number(given["places"])
    if "delta" in given:
        delta = _tolerance(given["delta"])
        if delta is None or "places" in given:
            return None
    if not isinstance(places, int) or not 0 <= places < 300 or "msg" in given \
            and not isinstance(given["msg"], ast.Constant):
        return None
    sides = _sides(call.args[0], call.args[1], data)
    if sides is None:
        return None
    expr, value, first, name = sides
    return expr, Near("almost", value, first, (places, delta)), name


__all__ = ["NEAR", "Bindings", "Near", "number", "shape"]
