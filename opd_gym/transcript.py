"""The episode transcript: OpenAI-format chat messages and the per-turn `Turn` records.

Conventions (what a chat API or a Qwen-style chat template can render as is):

- the assistant message holds `content` = the model's text minus the `<tool_call>` blocks
  that were parsed (so a template re-rendering `tool_calls` does not duplicate them) and
  `tool_calls` = [{id, type: "function", function: {name, arguments: JSON string}}] when
  there are any; when the model's raw output text differs from `content` (it held tool
  calls, or the action came as text) the message also keeps it verbatim as `raw_content`;
- what a model is prompted with is `messages_for_template(messages, tokenizer)`: per assistant
  message, the `content` + `tool_calls` form when the tokenizer's chat template renders it
  exactly as it renders the raw text, otherwise the raw text as the whole content (no
  `tool_calls`: a template that drops or reformats them, e.g. different JSON spacing, would
  otherwise show the model a history it did not produce). So re-rendered history equals
  what the model emitted, as far as the template renders content verbatim;
- every tool call is answered by one `{"role": "tool", "tool_call_id", "name", "content"}`
  message, in call order, including calls that could not run (their content says why);
- format errors that belong to no call (no call at all, a block that is not JSON) and the
  end-of-episode note are a `user` message after the tool messages.

`Turn.context_len` indexes the messages the model saw before the turn
(`messages[:context_len]`); `messages[context_len]` is its assistant message and
`messages[context_len + 1:end_len]` is the next state that followed it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opd_gym.grading import GradeReport
from opd_gym.models.tokenizer import render_ids
from opd_gym.tools.executor import ToolResult
from opd_gym.tools.parsing import ToolCall

Message = dict[str, Any]


def system_message(text: str) -> Message:
    return {"role": "system", "content": text}


def user_message(text: str) -> Message:
    return {"role": "user", "content": text}


RAW = "raw_content"


def assistant_message(
    content: str, calls: Sequence[ToolCall], raw: str | None = None
) -> Message:
    """The assistant message; `raw` (the model's output text) is kept when it says more."""
    message: Message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [call.to_openai() for call in calls]
    if raw is not None and (calls or raw != content):
        message[RAW] = raw
    return message


def tool_message(result: ToolResult) -> Message:
    return {"role": "tool", "tool_call_id": result.call_id, "name": result.name,
            "content": result.content}


def copy_messages(messages: Sequence[Message]) -> list[Message]:
    """A copy sharing no mutable object with `messages` (cheaper than deepcopy)."""
    out = []
    for message in messages:
        fresh = dict(message)
        if "tool_calls" in fresh:
            fresh["tool_calls"] = [
                {**call, "function": dict(call["function"])} for call in fresh["tool_calls"]
            ]
        out.append(fresh)
    return out


def messages_for_template(
    messages: Sequence[Message], tokenizer: Any = None
) -> list[Message]:
    """A copy for chat templates: tool-call arguments decoded to dicts, raw outputs resolved.

    With `tokenizer`, each assistant message that kept its raw output becomes the form the
    template renders exactly like that raw text: `content` + `tool_calls` when they render
    the same, else the raw text as content without `tool_calls`. Without a tokenizer (chat
    APIs, exports) the `content` + `tool_calls` form is used. `raw_content` never remains.
    """
    out = copy_messages(messages)
    for i, message in enumerate(out):
        for call in message.get("tool_calls", ()):
            arguments = call["function"].get("arguments")
            if isinstance(arguments, str):
                try:
                    call["function"]["arguments"] = json.loads(arguments)
                except json.JSONDecodeError:
                    pass
        raw = message.pop(RAW, None)
        if raw is not None and tokenizer is not None and \
                not renders_like_raw(tokenizer, message, raw):
            out[i] = {"role": "assistant", "content": raw}
    return out


def prompt_ids(
    tokenizer: Any,
    messages: Sequence[Message],
    tools: Sequence[Message] | None,
) -> list[int]:
    """The ids a model is prompted with for the next assistant turn of `messages` (the env's
    transcript): assistant turns in the form the template renders as the model's own output,
    `tools` in the prompt, the generation prompt at the end. The ONE rendering shared by the
    bundled policies, the OPD wrapper's `info["student_prompt"]` and the teacher's context."""
    return render_ids(tokenizer, messages_for_template(messages, tokenizer), tools,
                      add_generation_prompt=True)


_PROBE: Message = {"role": "user", "content": "."}
_RENDER_CACHE: dict[tuple[int, str, str], bool] = {}


def _render_text(tokenizer: Any, message: Message) -> str:
    text = tokenizer.apply_chat_template([_PROBE, message], tokenize=False,
                                         add_generation_prompt=False)
    return text if isinstance(text, str) else str(text)


def renders_like_raw(tokenizer: Any, message: Message, raw: str) -> bool:
    """True when the template renders `message` (content + tool_calls) exactly as `raw` text.

    False for templates that drop `tool_calls`, reformat them, or alter the text; a template
    that refuses the raw form (e.g. it insists on `tool_calls`) keeps the structured form.
    """
    key = (id(tokenizer), raw, json.dumps(message, sort_keys=True, default=str))
    if key not in _RENDER_CACHE:
        try:
            raw_text = _render_text(tokenizer, {"role": "assistant", "content": raw})
        except Exception:
            same = True
        else:
            try:
                same = _render_text(tokenizer, message) == raw_text
            except Exception:
                same = False
        if len(_RENDER_CACHE) > 4096:
            _RENDER_CACHE.clear()
        _RENDER_CACHE[key] = same
    return _RENDER_CACHE[key]


def render_messages(messages: Sequence[Message]) -> str:
    """A plain-text transcript for humans (render modes `ansi` and `human`)."""
    blocks = []
    for message in messages:
        role = message["role"]
        header = f"{role} ({message['name']})" if role == "tool" else role
        body = message.get("content") or ""
        for call in message.get("tool_calls", ()):
            fn = call["function"]
            body += f"\n-> {fn['name']}({fn['arguments']})"
        blocks.append(f"=== {header} ===\n{body.strip()}")
    return "\n\n".join(blocks) + "\n"


@dataclass(frozen=True)
class Turn:
    """One assistant turn, frozen once played: what the model produced, what ran, and the
    state that followed (safe to hand to wrappers and background threads by reference)."""

    index: int
    text: str
    context_len: int
    end_len: int = 0
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    format_errors: tuple[str, ...] = ()
    observation: str = ""
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    prompt_ids: tuple[int, ...] | None = None
    grade: GradeReport | None = None
    end_reason: str = ""
    student_topk_ids: tuple[tuple[int, ...], ...] | None = None

    def __post_init__(self) -> None:
        for name in ("tool_calls", "tool_results", "format_errors"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("token_ids", "logprobs", "prompt_ids"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(value))
        if self.student_topk_ids is not None:
            object.__setattr__(self, "student_topk_ids",
                               tuple(tuple(row) for row in self.student_topk_ids))

    @property
    def is_format_error(self) -> bool:
        """True when the turn yielded no valid tool call (counts toward the strike limit)."""
        return not any(call.valid for call in self.tool_calls)

    def summary(self) -> dict[str, Any]:
        """Compact, fixed-shape view for `info["turn"]`."""
        return {
            "index": self.index,
            "context_len": self.context_len,
            "end_len": self.end_len,
            "num_calls": len(self.tool_calls),
            "format_error": self.is_format_error,
            "has_token_ids": self.token_ids is not None,
            "num_tokens": len(self.token_ids) if self.token_ids is not None else 0,
        }

    def to_dict(self) -> dict[str, Any]:
        """Everything about the turn as plain JSON-able data (for recorders and exporters)."""
        return {
            "index": self.index,
            "text": self.text,
            "context_len": self.context_len,
            "end_len": self.end_len,
            "tool_calls": [call.to_dict() for call in self.tool_calls],
            "tool_results": [result.to_dict() for result in self.tool_results],
            "format_errors": list(self.format_errors),
            "observation": self.observation,
            "token_ids": _list(self.token_ids),
            "logprobs": _list(self.logprobs),
            "prompt_ids": _list(self.prompt_ids),
            "grade": self.grade.to_dict() if self.grade is not None else None,
            "end_reason": self.end_reason,
        } | ({} if self.student_topk_ids is None
             else {"student_topk_ids": [list(row) for row in self.student_topk_ids]})


def _list(values: Sequence[Any] | None) -> list[Any] | None:
    return list(values) if values is not None else None
