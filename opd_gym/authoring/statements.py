"""Problem statements of synthesized bugs, written like a user's bug report, and their checker.

A statement is written from the FAIL_TO_PASS tests' own source and the failure pytest reported
for them on the mutant (the validation run's messages, `"@crash:line|frame:line...\n<message>"`
as `synth.run_suite` records them; the frames are the traceback's, inside the workspace):

- the failing statement of a test is found with the AST at the traceback's frame inside the
  test function;
- the reproduction snippet is the test's own call with the concrete arguments it uses:
  parametrize rows and rows of a `for` over a literal table are inlined (a loop row only
  when the printed expectation identifies it), simple local assignments, local classes and
  small module helpers the call needs are included, and the test module's imports are reduced
  to the names used. When no single call can be singled out (a failure inside a local class,
  a loop over computed cases), the test's body up to the failure is the snippet, unittest
  assertions turned into plain `assert`s;
- observed = what the mutant produced (the value pytest printed for the computing side of
  the comparison, the exception it raised, or that it did not raise); expected = what the
  test wanted (the other side, the exception it expects, or no error). The computing side is
  the one touching the changed name, else the non-literal one, else the one with a call, else
  the left. A doctest runner's failure counter (`doctest.testmod(...).failed == 0`) is never
  evidence: such a test is passed over; a pytest doctest item's report gives the example's
  source line and its expected output instead;
- the title describes the symptom (an exception, a wrong value, a missing error), never the
  location; wording varies, seeded by the task id, among factual phrasings only. Printed
  values lose `test_x.<locals>.` qualifiers and memory addresses; an exception message that
  names the changed function or a test is cut to the exception's type.

Judgment call (issue 30, point 3): when the failing test calls the changed function directly
as public API, the snippet shows that call, the way a user's report would: a user knows which
public call misbehaves, and hiding it would leave single-module libraries (inflection, six)
without any reproduction. In the committed `repo` suite 85 of the 125 snippets call the changed
function (`calls_changed_function`). What is never allowed is blaming it: outside the fenced
snippet (title and prose) neither the changed function's name (`name(`, `` `name` ``,
`.name`, its qualified name, or the bare name when it is unmistakably an identifier: an
underscore, a capital inside, a digit, a dunder), nor the changed module's dotted path appears.
`statement_problems` enforces exactly this, and anywhere in the statement: no changed file path
or basename as a file name (`more.py`), no mutated line, no test id, test function or test
class name; and an observed part, an expected part and a snippet must be present.
"""

from __future__ import annotations

import ast
import builtins
import copy
import hashlib
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from opd_gym import pyast

OBSERVED_LABELS = ("What happens:", "Observed:", "Actual behaviour:")
EXPECTED_LABELS = ("What I expected:", "Expected:", "Expected behaviour:")
FENCE = "```"


# -- failure messages ----------------------------------------------------------------------
@dataclass(frozen=True)
class Failure:
    """One test's failure as the validation run recorded it."""

    crash: tuple[str, int] | None  # where the exception was raised (path, line)
    frames: tuple[tuple[str, int], ...]  # traceback frames inside the workspace, outermost first
    text: str  # pytest's message (the crash message, or a doctest report)


def _loc(text: str) -> tuple[str, int] | None:
    """`path:line` as (workspace-relative path, line); None when malformed."""
    path, _, line = text.rpartition(":")
    return (path.removeprefix("/workspace/"), int(line)) if line.isdigit() else None


def parse_failure(message: str) -> Failure:
    """A recorded message split into its crash location, its frames and its text."""
    if not message.startswith("@"):
        return Failure(None, (), message)
    head, _, text = message.partition("\n")
    parts = head[1:].split("|")
    frames = tuple(f for f in (_loc(p) for p in parts[1:]) if f is not None)
    return Failure(_loc(parts[0]), frames, text)


# -- finding the failing call in a test ----------------------------------------------------
@dataclass(frozen=True)
class Repro:
    """What a report says: the snippet, the observed and the expected behaviour."""

    snippet: str
    kind: str  # "value", "raises", "no_raise", "falsy", "doctest"
    observed: str
    expected: str
    call: str  # the snippet's last line (the call that misbehaves)


_UNITTEST_EQ = {"assertEqual", "assertEquals", "assertListEqual", "assertTupleEqual",
                "assertDictEqual", "assertSequenceEqual", "assertSetEqual", "assertCountEqual",
                "assertMultiLineEqual", "assertIs", "assertAlmostEqual"}
_UNITTEST_TRUE = {"assertTrue": True, "assert_": True, "assertFalse": False,
                  "assertIsNone": None, "assertIsNotNone": "not None"}
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Warning|Exit|Iteration|error))"
                        r"(?:: ?(.*))?$")


def _short(text: str, limit: int = 200) -> str:
    """One line of at most `limit` characters (a long value stays readable)."""
    text = re.sub(r"\s*\n\s*", " ", text).strip()  # one line; a value's own spaces stay
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _first_line(text: str) -> str:
    """The first non-blank line (pytest puts the summary there)."""
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()
    return ""


def _has_call(node: ast.AST) -> bool:
    """Whether an expression calls anything (a computed side, not a literal)."""
    return any(isinstance(n, ast.Call) for n in ast.walk(node))


def _stores_fail(stmt: ast.Assign | ast.AnnAssign) -> bool:
    """Whether an exception an assignment raised may come from its store, not its value: a
    target other than a plain name (`obj.attr = v` calls `__setattr__`, `d[k] = v`
    `__setitem__`, `a, b = v` unpacks), or a value that calls nothing. Then the snippet
    shows the whole assignment; a bare value would reproduce nothing."""
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    return stmt.value is None or not _has_call(stmt.value) \
        or not all(isinstance(t, ast.Name) for t in targets)


def _absolute_imports(module: ast.Module, path: str) -> None:
    """Make a test module's relative imports absolute, in place, from its path (`from
    .._connection import X` in h11/tests/ becomes `from h11._connection import X`): a
    snippet runs outside the package, as a user's script does."""
    package = PurePosixPath(path).parent.parts
    if package[:1] == ("src",):
        package = package[1:]
    for node in ast.walk(module):
        if isinstance(node, ast.ImportFrom) and node.level and node.level <= len(package):
            base = list(package[:len(package) - node.level + 1])
            node.module = ".".join(base + ([node.module] if node.module else []))
            node.level = 0


