"""Computed expectations held on the host: `assert f(n) == oracle(n)`.

A test that compares the solution's output with a value it computes at run time (an oracle
helper it defines, a library call such as `calendar.isleap(year)`, a local bound to one) leaves
the answer in the sandbox: a solution reading its caller's frame, hooking the return, or
swapping the oracle passes it without computing anything. Such a site is held like a literal
one (held.py), its value recorded instead of read from the text: calibration runs the reference
with the expected side emitted too (`opd_grading.hold(EXPECTED - i, <expected>)`), and the
starter (or the null submission) with the expected side evaluated first, so a value is held
only where two processes running different solutions computed the same thing (no time, path,
randomness or solution reached in it). In grades the expected side is gone from the text in
both runs: the site emits the solution's value, the local bound to the expectation becomes
`None`, and the module's helpers that only held expectations read are taken out, so neither a
frame reader nor a caller of the oracle finds the answer.

What may be held (static, `pending`): `==`/`!=` (and unittest's equalities) with the
solution's value on one side and, on the other, an expression that is no literal (a call, an
operator: `[values]`, `['neg'] * 5`, or a local bound once to one) and reaches no solution
name, reads the test's locals only where the solution side reads them too (its inputs: never a
projection such as `case["want"]` or `case.want`, which would hand the answer in, and never
the local the solution side reads as it is, a round trip such as `f(data) == data`), and
otherwise only builtins, imported modules that are no test or solution module, and functions
of the test module that read nothing else (taken out of the text in grades). Its value is
plain builtin data; a site in a `for` loop is held per iteration (the reference's count).
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from opd_gym import pyast
from opd_gym.grading.canary import _BUILTINS, _NO, _literal

EXPECTED = -1000  # the emission index of site i's expected side: EXPECTED - i
_NOT_IN_VALUE = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
                 ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom, ast.Starred)
_NOT_IN_SOLUTION_SIDE = (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)
# names through which a module may reach its functions or locals by another route
_READERS = frozenset({"locals", "vars", "eval", "exec", "globals", "__dict__", "_getframe",
                      "currentframe", "f_globals", "f_locals", "f_back", "getattr", "setattr",
                      "delattr", "stack", "settrace", "setprofile", "getfixturevalue",
                      "__code__", "__globals__", "inspect", "getsource"})


def expected_index(index: int) -> int:
    """The emission index of the expected side of held site `index` (calibration only)."""
    return EXPECTED - index


@dataclass(frozen=True)
class Pending:
    """A site whose expectation the test computes: `value` is the expression whose value the
    host would hold (the right side, or the value bound to the local compared there),
    `binding` that local's assignment (its value becomes None in grades), `helpers` the test
    module's functions the value reads (taken out of grades' text), `loop` whether the site
    runs once per iteration of a `for` loop of the test."""

    value: ast.expr = field(compare=False)
    site: ast.expr = field(compare=False)  # the expected side as the assertion reads it
    binding: ast.Assign | None = field(compare=False)
    helpers: frozenset[str]
    loop: bool
    text: str  # ast.unparse(value): what calibration recorded the value of
    reads: int = 1  # how often the test reads the bound local (each read must be held)


@dataclass(frozen=True)
class Recorded:
    """A computed site calibration vouched for: the expected side's text, the helper
    functions taken out of the module (name -> their source text, each run's must match),
    and the reference's value(s) per node id (one per run of the site)."""

    text: str
    helpers: Mapping[str, str]
    loop: bool
    values: Mapping[str, tuple[object, ...]]


Computed = Mapping[str, Mapping[int, Recorded]]  # test base id -> {site index: Recorded}


class ModuleFacts:
    """What deciding a computed site needs of one test module: its imports, its top-level
    functions that could be taken out, and whether it reaches names by another route."""

    def __init__(self, tree: ast.Module, solution: Collection[str], hidden: Collection[str],
                 judge_for) -> None:
        self.tree = tree
        self.judge_for = judge_for  # function node -> a canary._Judge of that test
        self.imports: set[str] = set()
        bound: dict[str, int] = {}
        for node in tree.body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
                for alias in node.names:
                    source = module if isinstance(node, ast.ImportFrom) else alias.name
                    top = source.partition(".")[0]
                    name = alias.asname or alias.name.partition(".")[0]
                    bound[name] = bound.get(name, 0) + 1
                    if alias.name != "*" and not getattr(node, "level", 0) \
                            and top not in solution and top not in hidden:
                        self.imports.add(name)
        self.functions: dict[str, ast.FunctionDef] = {}
        for node in pyast.walk(tree):
            for name in _bound_names(node):
                bound[name] = bound.get(name, 0) + 1
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and not node.decorator_list \
                    and not node.name.startswith("test") and bound.get(node.name) == 1:
                self.functions[node.name] = node
        self.imports = {n for n in self.imports if bound.get(n) == 1}
        self.module_bound = set(bound)
        self.readers = _reads_around(tree)  # the module reaches names by another route
        self._pure: dict[str, frozenset[str] | None] = {}

    def helpers(self, name: str) -> frozenset[str] | None:
        """The test functions `name` reads (itself included) when none of them reads anything
        but its own locals, builtins, non-test imports and other such functions; else None."""
        if name in self._pure:
            return self._pure[name]
        self._pure[name] = frozenset({name})  # a cycle: as far as seen
        node = self.functions.get(name)
        if node is None:
            self._pure[name] = None
            return None
        local = _locals(node)
        found = {name}
        for n in pyast.walk(node):
            if isinstance(n, ast.Global | ast.Nonlocal | ast.Yield | ast.YieldFrom | ast.Await):
                self._pure[name] = None
                return None
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in local:
                if n.id in self.imports or n.id in _BUILTINS and n.id not in self.module_bound:
                    continue
                inner = self.helpers(n.id) if n.id in self.functions else None
                if inner is None:
                    self._pure[name] = None
                    return None
                found |= inner
        self._pure[name] = frozenset(found)
        return self._pure[name]


def _reads_around(node: ast.AST) -> bool:
    """Whether code under `node` may reach locals or module names by another route than
    their names (`locals()`, `globals()`, frames, `getattr`...)."""
    return any(isinstance(n, ast.Name) and n.id in _READERS or isinstance(
        n, ast.Attribute) and n.attr in _READERS for n in pyast.walk(node))


def _bound_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
        return [node.id]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Global | ast.Nonlocal):
        return list(node.names)
    return []


