"""Map rows of public code datasets (HumanEval, MBPP, APPS, CodeContests) to Tasks.

Each adapter takes one row (a mapping in the dataset's own schema) and returns a Task, or
raises ValueError naming the offending field; the caller adds the row index and id.
"""

from __future__ import annotations

import ast
import io
import json
import sys
import tokenize
from collections.abc import Callable, Mapping
from typing import Any

from opd_gym import pyast
from opd_gym.errors import DatasetError
from opd_gym.records.task import BOUNDARY_KEY, Task

DEFAULT_CASE_TIMEOUT = 10.0
_PYTHON3 = {3, "3", "PYTHON3", "python3"}
_APPS_LEVELS = {"introductory": "easy", "interview": "medium", "competition": "hard"}

_STDIO_TEST = '''\
{doc}
from opd_grading import run

TIMEOUT = {timeout!r}


def _normalise(text):
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def _output(stdin):
    proc = run(["python3", "main.py"], stdin=stdin, timeout=TIMEOUT)
    if proc.returncode != 0:
        raise AssertionError(f"main.py exited with {{proc.returncode}}: {{proc.stderr[-2000:]}}")
    return proc.stdout
'''

_STDIO_CASE = '''

def test_case_{index}():
    assert _normalise(_output({stdin})) == {expected}
'''

# HumanEval and MBPP tests: the dataset's own code (check(), asserts, setup) is written as real
# code in the test file (so canaries can perturb its asserts), nested in the test function,
# and re-bound to a namespace of its own before it runs: the dataset's trusted prompt or
# setup code, builtins as they were before the solution loaded, and the solution's entry
# points fetched by name. No name of this module meets a dataset name, and nothing the
# solution exports (`__all__`, shadowed builtins) enters the check's namespace.
_ISOLATION = '''\
{doc}
import builtins as _builtins
import importlib as _importlib
import types as _types

_BUILTINS = dict(_builtins.__dict__)  # before the solution is imported


def _namespace(name, setup, bind):
    # pristine builtins, pytest's assert helpers, the setup code, the solution's `bind` names
    module = _importlib.import_module("solution")
    namespace = {{"__name__": name, "__builtins__": dict(_BUILTINS)}}
    namespace.update((k, v) for k, v in globals().items() if k.startswith("@"))
    exec(compile(setup, "<" + name + " setup>", "exec"), namespace)
    for attribute in bind:
        namespace[attribute] = getattr(module, attribute)
    return module, namespace


def _rebound(function, namespace):
    # the test's own tables reach the dataset code as closure cells
    return _types.FunctionType(function.__code__, namespace, function.__name__, None,
                               function.__closure__)
'''

# a HumanEval row's one test: the dataset's check(candidate) closed over the row's tables
_CHECK_TEST = '''

def test_check():
{tables}    def {inner}():
{body}
        return check

    _run_check({inner})
'''

# an MBPP row's setup code and the names its asserts bind to the solution
_MBPP_HEADER = '''
SETUP = {setup}
NAMES = {names}

'''

_HUMANEVAL_TEST = _ISOLATION + '''
ENTRY_POINT = {entry}
PROMPT = {prompt}


def _run_check(dataset_code):
    # the dataset's check(candidate), with the prompt's helpers, on solution.ENTRY_POINT
    module, namespace = _namespace("humaneval_check", PROMPT, ())
    candidate = getattr(module, ENTRY_POINT)
    namespace[ENTRY_POINT] = candidate
    _rebound(dataset_code, namespace)()(candidate)
''' + _CHECK_TEST

_MBPP_TEST = _ISOLATION + _MBPP_HEADER + '''
def _run_assert(assertion):
    _rebound(assertion, _namespace("mbpp_check", SETUP, NAMES)[1])()
'''

# The same tests across the process boundary (opd_gym/grading/launch.py `boundary`): the test
# process never imports a file of the agent; each entry point is `opd_grading.entry(name)`, a
# callable whose calls run in the solution's own process and whose values come back as plain
# data. The dataset's check code, prompt helpers and setup code run here, in the tests.
_BOUNDARY = '''\
{doc}
import builtins as _builtins
import types as _types

from opd_grading import entry as _entry

_BUILTINS = dict(_builtins.__dict__)


def _namespace(name, setup, bind):
    # pristine builtins, pytest's assert helpers, the setup code, the `bind` entry points
    namespace = {{"__name__": name, "__builtins__": dict(_BUILTINS)}}
    namespace.update((k, v) for k, v in globals().items() if k.startswith("@"))
    exec(compile(setup, "<" + name + " setup>", "exec"), namespace)
    for attribute in bind:
        namespace[attribute] = _entry(attribute)
    return namespace


def _rebound(function, namespace):
    # the test's own tables reach the dataset code as closure cells
    return _types.FunctionType(function.__code__, namespace, function.__name__, None,
                               function.__closure__)
'''

