"""The OpenAI Responses API as the proxy speaks it: a `/v1/responses` request becomes the
internal chat-completion request (the chat path then renders, samples and records it), and
the chat answer becomes a Response with `output` items, plain or as Responses stream events.

Mapping: `instructions` is the system message; `input` as a string is one user message; as
items, a `message` (role user, assistant, system, or developer as system; content a string
or `input_text`/`output_text` parts, joined by blank lines) is a message, consecutive
`function_call` items are the `tool_calls` of one assistant message, and a
`function_call_output` is a `tool` message; `function` tools carry over;
`max_output_tokens` is `max_tokens`. Stored state (`previous_response_id`), non-function
tools, non-text parts, reasoning items and non-text output formats are refused (400).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from opd_gym.proxy.errors import ProxyError, ProxyRequestError
from opd_gym.proxy.protocol import function_tool, tool_list
from opd_gym.proxy.recording import Sampled

ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
TEXT_PARTS = ("input_text", "output_text", "text")


def _content(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ProxyRequestError(f"{where} must be a string or a list of content parts")
    parts = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS or not isinstance(part.get("text"), str):
            raise ProxyRequestError(f"{where}[{i}] is a {kind!r} part; the recording proxy "
                                    "serves text models: input_text/output_text parts only")
        parts.append(part["text"])
    return "\n\n".join(parts)


def _items(items: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ProxyRequestError(f"input[{i}] must be an object")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = ROLES.get(item.get("role"))
            if role is None:
                raise ProxyRequestError(f"input[{i}].role must be user, assistant, system "
                                        "or developer")
            out.append({"role": role, "content": _content(item.get("content"),
                                                          f"input[{i}].content")})
        elif kind == "function_call":
            if not all(isinstance(item.get(k), str) for k in ("call_id", "name", "arguments")):
                raise ProxyRequestError(f"input[{i}]: a function_call needs string 'call_id', "
                                        "'name' and 'arguments'")
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise ProxyRequestError(f"input[{i}]: a function_call_output needs its "
                                        "'call_id'")
            out.append({"role": "tool", "tool_call_id": item["call_id"],
                        "content": _content(item.get("output", ""), f"input[{i}].output")})
        else:
            raise ProxyRequestError(f"input[{i}] is a {kind!r} item; the recording proxy "
                                    "takes message, function_call and function_call_output "
                                    "items")
    return out


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if tool_list(tools) is None:
        return None
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function" or \
                not isinstance(tool.get("name"), str):
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise ProxyRequestError(f"tools[{i}] is a {kind!r} tool; the recording proxy "
                                    "serves function tools (type, name, parameters) only")
        out.append(function_tool(tool["name"], tool.get("description"), tool.get("parameters")))
    return out or None


def _tool_choice(choice: Any) -> Any:
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and \
            isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise ProxyRequestError("'tool_choice' must be auto, none, required or "
                            "{\"type\": \"function\", \"name\": ...}")


def to_chat(body: Any) -> dict[str, Any]:
    """The internal chat-completion request for a Responses request; `ProxyRequestError`
    naming what is malformed or refused."""
    if not isinstance(body, dict):
        raise ProxyRequestError("the request body must be a JSON object")
    if body.get("previous_response_id") is not None or body.get("conversation") is not None:
        raise ProxyRequestError("the recording proxy stores no responses: send the whole "
                                "conversation in 'input' instead of previous_response_id or "
                                "conversation")
    fmt = ((body.get("text") or {}).get("format") or {}) if isinstance(body.get("text"),
                                                                       dict) else {}
    if fmt.get("type") not in (None, "text"):
        raise ProxyRequestError(f"text.format {fmt.get('type')!r} is not supported; only "
                                "plain text output")
    messages: list[dict[str, Any]] = []
    if body.get("instructions") is not None:
        if not isinstance(body["instructions"], str):
            raise ProxyRequestError("'instructions' must be a string")
        messages.append({"role": "system", "content": body["instructions"]})
    given = body.get("input")
    if isinstance(given, str):
        messages.append({"role": "user", "content": given})
    elif isinstance(given, list) and given:
        messages.extend(_items(given))
    else:
        raise ProxyRequestError("'input' must be a string or a non-empty list of items")
    out: dict[str, Any] = {"messages": messages}
    if body.get("model") is not None:
        out["model"] = body["model"]
    tools = _tools(body.get("tools"))
    if tools:
        out["tools"] = tools
        choice = _tool_choice(body.get("tool_choice"))
        if choice is not None:
            out["tool_choice"] = choice
    if body.get("max_output_tokens") is not None:
        out["max_tokens"] = body["max_output_tokens"]
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            out[key] = body[key]
    if "stream" in body:
        out["stream"] = body["stream"]
    return out


def _message_item(text: str, item_id: str, status: str = "completed") -> dict[str, Any]:
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def _call_item(call: Mapping[str, Any], item_id: str, status: str = "completed"
               ) -> dict[str, Any]:
    function = call.get("function") or {}
    return {"type": "function_call", "id": item_id, "call_id": call.get("id") or item_id,
            "name": function.get("name") or "", "arguments": function.get("arguments") or "",
            "status": status}


def _response(body: Mapping[str, Any], response_id: str, model: Any, created: int,
              output: list[dict[str, Any]], sampled: Sampled | None) -> dict[str, Any]:
    status = "in_progress" if sampled is None else \
        "incomplete" if sampled.finish_reason == "length" else "completed"
    usage = None if sampled is None else {
        "input_tokens": len(sampled.prompt_ids), "output_tokens": len(sampled.token_ids),
        "total_tokens": len(sampled.prompt_ids) + len(sampled.token_ids),
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0}}
    return {"id": response_id, "object": "response", "created_at": created, "status": status,
            "error": None, "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete" else None, "instructions": body.get("instructions"),
            "model": model, "output": output, "parallel_tool_calls": True,
            "temperature": body.get("temperature"), "top_p": body.get("top_p"),
            "max_output_tokens": body.get("max_output_tokens"),
            "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [],
            "metadata": body.get("metadata") or {}, "usage": usage}


def from_chat(response: Mapping[str, Any], sampled: Sampled, body: Mapping[str, Any]
              ) -> dict[str, Any]:
    """The Response for a chat completion (its exact ids in `sampled`), `body` the request."""
    message = response["choices"][0].get("message") or {}
    output = []
    if message.get("content"):
        output.append(_message_item(message["content"], f"msg_{uuid.uuid4().hex}"))
    for call in message.get("tool_calls") or []:
        output.append(_call_item(call, f"fc_{uuid.uuid4().hex}"))
    if output and sampled.finish_reason == "length":
        output[-1]["status"] = "incomplete"  # the item the token budget cut
    return _response(body, f"resp_{uuid.uuid4().hex}", response.get("model"),
                     int(time.time()), output, sampled)


class ResponsesStream:
    """Turns the chat stream's chunks into Responses events as they come: response.created,
    an output item at a time (output_text / function_call_arguments deltas), and, once the
    turn is recorded, the items' done events and response.completed."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body
        self.id = f"resp_{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = body.get("model")
        self.sequence = 0
        self.items: list[dict[str, Any]] = []  # output items so far (the last may be open)
        self.open: tuple[str, int] | None = None

    def _event(self, kind: str, payload: dict[str, Any]) -> bytes:
        data = {"type": kind, "sequence_number": self.sequence, **payload}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()

    def _close(self, status: str = "completed") -> list[bytes]:
        if self.open is None:
            return []
        self.open = None
        index = len(self.items) - 1
        item = self.items[index]
        item["status"] = status
        out = []
        if item["type"] == "message":
            part = item["content"][0]
            common = {"item_id": item["id"], "output_index": index, "content_index": 0}
            out.append(self._event("response.output_text.done", {**common,
                                                                 "text": part["text"]}))
            out.append(self._event("response.content_part.done", {**common, "part": part}))
        else:
            out.append(self._event("response.function_call_arguments.done", {
                "item_id": item["id"], "output_index": index,
                "arguments": item["arguments"]}))
        out.append(self._event("response.output_item.done", {"output_index": index,
                                                             "item": item}))
        return out

    def _snapshot(self, sampled: Sampled | None) -> dict[str, Any]:
        return _response(self.body, self.id, self.model, self.created,
                         json.loads(json.dumps(self.items)), sampled)

    def feed(self, chunk: Mapping[str, Any]) -> list[bytes]:
        """Events for one raw chat chunk (before the proxy strips it)."""
        if "error" in chunk:
            return []
        out = []
        if self.sequence == 0:
            self.model = self.model or chunk.get("model")
            snapshot = self._snapshot(None)
            out += [self._event("response.created", {"response": snapshot}),
                    self._event("response.in_progress", {"response": snapshot})]
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                if self.open != ("text", 0):
                    out += self._close()
                    item = _message_item("", f"msg_{uuid.uuid4().hex}", "in_progress")
                    self.items.append(item)
                    self.open = ("text", 0)
                    index = len(self.items) - 1
                    out.append(self._event("response.output_item.added", {
                        "output_index": index, "item": json.loads(json.dumps(item))}))
                    out.append(self._event("response.content_part.added", {
                        "item_id": item["id"], "output_index": index, "content_index": 0,
                        "part": {"type": "output_text", "text": "", "annotations": []}}))
                item = self.items[-1]
                item["content"][0]["text"] += delta["content"]
                out.append(self._event("response.output_text.delta", {
                    "item_id": item["id"], "output_index": len(self.items) - 1,
                    "content_index": 0, "delta": delta["content"]}))
            for call in delta.get("tool_calls") or []:
                function = call.get("function") or {}
                which = ("tool", int(call.get("index", 0)))
                if self.open != which:
                    out += self._close()
                    item = _call_item({"id": call.get("id"), "function": {
                        "name": function.get("name")}}, f"fc_{uuid.uuid4().hex}",
                        "in_progress")
                    self.items.append(item)
                    self.open = which
                    out.append(self._event("response.output_item.added", {
                        "output_index": len(self.items) - 1,
                        "item": json.loads(json.dumps(item))}))
                if function.get("arguments"):
                    item = self.items[-1]
                    item["arguments"] += function["arguments"]
                    out.append(self._event("response.function_call_arguments.delta", {
                        "item_id": item["id"], "output_index": len(self.items) - 1,
                        "delta": function["arguments"]}))
        return out

    def finish(self, sampled: Sampled) -> list[bytes]:
        """The closing events once the turn is recorded."""
        out = self._close("incomplete" if sampled.finish_reason == "length" else "completed")
        snapshot = self._snapshot(sampled)
        kind = "response.incomplete" if snapshot["status"] == "incomplete" else \
            "response.completed"
        return [*out, self._event(kind, {"response": snapshot})]

    def error(self, error: ProxyError) -> list[bytes]:
        """The error event for a stream that failed (the turn is not recorded)."""
        body = error.to_openai()["error"]
        return [self._event("error", {"code": body.get("code"), "message": body["message"],
                                      "param": None})]
