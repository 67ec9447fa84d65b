"""Python source to `ast` under one process-wide lock. CPython 3.11 before 3.11.9
(gh-106905) fails with 'AST constructor recursion depth mismatch' when threads build ASTs at
once, and episodes grade and tasks validate in parallel threads: every parse in the package
goes through here."""

from __future__ import annotations

import ast
import threading
from typing import Any

_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> Any:
    """`ast.parse`, one thread at a time."""
    with _LOCK:
        return ast.parse(source, filename, mode)


def literal_eval(text: str) -> Any:
    """`ast.literal_eval` of a string, its parse under the lock."""
    return ast.literal_eval(parse(text.lstrip(" \t"), mode="eval"))


__all__ = ["literal_eval", "parse"]