def _find_test(tree: ast.Module, parts: Sequence[str]) -> ast.FunctionDef | None:
    """The test function a node id names (`func` or `Class::method`)."""
    body: list[ast.stmt] = tree.body
    found: ast.AST | None = None
    for part in parts:
        found = next((n for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef
                                                    | ast.ClassDef) and n.name == part), None)
        if found is None:
            return None
        body = getattr(found, "body", [])
    return found if isinstance(found, ast.FunctionDef | ast.AsyncFunctionDef) else None


def _pytest_id(value: Any, name: str, index: int) -> str:
    """The id pytest gives one parametrize value."""
    if isinstance(value, str):
        return value.encode("unicode_escape").decode("ascii")
    if value is None or isinstance(value, bool | int | float | complex):
        return str(value)
    return f"{name}{index}"


def _params(fn: ast.FunctionDef, module: ast.Module, id_part: str) -> dict[str, ast.expr] | None:
    """{argument: value node} of the parametrize row the node id's `[...]` names; {} when the
    test is not parametrized, None when the row cannot be found."""
    decos = [d for d in fn.decorator_list if isinstance(d, ast.Call)
             and ast.unparse(d.func).endswith("parametrize") and len(d.args) >= 2]
    if not decos:
        return {} if not id_part else None
    if len(decos) > 1:
        return None
    names_node, rows_node = decos[0].args[:2]
    try:
        names = pyast.literal_eval(ast.unparse(names_node))
    except (ValueError, SyntaxError):
        return None
    names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
    if isinstance(rows_node, ast.Name):
        defs = [n.value for n in module.body if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == rows_node.id for t in n.targets)]
        if not defs:
            return None
        rows_node = defs[-1]
    if not isinstance(rows_node, ast.List | ast.Tuple):
        return None
    for index, row in enumerate(rows_node.elts):
        if isinstance(row, ast.Call) and ast.unparse(row.func).endswith("param"):
            row = ast.Tuple(elts=list(row.args)) if len(names) > 1 else row.args[0]
        elts = list(row.elts) if len(names) > 1 and isinstance(row, ast.Tuple | ast.List) \
            else [row]
        if len(elts) != len(names):
            continue
        ids = []
        for name, elt in zip(names, elts, strict=True):
            try:
                value = ast.literal_eval(elt)
            except (ValueError, SyntaxError, TypeError):
                value = object()
            ids.append(_pytest_id(value, name, index))
        if "-".join(ids) == id_part:
            return dict(zip(names, elts, strict=True))
    return None


class _Subst(ast.NodeTransformer):
    """Replaces parameter names by their row's value nodes."""

    def __init__(self, values: Mapping[str, ast.expr]) -> None:
        """Bind the parameter values to substitute."""
        self.values = values

    def visit_Name(self, node: ast.Name) -> ast.AST:
        """A parameter's value node in place of its name."""
        if isinstance(node.ctx, ast.Load) and node.id in self.values:
            return copy.deepcopy(self.values[node.id])
        return node