_BOUNDARY_HUMANEVAL_TEST = _BOUNDARY + '''
ENTRY_POINT = {entry}
PROMPT = {prompt}


def _run_check(dataset_code):
    # the dataset's check(candidate), with the prompt's helpers, on solution.ENTRY_POINT
    namespace = _namespace("humaneval_check", PROMPT, (ENTRY_POINT,))
    _rebound(dataset_code, namespace)()(namespace[ENTRY_POINT])
''' + _CHECK_TEST

_BOUNDARY_MBPP_TEST = _BOUNDARY + _MBPP_HEADER + '''
def _run_assert(assertion):
    _rebound(assertion, _namespace("mbpp_check", SETUP, NAMES))()
'''

_MBPP_CASE = '''

def test_assert_{index}():
    def {inner}():
{body}

    _run_assert({inner})
'''


def _names(source: str) -> set[str]:
    """Every identifier a piece of code uses or defines (to pick names it cannot meet)."""
    found: set[str] = set()
    for node in ast.walk(pyast.parse(source)):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
        elif isinstance(node, ast.alias):
            found.add((node.asname or node.name).partition(".")[0])
    return found


def _fresh(base: str, taken: set[str]) -> str:
    name = base
    while name in taken:
        name += "_"
    return name


def _indent(source: str, prefix: str) -> str:
    """Indent code by `prefix`, leaving the inside of multi-line strings untouched."""
    inside: set[int] = set()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError) as exc:
        raise DatasetError(f"cannot tokenize the dataset code: {exc}") from exc
    for token in tokens:
        if token.type == tokenize.STRING and token.end[0] > token.start[0]:
            inside.update(range(token.start[0] + 1, token.end[0] + 1))
    lines = source.splitlines()
    return "\n".join(
        line if i in inside or not line.strip() else prefix + line
        for i, line in enumerate(lines, start=1)
    )


def _embedded(code: str, where: str) -> str:
    """Dataset code that can live in a nested function (no `global`, no `import *`)."""
    for node in ast.walk(pyast.parse(code)):
        if isinstance(node, ast.Global | ast.Nonlocal):
            raise DatasetError(f"field {where!r}: `global`/`nonlocal` statements are not supported")
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            raise DatasetError(f"field {where!r}: `from ... import *` is not supported")
    return code


def _compiles(tests: str, where: str) -> str:
    try:
        compile(tests, "test_solution.py", "exec")
    except SyntaxError as exc:
        raise DatasetError(f"field {where!r} cannot be embedded in a test: {exc.msg}") from exc
    return tests


_STDIO_PROMPT = (
    "{statement}\n\nWrite a Python 3 program in `main.py` that reads the input from standard "
    "input and prints the answer to standard output. Hidden tests run `python3 main.py` on "
    "several inputs (at most {timeout:g} s each) and compare the output, ignoring extra whitespace."
)


def _doc(text: str) -> str:
    """A module docstring literal that is safe whatever characters a dataset id holds."""
    return repr(text)


