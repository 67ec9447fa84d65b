"""Synthesized bugs in real projects: AST mutations, sandbox validation, bug-report statements.

A project (a pinned library, an sdist or a local folder that ships its pytest suite) is
mutated one change at a time inside the functions its suite names: an operator swapped, a
condition negated, a constant off by one, a branch or a call removed, two arguments swapped,
a return value replaced. Each `Mutation` is a byte span of one file with its original and
replacement text, so a manifest replays it exactly (`Mutation.apply` refuses a file whose
span no longer holds the original text).

Validation runs plain pytest (the sandbox image's pytest, outcomes from pytest-reportlog) in
a sandbox from `opd_gym.sandboxes.make_pool`. The original tree runs 3 times: ids that do not
pass all 3 times are never scored. A mutant is kept only if (a) its first full run fails at
least one id that passes on the original (FAIL_TO_PASS), (b) two more runs of the
FAIL_TO_PASS ids fail them again (an id that changes is flaky: dropped, never scored), and
(c) at least one FAIL_TO_PASS test has a canary that earns
(`opd_gym.grading.canary.make_canaries`, `Canary.earns`): a task whose failing tests only
gate could never pay for a fix.
Mutants that break collection, time out, or leave nothing failing are discarded, with the
reason recorded in the progress file. Mutants are validated in parallel, by threads of this
process or by Ray actors (`opd_gym.authoring.synth_workers`), handed out in schedule order so that
any number of workers keeps the tasks a serial run keeps.

The test split, as in SWE-bench: PASS_TO_PASS is every id that passes on the original tree
in all its runs and on the mutant in all of its, less the ids validation found flaky, so every
passing test guards against a fix that breaks something else. FAIL_TO_PASS holds at most
`F2P_CAP` of the failing ids (canaried first, so grading stays bounded); failing ids beyond
the cap are scored in neither list. Each kept record states its difficulty: the lines the
change touches, its FAIL_TO_PASS count and how many tests failed on the mutant.

Kinds of change (`Mutation.kind`): besides the single-token ones above, `boundary` (`<` and
`<=`, `>` and `>=` exchanged; a slice bound one off), `wrong_variable` (a local's use
replaced by another local in use there), `wrong_default` (a parameter's default changed),
`swap_branch` (if/else bodies, or a conditional expression's two values, exchanged),
`missing_case` (an elif, or one of several guards of a block, deleted) and
`coordinated:<a>+<b>` (two edits of one function on different lines). The greppable kinds
(`GREPPABLE`: `return None`, a stray `pass`, a bare `not (...)`) are scheduled last.

Problem statements are written like a user's bug report from the FAIL_TO_PASS tests' own
source and the failures of the validation run (`opd_gym.authoring.statements`: a symptom title, a
reproduction snippet, observed and expected behaviour); a mutant none of whose reports passes
`statement_problems` (no changed file or function blamed, no mutated line, no test name or
id) is not kept.
"""

from __future__ import annotations

import ast
import bisect
import json
import random
import re
import shlex
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from opd_gym import pyast
from opd_gym.authoring.statements import statement_problems, write_report
from opd_gym.errors import DatasetError
from opd_gym.sandboxes.base import SandboxError
from opd_gym.sandboxes.environment import env_assignments, unset_variables
from opd_gym.tasks.manifest import (  # noqa: F401  (the manifest's names, as synth had them)
    MANIFEST_VERSION,
    READABLE_VERSIONS,
    WORKSPACE_INI,
    build_task,
    compact_records,
    difficulty,
    expand_records,
    is_manifest,
    load_manifest,
    manifest_tasks,
    read_manifest,
    task_id,
    working_copy,
    write_manifest,
)
from opd_gym.tasks.mutation import Mutation, Span, _line_starts  # noqa: F401
from opd_gym.tasks.project import (  # noqa: F401  (the project's names, as synth had them)
    Project,
    project_from_dir,
    project_from_library,
    project_from_sdist,
    project_from_source,
    resolve_project,
)

F2P_CAP = 20
STABILITY_RUNS = 3
CANARY_SEED = 0
RUN_TIMEOUT = 300.0
REPORT = "/tmp/opd-synth-report.jsonl"
OUTCOMES = ".opd-synth-outcomes.json"


_BINOPS = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "//"),
           ast.FloorDiv: ("//", "*"), ast.Mod: ("%", "//"), ast.BitAnd: ("&", "|"),
           ast.BitOr: ("|", "&"), ast.LShift: ("<<", ">>"), ast.RShift: (">>", "<<")}
_CMPOPS = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="),
           ast.GtE: (">=", ">"), ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="),
           ast.Is: ("is", "is not"), ast.IsNot: ("is not", "is"), ast.In: ("in", "not in"),
           ast.NotIn: ("not in", "in")}


# Kinds a reader finds by grepping for their footprint (`return None`, a stray `pass`, a bare
# `not (...)`): the schedule tries them only after every other kind (issue 30, point 4).
GREPPABLE = frozenset({"return_value", "remove_branch", "remove_call", "negate"})
# Edits that can make up a coordinated (two-edit) mutation of one function.
_PAIRABLE = frozenset({"boundary", "compare", "binop", "off_by_one", "wrong_variable",
                       "swap_args", "boolop"})
PAIRS_PER_FUNCTION = 3
_SIMPLE = (ast.Name, ast.Constant, ast.Attribute, ast.Call, ast.Subscript)


def kind_group(kind: str) -> str:
    """The kind a mix is counted by (`coordinated:a+b` counts as `coordinated`)."""
    return kind.partition(":")[0]