def _names(node: ast.AST) -> set[str]:
    """Names a node reads (excluding those it binds itself, roughly)."""
    loads = {n.id for n in ast.walk(node)
             if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    bound = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
             and isinstance(n.ctx, ast.Store)}
    bound |= {a.arg for n in ast.walk(node) if isinstance(n, ast.arguments)
              for a in n.args + n.kwonlyargs + n.posonlyargs
              + [x for x in (n.vararg, n.kwarg) if x is not None]}
    bound |= {n.name for n in ast.walk(node)
              if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    # `nonlocal n` in a local def reads the test's n (the snippet makes it `global n`)
    outer = {name for n in ast.walk(node) if isinstance(n, ast.Nonlocal) for name in n.names}
    return (loads - bound) | outer


def _reads(stmt: ast.AST) -> set[str]:
    """Names a statement reads before it binds any: an assignment's value may read the
    name it rebinds (`headers = f(headers)` needs the earlier `headers`)."""
    if isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        read = _names(stmt.value) if stmt.value is not None else set()
        read |= {n.id for t in targets for n in ast.walk(t)
                 if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            read.add(stmt.target.id)
        return read
    return _names(stmt)


class _Hoisted(ast.NodeTransformer):
    """A test's local def as a snippet's top-level one: its `nonlocal` names are the
    snippet's globals (a `nonlocal` at module level does not compile)."""

    def __init__(self) -> None:
        self.depth = 0

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        self.depth += 1
        try:
            return self.generic_visit(node)
        finally:
            self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Nonlocal(self, node: ast.Nonlocal) -> ast.AST:
        return ast.Global(names=node.names) if self.depth == 1 else node


def _binds(stmt: ast.stmt) -> set[str]:
    """Names a statement defines (what a snippet may need from it)."""
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {stmt.name}
    if isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    return set()


_BUILTINS = set(vars(builtins))


def _start(stmt: ast.stmt) -> int:
    """A statement's first line, its decorators included."""
    decorators = getattr(stmt, "decorator_list", None) or []
    return min([stmt.lineno, *(d.lineno for d in decorators)])


def _statement_at(fn: ast.FunctionDef, line: int) -> list[ast.stmt]:
    """The chain of statements of `fn` containing `line`, outermost first."""
    chain: list[ast.stmt] = []
    body: list[ast.stmt] = fn.body
    while True:
        hit = next((s for s in body if _start(s) <= line <= (s.end_lineno or s.lineno)), None)
        if hit is None:
            return chain
        chain.append(hit)
        inner: list[ast.stmt] = []
        for attr in ("body", "orelse", "finalbody", "handlers"):
            for child in getattr(hit, attr, []) or []:
                if isinstance(child, ast.ExceptHandler):
                    inner.extend(child.body)
                elif isinstance(child, ast.stmt):
                    inner.append(child)
        if isinstance(hit, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) or not inner:
            return chain
        body = inner


class _Resolver:
    """Collects the statements a snippet needs: local definitions before the failing line,
    module-level imports and small module-level definitions."""

    def __init__(self, module: ast.Module, fn: ast.FunctionDef, line: int,
                 params: Mapping[str, ast.expr], forbidden: set[str]) -> None:
        """Resolve names for a snippet of `fn` whose failing statement is at `line`."""
        self.module, self.fn, self.line, self.params = module, fn, line, params
        self.forbidden = forbidden
        self.local: list[ast.stmt] = []
        self.imports: list[str] = []
        self.unresolved: set[str] = set()
        self.seen: set[tuple[str, int]] = set()
        self.scope: list[ast.stmt] = list(fn.body)
        self.limit = 12  # lines of a module-level helper worth inlining

    def enter(self, chain: Sequence[ast.stmt]) -> None:
        """Also resolve names from the blocks (loop, with) around the failing statement: from
        the branch that holds it only (an `if`'s other branch never ran)."""
        for stmt, inner in zip(chain, chain[1:], strict=False):
            if isinstance(stmt, ast.With | ast.For | ast.If | ast.Try | ast.While):
                branches = [stmt.body, getattr(stmt, "orelse", []),
                            getattr(stmt, "finalbody", []),
                            *(h.body for h in getattr(stmt, "handlers", []))]
                branch = next((b for b in branches if inner in b), [])
                self.scope.extend(s for s in branch if s not in chain)
        self.scope.sort(key=lambda s: s.lineno)

    def need(self, node: ast.AST, line: int | None = None) -> None:
        """Resolve every name `node` reads, as bound before `line`."""
        for name in sorted(_reads(node)):
            self.resolve(name, self.line if line is None else line)

    def resolve(self, name: str, line: int) -> None:
        """Find what binds `name` before `line`: a local statement, an import, a helper."""
        if (name, line) in self.seen or name in self.params:
            return
        self.seen.add((name, line))
        before = [s for s in self.scope if (s.end_lineno or s.lineno) < line]
        for stmt in reversed(before):
            if name in _binds(stmt) and not isinstance(stmt, ast.AugAssign):
                if name in self.forbidden:
                    self.unresolved.add(name)
                    return
                self.take(stmt)
                # what the test did with the object since (`w.write(b"123")` before the
                # failing `w.write(b"45")`) is part of the reproduction: its state; so is
                # what it did with objects made from it (`r = Reporter(err)`, then `r.x()`)
                names, start = {name}, stmt.end_lineno or stmt.lineno
                for use in before:
                    if use.lineno > start and names & _reads(use) \
                            and not isinstance(use, ast.FunctionDef | ast.ClassDef):
                        self.take(use)
                        names |= _binds(use)
                return
        for stmt in self.module.body:
            if isinstance(stmt, ast.Import | ast.ImportFrom) and name in _binds(stmt):
                keep = [a for a in stmt.names if (a.asname or a.name).split(".")[0] == name]
                clone = copy.copy(stmt)
                clone.names = keep
                text = ast.unparse(clone)
                if text not in self.imports:
                    self.imports.append(text)
                return
        for stmt in self.module.body:
            if name in _binds(stmt) and not isinstance(stmt, ast.Import | ast.ImportFrom):
                text = ast.unparse(stmt)
                if name in self.forbidden or name.startswith("test") \
                        or text.count("\n") > self.limit or len(text) > 50 * self.limit:
                    self.unresolved.add(name)
                    return
                if stmt not in self.local:
                    self.local.insert(0, stmt)
                    self.need(stmt)
                return
        if name in _BUILTINS:
            return
        if name == "pytest":  # `pytest.raises` the snippet itself introduced
            if "import pytest" not in self.imports:
                self.imports.append("import pytest")
            return
        star = [ast.unparse(s) for s in self.module.body if isinstance(s, ast.ImportFrom)
                and any(a.name == "*" for a in s.names)]
        if len(star) == 1:  # `from lib import *`: the name comes from there
            if star[0] not in self.imports:
                self.imports.append(star[0])
            return
        self.unresolved.add(name)

    def take(self, stmt: ast.stmt) -> None:
        """Put a statement of the test in the snippet, and what it reads."""
        if stmt not in self.local:
            self.local.append(stmt)
            for name in sorted(_reads(_Subst(self.params).visit(copy.deepcopy(stmt)))):
                self.resolve(name, stmt.lineno)

    def snippet(self, tail: Sequence[str]) -> str:
        """Imports, the needed definitions in source order, then `tail`."""
        lines = list(self.imports)
        body = sorted(self.local, key=lambda s: s.lineno)
        if lines and body:
            lines.append("")
        for stmt in body:
            lines.append(ast.unparse(_Hoisted().visit(
                _Subst(self.params).visit(copy.deepcopy(stmt)))))
            if isinstance(stmt, ast.FunctionDef | ast.ClassDef):
                lines.append("")
        if lines:
            lines.append("")
        lines.extend(tail)
        return "\n".join(lines).strip("\n")


_CONSTRUCTORS = {"datetime", "date", "time", "timedelta", "timezone", "Decimal", "Fraction",
                 "set", "frozenset", "dict", "list", "tuple", "str", "int", "float", "bytes",
                 "complex", "range", "OrderedDict", "defaultdict", "deque", "Counter"}


def _literal_like(node: ast.AST) -> bool:
    """A literal, or a standard constructor applied to literals (`datetime(2011, 2, 1)`)."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return all(_literal_like(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _literal_like(k) for k in node.keys) \
            and all(_literal_like(v) for v in node.values)
    if isinstance(node, ast.UnaryOp):
        return _literal_like(node.operand)
    if isinstance(node, ast.Call):
        name = ast.unparse(node.func).rpartition(".")[2]
        return name in _CONSTRUCTORS and all(_literal_like(a) for a in node.args) \
            and all(_literal_like(k.value) for k in node.keywords)
    return False


def _call_side(pair: Sequence[ast.expr], hide: Iterable[str] = ()) -> int:
    """Which of two compared expressions computes the result (the other is the expectation):
    the side that touches the changed name, else the one that is not a literal, else the one
    with a call, else the left (pytest's `assert result == expected` convention)."""
    hidden = set(hide)
    touches = [bool(hidden & ({n.attr for n in ast.walk(x) if isinstance(n, ast.Attribute)}
                              | {n.id for n in ast.walk(x) if isinstance(n, ast.Name)}))
               for x in pair]
    if touches.count(True) == 1:
        return touches.index(True)
    literal = [_literal_like(n) for n in pair]
    if literal.count(True) == 1:
        return literal.index(False)
    calls = [_has_call(n) for n in pair]
    if calls.count(True) == 1:
        return calls.index(True)
    return 0


def _split_compare(line: str, op: str) -> tuple[str, str] | None:
    """`assert L op R` / `L op R` from pytest's or unittest's first message line."""
    line = re.sub(r"^(AssertionError: )?(assert )?", "", line)
    line = re.sub(r"^(Lists|Tuples|Sequences|Sets|Dicts|Items) differ: ", "", line)
    line = re.sub(r" : .*$", "", line)
    pieces = line.split(f" {op} ")
    if len(pieces) != 2:
        return None
    return pieces[0].strip(), pieces[1].strip()


def _exception(text: str) -> str | None:
    """`Type: message` of an exception message (its first line), or None."""
    match = _EXCEPTION.match(_first_line(text))
    if not match:
        return None
    name = match.group(1).rpartition(".")[2] if match.group(1).startswith("re.") is False \
        else match.group(1)
    return f"{name}: {_short(match.group(2), 160)}" if match.group(2) else name


def _doctest_repro(failure: Failure) -> Repro | None:
    """The failing example of a doctest report (pytest's doctest items), or None."""
    text = failure.text
    match = re.search(r"^\d*\s*>>> (.+)$", text, re.M)
    exp = re.search(r"^Expected:\n((?:    .*\n?)+)Got:\n((?:    .*\n?)*)", text, re.M)
    if not match or not exp:
        return None
    expected = "\n".join(s[4:] for s in exp.group(1).splitlines()).strip()
    got = "\n".join(s[4:] for s in exp.group(2).splitlines()).strip() or "nothing"
    call = match.group(1).strip()
    return Repro(f">>> {call}", "doctest", got, expected, call)


def _clean(text: str) -> str:
    """A printed value without test-local qualifiers (`test_x.<locals>.`, which would name
    the test) and memory addresses (which differ from run to run)."""
    text = re.sub(r"[\w.]*<locals>\.", "", text)
    text = re.sub(r"\.\.\.[0-9a-f]{6,}>", "...>", text)  # one pytest cut short: its tail
    return re.sub(r" at 0x[0-9a-f]+", "", text)


class _Asserts(ast.NodeTransformer):
    """unittest's `self.assertX(...)` calls as plain `assert` statements (for a snippet)."""

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        """`self.assertEqual(a, b)` and kin as `assert a == b` and kin."""
        call = node.value
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and isinstance(call.func.value, ast.Name) and call.func.value.id == "self"):
            return node
        attr, args = call.func.attr, call.args
        test: ast.expr | None = None
        if attr in _UNITTEST_EQ and len(args) >= 2:
            test = ast.Compare(left=args[0], ops=[ast.Eq()], comparators=[args[1]])
        elif attr in ("assertTrue", "assert_") and args:
            test = args[0]
        elif attr == "assertFalse" and args:
            test = ast.UnaryOp(op=ast.Not(), operand=args[0])
        elif attr in ("assertIn", "assertNotIn") and len(args) >= 2:
            op = ast.In() if attr == "assertIn" else ast.NotIn()
            test = ast.Compare(left=args[0], ops=[op], comparators=[args[1]])
        elif attr in ("assertIsNone", "assertIsNotNone") and args:
            op = ast.Is() if attr == "assertIsNone" else ast.IsNot()
            test = ast.Compare(left=args[0], ops=[op], comparators=[ast.Constant(None)])
        if test is None:
            return node
        return ast.copy_location(ast.Assert(test=test), node)

    def visit_With(self, node: ast.With) -> ast.AST:
        """`with self.assertRaises(E)` as `pytest.raises(E)`; `subTest` blocks unwrapped."""
        self.generic_visit(node)
        for item in node.items:
            ctx = item.context_expr
            if isinstance(ctx, ast.Call) and isinstance(ctx.func, ast.Attribute) \
                    and isinstance(ctx.func.value, ast.Name) and ctx.func.value.id == "self":
                if ctx.func.attr in ("assertRaises", "assertRaisesRegex") and ctx.args:
                    ctx.func = ast.Attribute(value=ast.Name("pytest", ast.Load()), attr="raises",
                                             ctx=ast.Load())
                    if len(ctx.args) > 1:
                        ctx.keywords = [ast.keyword("match", ctx.args[1])]
                        ctx.args = ctx.args[:1]
                elif ctx.func.attr == "subTest":
                    return node.body  # type: ignore[return-value]
        return node


def _literal_rows(loop: ast.For) -> list[dict[str, ast.expr]] | None:
    """Per iteration, {name: value node} of a `for` over a literal table; None otherwise."""
    if not isinstance(loop.iter, ast.List | ast.Tuple):
        return None
    names = [loop.target] if isinstance(loop.target, ast.Name) else (
        list(loop.target.elts) if isinstance(loop.target, ast.Tuple) else [])
    if not names or not all(isinstance(n, ast.Name) for n in names):
        return None
    rows = []
    for row in loop.iter.elts:
        elts = [row] if len(names) == 1 else list(getattr(row, "elts", []))
        if len(elts) != len(names):
            return None
        rows.append({n.id: e for n, e in zip(names, elts, strict=True)})  # type: ignore[attr-defined]
    return rows


def _same_value(node: ast.expr, printed: str) -> bool:
    """Whether a literal expression prints as `printed` (pytest/unittest show repr())."""
    try:
        return repr(ast.literal_eval(node)) == printed
    except (ValueError, SyntaxError, TypeError):
        return False


def find_repro(tests: Mapping[str, str], node_id: str, message: str,
               forbidden: Iterable[str] = (), hide: Iterable[str] = ()) -> Repro | None:
    """The report of one failing test, or None when its source gives no usable snippet.
    `forbidden`: names the snippet may not define or use (test names); `hide`: names that
    must not appear in the observed / expected prose (the changed function's)."""
    failure = parse_failure(message)
    path, _, rest = node_id.partition("::")
    if not rest:
        return None
    source = tests.get(path)
    if source is None:
        return _doctest_repro(failure)
    name_part, _, id_part = rest.partition("[")
    id_part = id_part[:-1] if id_part.endswith("]") else id_part
    try:
        module = pyast.parse(source)
    except SyntaxError:
        return None
    _absolute_imports(module, path)
    fn = _find_test(module, name_part.split("::"))
    if fn is None or re.search(r"\bdoctest\.(testmod|testfile|DocTestSuite|run_docstring)",
                               ast.get_source_segment(source, fn) or ""):
        return None  # a doctest runner: its failure counter says nothing about the bug
    params = _params(fn, module, id_part)
    if params is None:
        return None
    span = (fn.lineno, fn.end_lineno or fn.lineno)
    here = [line for p, line in (*failure.frames, *([failure.crash] if failure.crash else []))
            if p == path and span[0] <= line <= span[1]]
    if not here:
        return None
    line = here[-1] if failure.crash and failure.crash[0] == path else here[0]
    chain = _statement_at(fn, line)
    if len(set(here)) > 1 and chain and any(isinstance(n, ast.Lambda)
                                             for n in ast.walk(chain[-1])):
        line = here[0]  # the crash is in a lambda the test defined: its call is the failure
        chain = _statement_at(fn, line)
    if not chain:
        return None
    inner_def = next((s for s in chain if isinstance(s, ast.ClassDef | ast.FunctionDef)
                      and line >= s.body[0].lineno), None)  # not in a def's header
    first = _first_line(failure.text)
    hidden = [h for h in hide if h] + [n for n in forbidden if len(n) > 3]

    def show(text: str) -> str | None:
        """A printed value fit for prose; None when it names what must stay hidden."""
        text = _clean(text)
        return None if any(re.search(rf"(?<!\w){re.escape(h)}(?!\w)", text) for h in hidden) \
            else text

    loops = [s for s in chain if isinstance(s, ast.For)]
    rows: list[dict[str, ast.expr]] = [{}]
    if loops and inner_def is None:
        found = _literal_rows(loops[-1]) if len(loops) == 1 else None
        if found:
            rows = found
    for row in rows:
        repro = _one(module, fn, chain, {**params, **row}, failure, first, forbidden, show,
                     inner_def, pick_row=len(rows) > 1, hide=hidden, upto=max(here))
        if repro is not None:
            return repro
    return _fallback(module, fn, chain, params, failure, first,
                     {n for n in forbidden if n.isidentifier()}, show, max(here))


def _fallback(module: ast.Module, fn: ast.FunctionDef, chain: Sequence[ast.stmt],
              params: Mapping[str, ast.expr], failure: Failure, first: str,
              forbidden_names: set[str], show: Any, upto: int = 0) -> Repro | None:
    """The test's body as the snippet, and what the message says, when no single call can
    be singled out (a failure inside a local class, a loop whose failing row is unknown)."""
    snippet = _whole_body(module, fn, chain, params, forbidden_names, upto)
    if snippet is None:
        return None
    missing = re.search(r"(\w+) not raised$", first) \
        or re.search(r"DID NOT RAISE <class '(?:[\w.]+\.)?(\w+)'>", first)
    if missing:
        return Repro(snippet, "no_raise", "no exception is raised",
                     f"`{missing.group(1)}` is raised", snippet.splitlines()[-1])
    error = _exception(first) if not first.startswith("AssertionError") else None
    if error is not None:
        shown = show(error) or error.partition(":")[0]
        return Repro(snippet, "raises", f"`{shown}` is raised", "it runs without an error",
                     snippet.splitlines()[-1])
    shown = show(_short(first, 200))
    if not first or shown is None:
        return None
    return Repro(snippet, "assert", f"the check on the last line fails (`{shown}`)",
                 "the check holds", snippet.splitlines()[-1])


def _whole_body(module: ast.Module, fn: ast.FunctionDef, chain: Sequence[ast.stmt],
                params: Mapping[str, ast.expr], forbidden_names: set[str], upto: int = 0
                ) -> str | None:
    """The test's body up to the failing statement, asserts made plain (fallback)."""
    body = [s for s in fn.body if _start(s) <= max(chain[0].lineno, upto)]
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    subst = _Subst(params)
    helpers = _self_helpers(module, fn)
    body = [_Hoisted().visit(_SelfHelpers(helpers).visit(_Asserts().visit(
        subst.visit(copy.deepcopy(s))))) for s in body]
    used = {n for s in body for n in _names(s)}
    body = [h for name, h in sorted(helpers.items()) if name in used] + body
    tree = ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))
    text = ast.unparse(tree)
    local = _Resolver(module, fn, fn.lineno, params, forbidden_names)
    local.limit = 60
    bound = {n for s in body for n in _binds(s)}
    bound |= {n.id for s in body for n in ast.walk(s) if isinstance(n, ast.Name)
              and isinstance(n.ctx, ast.Store)}
    for name in sorted(_names(tree) - bound):
        local.resolve(name, fn.lineno)
    if "pytest.raises" in text and "import pytest" not in local.imports:
        local.imports.append("import pytest")
    defs = [ast.unparse(s) + "\n" for s in sorted(local.local, key=lambda s: s.lineno)]
    text = "\n".join([*defs, text])
    if local.unresolved or "self" in _names(tree) or text.count("\n") > 80:
        return None
    if any(re.search(rf"(?<!\w){re.escape(n)}(?!\w)", text) for n in forbidden_names
           if len(n) > 3):
        return None
    return "\n".join([*local.imports, "", text]).strip()


