"""opd_gym.pyast: parses under one lock, node listings kept while a tree lives, imports read."""

from __future__ import annotations

import ast
import gc
from pathlib import Path

from opd_gym import pyast


def test_walk_lists_what_ast_walk_yields_and_lets_the_tree_go():
    tree = pyast.parse(Path(pyast.__file__).read_text())
    listed = pyast.walk(tree)
    assert list(listed) == list(ast.walk(tree)) and listed[0] is tree
    function = next(n for n in listed if isinstance(n, ast.FunctionDef))
    assert list(pyast.walk(function)) == list(ast.walk(function))
    assert pyast.walk(tree) == listed  # listed once, read again
    kept = len(pyast._WALKED)
    del tree, listed, function
    gc.collect()
    assert len(pyast._WALKED) < kept  # the listings never keep their tree alive


def test_imports_map_names_to_what_they_import():
    imports = pyast.Imports.of(pyast.parse(
        "import a.b\nimport t as u\nfrom m import E as F, G\nfrom . import rel\n"
        "from star import *\n\ndef f():\n    import inner\n"))
    assert imports.names == {"a": {"a"}, "u": {"t"}, "F": {"m.E"}, "G": {"m.G"},
                             "rel": {"<relative>.rel"}, "inner": {"inner"}}
    assert imports.stars == {"star"}