class _Finder:
    """Collects candidate mutations of one module's text inside the chosen functions."""

    def __init__(self, path: str, text: str, wanted: Callable[[str, str | None], bool]) -> None:
        self.path, self.text, self.wanted = path, text, wanted
        self.data = text.encode("utf-8")
        self.starts = _line_starts(self.data)
        self.found: list[Mutation] = []

    def off(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def seg(self, node: ast.AST) -> str:
        return self.data[self.off(node.lineno, node.col_offset):
                         self.off(node.end_lineno, node.end_col_offset)].decode("utf-8")

    def add(self, function: str, kind: str, start: tuple[int, int], end: tuple[int, int],
            replacement: str) -> None:
        original = self.data[self.off(*start):self.off(*end)].decode("utf-8")
        if original != replacement:
            self.found.append(Mutation(self.path, function, kind, start[0], start[1], end[0],
                                       end[1], original, replacement))

    def at(self, offset: int) -> tuple[int, int]:
        """The (line, byte column) of a byte offset."""
        line = bisect.bisect_right(self.starts, offset)
        return line, offset - self.starts[line - 1]

    def start(self, node: ast.AST) -> int:
        return self.off(node.lineno, node.col_offset)

    def end(self, node: ast.AST) -> int:
        return self.off(node.end_lineno, node.end_col_offset)

    def span(self, function: str, kind: str, start: int, end: int, replacement: str) -> None:
        """`add` by byte offsets."""
        self.add(function, kind, self.at(start), self.at(end), replacement)

    def own_line(self, node: ast.AST) -> bool:
        """Whether only indentation precedes the node on its first line."""
        return not self.data[self.starts[node.lineno - 1]:self.start(node)].strip()

    def between(self, function: str, kind: str, left: ast.AST, right: ast.AST, old: str,
                new: str) -> None:
        """Replace the operator token `old` between two operands by `new`."""
        start, end = (left.end_lineno, left.end_col_offset), (right.lineno, right.col_offset)
        gap = self.data[self.off(*start):self.off(*end)].decode("utf-8")
        core = gap.strip().strip("()").strip()
        if core != old or "#" in gap:
            return
        self.add(function, kind, start, end, gap.replace(old, new, 1))

    def visit_module(self, tree: ast.Module) -> None:
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if self.wanted(node.name, None):
                    self.function(node, node.name)
            elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                for child in node.body:
                    if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) \
                            and self.wanted(child.name, node.name):
                        self.function(child, f"{node.name}.{child.name}")

    def function(self, fn: ast.AST, qual: str) -> None:
        body = fn.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring is not code
        first = len(self.found)
        self.block(body, qual)
        for stmt in body:
            for node in ast.walk(stmt):
                self.node(node, qual)
                for block in _blocks(node):
                    self.block(block, qual)
        self.defaults(fn, qual)
        self.variables(fn, body, qual)
        self.pairs(self.found[first:], qual)

    def defaults(self, fn: Any, q: str) -> None:
        """wrong_default: a parameter's constant default changed to another plausible value."""
        for node in [*fn.args.defaults, *(d for d in fn.args.kw_defaults if d is not None)]:
            if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) \
                    and isinstance(node.operand, ast.Constant) \
                    and type(node.operand.value) is int:
                news = [str(1 - node.operand.value)]
            elif not isinstance(node, ast.Constant):
                continue
            elif type(node.value) is bool:
                news = [str(not node.value)]
            elif type(node.value) is int:
                news = [str(node.value + 1)] + ([str(node.value - 1)] if node.value > 0 else [])
            elif type(node.value) is float:
                news = ["0.0" if node.value else "1.0"]
            elif type(node.value) is str:
                news = ['""' if node.value else '" "']
            else:
                continue
            for new in news:
                self.add(q, "wrong_default", (node.lineno, node.col_offset),
                         (node.end_lineno, node.end_col_offset), new)

    def variables(self, fn: Any, body: Sequence[ast.stmt], q: str) -> None:
        """wrong_variable: a local's use replaced by another local of the function, one bound
        before that line and itself used (a parameter is bound from the start)."""
        args = fn.args
        bound: dict[str, int] = {a.arg: fn.lineno for a in
                                 [*args.posonlyargs, *args.args, *args.kwonlyargs,
                                  *([args.vararg] if args.vararg else []),
                                  *([args.kwarg] if args.kwarg else [])]}
        loads: list[ast.Name] = []
        for node in _own_scope(body):
            if isinstance(node, ast.Name):
                if isinstance(node.ctx, ast.Store):
                    bound[node.id] = min(bound.get(node.id, node.lineno), node.lineno)
                elif isinstance(node.ctx, ast.Load):
                    loads.append(node)
        used = {n.id for n in loads}
        names = sorted(n for n in bound if n in used and n not in ("self", "cls"))
        for node in loads:
            if node.id not in names:
                continue
            others = [n for n in names if n != node.id and bound[n] < node.lineno]
            if others:
                rng = random.Random(f"{self.path}:{q}:{node.lineno}:{node.col_offset}")
                self.add(q, "wrong_variable", (node.lineno, node.col_offset),
                         (node.end_lineno, node.end_col_offset), rng.choice(others))

    def block(self, block: Sequence[ast.stmt], q: str) -> None:
        """missing_case: one guard of several (`if ...:` with no else) in a block deleted
        outright, lines and all."""
        guards = [s for s in block if isinstance(s, ast.If) and not s.orelse]
        if len(guards) < 2 or len(block) < 2:
            return
        for stmt in guards:
            if not self.own_line(stmt) or stmt.end_lineno >= len(self.starts):
                continue
            tail = self.data[self.end(stmt):self.starts[stmt.end_lineno]]
            if tail.strip() and not tail.strip().startswith(b"#"):
                continue  # something else follows on the last line
            self.span(q, "missing_case", self.starts[stmt.lineno - 1],
                      self.starts[stmt.end_lineno], "")

    def branches(self, node: ast.If, q: str) -> None:
        """swap_branch (if/else bodies exchanged) and missing_case (an elif removed)."""
        orelse = node.orelse
        if not orelse:
            return
        body_end = self.end(node.body[-1])
        if len(orelse) == 1 and isinstance(orelse[0], ast.If) \
                and self.data[self.start(orelse[0]):].startswith(b"elif"):
            elif_ = orelse[0]
            rest = elif_.orelse
            if not rest:  # the last elif: from the end of the branch before to its end
                self.span(q, "missing_case", body_end, self.end(elif_), "")
            elif len(rest) == 1 and isinstance(rest[0], ast.If) \
                    and self.data[self.start(rest[0]):].startswith(b"elif"):
                self.span(q, "missing_case", self.start(elif_), self.start(rest[0]), "")
            else:
                gap = self.data[self.end(elif_.body[-1]):self.start(rest[0])]
                found = re.search(rb"\belse\s*:", gap)
                if found and b"#" not in gap:
                    self.span(q, "missing_case", self.start(elif_),
                              self.end(elif_.body[-1]) + found.start(), "")
            return
        first, last = node.body[0], orelse[0]
        gap = self.data[body_end:self.start(last)]
        if b"#" in gap or not re.fullmatch(rb"\s*else\s*:\s*", gap):
            return
        if self.own_line(first) != self.own_line(last) or \
                (self.own_line(first) and first.col_offset != last.col_offset):
            return
        then = self.data[self.start(first):body_end].decode("utf-8")
        other = self.data[self.start(last):self.end(orelse[-1])].decode("utf-8")
        if then != other:
            self.span(q, "swap_branch", self.start(first), self.end(orelse[-1]),
                      other + gap.decode("utf-8") + then)

    def pairs(self, found: Sequence[Mutation], q: str) -> None:
        """coordinated: two single edits of one function made together (a seeded few)."""
        single = [m for m in found if m.kind in _PAIRABLE and not m.more]
        rng = random.Random(f"{self.path}:{q}:pairs")
        tried: set[tuple[str, str]] = set()
        for _ in range(8 * PAIRS_PER_FUNCTION):
            if len(single) < 2 or len(tried) >= PAIRS_PER_FUNCTION:
                return
            a, b = sorted(rng.sample(single, 2), key=lambda m: (m.line, m.col))
            if (a.end_line, a.end_col) > (b.line, b.col) or a.line == b.line:
                continue  # overlapping, or one line: no more than one edit to find
            if (a.key, b.key) in tried:
                continue
            tried.add((a.key, b.key))
            self.found.append(replace(a, kind=f"coordinated:{a.kind}+{b.kind}",
                                      more=(b.spans()[0],)))

    def node(self, node: ast.AST, q: str) -> None:
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            old, new = _BINOPS[type(node.op)]
            self.between(q, "binop", node.left, node.right, old, new)
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 \
                and type(node.ops[0]) in _CMPOPS:
            old, new = _CMPOPS[type(node.ops[0])]
            kind = "boundary" if isinstance(node.ops[0], ast.Lt | ast.LtE | ast.Gt | ast.GtE) \
                else "compare"
            self.between(q, kind, node.left, node.comparators[0], old, new)
        elif isinstance(node, ast.BoolOp) and len(node.values) == 2:
            old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
            self.between(q, "boolop", node.values[0], node.values[1], old, new)
        elif isinstance(node, ast.If | ast.While | ast.IfExp) and hasattr(node, "test"):
            test = node.test
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                new = self.seg(test.operand)
                if isinstance(test.operand, ast.BoolOp | ast.Compare | ast.IfExp):
                    new = f"({new})"
                self.add(q, "negate", (test.lineno, test.col_offset),
                         (test.end_lineno, test.end_col_offset), new)
            elif "\n" not in self.seg(test):
                self.add(q, "negate", (test.lineno, test.col_offset),
                         (test.end_lineno, test.end_col_offset), f"not ({self.seg(test)})")
            if isinstance(node, ast.If) and not node.orelse and len(node.body) == 1:
                self.add(q, "remove_branch", (node.lineno, node.col_offset),
                         (node.end_lineno, node.end_col_offset), "pass")
            if isinstance(node, ast.If):
                self.branches(node, q)
            elif isinstance(node, ast.IfExp) and "\n" not in self.seg(node):
                then, other = self.seg(node.body), self.seg(node.orelse)
                gap = self.data[self.end(node.body):self.start(node.orelse)].decode("utf-8")
                if then != other:
                    self.span(q, "swap_branch", self.start(node.body), self.end(node.orelse),
                              other + gap + then)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            self.add(q, "remove_call", (node.lineno, node.col_offset),
                     (node.end_lineno, node.end_col_offset), "pass")
        elif isinstance(node, ast.Constant) and type(node.value) is int \
                and 0 <= node.value <= 64:
            for delta in (1, -1):
                value = node.value + delta
                if value >= 0:
                    self.add(q, "off_by_one", (node.lineno, node.col_offset),
                             (node.end_lineno, node.end_col_offset), str(value))
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            self.add(q, "flip_bool", (node.lineno, node.col_offset),
                     (node.end_lineno, node.end_col_offset), str(not node.value))
        elif isinstance(node, ast.Return) and node.value is not None and not (
                isinstance(node.value, ast.Constant) and node.value.value is None):
            value = node.value
            self.add(q, "return_value", (value.lineno, value.col_offset),
                     (value.end_lineno, value.end_col_offset), "None")
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
            for bound in (node.slice.lower, node.slice.upper):
                if bound is None or isinstance(bound, ast.Constant | ast.UnaryOp) \
                        or "\n" in self.seg(bound):
                    continue  # a constant bound is off_by_one's
                text = self.seg(bound)
                text = text if isinstance(bound, _SIMPLE) else f"({text})"
                for delta in ("+ 1", "- 1"):
                    self.add(q, "boundary", (bound.lineno, bound.col_offset),
                             (bound.end_lineno, bound.end_col_offset), f"{text} {delta}")
        if isinstance(node, ast.Call):
            args = node.args
            if len(args) >= 2 and not any(isinstance(a, ast.Starred) for a in args[:2]):
                first, second = args[0], args[1]
                gap = self.data[self.off(first.end_lineno, first.end_col_offset):
                                self.off(second.lineno, second.col_offset)].decode("utf-8")
                if gap.strip() == "," and self.seg(first) != self.seg(second):
                    self.add(q, "swap_args", (first.lineno, first.col_offset),
                             (second.end_lineno, second.end_col_offset),
                             self.seg(second) + gap + self.seg(first))
            if isinstance(node.func, ast.Name) and node.func.id == "range" and args \
                    and "\n" not in self.seg(args[-1]):
                bound = args[-1] if len(args) <= 2 else args[1]
                self.add(q, "range_bound", (bound.lineno, bound.col_offset),
                         (bound.end_lineno, bound.end_col_offset), f"{self.seg(bound)} - 1")