def _field(row: Mapping[str, Any], name: str, kind: type | tuple[type, ...] = str) -> Any:
    """Fetch a required field and check its type (non-empty for strings and lists)."""
    if name not in row or row[name] is None:
        raise DatasetError(f"field {name!r} is missing")
    value = row[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        wanted = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise DatasetError(f"field {name!r} is a {type(value).__name__}, expected {wanted}")
    if isinstance(value, str | list | dict) and not value:
        raise DatasetError(f"field {name!r} is empty")
    return value


def _parse(source: str, name: str) -> ast.Module:
    try:
        return pyast.parse(source)
    except SyntaxError as exc:
        message = f"field {name!r} is not valid Python: {exc.msg} (line {exc.lineno})"
        raise DatasetError(message) from exc


def from_humaneval(row: Mapping[str, Any], *, boundary: bool = True) -> Task:
    """HumanEval row -> task: complete `solution.py`; the dataset's `check()` grades it.

    `boundary` (the default): the check runs across the process boundary, calling the entry
    point in the solution's own process (`_BOUNDARY`), so every test the reference passes and
    the starter fails earns, a check computing its expectation at run time included; False:
    the check imports the solution into its own process (canaries and held expectations).
    """
    task_id = _field(row, "task_id")
    prompt, body = _field(row, "prompt"), _field(row, "canonical_solution")
    test, entry = _field(row, "test"), _field(row, "entry_point")
    if not entry.isidentifier():
        raise DatasetError(f"field 'entry_point' is not a Python identifier: {entry!r}")
    if f"def {entry}(" not in prompt:
        raise DatasetError(f"field 'prompt' does not define the entry point {entry!r}")
    if "def check(" not in test:
        raise DatasetError("field 'test' does not define check(candidate)")
    _parse(prompt + body, "canonical_solution")
    _parse(test, "test")
    _embedded(test, "test")
    inner = _fresh("_dataset_code", _names(test) | _names(prompt) | {entry})
    tables, rest = _literal_tables(test, reserved={entry, inner} | _names(prompt))
    template = _BOUNDARY_HUMANEVAL_TEST if boundary else _HUMANEVAL_TEST
    tests = _compiles(template.format(
        doc=_doc(f"Hidden tests for {task_id}: the dataset check() against solution.{entry}."),
        entry=repr(entry), prompt=repr(prompt), inner=inner,
        tables="".join(_indent(text, " " * 4) + "\n" for text in tables.values()),
        body=_indent(rest.strip("\n"), " " * 8),
    ), "test")
    text = (
        f"Complete the function `{entry}` in `solution.py`. The file already holds its signature "
        f"and docstring:\n\n```python\n{prompt.rstrip()}\n```\n\nKeep the name and signature; "
        f"hidden tests import `{entry}` from `solution.py`."
    )
    metadata: dict[str, Any] = {"source": "humaneval", "entry_point": entry}
    if boundary:
        metadata[BOUNDARY_KEY] = ["solution"]
    return Task(
        id=task_id, prompt=text, files={"solution.py": prompt},
        tests={"test_solution.py": tests}, solution={"solution.py": prompt + body},
        tags=("humaneval", "function"), metadata=metadata,
    )


_HEADER_NAMES = frozenset({"ENTRY_POINT", "PROMPT"}) | {
    "_builtins", "_importlib", "_types", "_BUILTINS", "_namespace", "_rebound", "_run_check",
    "test_check", "_entry"}


def _literal_tables(test: str, reserved: set[str]) -> tuple[dict[str, str], str]:
    """The dataset code's top-level literal tables (`TABLE = {...}`, `CASES = [...]`: a name
    bound once, to a value `ast.literal_eval` reads), as {name: source}, and the code without
    them. They become statements of the test function's own body, where the grader reads them
    as the test's own tables (a loop's expected values, canaried and held like any table of a
    test's: `canary.local_tables`), and reach the nested check as closure cells; everything
    else stays nested."""
    tree = pyast.parse(test)
    stores: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            stores[node.id] = stores.get(node.id, 0) + 1
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            stores[node.name] = stores.get(node.name, 0) + 1
        elif isinstance(node, ast.arg):
            stores[node.arg] = stores.get(node.arg, 0) + 1
        elif isinstance(node, ast.alias):
            name = (node.asname or node.name).partition(".")[0]
            stores[name] = stores.get(name, 0) + 1
    lines = test.splitlines(keepends=True)
    tables: dict[str, str] = {}
    drop: set[int] = set()
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        if stores.get(name) != 1 or name in reserved or name in _HEADER_NAMES \
                or name.startswith("@"):
            continue
        try:
            ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        assert node.end_lineno is not None
        span = range(node.lineno - 1, node.end_lineno)
        if lines[node.end_lineno - 1][node.end_col_offset:].strip() or \
                lines[node.lineno - 1][:node.col_offset].strip():
            continue  # shares a line with other code (`A = 1; B = 2`): left nested
        tables[name] = "".join(lines[i] for i in span).rstrip("\n")
        drop.update(span)
    rest = "".join(line for i, line in enumerate(lines) if i not in drop)
    return tables, rest


def _called_names(asserts: list[str], code: ast.Module) -> list[str]:
    """Top-level functions/classes of the reference code that the asserts use, in order."""
    defined = {
        node.name for node in code.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    names: list[str] = []
    for i, line in enumerate(asserts):
        for node in ast.walk(_parse(line, f"test_list[{i}]")):
            if isinstance(node, ast.Name) and node.id in defined and node.id not in names:
                names.append(node.id)
    return names


def _stdlib_modules(asserts: list[str]) -> list[str]:
    """Stdlib modules the asserts use as `module.attr` (MBPP tests lean on the code's imports)."""
    used = {
        node.value.id for a in asserts for node in ast.walk(pyast.parse(a))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
    }
    return sorted(used & sys.stdlib_module_names)


def _defines_class(source: str) -> bool:
    return any(isinstance(node, ast.ClassDef) for node in ast.walk(pyast.parse(source)))


def from_mbpp(row: Mapping[str, Any], *, boundary: bool = True) -> Task:
    """MBPP row (original or sanitized) -> task: write `solution.py`; one test per assert.

    `boundary` (the default): the asserts call the solution's functions across the process
    boundary (see `from_humaneval`), unless an assert uses a class of the reference or the
    setup code defines one (an object of it could not cross: the row is graded in one
    process then, as with `boundary=False`)."""
    task_id = _field(row, "task_id", (int, str))
    text = _field(row, "text" if "text" in row or "prompt" not in row else "prompt")
    code = _field(row, "code")
    asserts = _field(row, "test_list", list)
    if not all(isinstance(a, str) and a.strip() for a in asserts):
        raise DatasetError("field 'test_list' must be a list of assert statements")
    names = _called_names(asserts, _parse(code, "code"))
    if not names:
        raise DatasetError("field 'test_list': no assert uses a function defined in field 'code'")
    imports = list(row.get("test_imports") or [])
    setup = row.get("test_setup_code") or ""
    if not isinstance(setup, str) or not all(isinstance(i, str) for i in imports):
        raise DatasetError("fields 'test_setup_code'/'test_imports' must be text")
    extra = [m for m in _stdlib_modules(asserts) if m not in names]
    imports += [f"import {m}" for m in extra if f"import {m}" not in imports]
    prelude = "\n".join(part for part in [*imports, setup.strip()] if part)
    taken = _names(prelude) | {n for a in asserts for n in _names(a)}
    inner = _fresh("_assertion", taken)
    functions = {node.name for node in _parse(code, "code").body
                 if isinstance(node, ast.FunctionDef)}  # a coroutine is no plain data
    boundary = boundary and set(names) <= functions and not _defines_class(prelude)
    tests = (_BOUNDARY_MBPP_TEST if boundary else _MBPP_TEST).format(
        doc=_doc(f"Hidden tests for mbpp/{task_id}: one test per assert."),
        setup=repr(prelude + "\n"), names=repr(tuple(names)),
    ) + "".join(
        _MBPP_CASE.format(index=i, inner=inner, body=_indent(_embedded(a.strip(), "test_list"),
                                                              " " * 8))
        for i, a in enumerate(asserts)
    )
    _compiles(tests, "test_list")
    wanted = " and ".join(f"`{n}`" for n in names)
    prompt = (
        f"{text.strip()}\n\nWrite `solution.py` defining {wanted}. Hidden tests import it from "
        f"`solution.py` and check asserts such as:\n\n```python\n{asserts[0].strip()}\n```"
    )
    return Task(
        id=f"mbpp/{task_id}", prompt=prompt, tests={"test_solution.py": tests},
        solution={"solution.py": code}, tags=("mbpp", "function"),
        metadata={"source": "mbpp", "entry_points": names,
                  **({BOUNDARY_KEY: ["solution"]} if boundary else {})},
    )


def _as_text(value: Any, name: str) -> str:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value)
    if not isinstance(value, str):
        raise DatasetError(f"field {name!r} must hold strings, got {type(value).__name__}")
    return value


def normalised(text: str) -> list[str]:
    """Program output as a stdin/stdout test compares it (its `_normalise`): the non-blank
    lines, each with its runs of whitespace made one space."""
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def _stdio_task(task_id: str, statement: str, cases: list[tuple[str, str]], reference: str | None,
                timeout: float, **extra: Any) -> Task:
    """Build a stdin/stdout task: the agent writes `main.py`; each case is one test."""
    extra["metadata"] = {**extra.get("metadata", {}), "cases": len(cases), "case_timeout": timeout}
    doc = _doc(f"Hidden tests for {task_id}: run main.py per case, compare normalised stdout.")
    # the expected output normalised here, as `_normalise` does in the test: a literal list the
    # host can hold (held.py), so the expected text never enters the sandbox
    tests = _STDIO_TEST.format(doc=doc, timeout=timeout) + "".join(
        _STDIO_CASE.format(index=i, stdin=repr(stdin), expected=repr(normalised(expected)))
        for i, (stdin, expected) in enumerate(cases)
    )
    return Task(
        id=task_id, prompt=_STDIO_PROMPT.format(statement=statement.strip(), timeout=timeout),
        tests={"test_main.py": tests}, solution={"main.py": reference} if reference else {},
        timeout=max(60.0, min(600.0, 5 + timeout * len(cases))), **extra,
    )


def _json_field(row: Mapping[str, Any], name: str, kind: type) -> Any:
    """A field APPS stores as a JSON string (already-decoded values are accepted too)."""
    value = row.get(name)
    if isinstance(value, str) and value.strip():
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"field {name!r} is not valid JSON: {exc.msg}") from exc
    if not isinstance(value, kind):
        raise DatasetError(f"field {name!r} must be a JSON {kind.__name__}")
    return value


