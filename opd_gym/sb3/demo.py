"""A small candidate-choice task set: per task, K=4 slots of candidate solutions (one passes
the hidden tests) written and submitted in one turn, and "submit unchanged"; used by the
example and the learning test. The correct slot differs per task, so no constant action wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opd_gym.sb3.actions import SUBMIT, Candidate
from opd_gym.tasks import Task

K = 4

_SPECS: dict[str, dict[str, Any]] = {
    "sb3_double": {
        "module": "mathx", "func": "double", "arg": "x",
        "prompt": "Write double(x) in mathx.py: it returns twice the number x.",
        "bodies": ["x * 2", "x + 2", "x ** 2"],  # correct: slot 0
        "correct": 0,
        "tests": "from mathx import double\n\n\ndef test_double():\n"
                 "    assert double(3) == 6\n    assert double(0) == 0\n"
                 "    assert double(-4) == -8\n",
    },
    "sb3_reverse": {
        "module": "strx", "func": "reverse", "arg": "s",
        "prompt": "Write reverse(s) in strx.py: it returns the text s backwards ('abc' -> 'cba').",
        "bodies": ["s.upper()", "s", "s[::-1]"],  # correct: slot 2
        "correct": 2,
        "tests": "from strx import reverse\n\n\ndef test_reverse():\n"
                 "    assert reverse('abc') == 'cba'\n    assert reverse('') == ''\n"
                 "    assert reverse('level up') == 'pu level'\n",
    },
    "sb3_biggest": {
        "module": "listx", "func": "biggest", "arg": "xs",
        "prompt": "Write biggest(xs) in listx.py: it returns the largest item of a non-empty list.",
        "bodies": ["min(xs)", "max(xs)", None],  # correct: slot 1; slot 2 is empty (masked)
        "correct": 1,
        "tests": "from listx import biggest\n\n\ndef test_biggest():\n"
                 "    assert biggest([3, 9, 2]) == 9\n    assert biggest([-5, -1]) == -1\n"
                 "    assert biggest([7]) == 7\n",
    },
}

#: The slot holding the passing candidate, per task id.
CORRECT_SLOT: dict[str, int] = {task_id: spec["correct"] for task_id, spec in _SPECS.items()}


def _source(spec: Mapping[str, Any], body: str) -> str:
    return f"def {spec['func']}({spec['arg']}):\n    return {body}\n"


def demo_tasks() -> list[Task]:
    """The three tasks (starter stubs raise NotImplementedError)."""
    tasks = []
    for task_id, spec in _SPECS.items():
        path = f"{spec['module']}.py"
        correct = spec["bodies"][spec["correct"]]
        tasks.append(Task(
            id=task_id, prompt=spec["prompt"],
            files={path: f"def {spec['func']}({spec['arg']}):\n    raise NotImplementedError\n"},
            tests={f"test_{spec['module']}.py": spec["tests"]},
            solution={path: _source(spec, correct)},
        ))
    return tasks


def demo_candidates(observation: str, info: Mapping[str, Any]) -> list[Candidate]:
    """The K slots for the episode's task: three write-and-submit candidates (one may be
    empty), then "submit unchanged"; stands in for an LLM proposing K actions."""
    spec = _SPECS[str(info["task_id"])]
    path = f"{spec['module']}.py"
    slots: list[Candidate] = []
    for body in spec["bodies"]:
        if body is None:
            slots.append(None)
        else:
            write = {"name": "write_file",
                     "arguments": {"path": path, "content": _source(spec, body)}}
            slots.append([write, {"name": "submit"}])
    slots.append(SUBMIT)
    return slots
