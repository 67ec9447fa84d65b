"""Run validated tool calls against a sandbox and phrase each outcome for the agent.

Tool failures (missing file, no match, refused path...) become clear `Error: ...` results;
only the sandbox itself dying (`SandboxDied`, `SandboxTimeout`) propagates, so the env can end
the episode. `submit` is not executed here: the env grades instead.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace

from opd_gym.sandboxes import (
    FileTooLarge,
    PathRefused,
    RunResult,
    Sandbox,
    SandboxDied,
    SandboxError,
    SandboxFileNotFound,
    SandboxTimeout,
)
from opd_gym.tools.parsing import ToolCall
from opd_gym.tools.schemas import EDIT_FILE, READ_FILE, TERMINAL, WRITE_FILE

SIGKILL_CODES = (137, -9)
MIN_OUTPUT_CHARS = 200  # the smallest tool-output budget (head + tail) an env accepts


def elision_marker(elided: int, limit: int, extra: str = "") -> str:
    """The line put between the kept head and tail of a tool result over its budget."""
    return (f"\n[... {elided} characters elided: this result is over the {limit}-character "
            f"limit for one tool result{extra}. To see the part you need, read_file with offset "
            "and limit, or filter the output with head, tail, grep or sed -n ...]\n")


def clip_output(text: str, limit: int | None, extra: str = "") -> tuple[str, int]:
    """`text` cut to its first `limit // 2` and last `limit - limit // 2` characters with an
    `elision_marker` between them when it is longer than `limit` (None or 0: no limit);
    returns (text, characters elided). `extra` is added to the marker's first sentence."""
    if not limit or len(text) <= limit:
        return text, 0
    head, tail = limit // 2, limit - limit // 2
    elided = len(text) - limit
    return text[:head] + elision_marker(elided, limit, extra) + text[len(text) - tail:], elided


@dataclass(frozen=True)
class ToolResult:
    """What one call did: `content` is shown to the agent; `error` is a short kind or ''."""

    call_id: str
    name: str
    content: str
    ok: bool = True
    error: str = ""
    exit_code: int | None = None
    timed_out: bool = False
    truncated: bool = False
    duration: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def error_result(
    call: ToolCall, kind: str, message: str, started: float | None = None
) -> ToolResult:
    """A failed call: the agent sees `Error: <message>`."""
    spent = time.perf_counter() - started if started is not None else 0.0
    return ToolResult(call.id, call.name, f"Error: {message}", ok=False, error=kind, duration=spent)


def describe_run(result: RunResult, limit: int | None = None) -> str:
    """Command output plus a status line: exit code, timeout, or a likely out-of-memory kill.

    Output over `limit` characters keeps its head and tail around an elision marker (the
    status line is always kept whole)."""
    extra = (f" (the command wrote {result.output_bytes} bytes in all)"
             if result.truncated and result.output_bytes else "")
    output, _ = clip_output(result.output.rstrip("\n"), limit, extra)
    output = output or "(no output)"
    if result.timed_out:
        status = (f"[timed out after {result.duration:.0f} s: the command and its children "
                  "were killed]")
    elif result.exit_code in SIGKILL_CODES:
        status = (f"[exit code: {result.exit_code}: killed by SIGKILL, most likely because the "
                  "sandbox memory limit was exceeded]")
    else:
        status = f"[exit code: {result.exit_code}]"
    return f"{output}\n{status}"


def _seconds(value: object) -> float:
    """A timeout as float: integers too large for a float become +inf (clamped later)."""
    try:
        return float(value)  # type: ignore[arg-type]
    except OverflowError:
        return math.inf if value > 0 else -math.inf  # type: ignore[operator]
    except (TypeError, ValueError):
        return math.nan