def _blocks(node: ast.AST) -> list[list[ast.stmt]]:
    """The statement lists a node holds (a body, an else, a handler's, a case's)."""
    out = [getattr(node, f) for f in ("body", "orelse", "finalbody")
           if isinstance(getattr(node, f, None), list)]
    out += [h.body for h in getattr(node, "handlers", [])]
    out += [c.body for c in getattr(node, "cases", [])]
    return [b for b in out if b and isinstance(b[0], ast.stmt)]


def _own_scope(body: Sequence[ast.stmt]) -> Iterable[ast.AST]:
    """The nodes of a function's body outside nested functions, classes, lambdas and
    comprehensions (whose names are not the function's locals)."""
    stack: list[ast.AST] = list(reversed(body))
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp,
              ast.SetComp, ast.DictComp, ast.GeneratorExp)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, nested):
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _identifiers(sources: Iterable[str]) -> set[str]:
    names: set[str] = set()
    for text in sources:
        names.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    return names


def _is_code(path: str, project: Project) -> bool:
    pure = PurePosixPath(path)
    return (path.endswith(".py") and path not in project.tests and pure.name not in
            {"setup.py", "conftest.py", "noxfile.py", "fabfile.py"}
            and not {"docs", "doc", "examples", "benchmarks", "bench"} & set(pure.parts)
            and not pure.name.startswith("test_"))