def from_apps(row: Mapping[str, Any], *, case_timeout: float = DEFAULT_CASE_TIMEOUT) -> Task:
    """APPS row -> stdin/stdout task (call-based `fn_name` problems are rejected)."""
    pid = _field(row, "problem_id", (int, str))
    question = _field(row, "question")
    if "input_output" not in row:
        raise DatasetError("field 'input_output' is missing")
    io = _json_field(row, "input_output", dict)
    if io.get("fn_name"):
        raise DatasetError("field 'input_output': call-based problems (fn_name) are not supported")
    inputs, outputs = io.get("inputs"), io.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or not inputs:
        raise DatasetError("field 'input_output' needs non-empty 'inputs' and 'outputs' lists")
    if len(inputs) != len(outputs):
        raise DatasetError(f"field 'input_output': {len(inputs)} inputs but {len(outputs)} outputs")
    pairs = zip(inputs, outputs, strict=True)
    cases = [(_as_text(i, "input_output"), _as_text(o, "input_output")) for i, o in pairs]
    solutions = _json_field(row, "solutions", list) if row.get("solutions") else []
    level = str(row.get("difficulty") or "")
    difficulty = _APPS_LEVELS.get(level, "medium")
    return _stdio_task(
        f"apps/{pid}", question, cases, next((s for s in solutions if isinstance(s, str)), None),
        case_timeout, difficulty=difficulty, tags=("apps", "stdio"),
        metadata={"source": "apps", "level": level, "url": row.get("url") or ""},
    )