def _self_helpers(module: ast.Module, fn: ast.FunctionDef) -> dict[str, ast.FunctionDef]:
    """The helper methods of a test's class that do not use `self`, as plain functions."""
    cls = next((c for c in module.body if isinstance(c, ast.ClassDef) and fn in c.body), None)
    out: dict[str, ast.FunctionDef] = {}
    for method in getattr(cls, "body", []):
        if not isinstance(method, ast.FunctionDef) or method.name.startswith("test") \
                or method.name.startswith("__") or not method.args.args:
            continue
        clone = copy.deepcopy(method)
        clone.args.args = clone.args.args[1:]
        clone.decorator_list = []
        if "self" not in _names(clone):
            out[method.name] = clone
    return out


class _SelfHelpers(ast.NodeTransformer):
    """`self.helper` as `helper` (for helpers `_self_helpers` turned into functions)."""

    def __init__(self, helpers: Mapping[str, ast.FunctionDef]) -> None:
        """Bind the helpers to inline."""
        self.helpers = helpers

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        """`self.helper` as `helper`."""
        if isinstance(node.value, ast.Name) and node.value.id == "self" \
                and node.attr in self.helpers:
            return ast.copy_location(ast.Name(node.attr, ast.Load()), node)
        return self.generic_visit(node)