def find_mutations(project: Project) -> list[Mutation]:
    """Every candidate mutation inside functions the suite names, in a stable order.

    A function qualifies when it is public (or a method of a public class) and its name, or
    for a method its class's name, occurs in the test files; dunder methods qualify with
    their class. Each candidate re-parses after the change.
    """
    referenced = _identifiers(project.tests.values())

    def wanted(name: str, cls: str | None) -> bool:
        if cls is None:
            return not name.startswith("_") and name in referenced
        if cls not in referenced and name not in referenced:
            return False
        return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))

    found: list[Mutation] = []
    for path, data in sorted(project.workspace.items()):
        if not _is_code(path, project):
            continue
        try:
            text = data.decode("utf-8")
            tree = pyast.parse(text)
        except (UnicodeDecodeError, SyntaxError, ValueError):
            continue
        finder = _Finder(path, text, wanted)
        finder.visit_module(tree)
        lines = text.splitlines(keepends=True)
        alone: dict[int, str] = {}  # per top-level statement: the file with only its lines
        for mutation in finder.found:
            top = next((n for n in tree.body if n.lineno <= mutation.line <= n.end_lineno),
                       None)
            if top is None:
                continue
            if top.lineno not in alone:  # blank elsewhere: line numbers hold, parsing is fast
                alone[top.lineno] = "".join(
                    line if top.lineno <= number <= top.end_lineno else "\n"
                    for number, line in enumerate(lines, 1))
            try:
                pyast.parse(mutation.apply(alone[top.lineno]))
            except (SyntaxError, ValueError, DatasetError):
                continue
            found.append(mutation)
    unique = {m.key: m for m in found}
    return sorted(unique.values(), key=lambda m: (m.path, m.line, m.col, m.kind, m.replacement))


def schedule(mutations: Sequence[Mutation], seed: int) -> list[Mutation]:
    """A seeded order: every kind but the greppable ones first (`GREPPABLE`, tried only after
    all others), and within each part every function once before any function twice, the
    kinds of one function taken in turn (so one kind with many candidates cannot crowd out
    the others)."""
    rng = random.Random(seed)
    subtle = [m for m in mutations if m.kind not in GREPPABLE]
    plain = [m for m in mutations if m.kind in GREPPABLE]
    return _layers(subtle, rng) + _layers(plain, rng)