def _cc_cases(row: Mapping[str, Any], groups: tuple[str, ...]) -> list[tuple[str, str]]:
    cases: list[tuple[str, str]] = []
    for group in groups:
        block = row.get(group) or {}
        if not isinstance(block, Mapping):
            raise DatasetError(f"field {group!r} must be a mapping with 'input' and 'output' lists")
        inputs, outputs = block.get("input") or [], block.get("output") or []
        if len(inputs) != len(outputs):
            raise DatasetError(f"field {group!r}: {len(inputs)} inputs but {len(outputs)} outputs")
        pairs = zip(inputs, outputs, strict=True)
        cases += [(_as_text(i, group), _as_text(o, group)) for i, o in pairs]
    return cases


def _cc_python3(solutions: Any) -> str | None:
    """First Python 3 solution, from the columnar {language: [...], solution: [...]} layout."""
    if isinstance(solutions, Mapping):
        pairs = zip(solutions.get("language") or [], solutions.get("solution") or [], strict=False)
    else:
        items = [s for s in solutions or [] if isinstance(s, Mapping)]
        pairs = ((s.get("language"), s.get("solution")) for s in items)
    return next((code for lang, code in pairs if lang in _PYTHON3 and isinstance(code, str)), None)


def from_code_contests(row: Mapping[str, Any], *, include_generated: bool = False,
                       case_timeout: float | None = None) -> Task:
    """CodeContests row -> stdin/stdout task on its public + private (+ generated) tests."""
    name, description = _field(row, "name"), _field(row, "description")
    groups = ("public_tests", "private_tests") + (("generated_tests",) if include_generated else ())
    cases = _cc_cases(row, groups)
    if not cases:
        raise DatasetError("fields 'public_tests'/'private_tests' hold no test cases")
    if case_timeout is None:
        limit = row.get("time_limit")
        limit = limit if isinstance(limit, Mapping) else {}
        seconds = (limit.get("seconds") or 0) + (limit.get("nanos") or 0) / 1e9
        case_timeout = min(30.0, max(DEFAULT_CASE_TIMEOUT, 3 * seconds))
    rating = row.get("cf_rating") or 0
    difficulty = "easy" if 0 < rating < 1400 else "hard" if rating >= 2000 else "medium"
    return _stdio_task(
        f"code_contests/{name}", description, cases, _cc_python3(row.get("solutions")),
        case_timeout, difficulty=difficulty, tags=("code_contests", "stdio"),
        metadata={"source": "code_contests", "cf_rating": rating},
    )


ADAPTERS: dict[str, Callable[[Mapping[str, Any]], Task]] = {
    "humaneval": from_humaneval,
    "mbpp": from_mbpp,
    "apps": from_apps,
    "code_contests": from_code_contests,
}
ID_FIELDS = {
    "humaneval": "task_id", "mbpp": "task_id", "apps": "problem_id", "code_contests": "name",
}
