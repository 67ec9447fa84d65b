"""Check that a task's hidden tests pay for solving it, and for nothing else.

Three gradings per task: the untouched starter must score 0, the reference solution 1.0 (a
task without any earning test, which pays 0 for every answer, fails as "cannot be verified"), and
a well-formed wrong answer (the reference with its answers perturbed: every value a public
function or method returns, every value printed or written, changed to a different value of
the same type; an answer file's numbers and words changed in place) below 0.5. A wrong answer
at 0.5 or more means the tests mostly check the format of the answer, not its value.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from opd_gym import pyast
from opd_gym.records.task import Task

WRONG_LIMIT = 0.5  # a wrong answer must score below this
PERTURB = "_opd_perturb"
WRAP = "_opd_wrong"

# The runtime half of the transform, inserted at the top of every reference Python module.
# `_opd_perturb` changes a value and keeps its type; `_opd_wrong` perturbs what the
# outermost call of a public function or method returns (inner and recursive calls see the
# true values, so the reference's own logic still runs as written).
_RUNTIME = r'''
def _opd_perturb(value, _depth=0):
    if _depth > 20:
        return value
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.5 + 1.0
    if isinstance(value, complex):
        return value + 1
    if isinstance(value, str):
        if type(value) is str:
            return _opd_text(value)
        try:  # a str subclass (an Enum...): another member of it, or the value unchanged
            return type(value)(_opd_text(value))
        except Exception:
            return value
    if isinstance(value, bytes):
        return _opd_text(value.decode("latin-1")).encode("latin-1")
    kind = type(value)
    if isinstance(value, tuple) and hasattr(value, "_fields") and hasattr(value, "_replace"):
        return value._replace(**{f: _opd_perturb(getattr(value, f), _depth + 1)
                                 for f in value._fields})
    import dataclasses as _dataclasses
    if _dataclasses.is_dataclass(value) and not isinstance(value, type):
        try:
            return _dataclasses.replace(value, **{
                f.name: _opd_perturb(getattr(value, f.name), _depth + 1)
                for f in _dataclasses.fields(value) if f.init})
        except Exception:
            return value
    if kind in (list, tuple):
        return kind(_opd_perturb(v, _depth + 1) for v in value)
    if kind is dict:
        return {k: _opd_perturb(v, _depth + 1) for k, v in value.items()}
    if kind in (set, frozenset):
        return kind(_opd_perturb(v, _depth + 1) for v in value)
    if isinstance(value, list):
        try:
            value[:] = [_opd_perturb(v, _depth + 1) for v in value]
        except Exception:
            pass
        return value
    return value


def _opd_text(text):
    import re as _re
    if not text:
        return "x"
    if _re.search(r"\d", text):
        return _re.sub(r"\d+", lambda m: str(int(m.group()) + 1).zfill(len(m.group())), text)
    if text in ("True", "False"):
        return "False" if text == "True" else "True"
    if text.strip() in ("YES", "NO", "Yes", "No", "yes", "no"):
        swap = {"YES": "NO", "NO": "YES", "Yes": "No", "No": "Yes", "yes": "no", "no": "yes"}
        return text.replace(text.strip(), swap[text.strip()])
    for i in range(len(text) - 1, -1, -1):
        ch = text[i]
        if ch.isalpha() and ch.isascii():
            base = ord("a") if ch.islower() else ord("A")
            return text[:i] + chr(base + (ord(ch) - base + 1) % 26) + text[i + 1:]
    return text + "x"


_opd_calls = [0]


def _opd_wrong(function):
    import functools as _functools
    import inspect as _inspect
    if _inspect.iscoroutinefunction(function):
        return function
    if _inspect.isgeneratorfunction(function):
        @_functools.wraps(function)
        def generator(*args, **kwargs):
            for item in function(*args, **kwargs):
                yield _opd_perturb(item)
        return generator

    @_functools.wraps(function)
    def wrapper(*args, **kwargs):
        _opd_calls[0] += 1
        try:
            result = function(*args, **kwargs)
        finally:
            _opd_calls[0] -= 1
        return _opd_perturb(result) if _opd_calls[0] == 0 else result
    return wrapper


def _opd_print(*args, **kwargs):
    import builtins as _builtins
    return _builtins.print(*(_opd_perturb(a) for a in args), **kwargs)
'''

ANSWER_NUMBER = re.compile(r"\d+")


def perturb_text(text: str) -> str:
    """An answer file's text with every number changed (or, with none, a letter changed)."""
    if ANSWER_NUMBER.search(text):
        return ANSWER_NUMBER.sub(lambda m: str(int(m.group()) + 1).zfill(len(m.group())), text)
    for i in range(len(text) - 1, -1, -1):
        ch = text[i]
        if ch.isascii() and ch.isalpha():
            base = ord("a") if ch.islower() else ord("A")
            return text[:i] + chr(base + (ord(ch) - base + 1) % 26) + text[i + 1:]
    return text + "x"


