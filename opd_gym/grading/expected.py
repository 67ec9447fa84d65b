"""Which tests the hidden test files define: the set a trustworthy run must report exactly.

Read statically from the test sources (pytest's default collection rules: `test*` functions at
module level and in `Test*` classes without `__init__`, nested classes included), so no code
runs to decide it. Parametrized tests count once per function: a run's ids are compared with
their `[...]` suffix removed.
"""

from __future__ import annotations

import configparser
import fnmatch
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath

from opd_gym.grading.canary import collected_tests, parse
from opd_gym.nodeids import base_id, display_name  # noqa: F401  (their old home)
from opd_gym.records.task import Task

DEFAULT_PYTHON_FILES = ("test_*.py", "*_test.py")


def _ini_list(ini: str | None, key: str) -> tuple[str, ...]:
    """A whitespace-separated option of a task's `[pytest]` ini text; () when unset."""
    if not ini:
        return ()
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(ini)
    except configparser.Error:
        return ()
    if not parser.has_option("pytest", key):
        return ()
    return tuple(parser.get("pytest", key).split())


def python_files(ini: str | None) -> tuple[str, ...]:
    """pytest's `python_files` patterns from a task's ini text (pytest's default if unset)."""
    return _ini_list(ini, "python_files") or DEFAULT_PYTHON_FILES


def is_test_module(path: str, patterns: Iterable[str] = DEFAULT_PYTHON_FILES) -> bool:
    """Whether `path` is conftest.py or a test module under `python_files` `patterns`."""
    name = PurePosixPath(path).name
    return name == "conftest.py" or (
        name.endswith(".py") and any(fnmatch.fnmatch(name, g) for g in patterns))


def doctest_sources(task: Task) -> dict[str, str]:
    """{path: pristine text} of the package modules whose doctests are hidden tests.

    A doctest source is a `.py` file that is no test module (nor conftest.py), that
    `task.test_ids` reference (`src/pkg/mod.py::pkg.mod.func`, as `--doctest-modules` names
    them), and that the task holds: its pristine text is the reference solution's where the
    solution changes that module (a SWE-style gold patch that edits a docstring's examples
    along with the code: the examples FAIL_TO_PASS names are the fix's), else `task.tests`'s,
    else the starter's. It is never laid over the agent's
    workspace: the agent's module is what the doctests import and run against, their examples
    come from this text (the harness's `doctests` request field).
    """
    reference = {**task.files, **task.solution}
    patterns = python_files(task.pytest_ini)
    found: dict[str, str] = {}
    for test_id in task.test_ids or ():
        path, sep, _ = test_id.partition("::")
        if not sep or not path.endswith(".py") or is_test_module(path, patterns) \
                or path in found:
            continue
        text = task.solution.get(path, task.tests.get(path, reference.get(path)))
        if text is not None:
            found[path] = text
    return dict(sorted(found.items()))


def test_paths(task: Task) -> list[str]:
    """What pytest is pointed at: the hidden test modules (all .py files if none look like
    tests) and the hidden text files `task.test_ids` name (doctests in `README.rst`); doctest
    sources are not among them (see `doctest_sources`)."""
    doctests = doctest_sources(task)
    patterns = python_files(task.pytest_ini)
    python = [p for p in task.tests if p.endswith(".py") and p not in doctests]
    named = [p for p in python if is_test_module(p, patterns)
             and PurePosixPath(p).name != "conftest.py"]
    texts = {i.partition("::")[0] for i in task.test_ids or ()
             if "::" in i and not i.partition("::")[0].endswith(".py")}
    return in_pytest_order(task, {*(named or python), *(p for p in texts if p in task.tests)})


def in_pytest_order(task: Task, paths: Iterable[str]) -> list[str]:
    """`paths` in the order plain pytest collects them: the ini's testpaths in their order,
    each folder sorted (a session fixture that one folder's tests fill, such as a
    doctest_namespace, is then seen by the next, as under plain pytest)."""
    roots = _ini_list(task.pytest_ini, "testpaths")

    def place(path: str) -> tuple[int, str]:
        for index, root in enumerate(roots):
            if path == root or path.startswith(root.rstrip("/") + "/"):
                return index, path
        return len(roots), path

    return sorted(set(paths), key=place)


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
