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

A base another hidden file defines (a mixin of tests in `tests/__init__.py`, `tests/base.py`,
imported as `from . import Mixin`, `from tests.base import Mixin` or `import base` then
`base.Mixin`) is copied the same way, with a decorator that gives the copy the globals of the
original method (`vars(base module)`, read from the method the base really has when the class
is created): the copy runs the same code in the same namespace as the inherited method did. The
decorator checks that the method it rebinds comes from the file the text was copied from, and
puts back the inherited method otherwise (a name resolved to another file than Python did), so
a wrong guess costs a canary, never a verdict. Only methods whose definition line evaluates
nothing in the module they are copied into are copied so: no decorators, no default values,
no annotations but `-> None`.

Left as they are (each inherited as before, the others of its class copied): methods reading
`super`, `__class__` or a private `__name` (a copy would bind or mangle with another class),
bases whose defining file is not among the hidden files (a library's class), and classes
pytest does not collect. A base whose every subclass then
owns its tests is no longer shared: its own methods run under its own ids only
(`canary._referenced_names` reads the copies so).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

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


Method = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Foreign:
    """A class base that another hidden file defines, as the module names it."""

    expr: str  # the base as the class statement writes it: "Mixin", "base.Mixin"
    path: str  # the hidden file that defines it
    text: str  # that file's source
    name: str  # the class's name there


@dataclass(frozen=True)
class _Origin:
    """Where an inherited method's text lives: this module (None) or a Foreign base's file."""

    foreign: Foreign
    lines: tuple[str, ...]


def _inherited(node: ast.ClassDef, classes: Mapping[str, ast.ClassDef],
               seen: frozenset[str] = frozenset(),
               foreign: Mapping[str, tuple[ast.ClassDef, Mapping[str, ast.ClassDef], _Origin]]
               | None = None,
               ) -> dict[str, tuple[Method, _Origin | None]] | None:
    """The test methods `node` inherits from this module's classes and from the `foreign`
    bases (by their expression), first base first (the MRO's order for the single and mixin
    hierarchies test suites use), each with where its text is; None where one cannot be
    copied or a base is no plain name of this module whose own bases resolve."""
    found: dict[str, tuple[Method, _Origin | None]] = {}
    for base in node.bases:
        elsewhere = (foreign or {}).get(_dotted(base) or "")
        if elsewhere is not None:
            cls, its_classes, origin = elsewhere
            deeper = _inherited(cls, its_classes, frozenset({cls.name}))
            if deeper is None:
                return None
            methods = {name: m for name, (m, _) in deeper.items()}
            for name, method in {**methods, **_test_methods(cls)}.items():
                found.setdefault(name, (method, origin))
            continue
        if not isinstance(base, ast.Name):
            continue  # unittest.TestCase, object, a library's class: nothing of ours
        local = classes.get(base.id)
        if local is None or local.name in seen | {node.name}:
            continue
        deeper = _inherited(local, classes, seen | {node.name}, foreign)
        if deeper is None:
            return None
        for name, method in {**deeper, **{n: (m, None) for n, m in
                                          _test_methods(local).items()}}.items():
            found.setdefault(name, method)
    return found


def _dotted(node: ast.expr) -> str | None:
    """`a.b.C` for a chain of attributes on a name, `C` for a name, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _portable(method: Method) -> bool:
    """Whether the definition line of `method` evaluates nothing in the module it is copied
    into (no decorators, defaults or annotations but `-> None`): only its body runs, with the
    globals of the module it came from."""
    args = method.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    return (not method.decorator_list and not args.defaults
            and not any(d is not None for d in args.kw_defaults)
            and all(a is None or a.annotation is None for a in every)
            and (method.returns is None or isinstance(method.returns, ast.Constant)
                 and method.returns.value is None))


def _rebinding(origin: _Origin, name: str) -> str:
    """The decorator line giving a copy of `name` the globals of the method the base really
    has at class creation (the inherited one put back if that comes from another file).
    pytest's assertion rewriting compiled the copy with this module's `@py...` helpers, which
    the other module (not rewritten) lacks: they are added to it under those names, which no
    Python identifier can spell."""
    where = "/" + origin.foreign.path
    return (f"@(lambda f, o=getattr({origin.foreign.expr}, {name!r}, None): "
            f"(*[o.__globals__.setdefault(k, v) for k, v in f.__globals__.items() "
            f"if k[:3] == '@py'], type(f)(f.__code__, o.__globals__, f.__name__, "
            f"f.__defaults__, f.__closure__))[-1] "
            f"if getattr(getattr(o, '__code__', None), 'co_filename', '').endswith({where!r})"
            f" else o)")


@functools.lru_cache(maxsize=256)
def _imported_bases(text: str) -> tuple[tuple[str, str, int, str], ...]:
    """Each class base of the module that an import binds: (the base as written, the module
    it comes from, the import's level, the class's name in that module)."""
    try:
        tree = pyast.parse(text)
    except (SyntaxError, ValueError):
        return ()
    froms: dict[str, tuple[str, int, str]] = {}  # bound name -> (module, level, name there)
    modules: dict[str, str] = {}  # bound name -> the module it is (`import a.b as c`)
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                froms[alias.asname or alias.name] = (node.module or "", node.level, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                modules[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0])
    local = {n.name for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef
                                                      | ast.AsyncFunctionDef)}
    local |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
              if isinstance(t, ast.Name)}
    found: list[tuple[str, str, int, str]] = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for base in cls.bases:
            dotted = _dotted(base)
            if dotted is None or dotted.split(".")[0] in local:
                continue
            head, *rest = dotted.split(".")
            if head in froms and not rest:
                module, level, name = froms[head]
                found.append((dotted, module, level, name))
            elif head in froms:  # `from . import base` then `base.Mixin`
                module, level, name = froms[head]
                path = ".".join(p for p in (module, name, *rest[:-1]) if p)
                found.append((dotted, path, level, rest[-1]))
            elif head in modules and rest:  # `import base` then `base.Mixin`
                found.append((dotted, ".".join([modules[head], *rest[:-1]]), 0, rest[-1]))
    return tuple(dict.fromkeys(found))


def _module_file(importer: str, module: str, level: int, sources: Mapping[str, str]
                 ) -> str | None:
    """The hidden file an import in `importer` reaches: relative to its package for a
    relative import; else from the importer's folder up to the root, nearest first (pytest's
    prepend import mode puts a test file's first folder without `__init__.py` on sys.path,
    and rootdir-relative packages import from the root)."""
    folder = PurePosixPath(importer).parent
    if level:
        for _ in range(level - 1):
            folder = folder.parent
        folders = [folder]
    else:
        folders = [folder, *folder.parents]
    parts = [p for p in module.split(".") if p]
    for root in folders:
        stem = root.joinpath(*parts)
        for candidate in (f"{stem}.py", f"{stem}/__init__.py"):
            candidate = candidate.removeprefix("./")
            if candidate in sources and candidate != importer:
                return candidate
    return None


def foreign_bases(path: str, sources: Mapping[str, str]) -> tuple[Foreign, ...]:
    """The class bases of hidden module `path` that another hidden file defines."""
    out: list[Foreign] = []
    for expr, module, level, name in _imported_bases(sources[path]):
        where = _module_file(path, module, level, sources)
        if where is not None and name in _classes(sources[where]):
            out.append(Foreign(expr, where, sources[where], name))
    return tuple(out)


@functools.lru_cache(maxsize=64)
def _classes(text: str) -> dict[str, ast.ClassDef]:
    try:
        tree = pyast.parse(text)
    except (SyntaxError, ValueError):
        return {}
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def _lines(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    return lines


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
def materialize_module(text: str, foreign: tuple[Foreign, ...] = ()) -> str:
    """`text` with each class's inherited test methods copied into its body (see module
    docstring), those of `foreign` bases too; unchanged when there is nothing to copy or it
    does not parse. Cached by text: every grade, calibration and draw of a task asks again,
    and parsing a large test module is the cost (on the repository suite's gold test, 21%
    more CPU uncached)."""
    try:
        tree = pyast.parse(text)
    except (SyntaxError, ValueError):
        return text
    lines = _lines(text)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    elsewhere = {}
    for base in foreign:
        its_classes = _classes(base.text)
        elsewhere[base.expr] = (its_classes[base.name], its_classes,
                                _Origin(base, tuple(_lines(base.text))))
    inserts: list[tuple[int, str]] = []  # (0-based line index to insert before, text)
    for node in classes.values():
        if not node.body:
            continue
        inherited = _inherited(node, classes, foreign=elsewhere)
        if not inherited:
            continue
        own = _own_names(node)
        # a method that cannot be copied stays inherited (its ids still share one function)
        todo = [(name, m, origin) for name, (m, origin) in inherited.items()
                if name not in own and _copyable(m) and (origin is None or _portable(m))]
        if not todo:
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
        if any(_indent_of(m, list(origin.lines) if origin else lines) != indent
               for _, m, origin in todo):
            continue  # another depth: re-indenting could change a multi-line string
        order = {id(o): i for i, o in enumerate(dict.fromkeys(o for _, _, o in todo))}
        todo.sort(key=lambda t: (t[2] is not None, order[id(t[2])], t[1].lineno))
        block = "".join(
            (indent + _rebinding(origin, name) + "\n" if origin else "")
            + _method_text(m, list(origin.lines) if origin else lines) + "\n"
            for name, m, origin in todo)
        inserts.append((at, block))
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
    return {path: materialize_module(text, foreign_bases(path, sources)) if path in wanted
            else text for path, text in sources.items()}


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


__all__ = ["Foreign", "foreign_bases", "materialize", "materialize_module", "shared_bases"]