# Dunders whose results are answers (arithmetic, text); comparison, hashing, container and
# life-cycle dunders keep their behaviour so the objects stay usable.
VALUE_DUNDERS = frozenset(
    f"__{op}__" for op in (
        "add radd sub rsub mul rmul matmul rmatmul truediv rtruediv floordiv rfloordiv mod "
        "rmod pow rpow neg pos abs invert and rand or ror xor rxor lshift rlshift rshift "
        "rrshift round str format"
    ).split()
)


class _Perturber(ast.NodeTransformer):
    """Decorates public functions and methods (and value dunders) with `_opd_wrong`, perturbs
    the public attributes `__init__` sets on `self`, and printed and written values
    (`print(...)`, `<stream>.write(...)`)."""

    def __init__(self) -> None:
        self.depth = 0  # nesting of function bodies: only module and class level get wrapped
        self.in_init = False

    def _decorate(self, node: ast.FunctionDef) -> None:
        name = node.name
        dunder = name.startswith("__") and name.endswith("__")
        if self.depth == 0 and (not dunder or name in VALUE_DUNDERS):
            # innermost decorator: applied first, under @property/@staticmethod/...
            node.decorator_list.append(ast.Name(WRAP, ast.Load()))

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        self._decorate(node)
        outer = self.in_init
        self.in_init = self.depth == 0 and node.name == "__init__"
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1
        self.in_init = outer
        return node

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        self.generic_visit(node)
        if self.in_init and len(node.targets) == 1:
            target = node.targets[0]
            if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                    and target.value.id == "self" and not target.attr.startswith("_")):
                node.value = _perturbed(node.value)
        return node

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Name) and func.id == "print":
            node.func = ast.Name("_opd_print", ast.Load())
        elif (isinstance(func, ast.Attribute) and func.attr in ("write", "write_text")
              and len(node.args) == 1 and not node.keywords):
            node.args = [_perturbed(node.args[0])]
        return node


def _perturbed(expr: ast.expr) -> ast.expr:
    return ast.Call(ast.Name(PERTURB, ast.Load()), [expr], [])


def perturb_python(source: str) -> str:
    """The module's source with its answers perturbed (see the module docstring).

    Raises SyntaxError if the source does not parse.
    """
    tree = pyast.parse(source)
    tree = _Perturber().visit(tree)
    runtime = pyast.parse(_RUNTIME).body
    body = tree.body
    at = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        at = 1  # keep the docstring first
    while at < len(body) and isinstance(body[at], ast.ImportFrom) \
            and body[at].module == "__future__":
        at += 1
    tree.body = body[:at] + runtime + body[at:]
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def wrong_answer(task: Task) -> dict[str, str]:
    """The reference solution with perturbed answers: Python files transformed, other
    files' text perturbed. A file that does not parse is kept as it is."""
    wrong: dict[str, str] = {}
    for path, text in task.solution.items():
        if path.endswith(".py"):
            try:
                wrong[path] = perturb_python(text)
            except SyntaxError:
                wrong[path] = text
        else:
            wrong[path] = perturb_text(text)
    return wrong


class Grades(Protocol):
    """What grading a file set gives: a `GradeReport`-like object with these fields."""

    passed: int
    reason: str

    @property
    def total(self) -> int: ...

    @property
    def score(self) -> float: ...


