"""Parse a model's raw output into tool calls, with one-sentence errors for anything malformed.

Default format (Hermes/Qwen): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`,
several per turn, run in order; anything inside `<think>...</think>` is ignored. A final
block whose closing tag is missing (a stop sequence ate it) is accepted. Optionally, when no
`<tool_call>` block is present, fenced ```bash blocks become `terminal` calls. Calls already
given in OpenAI shape (`{"id", "type": "function", "function": {"name", "arguments"}}`) are
validated the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from opd_gym.tools.schemas import SUBMIT, TERMINAL, check_arguments

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
EXPECTED_FORMAT = '<tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>'
NO_CALL_ERROR = (
    "No tool call found in your output. Call a tool as "
    '<tool_call>{"name": "terminal", "arguments": {"command": "ls"}}</tool_call>, '
    'or <tool_call>{"name": "submit", "arguments": {}}</tool_call> when you are done.'
)

_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FENCE = re.compile(r"\A\s*```[a-zA-Z]*\s*\n?(.*?)\n?\s*```\s*\Z", re.DOTALL)
_BASH = re.compile(r"```(?:bash|sh|shell|console)[ \t]*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """One well-formed call; `error` says why it cannot run (unknown tool, bad arguments)."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def valid(self) -> bool:
        return self.error is None

    def to_openai(self) -> dict[str, Any]:
        """The call as an OpenAI `tool_calls` entry (arguments as a JSON string)."""
        return {
            "id": self.id,
            "type": "function",
            "function": {
                "name": self.name,
                "arguments": json.dumps(self.arguments, ensure_ascii=False),
            },
        }

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": dict(self.arguments),
                "error": self.error or ""}


@dataclass(frozen=True)
class ParsedOutput:
    """A parsed turn: `content` is the text minus parsed call blocks; `errors` are format errors."""

    content: str
    calls: list[ToolCall]
    errors: list[str]

    @property
    def valid_calls(self) -> list[ToolCall]:
        return [call for call in self.calls if call.valid]


def format_tool_call(name: str, arguments: dict[str, Any] | None = None) -> str:
    """The Hermes/Qwen text of one call, e.g. for scripted agents and tests."""
    body = json.dumps({"name": name, "arguments": arguments or {}}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"


def _think_spans(text: str) -> list[tuple[int, int]]:
    """Spans of reasoning: `<think>...</think>` blocks and text before a lone `</think>`."""
    spans = [m.span() for m in _THINK.finditer(text)]
    close = text.find("</think>")
    if close >= 0 and (not spans or close < spans[0][0]):
        spans.insert(0, (0, close + len("</think>")))
    return spans


def _outside(spans: Sequence[tuple[int, int]], start: int) -> bool:
    return not any(a <= start < b for a, b in spans)


def _call_from_object(
    obj: Any, call_id: str, where: str, tools: Collection[str] | None
) -> ToolCall | str:
    """A ToolCall from a decoded `{"name", "arguments"}` object, or a format-error sentence."""
    if isinstance(obj, dict) and isinstance(obj.get("function"), dict):
        obj = obj["function"]  # OpenAI shape inside the tags
    if not isinstance(obj, dict):
        kind = type(obj).__name__
        return f"{where} must hold a JSON object, not {kind}. Expected {EXPECTED_FORMAT}."
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return f'{where} has no "name" string. Expected {EXPECTED_FORMAT}.'
    raw_args = obj.get("arguments", obj.get("parameters"))
    arguments, error = check_arguments(name, raw_args, tools)
    if error is not None:
        shown = raw_args if isinstance(raw_args, dict) else {}
        return ToolCall(call_id, name, shown_arguments(shown), error)
    return ToolCall(call_id, name, arguments or {})


def _shown_value(value: Any) -> Any:
    """A flat, JSON-safe stand-in for an argument value of an invalid call."""
    if value is None or isinstance(value, bool | float):
        return value if not isinstance(value, float) or value == value else None
    if isinstance(value, int):
        return value if abs(value) < 10**18 else f"<integer with {len(hex(value))} hex digits>"
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    return f"<{_type_label(value)}>"


def _type_label(value: Any) -> str:
    return {list: "array", dict: "object"}.get(type(value), type(value).__name__)


def shown_arguments(arguments: dict[Any, Any]) -> dict[str, Any]:
    """The arguments of an invalid call as kept for the transcript: flat and JSON-safe.

    Nested arrays/objects become a placeholder, huge integers and lone surrogates are
    replaced, so a hostile argument can never make the transcript fail to serialise.
    """
    return {
        _shown_value(str(key)): _shown_value(value)
        for key, value in list(arguments.items())[:32]
    }


def _decode_block(
    body: str, index: int, count: int, call_id: str, tools: Collection[str] | None
) -> ToolCall | str:
    where = "The <tool_call> block" if count == 1 else f"<tool_call> block {index + 1} of {count}"
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1)
    if not body.strip():
        return f"{where} is empty. Expected {EXPECTED_FORMAT}."
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        return (
            f"{where} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}). "
            f"Expected {EXPECTED_FORMAT}, with strings JSON-escaped."
        )
    except (ValueError, RecursionError) as exc:  # nesting too deep, integer too long
        why = "it is nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:100]
        return f"{where} cannot be read as JSON ({why}). Expected {EXPECTED_FORMAT}."
    return _call_from_object(obj, call_id, where, tools)


