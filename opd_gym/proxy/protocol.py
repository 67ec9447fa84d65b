"""The OpenAI chat-completion wire format as the proxy uses it: check a request, ask the model
for the exact ids, read them back from a response or a stream, and hide what was added.

Backends answer in vLLM's extended format: `prompt_token_ids` on the response (or the first
stream chunk), `token_ids` and `logprobs.content` on each choice (or each chunk's choice).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from opd_gym.proxy.errors import ProxyRequestError, UpstreamError
from opd_gym.proxy.recording import Sampled

SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "seed", "max_tokens",
                 "max_completion_tokens", "stop", "presence_penalty", "frequency_penalty",
                 "repetition_penalty", "logit_bias")


def tool_list(tools: Any) -> list[Any] | None:
    """Another API's `tools` field checked to be a list (None when absent)."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise ProxyRequestError("'tools' must be a list of tool objects")
    return tools


def function_tool(name: str, description: Any, parameters: Any) -> dict[str, Any]:
    """A chat request's tool from another API's tool, in OpenAI's field order (name,
    description, parameters), as vLLM renders tools, so a recorded turn re-renders to its ids."""
    function: dict[str, Any] = {"name": name}
    if description:
        function["description"] = description
    function["parameters"] = parameters or {"type": "object", "properties": {}}
    return {"type": "function", "function": function}


def check_request(body: Any) -> dict[str, Any]:
    """The request body as a dict, or `ProxyRequestError` naming what is malformed."""
    if not isinstance(body, dict):
        raise ProxyRequestError("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ProxyRequestError("'messages' must be a non-empty list of message objects")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ProxyRequestError(f"messages[{i}] must be an object with a string 'role'")
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list)
                                  and all(isinstance(t, dict) for t in tools)):
        raise ProxyRequestError("'tools' must be a list of tool objects")
    if body.get("n") not in (None, 1):
        raise ProxyRequestError("the recording proxy records one sample per call: 'n' must "
                                "be 1")
    if not isinstance(body.get("stream", False), bool):
        raise ProxyRequestError("'stream' must be true or false")
    if body.get("model") is not None and not isinstance(body["model"], str):
        raise ProxyRequestError("'model' must be a string")
    return body


def sampling_of(body: Mapping[str, Any]) -> dict[str, Any]:
    """The sampling settings the client asked for (kept with the turn)."""
    return {key: body[key] for key in SAMPLING_KEYS if body.get(key) is not None}


def with_exact_ids(body: Mapping[str, Any]) -> dict[str, Any]:
    """The request as sent to the model: also asking for prompt/sampled ids and logprobs."""
    return {**body, "logprobs": True, "return_token_ids": True}


def _logprobs(choice: Mapping[str, Any]) -> list[float]:
    content = (choice.get("logprobs") or {}).get("content") or []
    return [float(entry["logprob"]) if entry.get("logprob") is not None else -math.inf
            for entry in content]


def sampled_from_response(response: Mapping[str, Any]) -> Sampled:
    """The exact ids and logprobs in a (non-streamed) chat completion, or `UpstreamError`."""
    choices = response.get("choices") or []
    prompt = response.get("prompt_token_ids")
    if not choices or prompt is None or choices[0].get("token_ids") is None:
        raise UpstreamError("the model server answered without prompt_token_ids/token_ids; "
                            "the recording proxy needs a vLLM server (return_token_ids), and "
                            "no reasoning parser hiding them")
    choice = choices[0]
    message = choice.get("message") or {}
    ids = [int(t) for t in choice["token_ids"]]
    logprobs = _logprobs(choice)
    if len(logprobs) != len(ids):
        raise UpstreamError(f"the model server returned {len(ids)} sampled ids but "
                            f"{len(logprobs)} logprobs")
    return Sampled(prompt_ids=[int(t) for t in prompt], token_ids=ids, logprobs=logprobs,
                   content=message.get("content"), tool_calls=message.get("tool_calls") or None,
                   finish_reason=choice.get("finish_reason"), model=str(response.get("model")))


def strip_response(response: dict[str, Any], asked: Mapping[str, Any]) -> dict[str, Any]:
    """Remove from a response what the proxy added and the client did not ask for."""
    if not asked.get("return_token_ids"):
        response.pop("prompt_token_ids", None)
        for choice in response.get("choices") or []:
            choice.pop("token_ids", None)
    if not asked.get("logprobs"):
        for choice in response.get("choices") or []:
            if "logprobs" in choice:
                choice["logprobs"] = None
    return response


def strip_chunk(chunk: dict[str, Any], asked: Mapping[str, Any]) -> dict[str, Any] | None:
    """A stream chunk as the client would have got it; None for a chunk only the added
    fields caused (no text, no tool call, no role, no finish, no usage)."""
    strip_response(chunk, asked)
    if asked.get("logprobs") or asked.get("return_token_ids") or chunk.get("usage"):
        return chunk
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        if choice.get("finish_reason") is not None or any(
                delta.get(key) is not None for key in ("role", "content", "tool_calls",
                                                       "reasoning", "reasoning_content")):
            return chunk
    return None if chunk.get("choices") else chunk


class StreamRecorder:
    """Collects the exact ids, logprobs, text and tool calls from a stream's chunks."""

    def __init__(self) -> None:
        self.prompt_ids: list[int] | None = None
        self.token_ids: list[int] = []
        self.logprobs: list[float] = []
        self.content: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.model = ""
        self.failed: str | None = None

    def add(self, chunk: Mapping[str, Any]) -> None:
        """Take one parsed chunk (before stripping)."""
        if "error" in chunk:
            self.failed = str((chunk.get("error") or {}).get("message", chunk["error"]))
            return
        self.model = str(chunk.get("model") or self.model)
        if chunk.get("prompt_token_ids") is not None:
            self.prompt_ids = [int(t) for t in chunk["prompt_token_ids"]]
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            self.token_ids.extend(int(t) for t in choice.get("token_ids") or [])
            self.logprobs.extend(_logprobs(choice))
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.content.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                slot = self.calls.setdefault(int(call.get("index", 0)), {
                    "id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                if call.get("id"):
                    slot["id"] = call["id"]
                function = call.get("function") or {}
                slot["function"]["name"] += function.get("name") or ""
                slot["function"]["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason") is not None:
                self.finish_reason = choice["finish_reason"]

    def sampled(self) -> Sampled:
        """The whole call, or `UpstreamError` when the stream lacked the ids or failed."""
        if self.failed is not None:
            raise UpstreamError(f"the model server's stream failed: {self.failed}")
        if self.prompt_ids is None or self.finish_reason is None:
            raise UpstreamError("the model server's stream ended without prompt_token_ids "
                                "or a finish_reason; the call is not recorded")
        if len(self.logprobs) != len(self.token_ids):
            raise UpstreamError(f"the model server streamed {len(self.token_ids)} sampled ids "
                                f"but {len(self.logprobs)} logprobs")
        calls = [self.calls[i] for i in sorted(self.calls)] or None
        return Sampled(prompt_ids=self.prompt_ids, token_ids=self.token_ids,
                       logprobs=self.logprobs,
                       content="".join(self.content) if self.content or not calls else None,
                       tool_calls=calls, finish_reason=self.finish_reason, model=self.model)
