"""Whether a task's solution can run inside pytest's own process (read from the sources).

A solution the tests import (or load by path, or whose docstrings run as doctests) shares the
process with pytest, so it can make a test pass without computing anything: only canaries and
held expectations stand against that. A solution the tests only start as a child process
(stdin/stdout cases) cannot reach pytest. Any form of loading counts, so the answer errs
towards "in process".
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterable

from opd_gym import pyast

# callables that load or run code by name or path: a test using any of them may run the
# solution in its process whatever it names (a computed module name, a path)
_LOADERS = frozenset({
    "import_module", "__import__", "importorskip", "run_path", "run_module",
    "spec_from_file_location", "SourceFileLoader", "module_from_spec", "exec", "execfile",
    "load_source", "reload",
})


def imports_any(sources: Iterable[str], modules: Collection[str]) -> bool:
    """Some source imports one of `modules` (any `import`/`from` form, relative or not,
    top-level or nested) or calls a loader that could (`importlib.import_module`, `runpy`,
    `exec`...). A source that does not parse counts as importing (nothing can be ruled out)."""
    for source in sources:
        try:
            tree = pyast.parse(source)
        except (SyntaxError, ValueError):
            return True
        for node in pyast.walk(tree):
            if isinstance(node, ast.Import):
                if any(a.name.split(".")[0] in modules for a in node.names):
                    return True
            elif isinstance(node, ast.ImportFrom):
                if node.level or (node.module or "").split(".")[0] in modules:
                    return True
            elif isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else \
                    func.attr if isinstance(func, ast.Attribute) else ""
                if name in _LOADERS:
                    return True
    return False
