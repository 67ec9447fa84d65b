"""An in-process transformers model as the proxy's backend: template, sample, exact logprobs.

The prompt is the tokenizer's chat template applied to the request's messages (with its
`tools`), so `prompt_token_ids` are exactly what the model saw. Sampling uses `generate` with
its scores: each sampled id's logprob is the log-softmax of the processed scores at its
step, i.e. under the distribution it was drawn from (temperature applied, renormalised over
the top-k / top-p nucleus; the raw model distribution at temperature 1 and top_p 1). Streaming is
served after the whole turn is sampled (one content chunk), in the same chunk format.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from opd_gym.errors import ConfigError
from opd_gym.models.tokenizer import render_ids
from opd_gym.proxy.errors import ProxyRequestError


def template_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages in the form chat templates expect (as vLLM prepares them): text parts
    joined into one string, tool-call arguments decoded from their JSON string."""
    out = []
    for message in messages:
        item = dict(message)
        if isinstance(item.get("content"), list):
            item["content"] = "".join(part.get("text", "") for part in item["content"]
                                      if isinstance(part, Mapping))
        if item.get("tool_calls"):
            calls = []
            for call in item["tool_calls"]:
                call = dict(call)
                function = dict(call.get("function") or {})
                if isinstance(function.get("arguments"), str):
                    try:
                        function["arguments"] = json.loads(function["arguments"])
                    except ValueError:
                        pass
                call["function"] = function
                calls.append(call)
            item["tool_calls"] = calls
        out.append(item)
    return out


