"""Forward calls to a vLLM OpenAI server over HTTP (httpx), asking it for the exact ids.

vLLM's chat endpoint takes `return_token_ids` (the response then carries `prompt_token_ids`
and each choice's sampled `token_ids`, per chunk when streamed) and `logprobs` (one entry per
sampled id, end-of-turn token included). The logprobs are vLLM's: of the raw distribution
unless the server runs with `--logprobs-mode processed_logprobs`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from opd_gym.models.client import split_base_url
from opd_gym.proxy.errors import UpstreamError

FORWARDED_HEADERS = ("authorization", "openai-organization", "openai-project")


class VLLMBackend:
    """A vLLM server at `base_url` ("http://host:port", "/v1" optional).

    `api_key` is sent as the bearer token; without it the client's own Authorization header
    is forwarded, or an Anthropic client's `x-api-key` as that bearer token (the Messages
    API's way to send the same key). `timeout` bounds one call (seconds).
    """

    def __init__(self, base_url: str, *, api_key: str | None = None,
                 timeout: float = 600.0) -> None:
        self.root, self.api = split_base_url(base_url)
        self.api_key = api_key
        self.timeout = timeout
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:  # made lazily inside the server's event loop
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout, connect=10.0),
                limits=httpx.Limits(max_connections=256, max_keepalive_connections=64))
        return self._client

    def _headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        out = {key.lower(): value for key, value in headers.items()
               if key.lower() in FORWARDED_HEADERS}
        key = next((v for k, v in headers.items() if k.lower() == "x-api-key"), None)
        if key and "authorization" not in out:
            out["authorization"] = f"Bearer {key}"
        if self.api_key:
            out["authorization"] = f"Bearer {self.api_key}"
        return out

    async def _send(self, method: str, path: str, headers: Mapping[str, str],
                    body: dict[str, Any] | None = None, stream: bool = False,
                    base: str | None = None) -> httpx.Response:
        request = self._http().build_request(method, f"{base or self.api}/{path}", json=body,
                                             headers=self._headers(headers))
        try:
            response = await self._http().send(request, stream=stream)
        except httpx.HTTPError as exc:
            raise UpstreamError(f"the model server at {self.root} did not answer "
                                f"({type(exc).__name__}: {exc})") from exc
        if response.status_code != 200:
            raw = await response.aread()
            await response.aclose()
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = None
            raise UpstreamError(f"the model server answered HTTP {response.status_code}: "
                                f"{raw[:300].decode('utf-8', 'replace')}",
                                status=response.status_code,
                                body=payload if isinstance(payload, dict) else None)
        return response

    async def models(self, headers: Mapping[str, str]) -> dict[str, Any]:
        """The server's `/v1/models` listing, as it sent it."""
        return (await self._send("GET", "models", headers)).json()

    async def complete(self, body: dict[str, Any], headers: Mapping[str, str]
                       ) -> dict[str, Any]:
        """One chat completion from the server."""
        return (await self._send("POST", "chat/completions", headers, body)).json()

    async def stream(self, body: dict[str, Any], headers: Mapping[str, str]
                     ) -> AsyncIterator[dict[str, Any]]:
        """Open the stream (errors raise here), then its parsed chunks until `[DONE]`."""
        response = await self._send("POST", "chat/completions", headers, body, stream=True)
        return _chunks(response)

    async def count_tokens(self, body: dict[str, Any], headers: Mapping[str, str]) -> int:
        """The server's own count from its `/tokenize` route (chat template, tools and
        generation prompt, as a chat completion renders them)."""
        asked = {"messages": body["messages"], "add_generation_prompt": True}
        for key in ("model", "tools"):
            if body.get(key) is not None:
                asked[key] = body[key]
        answer = (await self._send("POST", "tokenize", headers, asked, base=self.root)).json()
        if not isinstance(answer.get("count"), int):
            raise UpstreamError("the model server's /tokenize answered without a 'count'")
        return int(answer["count"])

    async def aclose(self) -> None:
        """Close the connection pool."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None


async def _chunks(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The `data:` events of a server-sent-event stream as dicts; closes the response."""
    try:
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                return
            try:
                chunk = json.loads(data)
            except ValueError:
                chunk = {"error": {"message": f"unreadable stream event {data[:200]!r}"}}
            yield chunk
    finally:
        await response.aclose()