class ToolExecutor:
    """Executes terminal/read_file/write_file/edit_file calls in one sandbox."""

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        default_timeout: float = 60.0,
        max_timeout: float = 600.0,
        read_lines: int = 2000,
        max_read_chars: int = 32768,
        max_output_chars: int | None = None,
    ) -> None:
        """`max_output_chars` caps the text of every result (None: no cap): longer output
        keeps its head and tail around a marker naming the characters elided (`clip_output`);
        read_file stops at a line boundary within it and says where to continue."""
        self.sandbox = sandbox
        self.default_timeout = default_timeout
        self.max_timeout = max_timeout
        self.read_lines = read_lines
        self.max_output_chars = max_output_chars or None
        self.max_read_chars = min(max_read_chars, max_output_chars or max_read_chars)
        self._time_left: float | None = None
        self._tools = {
            TERMINAL: self.terminal,
            READ_FILE: self.read_file,
            WRITE_FILE: self.write_file,
            EDIT_FILE: self.edit_file,
        }

    def run(self, call: ToolCall, *, time_left: float | None = None) -> ToolResult:
        """Run one call; tool errors become results, a dead sandbox raises.

        `time_left` (seconds) caps a terminal command's timeout: the env's per-step budget.
        Every result's text is kept within `max_output_chars` (terminal output and read_file
        text are cut before their status note, which is always kept whole).
        """
        result = self._run(call, time_left)
        if result.name in (TERMINAL, READ_FILE) and result.error in ("", "timeout"):
            return result  # cut by the tool itself, before its status note
        content, elided = clip_output(result.content, self.max_output_chars)
        if not elided:
            return result
        return replace(result, content=content, truncated=True)

    def _run(self, call: ToolCall, time_left: float | None) -> ToolResult:
        started = time.perf_counter()
        if not call.valid:
            return error_result(call, "invalid_call", call.error or "invalid call")
        tool = self._tools.get(call.name)
        if tool is None:
            return error_result(call, "invalid_call", f"{call.name} cannot be run as a tool here")
        self._time_left = time_left
        try:
            return tool(call, started)
        except (SandboxDied, SandboxTimeout):
            raise
        except PathRefused as exc:
            return error_result(call, "path", str(exc), started)
        except FileTooLarge as exc:
            return error_result(call, "too_large", str(exc), started)
        except SandboxFileNotFound as exc:
            return error_result(call, "not_found", str(exc), started)
        except SandboxError as exc:
            return error_result(call, "sandbox", str(exc), started)
        except (ValueError, TypeError, OverflowError, UnicodeError, RecursionError) as exc:
            # arguments no tool can use (validated calls should never get here): one sentence
            message = f"the arguments cannot be used ({type(exc).__name__}: {str(exc)[:200]})"
            return error_result(call, "invalid_call", message, started)

    # -- tools -----------------------------------------------------------------------------
    def terminal(self, call: ToolCall, started: float) -> ToolResult:
        timeout = _seconds(call.arguments.get("timeout", self.default_timeout))
        if math.isnan(timeout) or timeout <= 0:
            message = "timeout must be a positive number of seconds"
            return error_result(call, "invalid_call", message)
        timeout = min(timeout, self.max_timeout)  # absurdly large (even inf): the maximum
        budget = self._time_left
        clipped = budget is not None and budget < timeout
        if budget is not None and clipped:
            timeout = max(budget, 0.001)
        result = self.sandbox.run(call.arguments["command"], timeout=timeout)
        content = describe_run(result, self.max_output_chars)
        limit = self.max_output_chars
        cut = limit is not None and len(result.output.rstrip("\n")) > limit
        if clipped and result.timed_out:
            content += (f"\n[the command was stopped by the per-step time budget: this turn's "
                        f"tool calls had {timeout:.0f} s left]")
        return ToolResult(
            call.id, call.name, content, ok=not result.timed_out,
            error="timeout" if result.timed_out else "", exit_code=result.exit_code,
            timed_out=result.timed_out, truncated=result.truncated or cut,
            duration=time.perf_counter() - started,
        )

    def _read_text(self, call: ToolCall, path: str, *, strict: bool = False) -> str | ToolResult:
        data = self.sandbox.read_file(path)
        if b"\x00" in data[:8192]:
            return error_result(call, "binary", f"{path} is a binary file, not text")
        try:
            return data.decode("utf-8", errors="strict" if strict else "replace")
        except UnicodeDecodeError:
            message = f"{path} is not valid UTF-8 text; change it with terminal instead"
            return error_result(call, "binary", message)

    def read_file(self, call: ToolCall, started: float) -> ToolResult:
        path = call.arguments["path"]
        offset = call.arguments.get("offset", 1)
        limit = call.arguments.get("limit", self.read_lines)
        if offset < 1 or limit < 1:
            return error_result(call, "invalid_call", "offset and limit must be at least 1")
        text = self._read_text(call, path)
        if isinstance(text, ToolResult):
            return text
        lines = text.splitlines(keepends=True)
        if not lines:
            return ToolResult(call.id, call.name, f"({path} is empty)",
                              duration=time.perf_counter() - started)
        if offset > len(lines):
            return error_result(call, "invalid_call",
                                f"offset {offset} is past the end of {path} ({len(lines)} lines)")
        chosen = lines[offset - 1 : offset - 1 + limit]
        body, used = [], 0
        for line in chosen:
            if used + len(line) > self.max_read_chars and body:
                break
            body.append(line)
            used += len(line)
        last = offset + len(body) - 1
        content, elided = clip_output("".join(body), self.max_output_chars)  # one huge line
        more_lines = last < len(lines)
        truncated = more_lines or elided > 0
        if offset > 1 or truncated:
            more = f"; call read_file with offset={last + 1} to continue" if more_lines else ""
            content = f"{content.rstrip(chr(10))}\n[lines {offset}-{last} of {len(lines)}{more}]"
        return ToolResult(call.id, call.name, content, truncated=truncated,
                          duration=time.perf_counter() - started)

    def write_file(self, call: ToolCall, started: float) -> ToolResult:
        path, content = call.arguments["path"], call.arguments["content"]
        self.sandbox.write_file(path, content)
        size = len(content.encode("utf-8"))
        return ToolResult(call.id, call.name, f"Wrote {size} bytes to {path}.",
                          duration=time.perf_counter() - started)

    def edit_file(self, call: ToolCall, started: float) -> ToolResult:
        path = call.arguments["path"]
        old, new = call.arguments["old_text"], call.arguments["new_text"]
        if not old:
            return error_result(call, "invalid_call",
                                "old_text is empty; give the exact text to replace")
        text = self._read_text(call, path, strict=True)
        if isinstance(text, ToolResult):
            return text
        count = text.count(old)
        if count == 0:
            return error_result(
                call, "no_match",
                f"old_text was not found in {path} (0 matches). Read the file and copy the exact "
                "text to replace, including whitespace and indentation.", started)
        if count > 1:
            return error_result(
                call, "multiple_matches",
                f"old_text matches {count} times in {path}; it must match exactly once. Include "
                "more surrounding lines to make it unique.", started)
        at = text.index(old)
        self.sandbox.write_file(path, text[:at] + new + text[at + len(old):])
        line = text.count("\n", 0, at) + 1
        return ToolResult(call.id, call.name,
                          f"Edited {path}: replaced 1 occurrence starting at line {line}.",
                          duration=time.perf_counter() - started)