def _locals(function: ast.AST) -> set[str]:
    """Names a function binds itself (its parameters, assignments, loop targets...)."""
    names = {n.id for n in pyast.walk(function) if isinstance(n, ast.Name)
             and not isinstance(n.ctx, ast.Load)}
    for n in pyast.walk(function):
        if isinstance(n, ast.arguments):
            names.update(a.arg for a in [*n.posonlyargs, *n.args, *n.kwonlyargs,
                                         *filter(None, (n.vararg, n.kwarg))])
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) \
                and n is not function:
            names.add(n.name)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names.add(n.name)
        elif isinstance(n, ast.alias):
            names.add(n.asname or n.name.partition(".")[0])
    return names


def _binding(name: str, function: ast.AST, statement: ast.stmt, body: list[ast.stmt]
             ) -> tuple[ast.Assign, int] | None:
    """`name = <value>`, the only binding of `name` in the test, a statement of `body` (the
    one holding the site) before it; and how often the test reads `name` (calibration holds
    the site only where every read is a held site)."""
    loads = stores = 0
    for node in pyast.walk(function):
        if isinstance(node, ast.Name) and node.id == name:
            if isinstance(node.ctx, ast.Load):
                loads += 1
            else:
                stores += 1
        elif name in _bound_names(node) or isinstance(node, ast.arg) and node.arg == name \
                or isinstance(node, ast.alias) and name in (node.asname, node.name) \
                or isinstance(node, ast.ExceptHandler) and node.name == name:
            return None
    if not loads or stores != 1:
        return None
    at = next((i for i, s in enumerate(body) if s is statement), None)
    for earlier in body[:at] if at is not None else ():
        if isinstance(earlier, ast.Assign) and len(earlier.targets) == 1 and isinstance(
                earlier.targets[0], ast.Name) and earlier.targets[0].id == name:
            return earlier, loads
    return None


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node


def pending(split: tuple[ast.expr, str, ast.expr], statement: ast.stmt, function: ast.AST,
            body: list[ast.stmt], loop: bool, facts: ModuleFacts, sol: str) -> Pending | None:
    """The computed expectation of a site (`split`: solution side, operator, expected side;
    `body` the statements holding it), or None where it could not be held safely."""
    solution_side, op, expected = split
    if op not in ("==", "!=") or _reads_around(function):
        return None
    binding = None
    value = expected
    reads = 1
    if isinstance(expected, ast.Name):
        if any(isinstance(n, ast.Name) and n.id == expected.id
               for n in pyast.walk(solution_side)):
            return None  # a round trip (`f(data) == data`): the input is the expectation
        bound = _binding(expected.id, function, statement, body)
        if bound is None:
            return None
        binding, reads = bound
        value = binding.value
    if any(isinstance(n, _NOT_IN_VALUE) for n in pyast.walk(value)) or any(
            isinstance(n, _NOT_IN_SOLUTION_SIDE) for n in pyast.walk(solution_side)):
        return None
    if binding is None and _literal(value, fold=False) is not _NO:
        return None  # a literal site (held.parts), never a computed one
    judge = facts.judge_for(function)
    if judge.value(solution_side) != sol or judge.value(value) == sol:
        return None
    local = _locals(function)
    inputs = {n.id for n in pyast.walk(solution_side) if isinstance(n, ast.Name)
              and n.id in local} - {"self", "cls"}
    called = {id(n.func) for n in pyast.walk(value) if isinstance(n, ast.Call)}
    helpers: set[str] = set()
    for node in pyast.walk(value):
        if isinstance(node, ast.Attribute | ast.Subscript) and id(node) not in called:
            root = _root(node)
            if isinstance(root, ast.Name) and root.id in local:
                return None  # a projection of an input may be the answer handed in
        if not isinstance(node, ast.Name):
            continue
        name = node.id
        if name in local:
            if name not in inputs:
                return None  # a local only the expectation reads: the answer may sit there
        elif name in facts.imports:
            continue
        elif name in facts.functions:
            inner = facts.helpers(name)
            if inner is None:
                return None
            helpers |= inner
        elif not (name in _BUILTINS and name not in facts.module_bound):
            return None
    if helpers and facts.readers:
        return None  # a helper taken out might still be looked for by its name
    return Pending(value, expected, binding, frozenset(helpers), loop, ast.unparse(value),
                   reads)


def prefix(reference: tuple[object, ...], other: tuple[object, ...]) -> bool:
    """`other` (a run that stopped early, e.g. the starter's) agrees with the reference on
    each value it computed."""
    if len(other) > len(reference):
        return False
    try:
        return all(type(a) is type(b) and bool(a == b)
                   for a, b in zip(reference, other, strict=False))
    except Exception:  # noqa: BLE001 - plain data compares; anything else disagrees
        return False


__all__ = ["EXPECTED", "Computed", "ModuleFacts", "Pending", "Recorded", "expected_index",
           "pending", "prefix"]
