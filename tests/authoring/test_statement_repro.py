"""Statements reproduce their bug (issue 30, point 3), checked against the mutant itself: each
snippet of a fixed sample (3 tasks per library of the committed `repo` suite) runs as a user's
script at a terminal (`docker exec -t`) in a container of the sandbox image, in the task's
workspace (the mutant; `src/` on the path for a src layout, as an install would put it), and
must show what its statement's observed part says: the exception it names, the value it
prints, the truth it reports, or no error; a snippet that is the test's body up to its failing
check must fail. The writer never sees this run: it reads only the test's source and pytest's
failure message, so this is an independent check of what it wrote."""

from __future__ import annotations

import ast
import json
import random
import re
import subprocess

import pytest

from opd_gym.authoring.statements import OBSERVED_LABELS
from opd_gym.grading.plain import container, put_files
from opd_gym.sandboxes.image import DEFAULT_IMAGE
from opd_gym.tasks.repo_suite import load_repo_suite

pytestmark = pytest.mark.docker

PER_LIBRARY = 3
RUNNER = r'''
import ast, json, sys
tree = ast.parse(open(sys.argv[1], encoding="utf-8").read())
*before, last = tree.body
scope = {"__name__": "__main__"}
try:
    exec(compile(ast.Module(body=before, type_ignores=[]), "snippet", "exec"), scope)
    if isinstance(last, ast.Expr):
        value = eval(compile(ast.Expression(last.value), "snippet", "eval"), scope)
        print("\n@result " + json.dumps({"returned": repr(value), "truth": bool(value)}))
    else:
        exec(compile(ast.Module(body=[last], type_ignores=[]), "snippet", "exec"), scope)
        print("\n@result " + json.dumps({"ran": True}))
except BaseException as exc:
    print("\n@result " + json.dumps({"raised": type(exc).__name__}))
'''


def observed(statement: str) -> str:
    """The observed part of a statement (after its label)."""
    for label in OBSERVED_LABELS:
        found = re.search(rf"^{re.escape(label)} (.*)$", statement, flags=re.M)
        if found:
            return found.group(1)
    raise AssertionError(f"no observed part in:\n{statement}")


def shown_as(printed: str, shown: str) -> bool:
    """Whether a repr matches a statement's value: equal once addresses are dropped, or, where
    pytest cut the value short (`<built-in me...>`), equal at both ends of the cut."""
    printed = re.sub(r" at 0x[0-9a-f]+", "", printed).replace("__main__.", "")
    cut = re.search(r"\.\.\.|\[\d+ chars\]", shown)  # pytest's and unittest's cuts
    if cut is None:
        return printed == shown
    head, tail = shown[:cut.start()], shown[cut.end():]
    return printed.startswith(head) and printed.endswith(tail)


def reproduces(statement: str, result: dict) -> bool:
    """Whether the run shows what the statement says happens."""
    said = observed(statement)
    raised = re.match(r"`([\w.]+)(?::[^`]*)?` is raised", said)
    snippet = re.search(r"```python\n(.*?)```", statement, flags=re.S).group(1)
    if not isinstance(ast.parse(snippet).body[-1], ast.Expr | ast.Assign):
        # the test's body up to its failing check (an assert, a loop of them): it must fail
        return "raised" in result and (not raised or result["raised"] == raised.group(1)
                                       .rpartition(".")[2])
    if raised:
        return result.get("raised") == raised.group(1).rpartition(".")[2]
    if said.startswith("The check on the last line fails"):
        return "raised" in result
    if "raised" in result:
        return False
    value = re.match(r"It returns `(.*)`$", said)
    if value:
        return "returned" in result and shown_as(result["returned"], value.group(1))
    truth = re.match(r"It is (truthy|falsy)", said)
    if truth:
        return result.get("truth") == (truth.group(1) == "truthy")
    return True  # "no exception is raised", "the result lacks ...": it ran without raising


def sample() -> list:
    """A fixed sample: PER_LIBRARY tasks with a Python snippet per library (seeded)."""
    by_library: dict[str, list] = {}
    for task in load_repo_suite():
        if "```python\n" in task.prompt:
            by_library.setdefault(task.metadata["library"], []).append(task)
    rng = random.Random(30)
    return [t for name in sorted(by_library)
            for t in rng.sample(by_library[name], min(PER_LIBRARY, len(by_library[name])))]


def test_sampled_snippets_reproduce_their_statement_on_the_mutant():
    tasks = sample()
    assert len({t.metadata["library"] for t in tasks}) >= 20
    wrong = []
    with container(DEFAULT_IMAGE) as name:
        put_files(name, {"run.py": RUNNER.encode()}, root="/tmp/repro")
        for task in tasks:
            snippet = re.search(r"```python\n(.*?)```", task.prompt, flags=re.S).group(1)
            root = f"/tmp/w-{task.id}"
            put_files(name, {**{p: t.encode() for p, t in task.files.items()},
                             "snippet_.py": snippet.encode()}, root=root)
            done = subprocess.run(
                ["docker", "exec", "-t", "-w", root, "-e", f"PYTHONPATH={root}:{root}/src", name,
                 "timeout", "30", "python3", "/tmp/repro/run.py", "snippet_.py"],
                capture_output=True, text=True, timeout=60)
            lines = [line for line in done.stdout.replace("\r", "").splitlines()
                     if line.startswith("@result ")]  # a tty mixes in what the snippet prints
            result = json.loads(lines[-1][8:]) if lines else {"nothing": done.stdout[-300:]}
            if not reproduces(task.prompt, result):
                wrong.append(f"{task.id}: says {observed(task.prompt)[:120]!r}, "
                             f"ran {result}")
    # Measured over the whole suite when this test was written: 1,077 of 1,084
    # snippets reproduce; the few that do not lean on what the writer cannot see (a fixture
    # the test takes, an earlier call in a helper). A writer that regresses fails this.
    assert len(wrong) <= len(tasks) // 20, \
        f"{len(wrong)} of {len(tasks)} snippets do not reproduce:\n" + "\n".join(wrong)
