"""Inherited test methods given a body of their own: one function per test id.

A test class that inherits `test*` methods from a class of its own module (a TestCase
subclass repeating its base's tests with other settings, a mixin of tests shared by several
TestCase classes, a plain `Test*` class extending another) runs one function under several
node ids. No canary or held site can tell those ids apart: an edit of the function changes
every one of them. So before calibration each such class gets a copy of every method it
inherits that way, placed first in its body (after its docstring), in the bases' order, as
the text of the base's method: the same code under the subclass's own id, found first by
attribute lookup, which is where unittest and pytest called the inherited one. Collection
order, ids and outcomes stay those of plain pytest.

Left as they are: methods reading `super`, `__class__` or a private `__name` (a copy would
bind or mangle with another class),
bases from other modules (their globals are not this module's), and classes pytest does not
collect. A base whose every subclass then owns its tests is no longer shared: its own
methods run under its own ids only (`canary._referenced_names` reads the copies so).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Mapping

from opd_gym import pyast

_BINDS_CLASS = frozenset({"super", "__class__"})  # names a copy would resolve differently


def _test_methods(node: ast.ClassDef) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {child.name: child for child in node.body
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            and child.name.startswith("test")}


def _own_names(node: ast.ClassDef) -> set[str]:
    """Every name the class body binds itself (methods, attributes): a copy must not shadow
    one (`test_x = None` disables an inherited test)."""
    names: set[str] = set()
    for child in node.body:
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(child.name)
        elif isinstance(child, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = child.targets if isinstance(child, ast.Assign) else [child.target]
            names.update(n.id for t in targets for n in pyast.walk(t) if isinstance(n, ast.Name))
    return names


def _mangled(name: str) -> bool:
    """`__x` (not `__x__`): Python mangles it with the class a method is defined in."""
    return name.startswith("__") and not name.endswith("__")


def _copyable(method: ast.AST) -> bool:
    """Whether a copy in another class runs as the original: no `super()`/`__class__` (bound
    to the defining class) and no private `__name` (mangled with it)."""
    for node in pyast.walk(method):
        if isinstance(node, ast.Name) and (node.id in _BINDS_CLASS or _mangled(node.id)) \
                or isinstance(node, ast.Attribute) and _mangled(node.attr):
            return False
    return True


def _inherited(node: ast.ClassDef, classes: Mapping[str, ast.ClassDef],
               seen: frozenset[str] = frozenset()
               ) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef] | None:
    """The test methods `node` inherits from this module's classes, first base first (the
    MRO's order for the single and mixin hierarchies test suites use), or None where one
    cannot be copied or a base is no plain name of this module whose own bases resolve."""
    found: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for base in node.bases:
        if not isinstance(base, ast.Name):
            continue  # unittest.TestCase, object, another module's class: nothing of ours
        local = classes.get(base.id)
        if local is None or local.name in seen | {node.name}:
            continue
        deeper = _inherited(local, classes, seen | {node.name})
        if deeper is None:
            return None
        for name, method in {**deeper, **_test_methods(local)}.items():
            found.setdefault(name, method)
    return found


def _indent(node: ast.ClassDef, lines: list[str]) -> str:
    first = node.body[0]
    line = lines[first.lineno - 1]
    return line[:len(line) - len(line.lstrip())]


def _start(method: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    return min([method.lineno, *(d.lineno for d in method.decorator_list)])


def _indent_of(method: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> str:
    line = lines[_start(method) - 1]
    return line[:len(line) - len(line.lstrip())]


def _method_text(method: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> str:
    """The method's source lines, decorators included (at the class body's depth)."""
    return "".join(lines[_start(method) - 1:method.end_lineno])


@functools.lru_cache(maxsize=64)
def materialize_module(text: str) -> str:
    """`text` with each class's inherited test methods copied into its body (see module
    docstring); unchanged when there is nothing to copy or it does not parse. Cached by
    text: every grade, calibration and draw of a task asks again, and parsing a large test
    module is the cost (on the repository suite's gold test, 21% more CPU uncached)."""
    try:
        tree = pyast.parse(text)
    except (SyntaxError, ValueError):
        return text
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    inserts: list[tuple[int, str]] = []  # (0-based line index to insert before, text)
    for node in classes.values():
        if not node.body:
            continue
        inherited = _inherited(node, classes)
        if not inherited:
            continue
        own = _own_names(node)
        todo = [m for name, m in inherited.items() if name not in own]
        if not todo or not all(_copyable(m) for m in todo):
            continue
        first = node.body[0]
        docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
            and isinstance(first.value.value, str)
        if first.lineno == node.lineno:  # `class A(B): pass` on one line
            continue
        at = first.end_lineno if docstring else min(  # type: ignore[assignment]
            [first.lineno, *(d.lineno for d in getattr(first, "decorator_list", ()))]) - 1
        if docstring and (first.end_lineno or 0) >= len(lines):
            continue
        indent = _indent(node, lines)
        if any(_indent_of(m, lines) != indent for m in todo):
            continue  # another depth: re-indenting could change a multi-line string
        todo.sort(key=lambda m: m.lineno)
        inserts.append((at, "".join(_method_text(m, lines) + "\n" for m in todo)))
    if not inserts:
        return text
    for at, block in sorted(inserts, reverse=True):
        lines.insert(at, block)
    out = "".join(lines)
    try:
        pyast.parse(out)
    except (SyntaxError, ValueError):
        return text  # never a grade of a module plain pytest would not run
    return out


def materialize(sources: Mapping[str, str], paths: Iterable[str]) -> dict[str, str]:
    """`sources` with the test modules among `paths` materialized (`materialize_module`)."""
    wanted = {p for p in paths if p.endswith(".py")}
    return {path: materialize_module(text) if path in wanted else text
            for path, text in sources.items()}


def shared_bases(tree: ast.Module) -> set[int]:
    """The ids of `ClassDef.bases` Name nodes whose class binds every test method name of
    that base itself (after `materialize`): such a reference no longer runs the base's
    tests."""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    covered: set[int] = set()
    for node in classes.values():
        own = _own_names(node)  # methods, and names bound otherwise (`test_x = None`)
        for base in node.bases:
            local = classes.get(base.id) if isinstance(base, ast.Name) else None
            if local is not None and set(_test_methods(local)) <= own:
                covered.add(id(base))
    return covered


__all__ = ["materialize", "materialize_module", "shared_bases"]