def _cut(text: str, spans: Sequence[tuple[int, int]]) -> str:
    out, last = [], 0
    for a, b in spans:
        out.append(text[last:a])
        last = b
    out.append(text[last:])
    return re.sub(r"\n{3,}", "\n\n", "".join(out)).strip()


def _no_call_error(text: str, visible: str) -> str:
    if "<think>" in text and "</think>" not in text[text.rfind("<think>"):]:
        return ("Your output ended inside <think> without a tool call. Close the reasoning with "
                f"</think> and then call a tool as {EXPECTED_FORMAT}.")
    if re.search(r'\{\s*"name"\s*:', visible):
        return (f"Found JSON that looks like a tool call but it is not inside <tool_call> tags. "
                f"Write it as {EXPECTED_FORMAT}.")
    return NO_CALL_ERROR


def parse_model_output(
    text: str,
    *,
    parse_bash_blocks: bool = False,
    id_prefix: str = "call",
    tools: Collection[str] | None = None,
) -> ParsedOutput:
    """Parse raw model text into calls and format errors; never raises.

    `tools` restricts the known tool names (default: all five).
    """
    think = _think_spans(text)
    blocks = [m for m in _BLOCK.finditer(text) if _outside(think, m.start())]
    calls: list[ToolCall] = []
    errors: list[str] = []
    cut: list[tuple[int, int]] = []
    for index, match in enumerate(blocks):
        call_id = f"{id_prefix}_{index}"
        result = _decode_block(match.group(1), index, len(blocks), call_id, tools)
        if isinstance(result, str):
            errors.append(result)
        else:
            calls.append(result)
            cut.append(match.span())
    if not blocks and parse_bash_blocks and (tools is None or TERMINAL in tools):
        fences = [m for m in _BASH.finditer(text) if _outside(think, m.start())]
        for index, match in enumerate(fences):
            command = match.group(1).strip()
            if command:
                calls.append(ToolCall(f"{id_prefix}_{index}", TERMINAL, {"command": command}))
                cut.append(match.span())
    if not blocks and not calls:
        errors.append(_no_call_error(text, _cut(text, think)))
    content = _cut(text, cut) if cut else text.strip()
    return ParsedOutput(content=content, calls=calls, errors=errors)


def parse_openai_tool_calls(
    tool_calls: Sequence[Any], *, id_prefix: str = "call", tools: Collection[str] | None = None
) -> ParsedOutput:
    """Validate tool calls given in OpenAI shape (content is left to the caller)."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    for index, item in enumerate(tool_calls):
        count = len(tool_calls)
        where = "The tool call" if count == 1 else f"Tool call {index + 1} of {count}"
        given_id = item.get("id") if isinstance(item, dict) else None
        call_id = given_id if isinstance(given_id, str) and given_id else f"{id_prefix}_{index}"
        result = _call_from_object(item, call_id, where, tools)
        if isinstance(result, str):
            errors.append(result)
        else:
            calls.append(result)
    if not tool_calls:
        errors.append(NO_CALL_ERROR)
    return ParsedOutput(content="", calls=calls, errors=errors)


def is_submit(call: ToolCall) -> bool:
    return call.valid and call.name == SUBMIT
