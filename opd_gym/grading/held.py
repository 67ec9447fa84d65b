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
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from opd_gym import pyast
from opd_gym.grading.canary import _apply, _collected, _Source, parse
from opd_gym.grading.sentinel import Placed

HeldSites = Mapping[str, tuple[int, ...]]  # test base id -> indices of held body statements
Expect = tuple[str, object]  # (operator "==" or "!=", the literal's value)
MAX_EMITTED = 1 << 16  # characters of one emitted value the host reads
_EQUAL = {"assertEqual": "==", "assertEquals": "==", "assertNotEqual": "!=",
          "assertNotEquals": "!="}
_NO = object()
_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Is: "is", ast.IsNot: "is not"}
_NOT = {"==": "!=", "!=": "==", "is": "is not", "is not": "is"}
NEVER = "never"  # the operator of an expectation nothing meets
_Parts = tuple[ast.expr, str, object]


def _literal(node: ast.AST) -> object:
    """The value of a literal expression (no names, no calls), or _NO."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NO


def parts(statement: ast.stmt) -> tuple[ast.expr, str, object] | None:
    """(solution-side expression, operator, literal value) of a holdable assertion."""
    test = statement.test if isinstance(statement, ast.Assert) else None
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    if negated:  # `assert not (x == E)`, e.g. a negated canary: `x != E`
        test = test.operand  # type: ignore[union-attr]
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _OPS:
        op = _OPS[type(test.ops[0])]
        op = _NOT[op] if negated else op
        left, right = test.left, test.comparators[0]
    elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) \
            and isinstance(statement.value.func, ast.Attribute) \
            and statement.value.func.attr in _EQUAL and len(statement.value.args) == 2 \
            and not statement.value.keywords \
            and not any(isinstance(a, ast.Starred) for a in statement.value.args):
        op = _EQUAL[statement.value.func.attr]
        left, right = statement.value.args
    else:
        return None
    value = _literal(right)
    expr = left
    if value is _NO:
        value, expr = _literal(left), right
    if value is _NO or _literal(expr) is not _NO:
        return None
    if op in ("is", "is not") and value not in (True, False, None):
        return None  # identity only with the singletons (`x is True`, `y is None`)
    if op in ("is", "is not") and type(value) not in (bool, type(None)):
        return None
    if any(isinstance(n, ast.Await | ast.Yield | ast.YieldFrom | ast.NamedExpr)
           for n in ast.walk(expr)):
        return None
    return expr, op, value


def _straight(function: ast.AST) -> list[tuple[int, ast.stmt]]:
    """(number, statement) of the straight-line statements of a test: its own body up to
    the first statement holding a `return`, and likewise the bodies of functions defined on
    such statements (a dataset's `check(candidate)`, an `_assertion()` helper), numbered in
    one pre-order walk (the same in every run: edits change tokens, never statements).
    Whether such a helper runs exactly once is left to calibration (it counts emissions)."""
    found: list[tuple[int, ast.stmt]] = []

    def walk(node: ast.AST) -> None:
        for statement in node.body if isinstance(node, ast.FunctionDef) else ():
            found.append((len(found), statement))
            if isinstance(statement, ast.FunctionDef) and not statement.decorator_list:
                walk(statement)
            if not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef
                              | ast.ClassDef) and any(
                    isinstance(n, ast.Return | ast.Yield | ast.YieldFrom)
                    for n in _own_nodes(statement)):
                return  # this one still runs once; nothing after it is sure to

    walk(function)
    return found


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


def candidates(sources: Mapping[str, str], paths: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """Every holdable site of the test modules `paths`: {test base id: body indices}."""
    found: dict[str, tuple[int, ...]] = {}
    for path in sorted(paths):
        if not path.endswith(".py") or path not in sources:
            continue
        try:
            tree = parse(sources[path])
        except (SyntaxError, ValueError):
            continue
        for test_id, function, owner in _collected(tree, path):
            if test_id != owner:
                continue
            indices = tuple(i for i, s in _straight(function) if parts(s) is not None)
            if indices:
                found[test_id] = indices
    return found


@dataclass(frozen=True)
class HeldRuns:
    """The variants' files with held sites rewritten, and what the host holds per run:
    {test base id as the run names it (clones too): {index: (operator, literal)}}."""

    files: tuple[dict[str, str], dict[str, str]]
    expect: tuple[dict[str, dict[int, Expect]], dict[str, dict[int, Expect]]]
    unheld: frozenset[str] = frozenset()  # tests of `held` a site of which was left as it is


def _clone_names(placed: Placed, run: int) -> dict[str, str]:
    """{clone base id: original base id} of the sentinels a run holds."""
    names: dict[str, str] = {}
    for sentinel in placed[run] if run < len(placed) else ():
        head = sentinel.site.test_id.rpartition("::")[0]
        names[f"{head}::{sentinel.clone}"] = sentinel.site.test_id
    return names


def _sites_in(text: str, path: str, held: HeldSites, clones: Mapping[str, str]
              ) -> dict[tuple[str, int, bool], tuple[str, ast.stmt | None, _Parts | None]]:
    """{(original test id, index, a clone): (this run's test id, statement, its parts)} in
    one file (a run holds at most one clone of a test; its name differs from run to run)."""
    try:
        tree = parse(text)
    except (SyntaxError, ValueError):
        return {}
    found = {}
    for test_id, function, owner in _collected(tree, path):
        original = clones.get(test_id, test_id)
        if test_id != owner or original not in held:
            continue
        body = dict(_straight(function))
        for index in held[original]:
            statement = body.get(index)
            found[(original, index, test_id != original)] = (test_id, statement,
                                       parts(statement) if statement is not None else None)
    return found


def rewrite(files: tuple[dict[str, str], dict[str, str]], held: HeldSites, placed: Placed,
            probe: bool = False) -> HeldRuns:
    """Both runs' files with every held site of `held` replaced by an emission (`probe`:
    wrapped in one, the assertion kept). A site is rewritten in both runs or in neither (its
    statement must be holdable in each run's text: a canary that negates it leaves it as it
    is), so the runs' texts differ only where they did before."""
    found = []
    for run in (0, 1):
        clones = _clone_names(placed, run)
        found.append({path: _sites_in(text, path, held, clones)
                      for path, text in files[run].items() if path.endswith(".py")})
    out: list[dict[str, str]] = [dict(files[0]), dict(files[1])]
    expect: tuple[dict[str, dict[int, Expect]], dict[str, dict[int, Expect]]] = ({}, {})
    unheld: set[str] = set()
    for path in found[0]:
        ok = {key for key, (_, _, p) in found[0][path].items()
              if p is not None and found[1].get(path, {}).get(key, (0, 0, None))[2] is not None}
        for run in (0, 1):
            for key, (test_id, _, _) in found[run][path].items():
                if key not in ok:  # never passes: a test the host could not hold
                    unheld.add(key[0])
                    expect[run].setdefault(test_id, {})[-1] = (NEVER, None)
        for run in (0, 1):
            source = _Source(files[run][path])
            edits = []
            for key in ok:
                test_id, statement, found_parts = found[run][path][key]
                assert statement is not None and found_parts is not None
                expr, op, value = found_parts
                start, end = source.span(expr)
                text = source.text(start, end)
                call = f'__import__("opd_grading").hold({key[1]}, ({text}'
                if probe:
                    edits.append((start, end, call + "))"))
                    continue
                s_start, s_end = source.span(statement)
                pad = "\n" * (statement.end_lineno - statement.lineno - text.count("\n"))
                edits.append((s_start, s_end, f"{call}{pad}))"))
                expect[run].setdefault(test_id, {})[key[1]] = (op, value)
            out[run][path] = _apply(source.data, edits)
    for run in (0, 1):  # a test with no held site left in this grade cannot pass either
        for test_id in [t for t, sites in expect[run].items() if -1 in sites]:
            expect[run][test_id] = {-1: (NEVER, None)}
    return HeldRuns((out[0], out[1]), expect, frozenset(unheld))


def read(emitted: str) -> object:
    """The value an emission stands for, or _NO when it is no literal."""
    if len(emitted) > MAX_EMITTED:
        return _NO
    try:  # parsed under the package's lock (threads grade at once: opd_gym.pyast)
        return pyast.literal_eval(emitted)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NO


def matches(value: object, op: str, literal: object) -> bool:
    """Whether an emitted value meets a held expectation (Python's own `==` on plain data)."""
    if value is _NO or op == NEVER:
        return False
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
        if op == NEVER:
            return "the assertion could not be held in this grade"
        if len(values) != 1:
            return f"an assertion ran {len(values)} times, not once"
        if not matches(read(values[0]), op, literal):
            got = values[0][:200] or "a value that is no builtin data"
            return f"the value compared was {got}"
    return None


def met(emissions: Iterable[tuple[int, str, bool]], expect: Mapping[int, Expect]) -> bool:
    """Each held site emitted exactly once, a value meeting its expectation."""
    return unmet(emissions, expect) is None


def calibrated(held: HeldSites, pristine: Mapping[str, str],
               probes: Mapping[str, list[tuple[int, str, bool]]],
               passed: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """The sites of `held` the reference vouches for: on every node id of the test it passed,
    the site emitted once a plain value meeting the pristine literal (`probes`: the
    reference's emissions per node id, from the run holding the real test)."""
    from opd_gym.nodeids import base_id

    literals: dict[tuple[str, int], Expect] = {}
    for path, text in pristine.items():
        if not path.endswith(".py"):
            continue
        for (test_id, index, _), (_, _, p) in _sites_in(text, path, held, {}).items():
            if p is not None:
                literals[(test_id, index)] = (p[1], p[2])
    nodes: dict[str, list[str]] = {}
    for nodeid in passed:
        nodes.setdefault(base_id(nodeid), []).append(nodeid)
    kept: dict[str, tuple[int, ...]] = {}
    for test_id, indices in held.items():
        good = []
        for index in indices:
            if (test_id, index) not in literals or not nodes.get(test_id):
                continue
            op, literal = literals[(test_id, index)]
            ok = True
            for nodeid in nodes[test_id]:
                values = [(e, plain) for i, e, plain in probes.get(nodeid, ()) if i == index]
                if len(values) != 1 or not values[0][1] \
                        or not matches(read(values[0][0]), op, literal):
                    ok = False
                    break
            if ok:
                good.append(index)
        if good:
            kept[test_id] = tuple(good)
    return kept


__all__ = ["HeldRuns", "HeldSites", "calibrated", "candidates", "matches", "met", "parts",
           "read", "rewrite", "unmet"]