def _one(module: ast.Module, fn: ast.FunctionDef, chain: list[ast.stmt],
         params: Mapping[str, ast.expr], failure: Failure, first: str,
         forbidden: Iterable[str], show: Any, inner_def: ast.stmt | None,
         pick_row: bool, hide: Iterable[str] = (), upto: int = 0) -> Repro | None:
    """The report for one binding of the test's names (a parametrize row, a loop row)."""
    stmt = chain[-1]
    raises = next((s for s in chain if isinstance(s, ast.With) and any(
        isinstance(i.context_expr, ast.Call)
        and ast.unparse(i.context_expr.func).rpartition(".")[2] in {"raises", "assertRaises",
                                                                    "assertRaisesRegex"}
        for i in s.items)), None)
    forbidden_names = {n for n in forbidden if n.isidentifier()}
    subst = _Subst(params)
    resolver = _Resolver(module, fn, chain[-1].lineno, params, forbidden_names)
    resolver.enter(chain)
    error = _exception(first) if not first.startswith("AssertionError") else None

    def finish(kind: str, target: ast.AST | None, observed: str | None, expected: str | None
               ) -> Repro | None:
        """The repro with `target` as the snippet's call (or the test's body as fallback)."""
        if observed is None or expected is None:
            return None
        snippet = call = None
        if isinstance(target, ast.Name) and kind == "value":
            target = None  # a variable's value: the statements before made it (the body)
        if target is not None and inner_def is None:
            node = subst.visit(copy.deepcopy(target))
            resolver.need(node)
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                resolver.resolve(node.target.id, resolver.line)  # `x += v` reads x first
            call = ast.unparse(node)
            if not resolver.unresolved and len(call) <= 400 and "self" not in _names(node):
                snippet = resolver.snippet([call])
        if snippet is None:
            if pick_row:
                return None  # a loop row is only shown through its own call
            snippet = _whole_body(module, fn, chain, params, forbidden_names, upto)
            call = snippet.splitlines()[-1] if snippet else None
        if snippet is None or call is None:
            return None
        return Repro(snippet, kind, observed, expected, call)

    def raised(text: str) -> str | None:
        """The observed part for an exception (its detail dropped if it blames)."""
        shown = show(text)
        if shown is None:  # the message names the changed function: keep only the type
            shown = text.partition(":")[0]
        return f"`{shown}` is raised"

    if raises is not None and (first.startswith("Failed: DID NOT RAISE")
                               or re.search(r"not raised$", first)):
        ctx = next(i.context_expr for i in raises.items if isinstance(i.context_expr, ast.Call))
        wanted = ast.unparse(ctx.args[0]).rpartition(".")[2] if ctx.args else "an exception"
        body = [s for s in raises.body if not isinstance(s, ast.Pass)]
        target = None
        if len(body) == 1 and raises is chain[-1] or len(body) == 1 and body[0] in chain:
            target = body[0].value if isinstance(body[0], ast.Expr) else body[0]
        return finish("no_raise", target, "no exception is raised", f"`{wanted}` is raised")
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
            and isinstance(stmt.value.func, ast.Attribute) \
            and stmt.value.func.attr == "assertRaises" and len(stmt.value.args) >= 2 \
            and re.search(r"not raised", first):
        args = stmt.value.args
        call = ast.Call(func=args[1], args=list(args[2:]), keywords=list(stmt.value.keywords))
        return finish("no_raise", call, "no exception is raised",
                      f"`{ast.unparse(args[0]).rpartition('.')[2]}` is raised")
    if isinstance(stmt, ast.ClassDef | ast.FunctionDef) and inner_def is None \
            and error is not None:  # the failure is in a local def's header (bases, decorator)
        what = "class" if isinstance(stmt, ast.ClassDef) else "function"
        return finish("raises", stmt, raised(error), f"the {what} is defined without an error")
    if inner_def is not None and not isinstance(inner_def, ast.ClassDef | ast.FunctionDef):
        return None
    pair: list[ast.expr] | None = None
    op = "=="
    if isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Compare) \
            and len(stmt.test.ops) == 1:
        pair = [stmt.test.left, stmt.test.comparators[0]]
        op = {ast.Eq: "==", ast.NotEq: "!=", ast.Is: "is", ast.IsNot: "is not", ast.In: "in",
              ast.NotIn: "not in", ast.Lt: "<", ast.Gt: ">", ast.LtE: "<=",
              ast.GtE: ">="}.get(type(stmt.test.ops[0]), "==")
    elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
            and isinstance(stmt.value.func, ast.Attribute):
        attr = stmt.value.func.attr
        if attr in _UNITTEST_EQ and len(stmt.value.args) >= 2:
            pair = list(stmt.value.args[:2])
        elif attr in ("assertTrue", "assert_", "assertFalse") and stmt.value.args:
            arg = stmt.value.args[0]
            test = arg if attr != "assertFalse" else ast.UnaryOp(op=ast.Not(), operand=arg)
            stmt = ast.copy_location(ast.Assert(test=test), stmt)
    if error is not None:  # an exception escaped the failing statement
        target: ast.AST | None = stmt
        expected: str | None = "it runs without an error"
        if pair is not None:
            side = _call_side([subst.visit(copy.deepcopy(x)) for x in pair], hide)
            target = pair[side]
            other = pair[1 - side]
            if not any(isinstance(n, ast.Call | ast.Attribute | ast.Subscript)
                       for n in ast.walk(target)):
                # a name or a literal cannot raise: the comparison did (`omd == {...}`
                # calling a broken `__eq__`), so the snippet shows the comparison
                target = stmt.test if isinstance(stmt, ast.Assert) else ast.Compare(
                    left=pair[0], ops=[ast.Eq()], comparators=[pair[1]])  # unittest's
                expected = "it runs without an error"
            elif op == "==" and not _has_call(other) and not _names(other):
                value = show(ast.unparse(subst.visit(copy.deepcopy(other))))
                if value is not None and len(value) <= 160:
                    expected = f"it returns `{value}`"
        elif isinstance(stmt, ast.Expr):
            target = stmt.value
        elif isinstance(stmt, ast.Assign | ast.AnnAssign) and not _stores_fail(stmt):
            target = stmt.value
        elif isinstance(stmt, ast.Assert):
            target = stmt.test
        elif isinstance(stmt, ast.With | ast.For | ast.If | ast.While | ast.ClassDef
                        | ast.FunctionDef):
            target = None
        if pick_row:
            return None  # which row raised is unknown
        return finish("raises", target, raised(error), expected)
    if pair is not None:
        side = _call_side([subst.visit(copy.deepcopy(x)) for x in pair], hide)
        if op in ("==", "is"):
            unittest = not first.startswith(("assert", "AssertionError: assert"))
            values = _split_compare(first, "!=" if unittest else op)
            if values is None or "Element counts" in first:
                return None
            observed, expected = values[side], values[1 - side]
            if pick_row and not _same_value(subst.visit(copy.deepcopy(pair[1 - side])),
                                            expected):
                return None
            observed, expected = show(observed), show(expected)
            if observed is None or expected is None:
                return None
            if observed == expected and op == "==":
                return finish("value", pair[side], f"it returns an object that prints as "
                              f"`{_short(observed, 200)}` but does not compare equal to the "
                              "expected one, which prints the same", "the two compare equal")
            return finish("value", pair[side], f"it returns `{_short(observed, 240)}`",
                          f"it returns `{_short(expected, 240)}`")
        if pick_row:
            return None
        if op in ("!=", "is not"):
            values = _split_compare(first, op)
            if values is None or show(values[side]) is None:
                return None
            return finish("value", pair[side], f"it returns `{_short(show(values[side]), 240)}`",
                          "a different value")
        if op in ("in", "not in") and side == 1:
            thing = show(_short(ast.unparse(subst.visit(copy.deepcopy(pair[0]))), 120))
            if thing is None:
                return None
            return finish("value", pair[1], f"the result {'lacks' if op == 'in' else 'contains'}"
                          f" `{thing}`", f"it {'contains' if op == 'in' else 'lacks'} `{thing}`")
        return None
    if isinstance(stmt, ast.Assert) and not pick_row:
        test = stmt.test
        negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        core = test.operand if negated else test
        if not _has_call(core):
            core = ast.Call(func=ast.Name("bool", ast.Load()), args=[core], keywords=[])
        return finish("falsy", core, f"it is {'truthy' if negated else 'falsy'}",
                      f"it is {'falsy' if negated else 'truthy'}")
    return None


