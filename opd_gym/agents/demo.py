"""The demo policy: reaches each task's reference solution through a realistic detour.

It looks around, writes its first attempt with a planted mistake, runs a check that fails,
repairs the mistake with `edit_file`, checks again and submits, so a demo run shows errors,
judge hints and recovery. Deterministic; needs tasks that ship a reference solution.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from opd_gym.agents.scripted import SUBMIT_CALL, ScriptedAgent
from opd_gym.errors import DatasetError
from opd_gym.records.task import Task
from opd_gym.tools.parsing import format_tool_call

PLANTED_BUG = "\ndef broken(:\n"  # a syntax error: py_compile names file and line
PLACEHOLDER = "TODO\n"


def _check(paths: list[str]) -> str:
    python = [p for p in paths if p.endswith(".py")]
    if python:
        return "python3 -m py_compile " + " ".join(shlex.quote(p) for p in python) + " && echo ok"
    return " && ".join(f"cat {shlex.quote(p)}" for p in paths)


def demo_script(task: Task) -> list[str]:
    """Tool-call turns: look, flawed write, failing check, edit fix, passing check, submit."""
    if not task.solution:
        raise DatasetError(f"task {task.id!r} ships no reference solution for the demo policy")
    paths = sorted(task.solution)
    target = next((p for p in paths if p.endswith(".py")), paths[0])
    original = task.solution[target]
    flawed = original + PLANTED_BUG if target.endswith(".py") else PLACEHOLDER
    writes = [
        format_tool_call("write_file", {"path": p, "content": flawed if p == target else text})
        for p, text in ((p, task.solution[p]) for p in paths)
    ]
    if target.endswith(".py"):
        fix = {"path": target, "old_text": PLANTED_BUG, "new_text": "\n"}
    else:
        fix = {"path": target, "old_text": PLACEHOLDER, "new_text": original}
    return [
        format_tool_call("terminal", {"command": "ls -la"}),
        "\n".join(writes),
        format_tool_call("terminal", {"command": _check(paths)}),
        format_tool_call("edit_file", fix),
        format_tool_call("terminal", {"command": _check(paths)}),
        SUBMIT_CALL,
    ]


class DemoAgent(ScriptedAgent):
    """Plays `demo_script` for the task named in `info["task_id"]`."""

    def __init__(self, tasks: Iterable[Task]) -> None:
        super().__init__()
        self.tasks = {task.id: task for task in tasks}

    def script(self, observation: str, info: Mapping[str, Any]) -> list[str]:
        return demo_script(self.tasks[info["task_id"]])
