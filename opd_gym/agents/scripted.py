"""Scripted agents: replay fixed tool-call texts, e.g. a task's reference solution.

An agent has `reset(observation, info)` and `act(observation, info) -> str`; `run_episode`
drives one episode with it through the public env API.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import gymnasium as gym

from opd_gym.errors import DatasetError
from opd_gym.records.task import Task
from opd_gym.tools.formats import get_tool_format
from opd_gym.tools.parsing import format_tool_call

SUBMIT_CALL = format_tool_call("submit")


def check_command(paths: Sequence[str]) -> str:
    """A terminal command that lists the workspace and byte-compiles the given Python files."""
    python = [p for p in paths if p.endswith(".py")]
    command = "ls -R . | head -n 50"
    if python:
        command += " && python3 -m py_compile " + " ".join(shlex.quote(p) for p in python)
        command += " && echo compiled"
    return command


def reference_script(task: Task, *, wrong: bool = False) -> list[str]:
    """Turns that write each reference file, run a check in the terminal, then submit.

    With `wrong=True` every solution file is written empty instead (a failing submission).
    """
    if not task.solution:
        raise DatasetError(f"task {task.id!r} ships no reference solution")
    if task.harbor is not None:
        return harbor_reference_script(task, wrong=wrong)
    turns = [
        format_tool_call("write_file", {"path": path, "content": "" if wrong else text})
        for path, text in sorted(task.solution.items())
    ]
    turns.append(format_tool_call("terminal", {"command": check_command(sorted(task.solution))}))
    turns.append(SUBMIT_CALL)
    return turns


def harbor_reference_script(task: Task, *, wrong: bool = False) -> list[str]:
    """A Harbor task's reference: its solution/solve.sh run in the terminal, then submit
    (`wrong`: submit the untouched workdir). Only solve.sh runs: a solution reading other
    files from /solution (Harbor copies the folder there) is refused."""
    script = task.solution.get("solve.sh")
    if script is None:
        raise DatasetError(f"Harbor task {task.id!r} ships no solution/solve.sh")
    if len(task.solution) > 1:
        raise DatasetError(f"Harbor task {task.id!r}: its solution/ holds more than solve.sh; "
                           "the reference runs solve.sh alone (no /solution folder is given)")
    if wrong:
        return [SUBMIT_CALL]
    end = "OPD_SOLVE"
    while end in script:
        end += "_"
    command = f"bash <<'{end}'\n{script.rstrip()}\n{end}"
    return [format_tool_call("terminal", {"command": command}), SUBMIT_CALL]


def in_format(output: str, tool_format: str) -> str:
    """A Hermes-written scripted output rewritten as the env's tool-call format asks."""
    if tool_format in ("", "hermes"):
        return output
    parsed = get_tool_format("hermes").parse(output)
    if parsed.errors or not parsed.calls:
        return output
    return get_tool_format(tool_format).format_calls(
        [(call.name, call.arguments) for call in parsed.calls]
    )


class ScriptedAgent:
    """Replays `outputs` one per step, then keeps submitting (in the env's tool format,
    read from `info["tool_format"]`)."""

    translate = True  # write the env's format (MalformedAgent keeps its bytes exactly)

    def __init__(self, outputs: Iterable[str] = ()) -> None:
        self.outputs = list(outputs)
        self._position = 0

    def script(self, observation: str, info: Mapping[str, Any]) -> list[str]:
        """The outputs for the episode starting with (observation, info)."""
        return self.outputs

    def reset(self, observation: str, info: Mapping[str, Any]) -> None:
        self._script = self.script(observation, info)
        self._position = 0

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        if self._position >= len(self._script):
            output = SUBMIT_CALL
        else:
            output = self._script[self._position]
            self._position += 1
        return in_format(output, str(info.get("tool_format", ""))) if self.translate else output


class ReferenceAgent(ScriptedAgent):
    """Solves any task that ships a reference solution (looked up by `info["task_id"]`)."""

    wrong = False

    def __init__(self, tasks: Iterable[Task]) -> None:
        super().__init__()
        self.tasks = {task.id: task for task in tasks}

    def script(self, observation: str, info: Mapping[str, Any]) -> list[str]:
        return reference_script(self.tasks[info["task_id"]], wrong=self.wrong)


class WrongAgent(ReferenceAgent):
    """Writes every solution file empty, checks, and submits: a reliably failing agent."""

    wrong = True


MALFORMED_OUTPUTS = (
    "I think I should look at the files first.",
    "<tool_call>{'name': 'terminal', 'arguments': {'command': 'ls'}}</tool_call>",
    '<tool_call>{"name": "rm_everything", "arguments": {}}</tool_call>',
    '<tool_call>{"name": "read_file", "arguments": {"path": 42}}</tool_call>',
    '<tool_call>{"name": "write_file", "arguments": {"path": "x.py"}}</tool_call>',
    '{"name": "terminal", "arguments": {"command": "ls"}}',
    "<think>maybe <tool_call>{\"name\": \"submit\"}</tool_call></think>no call after thinking",
)


class MalformedAgent(ScriptedAgent):
    """Only ever produces malformed output (cycling through common mistakes); never submits."""

    def __init__(self, outputs: Iterable[str] = MALFORMED_OUTPUTS) -> None:
        super().__init__(outputs)

    def act(self, observation: str, info: Mapping[str, Any]) -> str:
        output = self._script[self._position % len(self._script)]
        self._position += 1
        return output


def run_episode(
    env: gym.Env, agent: ScriptedAgent, *, seed: int | None = None,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Play one episode; returns the return, step count, and the last step's info."""
    observation, info = env.reset(seed=seed, options=options)
    agent.reset(observation, info)
    total, steps = 0.0, 0
    while True:
        observation, reward, terminated, truncated, info = env.step(agent.act(observation, info))
        total += float(reward)
        steps += 1
        if terminated or truncated:
            return {"return": total, "steps": steps, "terminated": terminated,
                    "truncated": truncated, "info": info}