def _layers(mutations: Sequence[Mutation], rng: random.Random) -> list[Mutation]:
    """`mutations` function by function in layers, each function's kinds in turn."""
    by_function: dict[tuple[str, str], list[Mutation]] = {}
    for mutation in mutations:
        by_function.setdefault((mutation.path, mutation.function), []).append(mutation)
    groups = []
    for key in sorted(by_function):
        by_kind: dict[str, list[Mutation]] = {}
        for mutation in by_function[key]:
            by_kind.setdefault(kind_group(mutation.kind), []).append(mutation)
        buckets = [by_kind[k] for k in sorted(by_kind)]
        for bucket in buckets:
            rng.shuffle(bucket)
        rng.shuffle(buckets)
        groups.append([b[i] for i in range(max(map(len, buckets))) for b in buckets
                       if i < len(b)])
    rng.shuffle(groups)
    order: list[Mutation] = []
    depth = 0
    while True:
        layer = [g[depth] for g in groups if depth < len(g)]
        if not layer:
            return order
        order.extend(layer)
        depth += 1


# -- running pytest in a sandbox -----------------------------------------------------------
_SUMMARY = r"""
import json, re, sys
phases, collect = {}, []
for line in open(sys.argv[1], encoding="utf-8"):
    if not line.strip():
        continue
    e = json.loads(line)
    kind = e.get("$report_type")
    if kind == "CollectReport" and e.get("outcome") == "failed":
        collect.append(e.get("nodeid", ""))
    elif kind == "TestReport":
        phases.setdefault(e["nodeid"], {})[e["when"]] = e
out, msgs = {}, {}
for nodeid, seen in phases.items():
    s, c, t = seen.get("setup"), seen.get("call"), seen.get("teardown")
    if s is not None and s["outcome"] == "failed":
        o, bad = "error", s
    elif s is not None and s["outcome"] == "skipped":
        o, bad = ("xfailed" if "wasxfail" in s else "skipped"), None
    elif c is None:
        o, bad = "error", None
    elif c["outcome"] == "failed":
        o, bad = "failed", c
    elif c["outcome"] == "skipped":
        o, bad = ("xfailed" if "wasxfail" in c else "skipped"), None
    else:
        o, bad = ("xpassed" if "wasxfail" in c else "passed"), None
    if o in ("passed", "xpassed") and t is not None and t["outcome"] == "failed":
        o, bad = "error", t
    out[nodeid] = o
    if bad is not None:
        lr = bad.get("longrepr")
        msg = ""
        if isinstance(lr, dict):
            crash = lr.get("reprcrash") or {}
            frames = []
            for entry in (lr.get("reprtraceback") or {}).get("reprentries") or []:
                text = "\n".join((entry.get("data") or {}).get("lines") or [])
                frames += ["%s:%s" % f for f in re.findall(r'File "(/workspace/[^"]+)", '
                                                           r'line (\d+)', text)]
            msg = "@%s:%s%s\n%s" % (crash.get("path", ""), crash.get("lineno", 0),
                                    "".join("|" + f for f in frames[:6]),
                                    crash.get("message") or "")
        elif isinstance(lr, str):
            msg = lr
        msgs[nodeid] = msg[:1500]
json.dump({"outcomes": out, "messages": msgs, "collect_errors": collect},
          open(sys.argv[2], "w", encoding="utf-8"))
"""


@dataclass(frozen=True)
class SuiteRun:
    """One plain pytest run: outcome and failure message per node id, collection errors."""

    outcomes: dict[str, str]
    messages: dict[str, str] = field(default_factory=dict)
    collect_errors: tuple[str, ...] = ()
    timed_out: bool = False
    wall: float = 0.0
    output: str = ""


def run_suite(sandbox: Any, args: Sequence[str] = (), timeout: float = RUN_TIMEOUT) -> SuiteRun:
    """`python3 -m pytest` in the sandbox's workspace (files already there), per-test outcomes
    from pytest-reportlog as tests/grading/plain_pytest.py reads them. It runs in the agent's
    terminal, with the suite environment the grade has too (`sandboxes.environment`), named
    again here so that no variable exported in that shell changes what validation sees."""
    quoted = " ".join(shlex.quote(a) for a in args)
    unset = " ".join(f"-u {name}" for name in unset_variables())
    command = (f"rm -f {REPORT} {OUTCOMES}; env {unset} {shlex.join(env_assignments())} "
               "python3 -m pytest "
               f"-p no:cacheprovider -q --tb=native --report-log={REPORT} {quoted} "
               ">/dev/null 2>&1; "
               f"python3 -c {shlex.quote(_SUMMARY)} {REPORT} {OUTCOMES}")
    started = time.perf_counter()
    result = sandbox.run(command, timeout=timeout)
    wall = time.perf_counter() - started
    if result.timed_out:
        return SuiteRun({}, timed_out=True, wall=wall, output=result.output[-2000:])
    try:
        raw = json.loads(sandbox.read_file(OUTCOMES))
    except Exception as exc:  # no report: pytest could not start at all
        return SuiteRun({}, collect_errors=(f"<no report: {exc}>",), wall=wall,
                        output=result.output[-2000:])
    return SuiteRun(raw["outcomes"], raw["messages"], tuple(raw["collect_errors"]), False,
                    wall, result.output[-2000:])


def suite_files(project: Project, files: Mapping[str, bytes] | None = None) -> dict[str, bytes]:
    """The whole tree pytest runs in: workspace, suite and the ini as `pytest.ini`."""
    tree = dict(project.workspace if files is None else files)
    tree.update({p: t.encode("utf-8") for p, t in project.tests.items()})
    tree["pytest.ini"] = project.ini.encode("utf-8")
    return tree


