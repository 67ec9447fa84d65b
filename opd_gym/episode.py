"""Episode: one coding task played over many turns in one sandbox, with its end rules.

An `Episode` owns the task, the sandbox holding its workspace, the transcript (chat messages
and one frozen `Turn` per assistant turn) and the turn loop: parse the model's output, run its
tool calls in order, decide whether the episode ends (`submit()`, the turn limit, too many
malformed turns in a row, a dead sandbox), and at the end grade the workspace by the hidden
tests in a fresh sandbox (`opd_gym.grading`) and compute the reward (`opd_gym.rewards`).
`CodingEnv` is the Gymnasium adapter around it; `EpisodeSettings` are its validated rules.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opd_gym.actions import ModelOutputData, to_model_output
from opd_gym.errors import ConfigError, OPDGymError
from opd_gym.grading import Grader, GradeReport
from opd_gym.grading.harbor import grade_harbor, workdir_files
from opd_gym.records.task import Task
from opd_gym.rewards import RewardBreakdown, RewardWeights, compute_reward
from opd_gym.sandboxes import Sandbox, SandboxDied, SandboxError, SandboxPool, SandboxTimeout
from opd_gym.tasks.repo import workspace_files
from opd_gym.tasks.repo_diff import WorkspaceDiff, base_commit, collect_diff
from opd_gym.tools.executor import MIN_OUTPUT_CHARS, ToolExecutor, ToolResult, error_result
from opd_gym.tools.formats import ToolFormat, get_tool_format
from opd_gym.tools.parsing import ParsedOutput, ToolCall, parse_openai_tool_calls
from opd_gym.tools.prompt import default_system_prompt
from opd_gym.tools.schemas import SUBMIT, TOOL_NAMES, check_tool_names, tool_schemas
from opd_gym.transcript import (
    Message,
    Turn,
    assistant_message,
    copy_messages,
    system_message,
    tool_message,
    user_message,
)

# Turn.end_reason / info["end_reason"] values
SUBMITTED, MAX_TURNS, FORMAT_ERRORS, SANDBOX_DIED = (
    "submitted", "max_turns", "format_errors", "sandbox_died",
)

Died = SandboxDied | SandboxTimeout
DEFAULT_TOOL_OUTPUT_CHARS = 10_000  # characters of one tool result the agent sees


def check_output_budget(value: object, name: str = "max_tool_output_chars") -> int | None:
    """A tool-output budget as the env keeps it: an int >= MIN_OUTPUT_CHARS, or None for no
    limit (0 and None alike); anything else is a ConfigError saying what is accepted."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value == 0):
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < MIN_OUTPUT_CHARS:
        raise ConfigError(f"{name} must be a whole number of characters of at least "
                          f"{MIN_OUTPUT_CHARS}, or 0 or None for no limit, got {value!r}")
    return value


@dataclass(frozen=True)
class EpisodeSettings:
    """The rules every episode of an env plays by, validated once (see `CodingEnv`'s Args).

    `reward_weights`, `tool_names` and `tool_format` accept what the env accepts (a mapping,
    a sequence of names, a format name or tokenizer) and are stored as objects; an empty
    `system_prompt` means the default prompt for these tools and this format.
    """

    max_turns: int = 15
    max_format_errors: int = 3
    tool_timeout: float = 60.0
    max_tool_timeout: float = 600.0
    max_calls_per_turn: int = 16
    step_time_budget: float | None = 600.0
    parse_bash_blocks: bool = False
    reward_weights: RewardWeights = field(default_factory=RewardWeights)
    binary_correctness: bool = False
    tool_names: tuple[str, ...] = TOOL_NAMES
    tool_format: ToolFormat = field(default_factory=get_tool_format)
    system_prompt: str = ""
    max_tool_output_chars: int | None = DEFAULT_TOOL_OUTPUT_CHARS
    tools_json: str = field(default="", init=False, repr=False)

    def __post_init__(self) -> None:
        if min(self.max_turns, self.max_format_errors, self.max_calls_per_turn) < 1:
            raise ConfigError("max_turns, max_format_errors and max_calls_per_turn must be >= 1")
        if self.step_time_budget is not None and not self.step_time_budget > 0:
            raise ConfigError("step_time_budget must be a positive number of seconds or None")
        if not (self.tool_timeout > 0 and self.max_tool_timeout > 0):
            raise ConfigError(f"tool_timeout and max_tool_timeout must be > 0 seconds, got "
                              f"{self.tool_timeout} and {self.max_tool_timeout}")
        setter = object.__setattr__
        setter(self, "max_tool_output_chars", check_output_budget(self.max_tool_output_chars))
        setter(self, "reward_weights", RewardWeights.from_config(self.reward_weights))
        setter(self, "tool_names", tuple(check_tool_names(self.tool_names)))
        setter(self, "tool_format", get_tool_format(self.tool_format))
        setter(self, "tools_json", json.dumps(tool_schemas(self.tool_names)))
        if not self.system_prompt:
            setter(self, "system_prompt", default_system_prompt(
                self.max_turns, self.tool_names, self.tool_format))

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The OpenAI function-calling schemas of the tools (a fresh copy)."""
        return json.loads(self.tools_json)


def task_prompt(task: Task) -> str:
    """The first user message: the task's prompt and the names of its starter files."""
    if not task.files:
        return task.prompt
    if task.repo is not None:  # a project's tree: its file list would drown the prompt
        return (f"{task.prompt.rstrip()}\n\nThe workspace is a git repository of "
                f"{task.repo.name} ({len(task.files)} files).")
    return f"{task.prompt.rstrip()}\n\nFiles in the workspace: {', '.join(sorted(task.files))}"


