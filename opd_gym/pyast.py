"""Python source to `ast` under one process-wide lock. CPython 3.11 before 3.11.9
(gh-106905) fails with 'AST constructor recursion depth mismatch' when threads build ASTs at
once, and episodes grade and tasks validate in parallel threads: every parse in the package
goes through here."""

from __future__ import annotations

import ast
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

_LOCK = threading.Lock()
_WALKED: weakref.WeakKeyDictionary[ast.AST, tuple[ast.AST, ...]] = weakref.WeakKeyDictionary()
_WALKED_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> Any:
    """`ast.parse`, one thread at a time."""
    with _LOCK:
        return ast.parse(source, filename, mode)


def walk(node: ast.AST) -> tuple[ast.AST, ...]:
    """The nodes `ast.walk(node)` yields, in its order, listed once per node while the node
    lives: the grader's analyses read the same large test modules many times over, and
    nothing in the package changes a tree after parsing it (the listing would go stale). The
    listing holds the node's descendants only, so it never keeps the node itself alive."""
    with _WALKED_LOCK:
        below = _WALKED.get(node)
    if below is None:
        below = tuple(ast.walk(node))[1:]
        with _WALKED_LOCK:
            _WALKED[node] = below
    return (node, *below)


def literal_eval(text: str) -> Any:
    """`ast.literal_eval` of a string, its parse under the lock."""
    return ast.literal_eval(parse(text.lstrip(" \t"), mode="eval"))


@dataclass
class Imports:
    """What a module's imports (any scope) bind: `name -> dotted names` (`import a.b` binds
    `a`; `import t as u` maps `u` to `t`; `from m import E as F` maps `F` to `m.E`; a relative
    import's names map to `<relative>.E`, which names no installed module), and the modules
    it star-imports (they may bind any name)."""

    names: dict[str, set[str]] = field(default_factory=dict)
    stars: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, tree: ast.AST) -> Imports:
        found = cls()
        for node in walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    head = alias.name.partition(".")[0]
                    found.bind(alias.asname or head, alias.name if alias.asname else head)
            elif isinstance(node, ast.ImportFrom):
                source = node.module if node.module and not node.level else "<relative>"
                for alias in node.names:
                    if alias.name == "*":
                        found.stars.add(source)
                    else:
                        found.bind(alias.asname or alias.name, f"{source}.{alias.name}")
        return found

    def bind(self, name: str, target: str) -> None:
        self.names.setdefault(name, set()).add(target)


__all__ = ["Imports", "literal_eval", "parse", "walk"]