# -- validation -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Baseline:
    """The original tree's stable passing ids (3 runs), and the suite's canaried test ids."""

    passing: tuple[str, ...]
    unstable: tuple[str, ...]
    canaried: frozenset[str]
    wall: float  # the slowest of the original's runs

    @property
    def timeout(self) -> float:
        """A mutant's run taking this long is a hang (an endless loop the bug made)."""
        return min(RUN_TIMEOUT, max(30.0, 4 * self.wall))


@dataclass(frozen=True)
class Verdict:
    """What validation decided about one mutation; `kept` carries the task's test split."""

    mutation: Mutation
    kept: bool
    reason: str
    fail_to_pass: tuple[str, ...] = ()
    pass_to_pass: tuple[str, ...] = ()
    flaky: tuple[str, ...] = ()
    canaried: int = 0
    failures: int = 0
    statement: str = ""
    messages: tuple[str, ...] = ()  # failure messages of the FAIL_TO_PASS tests, in order
    wall: float = 0.0


def base_id(node_id: str) -> str:
    """A node id without its parametrization (`path::test[1-2]` -> `path::test`)."""
    return node_id.split("[", 1)[0]


def canaried_ids(project: Project) -> frozenset[str]:
    """Base ids of the suite's tests whose canary may earn (`Canary.earns`): a bug whose
    failing tests only gate (their expectations come from run-time data, a shared parametrize
    table say) could never pay for a fix, and the suite would leave it out at load
    (`repo_suite.can_earn` asks the same question of the same test modules)."""
    from opd_gym.grading.canary import make_canaries, module_names

    paths = [p for p in project.tests if p.endswith(".py")
             and (p.rpartition("/")[2].startswith("test_") or p.endswith("_test.py"))]
    modules = module_names({**project.workspace, **project.tests})
    canaries = make_canaries(dict(project.tests), paths, CANARY_SEED, solution_modules=modules)
    return frozenset(t for t, c in canaries.canaries.items() if c.earns)


def baseline(project: Project, pool: Any, runs: int = STABILITY_RUNS) -> Baseline:
    """Run the original suite `runs` times; refuse a project whose suite cannot run."""
    sandbox = pool.acquire()
    try:
        sandbox.write_files(suite_files(project))
        results = [run_suite(sandbox) for _ in range(runs)]
    finally:
        pool.release(sandbox)
    first = results[0]
    if first.timed_out or not first.outcomes:
        raise DatasetError(f"{project.name}: the original suite did not run "
                           f"({'timed out' if first.timed_out else first.output[-300:]})")
    ids = set(first.outcomes)
    stable = {i for i in ids if all(r.outcomes.get(i) == first.outcomes[i] for r in results)}
    passing = sorted(i for i in stable if first.outcomes[i] == "passed")
    if not passing:
        raise DatasetError(f"{project.name}: no test passes on the original tree")
    return Baseline(tuple(passing), tuple(sorted(ids - stable)), canaried_ids(project),
                    max(r.wall for r in results))


def split_tests(failing: Sequence[str], passing: Sequence[str], canaried: frozenset[str],
                seed: int = 0) -> tuple[list[str], list[str]]:
    """(FAIL_TO_PASS, PASS_TO_PASS): at most `F2P_CAP` failing ids, canaried first, and every
    id still passing (the module docstring); `seed` is kept for callers, nothing is sampled."""
    ordered = sorted(failing, key=lambda i: (base_id(i) not in canaried, i))
    failed = set(failing)
    return ordered[:F2P_CAP], sorted(i for i in passing if i not in failed)


class Bench:
    """A sandbox holding the original tree, reused for many mutants: each validation writes
    the mutated file, runs, and writes the original back (no container start per mutant).
    A sandbox that dies is replaced from the pool."""

    def __init__(self, project: Project, pool: Any) -> None:
        self.project, self.pool = project, pool
        self.sandbox: Any = None

    def ready(self) -> Any:
        """The live sandbox holding the original tree (started and filled on first use)."""
        if self.sandbox is not None and not self.sandbox.alive:
            self.close()
        if self.sandbox is None:
            self.sandbox = self.pool.acquire()
            self.sandbox.write_files(suite_files(self.project))
        return self.sandbox

    def close(self) -> None:
        """Give the sandbox back to the pool (it is discarded there)."""
        if self.sandbox is not None:
            self.pool.release(self.sandbox)
            self.sandbox = None