class Episode:
    """One episode of `task` in a sandbox taken from `pool`, played turn by turn with `play`."""

    def __init__(self, task: Task, pool: SandboxPool, settings: EpisodeSettings,
                 grader: Grader | None = None) -> None:
        self.task, self.settings, self._pool = task, settings, pool
        # One grader per env (or per run) keeps each task's calibration; a new one per
        # episode would re-run the starter and the reference at every submit.
        self._grader = grader if grader is not None else Grader(pool)
        # the grade's runs are drawn while the agent works (a calibrated task's; no sandbox)
        if task.harbor is None:  # a Harbor task's verifier is its test.sh: nothing to draw
            self._grader.prepare(task)
        self.sandbox: Sandbox | None = _prepared_sandbox(pool, task)
        self._executor = ToolExecutor(self.sandbox, default_timeout=settings.tool_timeout,
                                      max_timeout=settings.max_tool_timeout,
                                      max_output_chars=settings.max_tool_output_chars)
        self.prompt = task_prompt(task)
        self.messages: list[Message] = [system_message(settings.system_prompt),
                                        user_message(self.prompt)]
        self.turns: list[Turn] = []
        self.grade: GradeReport | None = None
        self.reward_breakdown: RewardBreakdown | None = None
        self.end_reason = ""
        self.format_streak = 0
        self.snapshot_skipped: list[str] = []
        self.snapshot_skipped_count = 0
        self.diff: WorkspaceDiff | None = None  # a repository task's change, at the end

    @property
    def done(self) -> bool:
        return bool(self.end_reason)

    @property
    def reward(self) -> float:
        """0 until the episode ends, then the total of the reward breakdown."""
        return self.reward_breakdown.total if self.done and self.reward_breakdown else 0.0

    @property
    def results(self) -> list[ToolResult]:
        """Every tool result of the episode, in order."""
        return [result for turn in self.turns for result in turn.tool_results]

    def play(self, action: Any) -> Turn:
        """Run one assistant turn (the model's raw output or a structured action): parse its
        calls, run them, end and grade the episode when a rule says so; the frozen Turn."""
        if self.done:
            raise RuntimeError("the episode is over: call reset() before step()")
        index, context_len = len(self.turns), len(self.messages)
        output = to_model_output(action)
        parsed = self._parse(output, index)
        raw = output.text if output.tool_calls is None else None  # what the model emitted
        self.messages.append(assistant_message(parsed.content, parsed.calls, raw))
        results, died = self._run_calls(parsed.calls)
        format_error = not any(call.valid for call in parsed.calls)
        self.format_streak = self.format_streak + 1 if format_error else 0
        end_reason = self._end_reason(results, died, turns=index + 1)
        notes = list(parsed.errors)
        if notes:
            notes[0] = f"Format error: {notes[0]}"
        if end_reason:
            errors = sum(len(t.format_errors) for t in self.turns) + len(parsed.errors)
            results, died = self._finish(results, died, turns=index + 1, format_errors=errors)
            end_reason = SANDBOX_DIED if died is not None else end_reason
            if end_reason != SUBMITTED:
                notes.append(self._end_note(end_reason, died))
        self.messages.extend(tool_message(r) for r in results)
        if notes:
            self.messages.append(user_message("\n".join(notes)))
        turn = Turn(
            index=index, text=output.text, context_len=context_len, end_len=len(self.messages),
            tool_calls=tuple(parsed.calls), tool_results=tuple(results),
            format_errors=tuple(parsed.errors),
            observation=_observation(self.messages[context_len + 1:]),
            token_ids=output.token_ids, logprobs=output.logprobs, prompt_ids=output.prompt_ids,
            grade=self.grade if end_reason else None, end_reason=end_reason,
            student_topk_ids=output.topk_ids,
        )
        self.turns.append(turn)
        self.end_reason = end_reason
        return turn

    def info(self, turn: Turn | None = None) -> dict[str, Any]:
        """The step's info (reset's without a turn): everything a wrapper needs, by value.

        `turn_snapshot` is the frozen Turn and `task_prompt` the task's own prompt, so wrappers
        (OPD, recorder) work from what `step` returns and never read the env's internals.
        """
        info: dict[str, Any] = {
            "task_id": self.task.id,
            "task_prompt": self.task.prompt,
            "messages": copy_messages(self.messages),
            "tools": self.settings.tools,
            "tool_format": self.settings.tool_format.name,
            "turns": len(self.turns),
            "max_turns": self.settings.max_turns,
            "format_error_streak": self.format_streak,
        }
        if turn is None:
            return info
        info.update({
            "tool_calls": [call.to_dict() for call in turn.tool_calls],
            "tool_results": [_result_info(r) for r in turn.tool_results],
            "errors": list(turn.format_errors) + [r.content for r in turn.tool_results
                                                  if not r.ok],
            "turn": turn.summary(),
            "turn_snapshot": turn,
        })
        if turn.end_reason:
            info["end_reason"] = turn.end_reason
            if self.snapshot_skipped_count:
                # files the snapshot left out of grading ("path: reason", at most 100 notes)
                info["snapshot_skipped"] = list(self.snapshot_skipped)
                info["snapshot_skipped_count"] = self.snapshot_skipped_count
            if self.grade is not None:
                info["grade"] = self.grade.to_dict()
                if self.task.repo is not None:  # each test's kind: FAIL_TO_PASS/PASS_TO_PASS
                    self.task.repo.mark_tests(info["grade"])
                    level = self.task.metadata.get("difficulty")
                    if isinstance(level, dict):  # a synthesized task's, shown in the report
                        info["grade"]["difficulty"] = dict(level)
                if self.snapshot_skipped_count:
                    # what the grade could not see is part of the grade, never a silent 0
                    info["grade"]["not_carried"] = list(self.snapshot_skipped)
                    info["grade"]["not_carried_count"] = self.snapshot_skipped_count
            if self.reward_breakdown is not None:
                info["reward_breakdown"] = self.reward_breakdown.to_dict()
            if self.diff is not None:  # repository tasks: the agent's change (or why unknown)
                info["diff"] = self.diff.to_dict()
        return info

    def release(self) -> None:
        """Give the sandbox back to the pool (safe to call twice)."""
        sandbox, self.sandbox = self.sandbox, None
        if sandbox is not None:
            self._pool.release(sandbox)

    # -- the turn ------------------------------------------------------------------------------
    def _parse(self, output: ModelOutputData, index: int) -> ParsedOutput:
        prefix, fmt = f"call_{index}", self.settings.tool_format
        if output.problem is not None:
            return ParsedOutput(output.text, [], [f"{output.problem}. Expected text with "
                                                  f"{fmt.expected}."])
        if output.tool_calls is not None:
            parsed = parse_openai_tool_calls(output.tool_calls, id_prefix=prefix,
                                             tools=self.settings.tool_names)
            return dataclasses.replace(parsed, content=output.text)
        return fmt.parse(output.text, parse_bash_blocks=self.settings.parse_bash_blocks,
                         id_prefix=prefix, tools=self.settings.tool_names)

    def _run_calls(self, calls: Sequence[ToolCall]) -> tuple[list[ToolResult], Died | None]:
        """Run the calls in order; stop at submit, a dead sandbox, the call limit or budget."""
        settings, results = self.settings, []
        died: Died | None = None
        submitted = False
        budget = settings.step_time_budget
        deadline = time.monotonic() + budget if budget is not None else None
        for position, call in enumerate(calls):
            left = deadline - time.monotonic() if deadline is not None else None
            if died is not None or submitted:
                why = "the sandbox stopped" if died else "submit() ended the episode"
                result = error_result(call, "skipped", f"not run: {why}")
            elif position >= settings.max_calls_per_turn:
                limit = f"not run: at most {settings.max_calls_per_turn} tool calls run per turn"
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
                except Exception as exc:  # play never raises: a tool bug is the call's error
                    result = error_result(call, "internal", f"the tool failed ({exc!r:.300})")
            results.append(result)
        return results, died

    def _end_reason(self, results: Sequence[ToolResult], died: Died | None, turns: int) -> str:
        if died is not None:
            return SANDBOX_DIED
        if any(r.name == SUBMIT and r.ok for r in results):
            return SUBMITTED
        if self.format_streak >= self.settings.max_format_errors:
            return FORMAT_ERRORS
        if turns >= self.settings.max_turns:
            return MAX_TURNS
        return ""

    def _finish(self, results: list[ToolResult], died: Died | None, *, turns: int,
                format_errors: int) -> tuple[list[ToolResult], Died | None]:
        """Grade the workspace (unless the sandbox died) and compute the reward."""
        report: GradeReport | None = None
        if died is None and self.sandbox is not None and self.task.harbor is not None:
            report = grade_harbor(self.task, self.sandbox)  # the agent's container, then freed
        elif died is None and self.sandbox is not None:
            try:
                files = self.sandbox.snapshot()
            except (SandboxDied, SandboxTimeout) as exc:
                died = exc
            except SandboxError as exc:  # e.g. the helper refused: the episode still ends
                died = SandboxDied(f"the workspace snapshot failed: {exc}")
            else:  # as much as the grading sandbox holds; what is left out is named
                self.snapshot_skipped = list(getattr(files, "skipped", []))
                self.snapshot_skipped_count = getattr(files, "skipped_count", 0)
                self.diff = self._collect_diff()
                self.release()
                report = self._grader.grade(self.task, files)
        self.release()
        if self.task.repo is not None and self.diff is None:
            self.diff = WorkspaceDiff.unknown(
                f"the sandbox stopped before the diff was taken: {died}" if died is not None
                else "no sandbox was left to take the diff in")
        self.grade = report
        if report is not None:
            verdict = f"Submitted. {report.summary()}{self._not_carried_note()}"
            results = [dataclasses.replace(r, content=verdict)
                       if r.name == SUBMIT and r.ok else r for r in results]
        self.reward_breakdown = compute_reward(
            report, self.results + results, turns=turns, max_turns=self.settings.max_turns,
            format_errors=format_errors, weights=self.settings.reward_weights,
            binary=self.settings.binary_correctness,
        )
        return results, died

    def _collect_diff(self) -> WorkspaceDiff | None:
        """A repository task's diff against its base commit (None for other tasks); run after
        the snapshot, so the workspace it reads is the one graded."""
        if self.task.repo is None or self.sandbox is None:
            return None
        try:
            base = base_commit(self.task)
        except OPDGymError as exc:
            return WorkspaceDiff.unknown(f"the base commit is unknown: {exc}")
        return collect_diff(self.sandbox, base)

    def _not_carried_note(self) -> str:
        """What the snapshot could not carry to grading, for the agent's last message."""
        count = self.snapshot_skipped_count
        if not count:
            return ""
        shown = "; ".join(self.snapshot_skipped[:3]) + ("; ..." if count > 3 else "")
        return f" {count} workspace path(s) were not carried to grading ({shown})."

    def _end_note(self, end_reason: str, died: BaseException | None) -> str:
        verdict = (f" {self.grade.summary()}{self._not_carried_note()}"
                   if self.grade is not None else "")
        if end_reason == MAX_TURNS:
            return (f"[Episode over: the turn limit ({self.settings.max_turns}) was reached."
                    f"{verdict}]")
        if end_reason == FORMAT_ERRORS:
            return (f"[Episode over: {self.settings.max_format_errors} turns in a row had no "
                    f"valid tool call.{verdict}]")
        if end_reason == SANDBOX_DIED:
            return f"[Episode over: the sandbox stopped ({died}).]"
        return f"[Episode over.{verdict}]"


