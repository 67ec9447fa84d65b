"""Tool-call text formats per model family, one parser each behind the `ToolFormat` interface.

Every format parses raw model text into `ParsedOutput` (calls, format errors) and never raises:
anything malformed becomes one clear sentence naming the expected form. `<think>...</think>`
reasoning is ignored, several calls per turn run in order, and a final call whose closing
marker a stop sequence ate is accepted when its content is complete. Formats, each written
from the family's public chat template / documentation:

- `hermes` (Hermes, Qwen2.5/Qwen3): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`;
- `qwen3_coder` (Qwen3-Coder): `<tool_call><function=NAME><parameter=P>value</parameter>
  </function></tool_call>`, values as plain text (numbers converted by the tool's schema);
- `llama3` (Llama 3.1-3.3): `{"name": ..., "parameters": {...}}`, optionally after
  `<|python_tag|>`, several separated by `;` or new lines;
- `mistral`: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` and the newer
  `[TOOL_CALLS]NAME[ARGS]{...}` form;
- `deepseek` (V3/R1 and V3.1): `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function`
  `<｜tool▁sep｜>NAME` + a fenced JSON block + `<｜tool▁call▁end｜><｜tool▁calls▁end｜>`
  (V3.1: `NAME<｜tool▁sep｜>{...}`).

`detect_tool_format` picks the format from a tokenizer's chat template.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from opd_gym.errors import ConfigError
from opd_gym.tools import parsing
from opd_gym.tools.parsing import (
    ParsedOutput,
    ToolCall,
    _call_from_object,
    _cut,
    _outside,
    _think_spans,
)
from opd_gym.tools.schemas import _BY_NAME, TERMINAL

Decoder = Callable[[str, str, Collection[str] | None], ToolCall | str]


@dataclass(frozen=True)
class _Piece:
    """One call found in the text: the region to drop from content and how to decode it."""

    group: tuple[int, int]
    decode: Decoder


def _error(message: str) -> Decoder:
    return lambda where, call_id, tools: message.replace("{where}", where)


class ToolFormat:
    """A tool-call text format: how to write a call, the instructions, and the parser."""

    name = ""
    label = ""  # the family, as shown to people
    expected = ""  # one-line form quoted in error sentences
    markers: tuple[str, ...] = ()  # text that shows a model wrote in this format

    def format_call(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        """The text of one call in this format (for scripted agents, tests, prompts)."""
        raise NotImplementedError

    def format_calls(self, calls: Sequence[tuple[str, dict[str, Any]]]) -> str:
        """The text of several calls in one turn."""
        return "\n".join(self.format_call(name, args) for name, args in calls)

    def instructions(self) -> str:
        """The system-prompt paragraph that tells the model how to call a tool."""
        example = self.format_call("<tool>", {"<argument>": "<value>"})
        return f"Call a tool by writing:\n{example}"

    def no_call_error(self) -> str:
        """The sentence for a turn without any tool call."""
        return (
            f"No tool call found in your output. Call a tool as "
            f"{self._inline(self.format_call('terminal', {'command': 'ls'}))}, or "
            f"{self._inline(self.format_call('submit', {}))} when you are done."
        )

    def _inline(self, text: str) -> str:
        """A call's text on one line, for error sentences."""
        return re.sub(r"\s*\n\s*", "", text)

    def _pieces(self, text: str, think: Sequence[tuple[int, int]]) -> list[_Piece]:
        raise NotImplementedError

    def parse(
        self,
        text: str,
        *,
        parse_bash_blocks: bool = False,
        id_prefix: str = "call",
        tools: Collection[str] | None = None,
    ) -> ParsedOutput:
        """Parse raw model text into calls and format errors; never raises."""
        try:
            return self._parse(text, parse_bash_blocks, id_prefix, tools)
        except Exception as exc:  # the guarantee: a sentence, never an exception
            why = f"{type(exc).__name__}"
            return ParsedOutput(text.strip() if isinstance(text, str) else "", [], [
                f"Your output could not be read as tool calls ({why}). Expected {self.expected}."
            ])

    def _parse(
        self, text: str, parse_bash_blocks: bool, id_prefix: str, tools: Collection[str] | None
    ) -> ParsedOutput:
        think = _think_spans(text)
        pieces = self._pieces(text, think)
        calls: list[ToolCall] = []
        errors: list[str] = []
        failed_groups: set[tuple[int, int]] = set()
        for index, piece in enumerate(pieces):
            count = len(pieces)
            where = "The tool call" if count == 1 else f"Tool call {index + 1} of {count}"
            result = piece.decode(where, f"{id_prefix}_{index}", tools)
            if isinstance(result, str):
                errors.append(result)
                failed_groups.add(piece.group)
            else:
                calls.append(result)
        cut = sorted({p.group for p in pieces} - failed_groups)
        if not pieces and parse_bash_blocks and (tools is None or TERMINAL in tools):
            for index, match in enumerate(m for m in parsing._BASH.finditer(text)
                                          if _outside(think, m.start())):
                command = match.group(1).strip()
                if command:
                    calls.append(ToolCall(f"{id_prefix}_{index}", TERMINAL, {"command": command}))
                    cut.append(match.span())
        if not pieces and not calls:
            errors.append(self._no_call(text))
        content = _cut(text, _merge(cut)) if cut else text.strip()
        return ParsedOutput(content=content, calls=calls, errors=errors)

    def _no_call(self, text: str) -> str:
        if "<think>" in text and "</think>" not in text[text.rfind("<think>"):]:
            return ("Your output ended inside <think> without a tool call. Close the reasoning "
                    f"with </think> and then call a tool as {self.expected}.")
        return self._other_family(text) or self.no_call_error()

    def _other_family(self, text: str) -> str | None:
        """The sentence for calls written in another family's format, if they are."""
        visible = _cut(text, _think_spans(text))
        if any(m in visible for m in self.markers):
            return None
        for other in FORMATS.values():
            if other.name != self.name and any(m in visible for m in other.markers):
                return (f"Your output uses the {other.label} tool-call format, but this "
                        f"environment reads the {self.label} format: write {self.expected}.")
        return None


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if merged and a < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