@dataclass(frozen=True)
class TaskCheck:
    """The three gradings of one task and what is wrong with them (`problems`)."""

    task_id: str
    reference: Grades | None
    starter: Grades | None
    wrong: Grades | None
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def format_only(self) -> bool:
        """The tests reward a wrong answer of the right format (they check format, not value)."""
        return self.wrong is not None and self.wrong.score >= WRONG_LIMIT


def judge(task: Task, reference: Grades | None, starter: Grades, wrong: Grades | None
          ) -> TaskCheck:
    """The problems with a task given its three gradings (`None`: no reference to grade)."""
    problems: list[str] = []
    if reference is None or wrong is None:
        problems.append("no reference solution")
    elif unverifiable(reference):
        problems.append(f"cannot be verified: {UNVERIFIABLE}")
    elif reference.total == 0:
        problems.append(f"no test ran on the reference ({reference.reason or 'collection?'})")
    elif reference.score < 1.0:
        why = f": {reference.reason}" if reference.reason else ""
        problems.append(f"reference scores {reference.score:.2f}{why}")
    if starter.score > 0.0:
        problems.append(f"starter scores {starter.score:.2f}")
    if wrong is not None and wrong.score >= WRONG_LIMIT:
        problems.append(f"tests check format only: a wrong answer scores {wrong.score:.2f}")
    return TaskCheck(task.id, reference, starter, wrong, tuple(problems))


UNVERIFIABLE = ("no earning test (none has a valid canary, passes on the reference and "
                "fails on both the untouched starter and an empty solution): every grade is 0")


def unverifiable(reference: Grades) -> bool:
    """The reference's grade shows a task without any earning test (it scores 0 for all)."""
    earning = getattr(reference, "earning", None)
    reason = reference.reason or ""
    return earning == 0 and reference.total > 0 and (
        not reason or reason.startswith("the task cannot be verified"))


GradeFn = Callable[[Task, Mapping[str, bytes]], Grades]


def check_tasks(tasks: Iterable[Task], grade: GradeFn, *, workers: int = 2
                ) -> Iterable[TaskCheck]:
    """Grade every task's starter, reference and wrong answer (in a pool of `workers`
    threads), yielding one TaskCheck per task in order."""
    tasks = list(tasks)

    def one(job: tuple[Task, str]) -> Grades | None:
        task, kind = job
        if kind != "starter" and not task.solution:
            return None
        files = dict(task.files)
        if kind == "reference":
            files.update(task.solution)
        elif kind == "wrong":
            files.update(wrong_answer(task))
        return grade(task, {path: text.encode() for path, text in files.items()})

    jobs = [(task, kind) for task in tasks for kind in ("reference", "starter", "wrong")]
    with ThreadPoolExecutor(max(1, workers)) as pool:
        results = pool.map(one, jobs)
        for task in tasks:
            reference, starter, wrong = next(results), next(results), next(results)
            assert starter is not None
            yield judge(task, reference, starter, wrong)


def cell(report: Grades | None) -> str:
    """`passed/total score` of one grading for the table, or `-` when there is none."""
    if report is None:
        return "-"
    return f"{report.passed}/{report.total} {report.score:.2f}"


def table_header(width: int) -> str:
    """The first line of the validation table."""
    return (f"{'task':<{width}}  {'reference':>12}  {'starter':>12}  {'wrong':>12}  verdict")


def table_row(check: TaskCheck, width: int) -> str:
    """One task's line: its three gradings and `ok` or `BAD: <problems>`."""
    verdict = "ok" if check.ok else "BAD: " + "; ".join(check.problems)
    return (f"{check.task_id:<{width}}  {cell(check.reference):>12}  {cell(check.starter):>12}"
            f"  {cell(check.wrong):>12}  {verdict}")


__all__ = [
    "UNVERIFIABLE",
    "WRONG_LIMIT",
    "TaskCheck",
    "check_tasks",
    "judge",
    "perturb_python",
    "perturb_text",
    "table_header",
    "table_row",
    "unverifiable",
    "wrong_answer",
]