def _prepared_sandbox(pool: SandboxPool, task: Task) -> Sandbox:
    """A started sandbox holding the task's starter files (one retry if it dies at once)."""
    if task.repo is not None:
        workspace_files(task)  # a refusal (custom image, bad history) before any sandbox
    for attempt in range(2):
        sandbox = pool.acquire()
        try:
            if task.repo is not None:  # the tree and its .git, in one archive
                sandbox.write_files(workspace_files(task))
            elif task.harbor is not None:  # what the image holds in the workdir it works in
                sandbox.start()
                seed = workdir_files(sandbox.engine, sandbox.config.image, task.harbor.workdir)
                if seed:
                    sandbox.write_files(seed)
            else:
                for path, text in task.files.items():
                    sandbox.write_file(path, text)
                if task.assets:
                    sandbox.write_files(dict(task.assets))
            return sandbox
        except (SandboxDied, SandboxTimeout):
            pool.release(sandbox)
            if attempt:
                raise
        except SandboxError as exc:
            pool.release(sandbox)
            raise ConfigError(f"task {task.id!r}: cannot place its starter files: {exc}") from exc
    raise AssertionError("unreachable")


def _observation(new: Sequence[Mapping[str, Any]]) -> str:
    """The text the model sees next: the one new message, or each labelled and joined."""
    if len(new) == 1:
        return new[0]["content"]
    return "\n\n".join(f"[{m['name']}]\n{m['content']}" if m["role"] == "tool" else m["content"]
                       for m in new)


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


__all__ = [
    "DEFAULT_TOOL_OUTPUT_CHARS",
    "FORMAT_ERRORS",
    "MAX_TURNS",
    "SANDBOX_DIED",
    "SUBMITTED",
    "Episode",
    "EpisodeSettings",
    "check_output_budget",
    "task_prompt",
]