def validate_mutation(project: Project, base: Baseline, mutation: Mutation, pool: Any,
                      seed: int = 0, bench: Bench | None = None) -> Verdict:
    """Run the mutant's whole suite once and its FAIL_TO_PASS tests twice more, and decide."""
    started = time.perf_counter()
    original = project.workspace[mutation.path]
    mutant = mutation.apply(original.decode("utf-8")).encode("utf-8")
    own = bench is None
    bench = bench or Bench(project, pool)

    def done(kept: bool, reason: str, **kw: Any) -> Verdict:
        return Verdict(mutation, kept, reason, wall=time.perf_counter() - started, **kw)

    try:
        sandbox = bench.ready()
        sandbox.write_files({mutation.path: mutant})
        try:
            first = run_suite(sandbox, timeout=base.timeout)
            if first.timed_out:
                bench.close()  # a runaway mutant may leave the sandbox busy
                return done(False, "timed out")
            if first.collect_errors or not first.outcomes:
                return done(False, "breaks collection")
            passing = set(base.passing)
            failing = sorted(i for i in passing
                             if first.outcomes.get(i, "missing") != "passed")
            if not failing:
                return done(False, "no test fails")
            still = sorted(i for i in passing if first.outcomes.get(i) == "passed")
            f2p, p2p = split_tests(failing, still, base.canaried, seed)
            if not any(base_id(i) in base.canaried for i in f2p):
                return done(False, "no FAIL_TO_PASS test can earn", failures=len(failing))
            # The original passed every PASS_TO_PASS id in all its runs (the baseline): only
            # the FAIL_TO_PASS ids run again, to see that the mutant fails them every time.
            reruns = [run_suite(sandbox, f2p, timeout=base.timeout)
                      for _ in range(STABILITY_RUNS - 1)]
        finally:
            if bench.sandbox is not None:
                bench.sandbox.write_files({mutation.path: original})
    finally:
        if own:
            bench.close()
    if any(r.timed_out or r.collect_errors for r in reruns):
        return done(False, "unstable (a rerun timed out or broke collection)")
    flaky = sorted(i for i in f2p if any(r.outcomes.get(i, "missing")
                                         != first.outcomes.get(i, "missing")
                                         for r in reruns))
    f2p = [i for i in f2p if i not in flaky]
    p2p = [i for i in p2p if i not in flaky]
    if not f2p:
        return done(False, "every failing test is flaky", flaky=tuple(flaky))
    canaried = sum(base_id(i) in base.canaried for i in f2p)
    if not canaried:
        return done(False, "no FAIL_TO_PASS test can earn", flaky=tuple(flaky),
                    failures=len(failing))
    messages = tuple(first.messages.get(i, "")[:1500] for i in f2p)
    statement = write_statement(project, mutation, messages, f2p)
    problems = check_statement(project, mutation, statement, f2p + p2p)
    if problems:  # a task is only as good as its report
        return done(False, f"no statement passes the checker ({problems[0]})",
                    flaky=tuple(flaky), failures=len(failing))
    return done(True, "kept", fail_to_pass=tuple(f2p), pass_to_pass=tuple(p2p),
                flaky=tuple(flaky), canaried=canaried, failures=len(failing),
                statement=statement, messages=messages)


# -- problem statements ------------------------------------------------------------------
def write_statement(project: Project, mutation: Mutation, messages: Sequence[str],
                    f2p: Sequence[str]) -> str:
    """A user's bug report of the mutant (`opd_gym.authoring.statements`): symptom, snippet,
    observed and expected; "" when no failing test yields one. `messages[i]` is the
    validation run's message of `f2p[i]`."""
    names = {part for i in f2p for part in base_id(i).split("::")[1:]}
    return write_report(project.tests, project.name, project.version, messages, f2p, names,
                        task_id(project.name, mutation),
                        hide=[mutation.function.rpartition(".")[2]]) or ""


def check_statement(project: Project, mutation: Mutation, statement: str,
                    test_ids: Iterable[str]) -> list[str]:
    """What keeps `statement` from being a task's statement (`statement_problems`)."""
    original = project.workspace[mutation.path].decode("utf-8")
    return statement_problems(statement, path=mutation.path, function=mutation.function,
                              mutated_lines=mutation.lines(original), test_ids=test_ids)


def _forbidden(project: Project, mutation: Mutation, test_ids: Iterable[str]) -> list[str]:
    """Strings a statement must not contain: test ids, test function names, mutated lines."""
    out: list[str] = []
    for node_id in test_ids:
        out.append(node_id)
        out.extend(part for part in base_id(node_id).split("::")[1:] if len(part) > 3)
    original = project.workspace[mutation.path].decode("utf-8")
    for line in mutation.lines(original):
        for piece in line.splitlines():
            if len(piece.strip()) >= 6:
                out.append(piece.strip())
    return out


def statement_leaks(project: Project, mutation: Mutation, statement: str,
                    test_ids: Iterable[str]) -> list[str]:
    """The forbidden strings (test ids and names, mutated lines) found in `statement`."""
    return [x for x in _forbidden(project, mutation, test_ids) if x in statement]


def verdict_record(project: Project, verdict: Verdict) -> dict[str, Any]:
    """The manifest row of a kept verdict (with its `difficulty`)."""
    return {"id": task_id(project.name, verdict.mutation), "project": project.name,
            "mutation": verdict.mutation.record(), "statement": verdict.statement,
            "fail_to_pass": list(verdict.fail_to_pass),
            "pass_to_pass": list(verdict.pass_to_pass), "flaky": list(verdict.flaky),
            "canaried": verdict.canaried, "failures": verdict.failures,
            "difficulty": difficulty(verdict.mutation, verdict.fail_to_pass,
                                     verdict.failures)}


