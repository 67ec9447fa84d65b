"""The Anthropic Messages API as the proxy speaks it: a `/v1/messages` request becomes the
internal chat-completion request (the chat path then renders, samples and records it), and
the chat answer becomes a Messages answer, plain or as Anthropic's server-sent events.

Mapping: `system` (a string or text blocks, joined by blank lines) is the system message;
a user turn's text blocks are one user message and each `tool_result` block one `tool`
message (in block order); an assistant turn's text is its content and its `tool_use` blocks
its `tool_calls` (input as JSON arguments); `tools` are function tools with `input_schema`
as parameters; `max_tokens`, `temperature`, `top_p`, `top_k`, `stop_sequences` (as `stop`),
`tool_choice` and `stream` carry over. Images, documents, thinking blocks, server tools,
structured output and unknown block types are refused (400), never dropped; `thinking`,
`metadata` and `cache_control` settings are ignored (the answer has no thinking blocks).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from opd_gym.proxy.errors import ProxyError, ProxyRequestError, UpstreamError
from opd_gym.proxy.protocol import function_tool, tool_list
from opd_gym.proxy.recording import Sampled

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 529: "overloaded_error"}


def error_body(error: ProxyError) -> dict[str, Any]:
    """Anthropic's error body (`{"type": "error", "error": {"type", "message"}}`)."""
    message = str(error)
    if isinstance(error, UpstreamError) and isinstance(error.body, dict):
        inner = error.body.get("error")
        if isinstance(inner, dict) and inner.get("message"):
            message = str(inner["message"])
    return {"type": "error",
            "error": {"type": ERROR_TYPES.get(error.status, "api_error"), "message": message}}