def _json_at(text: str, pos: int) -> tuple[Any, int] | str:
    """Decode one JSON value at `pos`: (value, end) or a short reason it cannot be read."""
    try:
        return json.JSONDecoder().raw_decode(text, pos)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text.rstrip()) or "Unterminated string" in exc.msg and (
            text.find('"', exc.pos + 1) < 0
        ):
            return "cut off"
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    except RecursionError:
        return "nested too deeply"
    except ValueError as exc:  # integer too long
        return str(exc)[:100]


def _object_decoder(obj: Any, expected: str) -> Decoder:
    def decode(where: str, call_id: str, tools: Collection[str] | None) -> ToolCall | str:
        result = _call_from_object(obj, call_id, where, tools)
        if isinstance(result, str):
            return result.replace(parsing.EXPECTED_FORMAT, expected)
        return result
    return decode


def _json_error(reason: str, expected: str) -> Decoder:
    if reason == "cut off":
        return _error("{where} is cut off: its JSON ends before it is complete (the output "
                      f"stopped too early). Expected {expected}.")
    return _error(f"{{where}} is not valid JSON ({reason}). Expected {expected}, with strings "
                  "JSON-escaped.")


class HermesFormat(ToolFormat):
    """Hermes / Qwen2.5 / Qwen3: JSON inside `<tool_call>` tags (the default)."""

    name = "hermes"
    label = "Hermes/Qwen <tool_call> JSON"
    expected = parsing.EXPECTED_FORMAT
    markers = ("<tool_call>\n{", "<tool_call>{", "<tool_call> {")

    def format_call(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        return parsing.format_tool_call(name, arguments)

    def instructions(self) -> str:
        return ("Call a tool by writing:\n<tool_call>\n"
                '{"name": "<tool>", "arguments": {<arguments as a JSON object>}}\n</tool_call>')

    def no_call_error(self) -> str:
        return parsing.NO_CALL_ERROR

    def parse(
        self,
        text: str,
        *,
        parse_bash_blocks: bool = False,
        id_prefix: str = "call",
        tools: Collection[str] | None = None,
    ) -> ParsedOutput:
        parsed = parsing.parse_model_output(
            text, parse_bash_blocks=parse_bash_blocks, id_prefix=id_prefix, tools=tools
        )
        if len(parsed.errors) == 1 and not parsed.calls and "<tool_call>" not in text:
            other = self._other_family(text)
            if other is not None and "inside <think>" not in parsed.errors[0]:
                return ParsedOutput(parsed.content, [], [other])
        return parsed


_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FUNCTION = re.compile(r"\s*<function=([^>\n]*)>(.*?)(</function>\s*\Z|\Z)", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]*)>(.*?)</parameter>", re.DOTALL)