# -- writing ---------------------------------------------------------------------------------
_INTROS = (
    "After upgrading to {lib} {version}, this snippet misbehaves:",
    "With {lib} {version} the following code no longer works as it should:",
    "I hit this with {lib} {version}. A minimal reproduction:",
    "Running the code below against {lib} {version}:",
)
_TITLES = {
    "raises": ("Unexpected {exc} on valid input", "{exc} raised for a call that used to work",
               "Crash with {exc}"),
    "value": ("Wrong result: {observed} instead of {expected}",
              "Call returns {observed}, expected {expected}",
              "Incorrect return value ({observed} where {expected} is expected)"),
    "no_raise": ("Invalid input is accepted silently (no {expected} raised)",
                 "Expected {expected} is not raised"),
    "falsy": ("Check that should hold comes out {observed}",
              "Condition evaluates {observed} where it should be {expected}"),
    "assert": ("Result does not match what the documentation promises",
               "Documented behaviour no longer holds for this input"),
    "doctest": ("Documented example gives {observed} instead of {expected}",
                "Docstring example no longer holds"),
}
_OUTROS = ("", "", "This worked before; nothing else in my code changed.",
           "Other calls seem fine; it is this input that goes wrong.")


def _rng(seed_text: str) -> random.Random:
    """A generator seeded by text (stable across processes, unlike hash())."""
    return random.Random(int(hashlib.sha256(seed_text.encode()).hexdigest()[:16], 16))