def _text(blocks: Any, where: str) -> str:
    """The text of a string or a list of text blocks (joined by blank lines)."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise ProxyRequestError(f"{where} must be a string or a list of text blocks")
    parts = []
    for i, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") != "text" or \
                not isinstance(block.get("text"), str):
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise ProxyRequestError(f"{where}[{i}] is a {kind!r} block; only text blocks are "
                                    "supported there")
        parts.append(block["text"])
    return "\n\n".join(parts)


def _user(content: Any, i: int) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    if not isinstance(content, list):
        raise ProxyRequestError(f"messages[{i}].content must be a string or a list of blocks")
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_result":
            if texts:
                out.append({"role": "user", "content": "\n\n".join(texts)})
                texts = []
            if not isinstance(block.get("tool_use_id"), str):
                raise ProxyRequestError(f"messages[{i}].content[{j}]: a tool_result needs "
                                        "its 'tool_use_id'")
            result = block.get("content", "")
            out.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                        "content": _text(result, f"messages[{i}].content[{j}].content")})
        else:
            raise ProxyRequestError(
                f"messages[{i}].content[{j}] is a {kind!r} block; the recording proxy serves "
                "text models: user turns take text and tool_result blocks")
    if texts:
        out.append({"role": "user", "content": "\n\n".join(texts)})
    return out


def _assistant(content: Any, i: int) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    if not isinstance(content, list):
        raise ProxyRequestError(f"messages[{i}].content must be a string or a list of blocks")
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str) \
                    or not isinstance(block.get("input", {}), dict):
                raise ProxyRequestError(f"messages[{i}].content[{j}]: a tool_use needs a "
                                        "string 'id' and 'name' and an object 'input'")
            calls.append({"id": block["id"], "type": "function", "function": {
                "name": block["name"],
                "arguments": json.dumps(block.get("input", {}), ensure_ascii=False)}})
        else:
            raise ProxyRequestError(
                f"messages[{i}].content[{j}] is a {kind!r} block; assistant turns take text "
                "and tool_use blocks")
    message: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts)}
    if calls:
        message["tool_calls"] = calls
    return message


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if tool_list(tools) is None:
        return None
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise ProxyRequestError(f"tools[{i}] must be an object with a string 'name'")
        if tool.get("type") not in (None, "custom"):
            raise ProxyRequestError(f"tools[{i}] is a {tool['type']!r} server tool; the "
                                    "recording proxy serves client tools (name, "
                                    "description, input_schema) only")
        out.append(function_tool(tool["name"], tool.get("description"), tool.get("input_schema")))
    return out or None


def _tool_choice(choice: Any) -> Any:
    if choice is None:
        return None
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind in ("auto", "none"):
        return kind
    if kind == "any":
        return "required"
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise ProxyRequestError("'tool_choice' must be {\"type\": \"auto\"|\"any\"|\"none\"} or "
                            "{\"type\": \"tool\", \"name\": ...}")


def to_chat(body: Any, *, counting: bool = False) -> dict[str, Any]:
    """The internal chat-completion request for a Messages request (`counting`: a
    count_tokens request, which has no `max_tokens`); `ProxyRequestError` when malformed."""
    if not isinstance(body, dict):
        raise ProxyRequestError("the request body must be a JSON object")
    config = body.get("output_config")
    if body.get("output_format") is not None or (
            isinstance(config, dict) and config.get("format") is not None):
        raise ProxyRequestError("structured output (output_format / output_config.format) is "
                                "not supported by the recording proxy; only plain text")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ProxyRequestError("'messages' must be a non-empty list of message objects")
    if not counting and (not isinstance(body.get("max_tokens"), int)
                         or isinstance(body["max_tokens"], bool) or body["max_tokens"] < 1):
        raise ProxyRequestError("'max_tokens' is required: a positive integer")
    chat: list[dict[str, Any]] = []
    if body.get("system") is not None:
        chat.append({"role": "system", "content": _text(body["system"], "system")})
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "user":
            chat.extend(_user(message.get("content"), i))
        elif role == "assistant":
            chat.append(_assistant(message.get("content"), i))
        else:
            raise ProxyRequestError(f"messages[{i}] must be an object with role 'user' or "
                                    "'assistant'")
    out: dict[str, Any] = {"messages": chat}
    if body.get("model") is not None:
        out["model"] = body["model"]
    tools = _tools(body.get("tools"))
    if tools:
        out["tools"] = tools
        choice = _tool_choice(body.get("tool_choice"))
        if choice is not None:
            out["tool_choice"] = choice
    if counting:
        return out
    out["max_tokens"] = body["max_tokens"]
    for key in ("temperature", "top_p", "top_k"):
        if body.get(key) is not None:
            out[key] = body[key]
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
            raise ProxyRequestError("'stop_sequences' must be a list of non-empty strings")
        if stops:
            out["stop"] = stops
    if "stream" in body:
        out["stream"] = body["stream"]
    return out


def stop_reason(finish: str | None, matched: Any, has_calls: bool
                ) -> tuple[str, str | None]:
    """Anthropic's `stop_reason` (and `stop_sequence`) for a chat finish."""
    if has_calls or finish == "tool_calls":
        return "tool_use", None
    if finish == "length":
        return "max_tokens", None
    if isinstance(matched, str):
        return "stop_sequence", matched
    return "end_turn", None