class Progress:
    """The resumable log of a synthesis run: one JSON line per tried mutation (any verdict)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.rows: dict[tuple[str, str], dict[str, Any]] = {}
        self.reload()

    def reload(self) -> None:
        """Read the rows on disk again (another process may be growing the same file)."""
        if not self.path.exists():
            return
        with self.lock:
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue  # a line another process is still writing
                self.rows.setdefault((row["project"], row["key"]), row)

    def seen(self, project: str, key: str) -> bool:
        return (project, key) in self.rows

    def add(self, row: dict[str, Any]) -> None:
        with self.lock:
            self.rows[(row["project"], row["key"])] = row
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row, sort_keys=True) + "\n")

    def of(self, project: str) -> list[dict[str, Any]]:
        return [r for (p, _), r in self.rows.items() if p == project]


# -- who validates mutants: threads of this process (Ray actors: synth_workers) --
class Validators(Protocol):
    """A set of workers that validate mutants: `slots` at once, results in any order."""

    slots: int

    def submit(self, project: Project, base: Baseline, mutation: Mutation) -> Any:
        """Start validating `mutation`; returns a handle for `wait`."""
        ...

    def wait(self, handles: Sequence[Any]) -> list[tuple[Any, Verdict | None]]:
        """Block until at least one handle is done; its (handle, verdict) pairs."""
        ...

    def release(self, project: Project) -> None:
        """Give back the sandboxes holding `project` (its mutants are all validated)."""
        ...

    def close(self) -> None:
        """Stop the workers and give their sandboxes back."""
        ...


class ThreadValidators:
    """`workers` threads of this process, sharing one sandbox pool (the default backend)."""

    def __init__(self, pool: Any, workers: int) -> None:
        self.pool, self.slots = pool, max(workers, 1)
        self._executor = ThreadPoolExecutor(max_workers=self.slots,
                                            thread_name_prefix="opd-synth")
        self._local = threading.local()
        self._lock = threading.Lock()
        self._benches: list[Bench] = []

    def _bench(self, project: Project) -> Bench:
        """This thread's bench for `project` (made on first use)."""
        benches = self._local.__dict__.setdefault("benches", {})
        if project.name not in benches:
            benches[project.name] = Bench(project, self.pool)
            with self._lock:
                self._benches.append(benches[project.name])
        return benches[project.name]

    def release(self, project: Project) -> None:
        """Close every thread's bench of `project` (none of its mutants is in flight)."""
        with self._lock:
            for bench in self._benches:
                if bench.project.name == project.name:
                    bench.close()

    def _one(self, project: Project, base: Baseline, mutation: Mutation) -> Verdict | None:
        bench = self._bench(project)
        try:
            return validate_mutation(project, base, mutation, self.pool, 0, bench)
        except SandboxError:  # our machinery failed, not the mutant
            bench.close()
            return None

    def submit(self, project: Project, base: Baseline, mutation: Mutation) -> Future:
        return self._executor.submit(self._one, project, base, mutation)

    def wait(self, handles: Sequence[Future]) -> list[tuple[Future, Verdict | None]]:
        done, _ = wait(handles, return_when=FIRST_COMPLETED)
        return [(f, f.result()) for f in handles if f in done]

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        for bench in self._benches:
            bench.close()
        self._benches.clear()



def synthesize(project: Project, pool: Any, progress: Progress, max_tasks: int, seed: int = 0,
               max_tries: int | None = None, workers: int = 2,
               on_verdict: Callable[[Verdict | None], None] | None = None,
               validators: Any = None) -> list[dict]:
    """Validate mutations of `project` in schedule order until `max_tasks` are kept.

    Mutations are handed to `validators` (`opd_gym.authoring.synth_workers`: threads sharing
    `pool` by default, or Ray actors) in schedule order, at most its `slots` at a time, and
    every one handed out is waited for: the mutations validated are always a prefix of the
    schedule, so the records kept are those of a serial run with the same seed, whatever
    the number of workers. Tried mutations are logged to `progress` (and skipped when the
    run resumes). Returns the kept records of this project, resumed ones included, in
    schedule order; `pool` runs the original suite (the baseline).
    """
    order = schedule(find_mutations(project), seed)
    progress.reload()
    kept = {r["key"] for r in progress.of(project.name) if r.get("kept")}
    todo = [m for m in order if not progress.seen(project.name, m.key)]
    if max_tries is not None:
        todo = todo[:max_tries]
    if len(kept) < max_tasks and todo:
        base = baseline(project, pool)
        own = validators is None
        runner = ThreadValidators(pool, workers) if own else validators
        try:
            _validate_in_order(project, base, todo, runner, progress, kept, max_tasks,
                               on_verdict)
        finally:
            if own:
                runner.close()
            else:  # shared by several projects: this one's sandboxes go back now
                runner.release(project)
    rows = {r["key"]: r for r in progress.of(project.name)}
    records = []
    for mutation in order:
        row = rows.get(mutation.key)
        if row is None or not row.get("kept"):
            continue
        record = dict(row["record"])  # statements are re-written with the current writer
        record["difficulty"] = difficulty(mutation, record["fail_to_pass"],
                                          record.get("failures", 0))
        record["statement"] = write_statement(project, mutation, row.get("messages", []),
                                              record["fail_to_pass"])
        if check_statement(project, mutation, record["statement"],
                           record["fail_to_pass"] + record["pass_to_pass"]):
            continue  # no report passes the checker: not a task
        records.append(record)
    return records[:max_tasks]


def _validate_in_order(project: Project, base: Baseline, todo: Sequence[Mutation],
                       runner: Any, progress: Progress, kept: set[str], max_tasks: int,
                       on_verdict: Callable[[Verdict | None], None] | None) -> None:
    """Hand `todo` out in order to `runner` until `max_tasks` are kept, logging each verdict
    (a verdict of None, the machinery failing, is not logged: a later run retries it)."""
    pending = iter(todo)
    in_flight: dict[Any, Mutation] = {}
    while True:
        while len(in_flight) < runner.slots and len(kept) < max_tasks:
            mutation = next(pending, None)
            if mutation is None:
                break
            progress.reload()  # another process may have tried it meanwhile
            if not progress.seen(project.name, mutation.key):
                in_flight[runner.submit(project, base, mutation)] = mutation
        if not in_flight:
            return
        for handle, verdict in runner.wait(list(in_flight)):
            mutation = in_flight.pop(handle)
            if verdict is not None:
                row: dict[str, Any] = {"project": project.name, "key": mutation.key,
                                       "kept": verdict.kept, "reason": verdict.reason,
                                       "wall": round(verdict.wall, 3)}
                if verdict.kept:
                    row["record"] = verdict_record(project, verdict)
                    row["messages"] = list(verdict.messages)
                    kept.add(mutation.key)
                progress.add(row)
            if on_verdict is not None:
                on_verdict(verdict)


