"""mini-swe-agent's environment class for opd_gym: each command it runs is one env step.

The harness drives. When it asks to run a command, this class takes the proxy's recorded
turns of the episode not stepped yet (the last one is the model output that held the
command), steps the env with each as a token-exact action, so the command runs in the
episode's sandbox and the OPD wrapper scores exactly the recorded ids on the prompt the model
saw, and hands the tool result back to the harness as the command's output.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from opd_gym.harness.errors import HarnessError
from opd_gym.tools.schemas import SUBMIT, TERMINAL

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"  # mini-swe-agent's final-output line
_SUBMIT_COMMAND = re.compile(rf"^\s*echo\s+['\"]?{SUBMIT_MARKER}\b")
_STATUS_LINE = re.compile(r"\n?\[(exit code: -?\d+[^\]]*|timed out after [^\]]*)\]\Z")


def is_submit_command(command: str) -> bool:
    """Whether `command` prints the submit marker first (mini-swe-agent's submit command)."""
    return bool(_SUBMIT_COMMAND.match(command))


def command_output(content: str) -> str:
    """The command's own output from the env's tool result (its status line dropped)."""
    output = _STATUS_LINE.sub("", content)
    return "" if output == "(no output)" else output


class SandboxEnvironment:
    """A mini-swe-agent `Environment` that executes in the episode's opd_gym sandbox."""

    def __init__(self, step: Callable[[dict[str, Any]], dict[str, Any]], proxy: Any,
                 key: str) -> None:
        self.step, self.proxy, self.key = step, proxy, key  # step(action) -> the step's info
        self.config: dict[str, Any] = {"episode": key}
        self.stepped = 0  # proxy turns already played as env steps
        self.done = False
        self.last_info: dict[str, Any] | None = None
        self.turn_notes: list[dict[str, Any]] = []  # per model turn, for the row

    # -- mini-swe-agent's Environment protocol --------------------------------------------
    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None
                ) -> dict[str, Any]:
        """Run the harness's command as the env step of the model turn that held it."""
        from minisweagent.exceptions import Submitted

        command = str(action.get("command", ""))
        if self.done:
            raise HarnessError("the harness ran a command after the episode ended")
        pending = self.pending()
        if not pending:
            raise HarnessError(f"no recorded model turn holds the command {command[:80]!r}")
        for turn in pending[:-1]:  # turns the harness rejected (format errors): no command
            self._step(turn, None)
            if self.done:
                raise HarnessError("the env ended the episode on a format-error turn")
        calls = [_call(TERMINAL, {"command": command})]
        if is_submit_command(command):
            calls.append(_call(SUBMIT, {}))
        info = self._step(pending[-1], calls)
        result = info["turn_snapshot"].tool_results[0]
        output = {"output": command_output(result.content),
                  "returncode": result.exit_code if result.exit_code is not None else -1,
                  "exception_info": "" if result.ok else f"{result.error}: {result.content}"}
        if self.done and info.get("end_reason") == "submitted":
            lines = output["output"].lstrip().splitlines(keepends=True)
            submission = "".join(lines[1:])
            raise Submitted({"role": "exit", "content": submission,
                             "extra": {"exit_status": "Submitted", "submission": submission}})
        return output

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        """What the harness's prompt templates may use (the sandbox is Linux x86_64)."""
        return {"system": "Linux", "release": "", "version": "", "machine": "x86_64", **kwargs}

    def serialize(self) -> dict[str, Any]:
        """The harness's trajectory entry for this environment."""
        return {"info": {"config": {"environment": dict(self.config),
                                    "environment_type": f"{__name__}.SandboxEnvironment"}}}

    # -- the runner's side ----------------------------------------------------------------
    def pending(self) -> list[Any]:
        """The episode's recorded model turns not stepped yet, in order."""
        return self.proxy.turns(self.key)[self.stepped:]

    def flush(self) -> None:
        """Step the recorded turns the harness ran no command for (its last format errors)."""
        for turn in self.pending():
            if self.done:
                break
            self._step(turn, None)

    def _step(self, turn: Any, calls: list[dict[str, Any]] | None) -> dict[str, Any]:
        """One env step from a recorded turn: its exact ids, with `calls` (None: a turn the
        harness found no command in, played as text)."""
        action = turn.to_action()
        if calls is not None:
            action["tool_calls"] = calls
        note = {"proxy_turn": turn.index, "extends_previous": turn.extends_previous,
                "finish_reason": turn.finish_reason, "env_turn": self.stepped,
                "command": None if calls is None else calls[0]["function"]["arguments"]}
        self.turn_notes.append(note)
        info = self.step(action)
        self.stepped += 1
        self.done = bool(info.get("end_reason"))
        self.last_info = info
        return info


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool call in OpenAI shape (arguments as an object; the env validates them)."""
    return {"type": "function", "function": {"name": name, "arguments": arguments}}