def _xml_value(name: str, key: str, raw: str) -> Any:
    """A parameter's text as the tool's schema types it (the Qwen3-Coder template's rule)."""
    value = raw[1:] if raw.startswith("\n") else raw
    value = value[:-1] if value.endswith("\n") else value
    kind = _BY_NAME.get(name, {}).get("parameters", {}).get("properties", {}).get(key, {}).get(
        "type", "string"
    )
    if kind in ("integer", "number"):
        try:
            number = float(value.strip())
        except ValueError:
            return value
        if kind == "integer" and number.is_integer() and abs(number) < 2**63:
            return int(number)
        return number
    if kind != "string":
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


class Qwen3CoderFormat(ToolFormat):
    """Qwen3-Coder: `<tool_call><function=NAME><parameter=P>value</parameter></function>`."""

    name = "qwen3_coder"
    label = "Qwen3-Coder XML"
    expected = ("<tool_call><function=NAME><parameter=ARG>value</parameter></function>"
                "</tool_call>")
    markers = ("<function=",)

    def format_call(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        params = ""
        for key, value in (arguments or {}).items():
            shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            params += f"<parameter={key}>\n{shown}\n</parameter>\n"
        return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"

    def instructions(self) -> str:
        return ("Call a tool by writing:\n<tool_call>\n<function=<tool>>\n<parameter=<argument>>\n"
                "<value as plain text, may span several lines>\n</parameter>\n</function>\n"
                "</tool_call>\nWrite one <parameter> block per argument.")

    def _pieces(self, text: str, think: Sequence[tuple[int, int]]) -> list[_Piece]:
        return [_Piece(m.span(), self._decoder(m.group(1)))
                for m in _BLOCK.finditer(text) if _outside(think, m.start())]

    def _decoder(self, body: str) -> Decoder:
        expected = self.expected
        if not body.strip():
            return _error(f"{{where}} is empty. Expected {expected}.")
        function = _FUNCTION.match(body)
        if function is None:
            if body.lstrip().startswith("{"):
                return _error("{where} holds JSON, but this environment reads the Qwen3-Coder "
                              f"XML form. Expected {expected}.")
            return _error(f"{{where}} has no <function=NAME> tag. Expected {expected}.")
        name, inner = function.group(1).strip(), function.group(2)
        if not name:
            return _error(f"{{where}} has an empty function name. Expected {expected}.")
        arguments: dict[str, Any] = {}
        last = 0
        for match in _PARAMETER.finditer(inner):
            between = inner[last:match.start()]
            if between.strip():
                return _error(f"{{where}} has text outside <parameter> tags "
                              f"({between.strip()[:40]!r}). Expected {expected}.")
            key = match.group(1).strip()
            if key in arguments:
                return _error(f"{{where}} gives parameter {key!r} twice. Expected {expected}.")
            arguments[key] = _xml_value(name, key, match.group(2))
            last = match.end()
        rest = inner[last:]
        if "<parameter=" in rest:
            key = rest[rest.find("<parameter=") + 11:].partition(">")[0][:40]
            return _error(f"{{where}} ends inside <parameter={key}> without </parameter> (the "
                          f"output was cut off or the tag is unclosed). Expected {expected}.")
        if rest.strip():
            return _error(f"{{where}} has text outside <parameter> tags ({rest.strip()[:40]!r})."
                          f" Expected {expected}.")
        return _object_decoder({"name": name, "arguments": arguments}, expected)


_PYTHON_TAG = "<|python_tag|>"
_LLAMA_START = re.compile(r'\{\s*"(?:name|type|function)"\s*:')


class Llama3Format(ToolFormat):
    """Llama 3.x JSON tool calling: `{"name": ..., "parameters": ...}` after `<|python_tag|>`."""

    name = "llama3"
    label = "Llama 3 JSON"
    expected = '{"name": "<tool>", "parameters": {...}}'
    markers = (_PYTHON_TAG, '"parameters"')

    def format_call(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        return json.dumps({"name": name, "parameters": arguments or {}}, ensure_ascii=False)

    def format_calls(self, calls: Sequence[tuple[str, dict[str, Any]]]) -> str:
        return "; ".join(self.format_call(name, args) for name, args in calls)

    def instructions(self) -> str:
        return ('Call a tool by replying with a JSON object and nothing else:\n'
                '{"name": "<tool>", "parameters": {<arguments as a JSON object>}}\n'
                "Separate several calls with a semicolon.")

    def _pieces(self, text: str, think: Sequence[tuple[int, int]]) -> list[_Piece]:
        pieces: list[_Piece] = []
        starts = [m.start() for m in _LLAMA_START.finditer(text) if _outside(think, m.start())]
        tags = [i for i in _find_all(text, _PYTHON_TAG) if _outside(think, i)]
        for tag in tags:  # a python tag followed by something that is not a call object
            after = tag + len(_PYTHON_TAG)
            if text[after:].lstrip()[:1] not in ("{", "["):
                if not text[after:].strip():
                    why = "nothing"
                else:
                    why = repr(text[after:].strip()[:40])
                pieces.append(_Piece((tag, after), _error(
                    f"{{where}} after <|python_tag|> is {why}, not a JSON object. "
                    f"Expected {self.expected}.")))
        end = -1
        for start in starts:
            if start < end:
                continue
            decoded = _json_at(text, start)
            if isinstance(decoded, str):
                pieces.append(_Piece((start, len(text)), _json_error(decoded, self.expected)))
                break  # the rest of the text is inside the broken object
            obj, end = decoded
            group_start = start
            before = text[:start].rstrip()
            if before.endswith(_PYTHON_TAG):
                group_start = len(before) - len(_PYTHON_TAG)
            group_end = end
            tail = re.match(r"\s*;", text[end:])
            if tail:
                group_end = end + tail.end()
            pieces.append(_Piece((group_start, group_end), _object_decoder(obj, self.expected)))
        return sorted(pieces, key=lambda p: p.group)


def _find_all(text: str, marker: str) -> list[int]:
    out, at = [], text.find(marker)
    while at >= 0:
        out.append(at)
        at = text.find(marker, at + len(marker))
    return out


_TOOL_CALLS = "[TOOL_CALLS]"
_V11 = re.compile(r"\s*([A-Za-z0-9_.\-]+)(?:\[CALL_ID\]([A-Za-z0-9]*))?\[ARGS\]")


class MistralFormat(ToolFormat):
    """Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}]`, or `[TOOL_CALLS]NAME[ARGS]{}`."""

    name = "mistral"
    label = "Mistral [TOOL_CALLS]"
    expected = '[TOOL_CALLS][{"name": "<tool>", "arguments": {...}}]'
    markers = (_TOOL_CALLS,)

    def format_call(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        return self.format_calls([(name, arguments or {})])

    def format_calls(self, calls: Sequence[tuple[str, dict[str, Any]]]) -> str:
        body = [{"name": name, "arguments": args or {}} for name, args in calls]
        return _TOOL_CALLS + json.dumps(body, ensure_ascii=False)

    def instructions(self) -> str:
        return ("Call tools by writing [TOOL_CALLS] followed by a JSON list of calls:\n"
                '[TOOL_CALLS][{"name": "<tool>", "arguments": {<arguments as a JSON object>}}]\n'
                "Put several calls in the same list; they run in order.")

    def _pieces(self, text: str, think: Sequence[tuple[int, int]]) -> list[_Piece]:
        marks = [i for i in _find_all(text, _TOOL_CALLS) if _outside(think, i)]
        pieces: list[_Piece] = []
        for n, mark in enumerate(marks):
            stop = marks[n + 1] if n + 1 < len(marks) else len(text)
            pieces += self._segment(text[:stop], mark + len(_TOOL_CALLS), (mark, stop))
        return pieces

    def _segment(self, text: str, pos: int, group: tuple[int, int]) -> list[_Piece]:
        expected = self.expected
        rest = text[pos:]
        at = pos + len(rest) - len(rest.lstrip())
        if at >= len(text):
            return [_Piece(group, _error(f"{{where}} is empty after [TOOL_CALLS] (the output was "
                                         f"cut off). Expected {expected}."))]
        if text[at] == "{":
            decoded = _json_at(text, at)
            if isinstance(decoded, str):
                return [_Piece(group, _json_error(decoded, expected))]
            return [_Piece(group, _object_decoder(decoded[0], expected))]
        if text[at] != "[":
            v11 = _V11.match(text, pos)
            if v11 is None:
                shown = repr(text[at:at + 40])
                return [_Piece(group, _error(f"{{where}}: [TOOL_CALLS] is followed by {shown}, "
                                             f"not a JSON list. Expected {expected}."))]
            decoded = _json_at(text, v11.end())
            if isinstance(decoded, str):
                return [_Piece(group, _json_error(decoded, expected))]
            obj = {"name": v11.group(1), "arguments": decoded[0]}
            return [_Piece(group, _object_decoder(obj, expected))]
        pieces: list[_Piece] = []
        pos = at + 1
        while True:
            while pos < len(text) and text[pos] in " \t\r\n":
                pos += 1
            if pos >= len(text):
                pieces.append(_Piece(group, _error(
                    "{where} is cut off: the [TOOL_CALLS] list ends before its closing ] (the "
                    f"output stopped too early). Expected {expected}.")))
                return pieces
            if text[pos] == "]" and (not pieces or pos > at + 1):
                return pieces if pieces else [_Piece(group, _error(
                    f"{{where}}: the [TOOL_CALLS] list is empty. Expected {expected}."))]
            decoded = _json_at(text, pos)
            if isinstance(decoded, str):
                pieces.append(_Piece(group, _json_error(decoded, expected)))
                return pieces
            pieces.append(_Piece(group, _object_decoder(decoded[0], expected)))
            pos = decoded[1]
            while pos < len(text) and text[pos] in " \t\r\n":
                pos += 1
            if pos < len(text) and text[pos] == ",":
                pos += 1
            elif pos < len(text) and text[pos] == "]":
                return pieces
            elif pos < len(text):
                pieces.append(_Piece(group, _error(
                    f"{{where}}: the [TOOL_CALLS] list has {text[pos:pos + 20]!r} where a comma "
                    f"or ] belongs. Expected {expected}.")))
                return pieces


CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, TOOL_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
_DS_CALL = re.compile(
    re.escape(CALL_BEGIN) + r"(.*?)(?:" + re.escape(CALL_END) + r"|(?=" + re.escape(CALL_BEGIN)
    + r")|(?=" + re.escape(CALLS_END) + r")|\Z)", re.DOTALL,
)
_DS_FENCE = re.compile(r"\A\s*```[a-zA-Z]*[ \t]*\n?(.*?)(?:\n?\s*```\s*|\Z)\Z", re.DOTALL)


class DeepSeekFormat(ToolFormat):
    """DeepSeek V3/R1 (`function`, separator, NAME, fenced JSON) or V3.1 (NAME, separator, JSON)."""

    name = "deepseek"
    label = "DeepSeek tool-call marker"
    expected = (f"{CALLS_BEGIN}{CALL_BEGIN}function{TOOL_SEP}NAME\\n```json\\n{{...}}\\n```"
                f"{CALL_END}{CALLS_END}")
    markers = (CALL_BEGIN, CALLS_BEGIN)

    def format_call(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        return self.format_calls([(name, arguments or {})])

    def format_calls(self, calls: Sequence[tuple[str, dict[str, Any]]]) -> str:
        body = "".join(
            f"{CALL_BEGIN}function{TOOL_SEP}{name}\n```json\n"
            f"{json.dumps(args or {}, ensure_ascii=False)}\n```{CALL_END}"
            for name, args in calls
        )
        return f"{CALLS_BEGIN}{body}{CALLS_END}"

    def instructions(self) -> str:
        return ("Call tools by writing:\n"
                f"{CALLS_BEGIN}{CALL_BEGIN}function{TOOL_SEP}<tool>\n```json\n"
                f"{{<arguments as a JSON object>}}\n```{CALL_END}{CALLS_END}\n"
                f"Put several {CALL_BEGIN}...{CALL_END} calls inside one {CALLS_BEGIN}"
                f"...{CALLS_END}; they run in order.")

    def _pieces(self, text: str, think: Sequence[tuple[int, int]]) -> list[_Piece]:
        pieces = [_Piece(self._group(text, *m.span()), self._decoder(m.group(1)))
                  for m in _DS_CALL.finditer(text) if _outside(think, m.start())]
        if not pieces:
            begin = [i for i in _find_all(text, CALLS_BEGIN) if _outside(think, i)]
            if begin:
                pieces.append(_Piece((begin[0], len(text)), _error(
                    f"{{where}}: {CALLS_BEGIN} is not followed by any {CALL_BEGIN} (the output was "
                    f"cut off or the marker is wrong). Expected {self.expected}.")))
        return pieces

    @staticmethod
    def _group(text: str, start: int, end: int) -> tuple[int, int]:
        """A call's span widened to the calls-begin/-end wrapper right around it."""
        before = text[:start].rstrip()
        if before.endswith(CALLS_BEGIN):
            start = len(before) - len(CALLS_BEGIN)
        after = text[end:]
        if after.lstrip().startswith(CALLS_END):
            end += len(after) - len(after.lstrip()) + len(CALLS_END)
        return start, end

    def _inline(self, text: str) -> str:
        return text.replace("\n", "\\n")

    def _decoder(self, body: str) -> Decoder:
        expected = self.expected
        if TOOL_SEP not in body:
            return _error(f"{{where}} has no {TOOL_SEP} between the call type and the function "
                          f"name (or the output was cut off). Expected {expected}.")
        head, _, rest = body.partition(TOOL_SEP)
        head = head.strip()
        if head == "function":  # V3 / R1: the name on its own line, then fenced JSON
            name, _, args = rest.partition("\n")
            fenced = _DS_FENCE.match(args)
            args = fenced.group(1) if fenced else args
        else:  # V3.1: the name before the separator, the JSON right after
            name, args = head, rest
        name = name.strip()
        if not name:
            return _error(f"{{where}} has no function name. Expected {expected}.")
        if not args.strip():
            return _error(f"{{where}} has no JSON arguments (the output was cut off or the "
                          f"arguments are missing). Expected {expected}.")
        at = len(args) - len(args.lstrip())
        decoded = _json_at(args, at)
        if isinstance(decoded, str):
            return _json_error(decoded, expected)
        if args[decoded[1]:].strip():
            return _error(f"{{where}} has text after its JSON arguments "
                          f"({args[decoded[1]:].strip()[:40]!r}). Expected {expected}.")
        return _object_decoder({"name": name, "arguments": decoded[0]}, expected)


FORMATS: dict[str, ToolFormat] = {
    f.name: f for f in (HermesFormat(), Qwen3CoderFormat(), Llama3Format(), MistralFormat(),
                        DeepSeekFormat())
}
ALIASES = {"qwen": "hermes", "qwen2.5": "hermes", "qwen3": "hermes", "qwen3-coder": "qwen3_coder",
           "qwen3_xml": "qwen3_coder", "llama": "llama3", "llama3.1": "llama3",
           "llama3_json": "llama3", "deepseek_v3": "deepseek", "deepseek-r1": "deepseek"}
DEFAULT_FORMAT = "hermes"


def _template_text(source: Any) -> str:
    template = source if isinstance(source, str) else getattr(source, "chat_template", None)
    if isinstance(template, dict):  # tokenizers with named templates
        return "\n".join(str(t) for t in template.values())
    if isinstance(template, list):
        return "\n".join(str(t.get("template", "")) for t in template if isinstance(t, dict))
    return template if isinstance(template, str) else ""


def detect_tool_format(source: Any) -> str | None:
    """The format a chat template (or a tokenizer's `chat_template`) writes calls in, if any."""
    template = _template_text(source)
    if not template:
        return None
    if "tool▁calls▁begin" in template or "tool▁sep" in template:
        return "deepseek"
    if "[TOOL_CALLS]" in template:
        return "mistral"
    if "<function=" in template and "<parameter=" in template:
        return "qwen3_coder"
    if "<tool_call>" in template:
        return "hermes"
    if "<|python_tag|>" in template or (
        "<|start_header_id|>" in template and '"parameters"' in template
    ):
        return "llama3"
    return None


def get_tool_format(spec: str | ToolFormat | Any | None = None) -> ToolFormat:
    """A format by name or alias, as given, detected from a tokenizer/template, or the default.

    `None` and "auto" without a template mean the default (`hermes`).
    """
    if isinstance(spec, ToolFormat):
        return spec
    if spec is None or spec == "auto":
        return FORMATS[DEFAULT_FORMAT]
    if isinstance(spec, str):
        key = spec.strip().lower()
        key = ALIASES.get(key, key)
        if key in FORMATS:
            return FORMATS[key]
        if "{%" in spec or "{{" in spec:  # a chat template itself
            return FORMATS[detect_tool_format(spec) or DEFAULT_FORMAT]
        known = ", ".join(FORMATS)
        raise ConfigError(f"unknown tool_format {spec!r}; the formats are: {known}, or auto")
    if hasattr(spec, "chat_template"):
        return FORMATS[detect_tool_format(spec) or DEFAULT_FORMAT]
    raise ConfigError(f"tool_format must be a format name, a ToolFormat or a tokenizer, "
                     f"not {type(spec).__name__}")


def parse_tool_calls(
    text: str,
    tool_format: str | ToolFormat = DEFAULT_FORMAT,
    *,
    parse_bash_blocks: bool = False,
    id_prefix: str = "call",
    tools: Collection[str] | None = None,
) -> ParsedOutput:
    """Parse raw model text in `tool_format`; never raises."""
    return get_tool_format(tool_format).parse(
        text, parse_bash_blocks=parse_bash_blocks, id_prefix=id_prefix, tools=tools
    )
