"""CodingEnv: one coding task per episode, driven by the model's raw text through tool calls.

`reset` picks a task, takes a started sandbox from a warm pool, writes the starter files and
returns the task prompt. `step` parses the tool calls in the model's output, runs them in
order and returns their results. `submit()`, running out of turns, or too many malformed
turns in a row end the episode; the workspace is then graded by the hidden tests in a fresh
sandbox (`opd_gym.grading`) and the terminal reward is computed (`opd_gym.rewards`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from opd_gym.actions import ModelOutputData, to_model_output
from opd_gym.grading import Grader, GradeReport
from opd_gym.rewards import RewardBreakdown, RewardWeights, compute_reward
from opd_gym.sandboxes import (
    Sandbox,
    SandboxDied,
    SandboxError,
    SandboxPool,
    SandboxTimeout,
    make_pool,
)
from opd_gym.spaces import ModelOutput, UnicodeText
from opd_gym.tasks.loaders import load_hf_dataset, load_tasks
from opd_gym.tasks.model import Task
from opd_gym.tools.executor import ToolExecutor, ToolResult, error_result
from opd_gym.tools.formats import get_tool_format
from opd_gym.tools.parsing import ParsedOutput, parse_openai_tool_calls
from opd_gym.tools.prompt import default_system_prompt
from opd_gym.tools.schemas import SUBMIT, TOOL_NAMES, check_tool_names, tool_schemas
from opd_gym.transcript import (
    Message,
    Turn,
    assistant_message,
    copy_messages,
    render_messages,
    system_message,
    tool_message,
    user_message,
)

DEFAULT_SUITE = "coding"

# info["end_reason"] values
SUBMITTED, MAX_TURNS, FORMAT_ERRORS, SANDBOX_DIED = (
    "submitted", "max_turns", "format_errors", "sandbox_died",
)


def resolve_tasks(spec: Any) -> list[Task]:
    """Tasks from a suite name, a path, a list of ids (of the built-in suite), Tasks or rows.

    A mapping is a loader call: `{"source": path_or_suite, "schema": ..., "ids": [...]}` or
    `{"dataset": hub_name_or_path, "schema": ..., "split": ..., "limit": ...}`.
    """
    if spec is None:
        spec = DEFAULT_SUITE
    if isinstance(spec, Task):
        tasks: list[Task] = [spec]
    elif isinstance(spec, str):
        tasks = list(load_tasks(spec))
    elif isinstance(spec, Mapping):
        options = dict(spec)
        ids = options.pop("ids", None)
        if "dataset" in options:
            tasks = list(load_hf_dataset(options.pop("dataset"), **options))
        else:
            tasks = list(load_tasks(options.pop("source", DEFAULT_SUITE), **options))
        if ids is not None:
            tasks = _select_ids(tasks, ids)
    elif isinstance(spec, Sequence) and spec and all(isinstance(t, str) for t in spec):
        tasks = _select_ids(list(load_tasks(DEFAULT_SUITE)), spec)
    elif isinstance(spec, Sequence):
        tasks = list(load_tasks(list(spec)))
    else:
        kind = type(spec).__name__
        raise TypeError(f"tasks must be a suite name, path, list or mapping, got {kind}")
    if not tasks:
        raise ValueError(f"no tasks found for tasks={spec!r}")
    return tasks


def _select_ids(tasks: list[Task], ids: Sequence[str]) -> list[Task]:
    by_id = {task.id: task for task in tasks}
    missing = [i for i in ids if i not in by_id]
    if missing:
        known = ", ".join(sorted(by_id)[:20])
        raise ValueError(f"unknown task id(s) {missing}; known ids include: {known}")
    return [by_id[i] for i in ids]


class CodingEnv(gym.Env[str, Any]):
    """Multi-turn coding episodes: text in (model output), text out (tool results).

    Reward: 0 until the last step, then, with c = fraction of hidden tests passed (or 0/1 with
    `binary_correctness`), T = turns used, M = `max_turns`:
    `w_c * c + w_e * c * (1 - (T - 1) / M) + w_u * tool_use`, where tool_use = 0.4 [a file
    was written or edited] + 0.4 [a terminal command ran after the last file change] + 0.2
    (1 - failed calls / attempted calls); see `opd_gym.rewards` for the details.

    Args:
        tasks: suite name (default "coding"), task file or folder, list of task ids of the
            built-in suite, list of Tasks/rows, or a loader mapping (see `resolve_tasks`).
        sandbox: backend "docker" (default), "bwrap", "local", "auto", a mapping
            {"backend": ..., **options}, or a `SandboxPool` to share (not closed by the env).
        pool_size: warm sandboxes kept ready (each episode uses one, grading another).
        max_turns: assistant turns before the episode is truncated (and graded).
        max_format_errors: consecutive turns without a valid tool call before truncation.
        tool_timeout: default seconds for a terminal command; max_tool_timeout caps requests.
        max_calls_per_turn: tool calls run per turn; the rest are answered with an error.
        step_time_budget: seconds one step may spend running tool calls in total (None: no
            budget). Each terminal command's timeout is cut to what is left, and calls met
            once it is used up are answered with an error instead of run, so a turn chaining
            16 calls of 8 s each still ends within the budget. Submitting is never refused.
        parse_bash_blocks: also read fenced ```bash blocks as terminal calls.
        reward_weights: {"correctness", "efficiency", "tool_use"} (default 0.7/0.15/0.15).
        binary_correctness: correctness is 1 only if every hidden test passes.
        system_prompt: replaces the default system prompt.
        tool_format: how calls are written in the text: "hermes" (default), "qwen3_coder",
            "llama3", "mistral", "deepseek" (see `opd_gym.tools.formats`), or a tokenizer whose
            chat template decides; the default system prompt states the chosen format.
        tools: the tool names offered (a subset of the five; must include "submit").
        render_mode: "ansi" (render returns the transcript) or "human" (prints it).
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}

    def __init__(
        self,
        tasks: Any = DEFAULT_SUITE,
        sandbox: str | Mapping[str, Any] | SandboxPool = "docker",
        pool_size: int = 2,
        max_turns: int = 15,
        max_format_errors: int = 3,
        tool_timeout: float = 60.0,
        max_tool_timeout: float = 600.0,
        max_calls_per_turn: int = 16,
        step_time_budget: float | None = 600.0,
        parse_bash_blocks: bool = False,
        reward_weights: Mapping[str, float] | None = None,
        binary_correctness: bool = False,
        system_prompt: str | None = None,
        tools: Sequence[str] | None = None,
        render_mode: str | None = None,
        tool_format: Any = "hermes",
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None")
        if max_turns < 1 or max_format_errors < 1 or max_calls_per_turn < 1:
            raise ValueError("max_turns, max_format_errors and max_calls_per_turn must be >= 1")
        self.tasks = resolve_tasks(tasks)
        self._task_index = {task.id: task for task in self.tasks}
        self.sandbox_spec = sandbox
        self.pool_size = pool_size
        self.max_turns = max_turns
        self.max_format_errors = max_format_errors
        self.tool_timeout = tool_timeout
        self.max_tool_timeout = max_tool_timeout
        self.max_calls_per_turn = max_calls_per_turn
        if step_time_budget is not None and not step_time_budget > 0:
            raise ValueError("step_time_budget must be a positive number of seconds or None")
        self.step_time_budget = step_time_budget
        self._snapshot_skipped: list[str] = []
        self._snapshot_skipped_count = 0
        self.parse_bash_blocks = parse_bash_blocks
        self.reward_weights = RewardWeights.from_config(reward_weights)
        self.binary_correctness = binary_correctness
        self.tool_names = check_tool_names(tools if tools is not None else TOOL_NAMES)
        self._tools_json = json.dumps(tool_schemas(self.tool_names))
        self.tool_format = get_tool_format(tool_format)
        self.system_prompt = system_prompt or default_system_prompt(
            max_turns, self.tool_names, self.tool_format
        )
        self.render_mode = render_mode
        self.observation_space = UnicodeText()
        self.action_space = ModelOutput()

        self.pool: SandboxPool | None = sandbox if isinstance(sandbox, SandboxPool) else None
        self._owns_pool = self.pool is None
        self.sandbox: Sandbox | None = None
        self.task: Task | None = None
        self.messages: list[Message] = []
        self.turns: list[Turn] = []
        self.grade: GradeReport | None = None
        self.reward_breakdown: RewardBreakdown | None = None
        self._executor: ToolExecutor | None = None
        self._format_streak = 0
        self._printed = 0
        self._done = True
        self._closed = False

    # -- properties --------------------------------------------------------------------------
    @property
    def tools(self) -> list[dict[str, Any]]:
        """The OpenAI function-calling schemas of the tools (a fresh copy)."""
        return json.loads(self._tools_json)

    @property
    def results(self) -> list[ToolResult]:
        """Every tool result of the episode, in order."""
        return [result for turn in self.turns for result in turn.tool_results]

    # -- episode -----------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        if self._closed:
            raise RuntimeError("this environment is closed")
        self._release_sandbox()
        self.task = self._pick_task(options or {})
        if self.pool is None:
            self.pool = make_pool(self.sandbox_spec, size=self.pool_size)
        self.sandbox = self._prepared_sandbox(self.task)
        self._executor = ToolExecutor(
            self.sandbox, default_timeout=self.tool_timeout, max_timeout=self.max_tool_timeout
        )
        prompt = self._task_prompt(self.task)
        self.messages = [system_message(self.system_prompt), user_message(prompt)]
        self.turns = []
        self.grade = None
        self.reward_breakdown = None
        self._snapshot_skipped, self._snapshot_skipped_count = [], 0
        self._format_streak = 0
        self._printed = 0
        self._done = False
        if self.render_mode == "human":
            self.render()
        info = {
            "task_id": self.task.id,
            "messages": copy_messages(self.messages),
            "tools": self.tools,
            "tool_format": self.tool_format.name,
            "turns": 0,
            "max_turns": self.max_turns,
            "format_error_streak": 0,
        }
        return prompt, info

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._done or self.task is None:
            raise RuntimeError("the episode is over: call reset() before step()")
        index = len(self.turns)
        output = to_model_output(action)
        parsed = self._parse(output, index)
        turn = Turn(
            index=index, text=output.text, context_len=len(self.messages),
            token_ids=output.token_ids, logprobs=output.logprobs, prompt_ids=output.prompt_ids,
            tool_calls=parsed.calls, format_errors=list(parsed.errors),
        )
        self.turns.append(turn)
        raw = output.text if output.tool_calls is None else None  # what the model emitted
        self.messages.append(assistant_message(parsed.content, parsed.calls, raw))

        died = self._run_calls(turn)
        self._format_streak = self._format_streak + 1 if turn.is_format_error else 0
        end_reason = self._end_reason(turn, died)
        notes = list(parsed.errors)
        if notes:
            notes[0] = f"Format error: {notes[0]}"
        if end_reason:
            died = self._finish(turn, died)
            if died is not None:
                end_reason = turn.end_reason = SANDBOX_DIED
            else:
                turn.end_reason = end_reason
            if end_reason != SUBMITTED:
                notes.append(self._end_note(end_reason, died))
        else:
            self.messages.extend(tool_message(r) for r in turn.tool_results)
        if notes:
            self.messages.append(user_message("\n".join(notes)))
        turn.end_len = len(self.messages)
        turn.observation = self._observation(turn)
        reward = self.reward_breakdown.total if end_reason and self.reward_breakdown else 0.0
        info = self._step_info(turn, end_reason)
        if self.render_mode == "human":
            self.render()
        terminated = end_reason == SUBMITTED
        truncated = bool(end_reason) and not terminated
        return turn.observation, float(reward), terminated, truncated, info

    def render(self) -> str | None:
        """`ansi`: the whole transcript; `human`: print the messages not printed yet."""
        if self.render_mode == "ansi":
            return render_messages(self.messages)
        if self.render_mode == "human" and self._printed < len(self.messages):
            print(render_messages(self.messages[self._printed :]), end="", flush=True)
            self._printed = len(self.messages)
        return None

    def close(self) -> None:
        """Release the sandbox and close the pool the env created; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._done = True
        self._release_sandbox()
        if self.pool is not None and self._owns_pool:
            self.pool.close()
        self.pool = None
        super().close()

    # -- internals ---------------------------------------------------------------------------
    def _pick_task(self, options: Mapping[str, Any]) -> Task:
        if options.get("task") is not None:
            task = options["task"]
            return task if isinstance(task, Task) else resolve_tasks([task])[0]
        task_id = options.get("task_id")
        if task_id is not None:
            if task_id not in self._task_index:
                known = ", ".join(sorted(self._task_index)[:20])
                raise ValueError(f"unknown task_id {task_id!r}; known ids include: {known}")
            return self._task_index[task_id]
        return self.tasks[int(self.np_random.integers(len(self.tasks)))]

    def _prepared_sandbox(self, task: Task) -> Sandbox:
        """A started sandbox holding the task's starter files (one retry if it dies at once)."""
        assert self.pool is not None
        for attempt in range(2):
            sandbox = self.pool.acquire()
            try:
                for path, text in task.files.items():
                    sandbox.write_file(path, text)
                return sandbox
            except (SandboxDied, SandboxTimeout):
                self.pool.release(sandbox)
                if attempt:
                    raise
            except SandboxError as exc:
                self.pool.release(sandbox)
                message = f"task {task.id!r}: cannot place its starter files: {exc}"
                raise ValueError(message) from exc
        raise AssertionError("unreachable")

    @staticmethod
    def _task_prompt(task: Task) -> str:
        if not task.files:
            return task.prompt
        listing = ", ".join(sorted(task.files))
        return f"{task.prompt.rstrip()}\n\nFiles in the workspace: {listing}"

    def _parse(self, output: ModelOutputData, index: int) -> ParsedOutput:
        prefix = f"call_{index}"
        if output.problem is not None:
            problem = f"{output.problem}. Expected text with {self.tool_format.expected}."
            return ParsedOutput(output.text, [], [problem])
        if output.tool_calls is not None:
            parsed = parse_openai_tool_calls(
                output.tool_calls, id_prefix=prefix, tools=self.tool_names
            )
            return dataclasses.replace(parsed, content=output.text)
        return self.tool_format.parse(
            output.text, parse_bash_blocks=self.parse_bash_blocks, id_prefix=prefix,
            tools=self.tool_names,
        )

    def _run_calls(self, turn: Turn) -> SandboxDied | SandboxTimeout | None:
        """Run the turn's calls in order; stop at submit, a dead sandbox, or the call limit."""
        assert self._executor is not None
        died: SandboxDied | SandboxTimeout | None = None
        submitted = False
        budget = self.step_time_budget
        deadline = time.monotonic() + budget if budget is not None else None
        for position, call in enumerate(turn.tool_calls):
            left = deadline - time.monotonic() if deadline is not None else None
            if died is not None or submitted:
                why = "the sandbox stopped" if died else "submit() ended the episode"
                result = error_result(call, "skipped", f"not run: {why}")
            elif position >= self.max_calls_per_turn:
                limit = f"not run: at most {self.max_calls_per_turn} tool calls run per turn"
                result = error_result(call, "call_limit", limit)
            elif call.valid and call.name == SUBMIT:
                submitted = True
                result = ToolResult(call.id, call.name, "Submitted.")
            elif left is not None and left <= 0:
                result = error_result(call, "step_budget", "not run: this turn's tool calls "
                                      f"used up the per-step time budget ({budget:g} s)")
            else:
                try:
                    result = self._executor.run(call, time_left=left)
                except (SandboxDied, SandboxTimeout) as exc:
                    died = exc
                    result = error_result(call, "sandbox_died", f"the sandbox stopped: {exc}")
                except Exception as exc:  # step never raises: a tool bug is the call's error
                    result = error_result(call, "internal", f"the tool failed ({exc!r:.300})")
            turn.tool_results.append(result)
        return died

    def _end_reason(self, turn: Turn, died: BaseException | None) -> str:
        if died is not None:
            return SANDBOX_DIED
        if any(r.name == SUBMIT and r.ok for r in turn.tool_results):
            return SUBMITTED
        if self._format_streak >= self.max_format_errors:
            return FORMAT_ERRORS
        if len(self.turns) >= self.max_turns:
            return MAX_TURNS
        return ""

    def _finish(self, turn: Turn, died: SandboxDied | SandboxTimeout | None
                ) -> SandboxDied | SandboxTimeout | None:
        """Grade the workspace (unless the sandbox died), compute the reward, end the episode."""
        assert self.task is not None and self.pool is not None
        self._done = True
        report: GradeReport | None = None
        if died is None and self.sandbox is not None:
            try:
                files = self.sandbox.snapshot()
            except (SandboxDied, SandboxTimeout) as exc:
                died = exc
            except SandboxError as exc:  # e.g. the helper refused: the episode still ends
                died = SandboxDied(f"the workspace snapshot failed: {exc}")
            else:
                self._snapshot_skipped = list(getattr(files, "skipped", []))
                self._snapshot_skipped_count = getattr(files, "skipped_count", 0)
                self._release_sandbox()
                report = Grader(self.pool).grade(self.task, files)
        self._release_sandbox()
        self.grade = turn.grade = report
        turn.tool_results = [
            dataclasses.replace(r, content=f"Submitted. {report.summary()}")
            if r.name == SUBMIT and r.ok and report is not None else r
            for r in turn.tool_results
        ]
        self.messages.extend(tool_message(r) for r in turn.tool_results)
        self.reward_breakdown = compute_reward(
            report, self.results, turns=len(self.turns), max_turns=self.max_turns,
            format_errors=sum(len(t.format_errors) for t in self.turns),
            weights=self.reward_weights, binary=self.binary_correctness,
        )
        return died

    def _end_note(self, end_reason: str, died: BaseException | None) -> str:
        verdict = f" {self.grade.summary()}" if self.grade is not None else ""
        if end_reason == MAX_TURNS:
            return f"[Episode over: the turn limit ({self.max_turns}) was reached.{verdict}]"
        if end_reason == FORMAT_ERRORS:
            return (f"[Episode over: {self.max_format_errors} turns in a row had no valid tool "
                    f"call.{verdict}]")
        if end_reason == SANDBOX_DIED:
            return f"[Episode over: the sandbox stopped ({died}).]"
        return f"[Episode over.{verdict}]"

    def _observation(self, turn: Turn) -> str:
        new = self.messages[turn.context_len + 1 : turn.end_len]
        if len(new) == 1:
            return new[0]["content"]
        parts = []
        for message in new:
            if message["role"] == "tool":
                parts.append(f"[{message['name']}]\n{message['content']}")
            else:
                parts.append(message["content"])
        return "\n\n".join(parts)

    def _step_info(self, turn: Turn, end_reason: str) -> dict[str, Any]:
        assert self.task is not None
        errors = list(turn.format_errors) + [r.content for r in turn.tool_results if not r.ok]
        info: dict[str, Any] = {
            "task_id": self.task.id,
            "messages": copy_messages(self.messages),
            "tools": self.tools,
            "tool_format": self.tool_format.name,
            "turns": len(self.turns),
            "max_turns": self.max_turns,
            "format_error_streak": self._format_streak,
            "tool_calls": [call.to_dict() for call in turn.tool_calls],
            "tool_results": [_result_info(r) for r in turn.tool_results],
            "errors": errors,
            "turn": turn.summary(),
        }
        if end_reason:
            info["end_reason"] = end_reason
            if self._snapshot_skipped_count:
                # files the snapshot left out of grading ("path: reason", at most 100 notes)
                info["snapshot_skipped"] = list(self._snapshot_skipped)
                info["snapshot_skipped_count"] = self._snapshot_skipped_count
            if self.grade is not None:
                info["grade"] = self.grade.to_dict()
            if self.reward_breakdown is not None:
                info["reward_breakdown"] = self.reward_breakdown.to_dict()
        return info

    def _release_sandbox(self) -> None:
        sandbox, self.sandbox = self.sandbox, None
        self._executor = None
        if sandbox is None:
            return
        if self.pool is not None:
            self.pool.release(sandbox)
        else:
            sandbox.close()


def _result_info(result: ToolResult) -> dict[str, Any]:
    """Per-call result for info: status fields only (the content is in the messages)."""
    return {
        "call_id": result.call_id,
        "name": result.name,
        "ok": result.ok,
        "error": result.error,
        "exit_code": result.exit_code if result.exit_code is not None else -1,
        "timed_out": result.timed_out,
        "truncated": result.truncated,
        "duration": result.duration,
    }