def _title_value(text: str) -> str:
    """A short value for a title."""
    text = text.removeprefix("it returns ").removeprefix("it is ").strip("`")
    return _short(text, 40)


def render(repro: Repro, lib: str, version: str, seed_text: str) -> str:
    """The report's text for one reproduction (wording seeded by `seed_text`)."""
    rng = _rng(seed_text)
    exc = repro.observed.removesuffix(" is raised").strip("`").split(":")[0]
    fields = {"exc": exc, "observed": _title_value(repro.observed),
              "expected": _title_value(repro.expected).removesuffix(" is raised").strip("`")}
    title = rng.choice(_TITLES[repro.kind]).format(**fields)
    which = rng.randrange(len(OBSERVED_LABELS))
    lang = "pycon" if repro.kind == "doctest" else "python"
    lines = [title, "", rng.choice(_INTROS).format(lib=lib, version=version), "",
             f"{FENCE}{lang}", repro.snippet, FENCE, "",
             f"{OBSERVED_LABELS[which]} {_sentence(repro.observed)}",
             f"{EXPECTED_LABELS[which]} {_sentence(repro.expected)}"]
    outro = rng.choice(_OUTROS)
    if outro:
        lines += ["", outro]
    return "\n".join(lines)


def _sentence(text: str) -> str:
    """Capitalized, with a full stop unless it ends in code."""
    text = text.strip()
    return (text[0].upper() + text[1:] + ("" if text.endswith((".", "`")) else ".")) \
        if text else text


