"""Which tests the hidden test files define: the set a trustworthy run must report exactly.

Read statically from the test sources (pytest's default collection rules: `test*` functions at
module level and in `Test*` classes without `__init__`, nested classes included), so no code
runs to decide it. Parametrized tests count once per function: a run's ids are compared with
their `[...]` suffix removed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath

from opd_gym.grading.canary import collected_tests, parse
from opd_gym.tasks.model import Task

_PARAMS = re.compile(r"\[.*\]$", re.S)


def test_paths(task: Task) -> list[str]:
    """The hidden test modules pytest is pointed at (all .py files if none look like tests)."""
    python = [p for p in task.tests if p.endswith(".py")]
    named = [
        p for p in python if PurePosixPath(p).name.startswith("test_") or p.endswith("_test.py")
    ]
    return sorted(named or python)


def expected_tests(sources: Mapping[str, str], paths: Iterable[str]) -> set[str]:
    """Base ids (`path::name` or `path::Class::name`) the given test modules define."""
    ids: set[str] = set()
    for path in paths:
        try:
            tree = parse(sources[path])  # under the lock of gh-106905 (see canary.parse)
        except SyntaxError:
            continue
        ids.update(test_id for test_id, _ in collected_tests(tree, path))
    return ids


def base_id(nodeid: str) -> str:
    """A pytest node id without its parametrization suffix."""
    return _PARAMS.sub("", nodeid)


def display_name(nodeid: str) -> str:
    """The short name reports show (`module::test`, classes dotted into the module part)."""
    path, _, rest = nodeid.partition("::")
    module = path[:-3] if path.endswith(".py") else path
    parts = [module.replace("/", "."), *rest.split("::")] if rest else [module]
    if len(parts) == 1:
        return parts[0]
    return ".".join(parts[:-1]) + "::" + parts[-1]
