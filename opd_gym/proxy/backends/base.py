"""What the proxy needs from a model: chat completions with the exact ids, plain or streamed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol


class Backend(Protocol):
    """A model the proxy forwards to; answers in vLLM's extended chat-completion format.

    `stream` raises (an `UpstreamError`) before returning when the model refuses the call,
    so the client gets one error response instead of a broken stream.
    """

    async def models(self, headers: Mapping[str, str]) -> dict[str, Any]:
        """The OpenAI `/v1/models` listing."""
        ...

    async def complete(self, body: dict[str, Any], headers: Mapping[str, str]
                       ) -> dict[str, Any]:
        """One chat completion (the body already asks for ids and logprobs)."""
        ...

    async def stream(self, body: dict[str, Any], headers: Mapping[str, str]
                     ) -> AsyncIterator[dict[str, Any]]:
        """The chunks of one streamed chat completion, parsed, in order."""
        ...

    async def count_tokens(self, body: dict[str, Any], headers: Mapping[str, str]) -> int:
        """How many prompt ids the chat template renders for this request (what `complete`
        would send the model), without sampling."""
        ...

    async def aclose(self) -> None:
        """Release connections or the model."""
        ...