def write_report(tests: Mapping[str, str], lib: str, version: str, messages: Sequence[str],
                 fail_to_pass: Sequence[str], forbidden_names: Iterable[str],
                 seed_text: str, hide: Iterable[str] = ()) -> str | None:
    """The statement of a bug from its failing tests (None when no test gives a snippet).
    `messages[i]` is the validation run's message of `fail_to_pass[i]`; doctest runners and
    tests whose source yields no snippet are passed over for the next failing test."""
    names = set(forbidden_names)
    ranked: list[tuple[int, int, Repro]] = []
    for index, (node_id, message) in enumerate(zip(fail_to_pass, messages, strict=False)):
        if not message:
            continue
        try:
            repro = find_repro(tests, node_id, message, names, hide)
        except (ValueError, TypeError, AttributeError, RecursionError):
            repro = None
        if repro is None:
            continue
        rank = {"value": 0, "raises": 1, "no_raise": 1, "doctest": 2, "falsy": 3,
                "assert": 4}[repro.kind]
        if "chars]" in repro.observed:  # unittest elided the values
            rank = 3
        ranked.append((rank, index, repro))
        if rank == 0:
            break
    if not ranked:
        return None
    return render(min(ranked, key=lambda r: r[:2])[2], lib, version, seed_text)


# -- the checker -----------------------------------------------------------------------------
def _prose(statement: str) -> str:
    """The statement without its fenced code blocks."""
    return re.sub(r"```.*?```", "", statement, flags=re.S)


def _snippets(statement: str) -> list[str]:
    """The fenced code blocks of a statement."""
    return re.findall(r"```[a-z]*\n(.*?)```", statement, flags=re.S)


def _inert(stmt: ast.stmt) -> bool:
    """A statement that reads no name and calls nothing (`'uh oh'`, `x = {'a': 1}`): it
    cannot reach the library, so a snippet ending there shows no failure."""
    if not isinstance(stmt, ast.Expr | ast.Assign | ast.AnnAssign):
        return False
    return not any(isinstance(n, ast.Call) or isinstance(n, ast.Name)
                   and isinstance(n.ctx, ast.Load) for n in ast.walk(stmt))


def _identifier_like(name: str) -> bool:
    """Whether a bare word is unmistakably the identifier (not an English word)."""
    return "_" in name or any(c.isupper() for c in name[1:]) or any(c.isdigit() for c in name)


def statement_problems(statement: str, *, path: str, function: str,
                       mutated_lines: Iterable[str], test_ids: Iterable[str]) -> list[str]:
    """What is wrong with a statement (empty: it passes); see the module docstring's rules."""
    problems: list[str] = []
    prose = _prose(statement)
    pure = PurePosixPath(path)
    module = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    for prefix in ("src.", "lib."):
        module = module.removeprefix(prefix)
    if re.search(rf"(?<![\w./]){re.escape(path)}(?![\w])", statement):
        problems.append(f"names the changed file {path!r}")
    if pure.name != "__init__.py" and re.search(rf"(?<![\w.]){re.escape(pure.name)}\b",
                                                statement):
        problems.append(f"names the changed file's basename {pure.name!r}")
    if "." in module and re.search(rf"\b{re.escape(module)}\b", prose):
        problems.append(f"names the changed module {module!r} in prose")
    short = function.rpartition(".")[2]
    forms = [f"{short}(", f"`{short}`", f".{short}"] + ([function] if "." in function else [])
    for form in forms:
        if form in prose:
            problems.append(f"blames the changed function ({form!r}) in prose")
            break
    else:
        if (_identifier_like(short) or short.startswith("__")) \
                and re.search(rf"(?<![\w]){re.escape(short)}(?![\w])", prose):
            problems.append(f"names the changed function {short!r} in prose")
    for line in mutated_lines:
        for piece in line.splitlines():
            piece = piece.strip()
            if len(piece) >= 6 and piece in statement:
                problems.append(f"quotes the mutated line {piece!r}")
    for node_id in test_ids:
        if node_id in statement:
            problems.append(f"names the test id {node_id!r}")
        for part in node_id.split("[", 1)[0].split("::")[1:]:
            if len(part) > 3 and re.search(rf"(?<!\w){re.escape(part)}(?!\w)", statement):
                problems.append(f"names the test {part!r}")
    if not any(label in prose for label in OBSERVED_LABELS):
        problems.append("no observed behaviour")
    if not any(label in prose for label in EXPECTED_LABELS):
        problems.append("no expected behaviour")
    if not any(s.strip() for s in _snippets(statement)):
        problems.append("no reproduction snippet")
    address = re.search(r"\b0x[0-9a-f]{6,}|\.\.\.[0-9a-f]{6,}>", prose)
    if address:
        problems.append(f"shows a memory address ({address.group(0)!r}), which differs from "
                        "run to run")
    for snippet in re.findall(r"```python\n(.*?)```", statement, flags=re.S):
        try:
            body = pyast.parse(snippet).body
            compile(snippet, "snippet", "exec")  # what parsing accepts and running does not
        except (SyntaxError, ValueError) as exc:
            problems.append(f"the snippet is not valid Python ({getattr(exc, 'msg', exc)})")
            continue
        relative = next((n for n in ast.walk(ast.Module(body=body, type_ignores=[]))
                         if isinstance(n, ast.ImportFrom) and n.level), None)
        if relative is not None:
            problems.append(f"the snippet imports relatively ({ast.unparse(relative)!r}): "
                            "it runs only inside the package")
        if body and _inert(body[-1]):
            problems.append(f"the snippet's last line reaches no code "
                            f"({_short(ast.unparse(body[-1]), 60)!r}): it reproduces nothing")
    return sorted(set(problems), key=problems.index)


def calls_changed_function(statement: str, function: str) -> bool:
    """Whether the statement's snippet calls the changed function itself (the public-call
    case the module docstring allows)."""
    short = function.rpartition(".")[2]
    return any(re.search(rf"(?<![\w]){re.escape(short)}\s*\(", s) for s in _snippets(statement))