class TransformersBackend:
    """Samples chat turns from a causal LM in this process (a path or a loaded model).

    `max_tokens` is the cap when a request names none; `seed` seeds call i from (`seed`, i)
    unless the request carries its own `seed`. One call runs at a time (a lock), off the
    server's event loop.
    """

    def __init__(self, model: Any, *, tokenizer: Any = None, model_name: str | None = None,
                 max_tokens: int = 256, seed: int = 0, device: str = "cpu",
                 dtype: str | None = "auto") -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from opd_gym.models.dtypes import resolve_dtype

        if max_tokens < 1:
            raise ConfigError("max_tokens must be >= 1")
        if isinstance(model, str) or hasattr(model, "__fspath__"):
            path = str(model)
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(path)
            name = resolve_dtype(dtype, path)
            model = AutoModelForCausalLM.from_pretrained(
                path, dtype=getattr(torch, name) if name != "auto" else "auto")
            model_name = model_name or path
        if tokenizer is None:
            raise ConfigError("pass the tokenizer along with a loaded model")
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.model_name = model_name or str(getattr(model.config, "_name_or_path", "") or
                                            "local-model")
        self.max_tokens = int(max_tokens)
        self.device = device
        self.seed = int(seed)
        limit = getattr(self.model.config.get_text_config(), "max_position_embeddings", None)
        self.max_model_len = int(limit) if limit else None
        self._draws = itertools.count()
        self._lock = threading.Lock()

    async def models(self, headers: Mapping[str, str]) -> dict[str, Any]:
        """The one served model, in the `/v1/models` shape."""
        return {"object": "list", "data": [{
            "id": self.model_name, "object": "model", "created": 0, "owned_by": "opd_gym",
            "max_model_len": self.max_model_len}]}

    async def complete(self, body: dict[str, Any], headers: Mapping[str, str]
                       ) -> dict[str, Any]:
        """One chat completion, sampled in a worker thread."""
        return await asyncio.to_thread(self.sample, body)

    async def stream(self, body: dict[str, Any], headers: Mapping[str, str]
                     ) -> AsyncIterator[dict[str, Any]]:
        """The completion as stream chunks (sampled first; errors raise before streaming)."""
        return _as_chunks(await self.complete(body, headers), body)

    async def count_tokens(self, body: dict[str, Any], headers: Mapping[str, str]) -> int:
        """The length of the prompt `complete` would sample from."""
        return len(await asyncio.to_thread(self.prompt_ids, body))

    async def aclose(self) -> None:
        """Nothing to release (the model stays with its owner)."""

    def prompt_ids(self, body: Mapping[str, Any]) -> list[int]:
        """The ids of the chat template applied to the request's messages and tools."""
        try:
            return render_ids(self.tokenizer, template_messages(body["messages"]),
                              body.get("tools"), add_generation_prompt=True)
        except Exception as exc:  # the template refused these messages
            raise ProxyRequestError(f"the chat template cannot render these messages "
                                    f"({type(exc).__name__}: {exc})") from exc

    def sample(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Sample one turn for a chat request; the response in vLLM's extended format."""
        import torch

        if body.get("stop"):
            raise ProxyRequestError("the in-process transformers backend does not apply stop "
                                    "sequences ('stop' / 'stop_sequences'); serve the model "
                                    "with vLLM (--upstream) to use them")
        prompt = self.prompt_ids(body)
        temperature = float(body.get("temperature", 1.0) if body.get("temperature")
                            is not None else 1.0)
        top_p = float(body.get("top_p") if body.get("top_p") is not None else 1.0)
        top_k = body.get("top_k")
        if temperature < 0 or not 0.0 < top_p <= 1.0 or not (
                top_k is None or (isinstance(top_k, int) and not isinstance(top_k, bool))):
            raise ProxyRequestError("temperature must be >= 0, top_p in (0, 1] and top_k an "
                                    "integer (0 or -1: off)")
        cap = body.get("max_completion_tokens") or body.get("max_tokens") or self.max_tokens
        budget = int(cap)
        if self.max_model_len:
            budget = min(budget, self.max_model_len - len(prompt))
        if budget < 1:
            raise ProxyRequestError(f"the prompt has {len(prompt)} tokens: no room left in "
                                    f"the model's context of {self.max_model_len}")
        eos = self.tokenizer.eos_token_id
        seed = body.get("seed")
        with self._lock:
            if seed is None:
                seed = (self.seed * 1_000_003 + next(self._draws)) % 2**31
            sample = temperature > 0
            options: dict[str, Any] = {"do_sample": sample, "top_k": 0}
            if sample:
                options.update(temperature=temperature, top_p=top_p,
                               top_k=max(int(top_k or 0), 0))
            with torch.random.fork_rng(devices=[]), torch.no_grad():
                torch.manual_seed(int(seed))
                out = self.model.generate(
                    input_ids=torch.tensor([prompt], device=self.device),
                    attention_mask=torch.ones(1, len(prompt), dtype=torch.long,
                                              device=self.device),
                    max_new_tokens=budget, eos_token_id=eos,
                    pad_token_id=self.tokenizer.pad_token_id if
                    self.tokenizer.pad_token_id is not None else eos,
                    output_scores=True, return_dict_in_generate=True, **options)
        ids = [int(t) for t in out.sequences[0, len(prompt):]]
        if eos in ids:
            ids = ids[:ids.index(eos) + 1]
        logprobs = [float(torch.log_softmax(score[0].double(), dim=-1)[token])
                    for score, token in zip(out.scores[:len(ids)], ids, strict=True)]
        return self._response(body, prompt, ids, logprobs, eos)

    def _response(self, body: Mapping[str, Any], prompt: list[int], ids: list[int],
                  logprobs: list[float], eos: int | None) -> dict[str, Any]:
        text_ids = ids[:-1] if ids and ids[-1] == eos else ids
        text = self.tokenizer.decode(text_ids, skip_special_tokens=True)
        content: str | None = text
        calls = None
        finish = "stop" if ids and ids[-1] == eos else "length"
        if body.get("tools"):
            content, calls = self._tool_calls(text, body["tools"])
            if calls:
                finish = "tool_calls"
        entries = [{"token": self.tokenizer.decode([t]), "logprob": lp, "bytes": None,
                    "top_logprobs": []} for t, lp in zip(ids, logprobs, strict=True)]
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
            "created": int(time.time()), "model": body.get("model") or self.model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content,
                                                 "tool_calls": calls or []},
                         "logprobs": {"content": entries}, "finish_reason": finish,
                         "token_ids": ids}],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids),
                      "total_tokens": len(prompt) + len(ids)},
            "prompt_token_ids": prompt,
        }

    def _tool_calls(self, text: str, tools: Sequence[Mapping[str, Any]]
                    ) -> tuple[str | None, list[dict[str, Any]] | None]:
        """Calls the model wrote in its template's tool format, for the requested tools; a
        template whose format is not known has its text returned as is (no guessed format)."""
        from opd_gym.tools.formats import detect_tool_format, get_tool_format

        family = detect_tool_format(self.tokenizer)
        if family is None:
            return text, None
        names = {(t.get("function") or {}).get("name") for t in tools}
        parsed = get_tool_format(family).parse(text, tools=names)
        calls = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                  "function": {"name": c.name,
                               "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                 for c in parsed.calls if c.name in names]
        if not calls:
            return text, None
        return (parsed.content or None), calls


async def _as_chunks(response: dict[str, Any], body: Mapping[str, Any]
                     ) -> AsyncIterator[dict[str, Any]]:
    """A finished completion as OpenAI stream chunks (role, content, tool calls, finish)."""
    choice = response["choices"][0]
    message = choice["message"]
    head = {"id": response["id"], "object": "chat.completion.chunk",
            "created": response["created"], "model": response["model"]}
    yield {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                "logprobs": None, "finish_reason": None}],
           "prompt_token_ids": response["prompt_token_ids"]}
    delta: dict[str, Any] = {}
    if message.get("content"):
        delta["content"] = message["content"]
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **call}
                               for i, call in enumerate(message["tool_calls"])]
    yield {**head, "choices": [{"index": 0, "delta": delta, "logprobs": choice["logprobs"],
                                "finish_reason": None, "token_ids": choice["token_ids"]}]}
    yield {**head, "choices": [{"index": 0, "delta": {}, "logprobs": None,
                                "finish_reason": choice["finish_reason"]}]}
    if (body.get("stream_options") or {}).get("include_usage"):
        yield {**head, "choices": [], "usage": response["usage"]}