def _input(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as the tool_use input object, or `UpstreamError`."""
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise UpstreamError(f"the model's tool call arguments are not a JSON object "
                            f"({str(arguments)[:200]!r}); cannot answer them as a tool_use")
    return value


def from_chat(response: Mapping[str, Any], sampled: Sampled) -> dict[str, Any]:
    """The Messages answer for a chat completion (its exact ids in `sampled`)."""
    choice = response["choices"][0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    calls = message.get("tool_calls") or []
    for call in calls:
        function = call.get("function") or {}
        content.append({"type": "tool_use", "id": call.get("id") or _tool_id(),
                        "name": function.get("name"), "input": _input(function.get("arguments"))})
    reason, matched = stop_reason(choice.get("finish_reason"), choice.get("stop_reason"),
                                  bool(calls))
    return {"id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant",
            "model": response.get("model"), "content": content, "stop_reason": reason,
            "stop_sequence": matched, "usage": _usage(sampled)}


def _usage(sampled: Sampled) -> dict[str, int]:
    return {"input_tokens": len(sampled.prompt_ids), "output_tokens": len(sampled.token_ids)}


def _tool_id() -> str:
    return f"toolu_{uuid.uuid4().hex[:24]}"


def models_listing(listing: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI `/v1/models` listing in Anthropic's shape (for clients sending
    `anthropic-version`)."""
    data = [{"type": "model", "id": str(m.get("id")), "display_name": str(m.get("id")),
             "created_at": "1970-01-01T00:00:00Z"} for m in listing.get("data") or []]
    return {"data": data, "has_more": False, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None}


def _event(kind: str, payload: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **payload}, ensure_ascii=False)}" \
           f"\n\n".encode()


class MessagesStream:
    """Turns the chat stream's chunks into Anthropic's events as they come: message_start,
    one content block at a time (text_delta / input_json_delta), then, once the turn is
    recorded, message_delta (stop_reason, usage) and message_stop."""

    def __init__(self, model: str | None) -> None:
        self.model = model
        self.started = False
        self.block = -1  # index of the open content block
        self.open: tuple[str, int] | None = None  # ("text", 0) or ("tool", call index)
        self.calls = False
        self.matched: Any = None

    def _start(self, chunk: Mapping[str, Any]) -> list[bytes]:
        self.started = True
        self.model = self.model or chunk.get("model")
        prompt = chunk.get("prompt_token_ids") or []
        return [_event("message_start", {"message": {
            "id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant",
            "model": self.model, "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": len(prompt), "output_tokens": 0}}})]

    def _close(self) -> list[bytes]:
        if self.open is None:
            return []
        self.open = None
        return [_event("content_block_stop", {"index": self.block})]

    def feed(self, chunk: Mapping[str, Any]) -> list[bytes]:
        """Events for one raw chat chunk (before the proxy strips it)."""
        if "error" in chunk:
            return []
        out = [] if self.started else self._start(chunk)
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            if choice.get("stop_reason") is not None:
                self.matched = choice["stop_reason"]
            delta = choice.get("delta") or {}
            if delta.get("content"):
                if self.open != ("text", 0):
                    out += self._close()
                    self.block += 1
                    self.open = ("text", 0)
                    out.append(_event("content_block_start", {
                        "index": self.block, "content_block": {"type": "text", "text": ""}}))
                out.append(_event("content_block_delta", {"index": self.block, "delta": {
                    "type": "text_delta", "text": delta["content"]}}))
            for call in delta.get("tool_calls") or []:
                function = call.get("function") or {}
                which = ("tool", int(call.get("index", 0)))
                if self.open != which:
                    out += self._close()
                    self.block += 1
                    self.open = which
                    self.calls = True
                    out.append(_event("content_block_start", {
                        "index": self.block, "content_block": {
                            "type": "tool_use", "id": call.get("id") or _tool_id(),
                            "name": function.get("name") or "", "input": {}}}))
                if function.get("arguments"):
                    out.append(_event("content_block_delta", {"index": self.block, "delta": {
                        "type": "input_json_delta", "partial_json": function["arguments"]}}))
        return out

    def finish(self, sampled: Sampled) -> list[bytes]:
        """The closing events once the turn is recorded."""
        reason, matched = stop_reason(sampled.finish_reason, self.matched, self.calls)
        return [*self._close(), _event("message_delta", {
            "delta": {"stop_reason": reason, "stop_sequence": matched},
            "usage": {"output_tokens": len(sampled.token_ids)}}),
            _event("message_stop", {})]

    def error(self, error: ProxyError) -> list[bytes]:
        """The error event for a stream that failed (the turn is not recorded)."""
        return [_event("error", {"error": error_body(error)["error"]})]
