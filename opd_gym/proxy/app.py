"""The proxy's HTTP surface (FastAPI): OpenAI chat completions, Anthropic Messages and
OpenAI Responses per episode, and a small control API to open episodes and read their turns.

Routes: `POST /<key>/v1/chat/completions`, `/<key>/v1/messages` and `/<key>/v1/responses`
(or the same under `/v1/` with the episode in the `X-OPD-Episode` header),
`POST [/<key>]/v1/messages/count_tokens`, `GET [/<key>]/v1/models`, and
`POST /opd/episodes`, `GET|DELETE /opd/episodes/<key>`. Messages and Responses requests are
converted to the chat request (`anthropic.py`, `responses.py`) and go through the same
rendering, sampling and recording. Every refusal is an error body in the API's own shape;
a call is recorded only when the model answered completely with its exact ids.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from opd_gym.proxy import anthropic, responses
from opd_gym.proxy.backends.base import Backend
from opd_gym.proxy.errors import ProxyError, ProxyRequestError
from opd_gym.proxy.protocol import (
    StreamRecorder,
    check_request,
    sampled_from_response,
    sampling_of,
    strip_chunk,
    strip_response,
    with_exact_ids,
)
from opd_gym.proxy.recording import EpisodeRegistry

EPISODE_HEADER = "x-opd-episode"


def speaks_anthropic(request: Request) -> bool:
    """Whether a call is answered in Anthropic's shape (its Messages routes, or a client
    sending Anthropic's `anthropic-version` header)."""
    return "/v1/messages" in request.url.path or "anthropic-version" in request.headers


def error_response(error: ProxyError, request: Request | None = None) -> JSONResponse:
    """An error response for `error`, in Anthropic's shape for an Anthropic call, else
    OpenAI's (which the Responses API shares)."""
    if request is not None and speaks_anthropic(request):
        return JSONResponse(anthropic.error_body(error), status_code=error.status)
    return JSONResponse(error.to_openai(), status_code=error.status)


def episode_key(path_key: str | None, headers: Mapping[str, str]) -> str | None:
    """The episode a call names: in its URL, in its header, both agreeing, or none."""
    header = headers.get(EPISODE_HEADER)
    if path_key and header and header != path_key:
        raise ProxyRequestError(f"the URL names episode {path_key!r} but the X-OPD-Episode "
                                f"header names {header!r}")
    return path_key or header


def build_app(backend: Backend, registry: EpisodeRegistry) -> FastAPI:
    """The ASGI app serving `backend`'s model and recording into `registry`."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await backend.aclose()

    app = FastAPI(title="opd-gym recording proxy", lifespan=lifespan, docs_url=None,
                  redoc_url=None, openapi_url=None)

    @app.exception_handler(ProxyError)
    async def on_proxy_error(request: Request, exc: ProxyError) -> JSONResponse:
        return error_response(exc, request)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        error = ProxyRequestError(f"{request.method} {request.url.path}: {exc.detail}")
        error.status = exc.status_code
        return error_response(error, request)

    async def read_json(request: Request) -> Any:
        raw = await request.body()
        try:
            return json.loads(raw) if raw else None
        except ValueError as exc:
            raise ProxyRequestError(f"the request body is not valid JSON ({exc})") from exc

    def call_of(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], float]:
        """A checked chat request as sent to the backend (exact ids asked for), what its
        record keeps of it, and when it started."""
        context = {"messages": body["messages"], "tools": body.get("tools"),
                   "sampling": sampling_of(body)}
        return with_exact_ids(body), context, time.perf_counter()

    async def chat(request: Request, path_key: str | None) -> Response:
        key = episode_key(path_key, request.headers)
        registry.get(key)  # refuse unknown episodes before anything reaches the model
        body = check_request(await read_json(request))
        asked = {"logprobs": body.get("logprobs"), "return_token_ids":
                 body.get("return_token_ids")}
        sent, context, started = call_of(body)
        if not body.get("stream"):
            response = await backend.complete(sent, request.headers)
            sampled = sampled_from_response(response)
            registry.record(str(key), sampled, stream=False,
                            model_seconds=time.perf_counter() - started, **context)
            return JSONResponse(strip_response(response, asked))
        chunks = await backend.stream(sent, request.headers)
        return StreamingResponse(_relay(chunks, asked, registry, str(key), context, started),
                                 media_type="text/event-stream")

    @app.post("/v1/chat/completions")
    async def chat_by_header(request: Request) -> Response:
        return await chat(request, None)

    @app.post("/{key}/v1/chat/completions")
    async def chat_by_path(key: str, request: Request) -> Response:
        return await chat(request, key)

    async def converted(request: Request, path_key: str | None, api: str) -> Response:
        """A Messages or Responses call: converted to the chat request, sampled and
        recorded as a chat call is, and answered in the API's own shape."""
        key = episode_key(path_key, request.headers)
        registry.get(key)
        given = await read_json(request)
        body = check_request(anthropic.to_chat(given) if api == "anthropic"
                             else responses.to_chat(given))
        sent, context, started = call_of(body)
        if not body.get("stream"):
            response = await backend.complete(sent, request.headers)
            sampled = sampled_from_response(response)
            # converted before recording: an answer the client cannot get is not recorded
            answer = anthropic.from_chat(response, sampled) if api == "anthropic" else \
                responses.from_chat(response, sampled, given)
            registry.record(str(key), sampled, stream=False,
                            model_seconds=time.perf_counter() - started, **context)
            return JSONResponse(answer)
        chunks = await backend.stream(sent, request.headers)
        events = anthropic.MessagesStream(body.get("model")) if api == "anthropic" else \
            responses.ResponsesStream(given)
        return StreamingResponse(_relay_events(events, chunks, registry, str(key), context,
                                               started), media_type="text/event-stream")

    @app.post("/v1/messages")
    async def messages_by_header(request: Request) -> Response:
        return await converted(request, None, "anthropic")

    @app.post("/{key}/v1/messages")
    async def messages_by_path(key: str, request: Request) -> Response:
        return await converted(request, key, "anthropic")

    @app.post("/v1/responses")
    async def responses_by_header(request: Request) -> Response:
        return await converted(request, None, "responses")

    @app.post("/{key}/v1/responses")
    async def responses_by_path(key: str, request: Request) -> Response:
        return await converted(request, key, "responses")

    async def count_tokens(request: Request) -> Response:
        body = check_request(anthropic.to_chat(await read_json(request), counting=True))
        return JSONResponse({"input_tokens": await backend.count_tokens(body,
                                                                        request.headers)})

    @app.post("/v1/messages/count_tokens")
    async def count_tokens_plain(request: Request) -> Response:
        key = episode_key(None, request.headers)
        if key:
            registry.get(key)
        return await count_tokens(request)

    @app.post("/{key}/v1/messages/count_tokens")
    async def count_tokens_by_path(key: str, request: Request) -> Response:
        registry.get(episode_key(key, request.headers))
        return await count_tokens(request)

    async def listing(request: Request) -> Response:
        found = await backend.models(request.headers)
        return JSONResponse(anthropic.models_listing(found) if speaks_anthropic(request)
                            else found)

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        return await listing(request)

    @app.get("/{key}/v1/models")
    async def models_by_path(key: str, request: Request) -> Response:
        registry.get(episode_key(key, request.headers))
        return await listing(request)

    @app.post("/opd/episodes")
    async def open_episode(request: Request) -> Response:
        body = await read_json(request) or {}
        if not isinstance(body, dict):
            raise ProxyRequestError("the body must be a JSON object like {\"key\": \"ep-1\"}")
        key = registry.open(body.get("key"), body.get("metadata"))
        base = str(request.base_url).rstrip("/")
        return JSONResponse({"key": key, "base_url": f"{base}/{key}/v1"})

    @app.get("/opd/episodes/{key}")
    async def episode_turns(key: str) -> Response:
        return JSONResponse({"key": key, "turns": [t.to_dict() for t in registry.turns(key)]})

    @app.delete("/opd/episodes/{key}")
    async def close_episode(key: str) -> Response:
        return JSONResponse({"key": key, "turns": [t.to_dict() for t in registry.close(key)]})

    return app


async def _relay(chunks: AsyncIterator[dict[str, Any]], asked: Mapping[str, Any],
                 registry: EpisodeRegistry, key: str, context: dict[str, Any],
                 started: float) -> AsyncIterator[bytes]:
    """Pass a stream's chunks to the client (added fields removed) and record the turn once
    the model finished; a failed or abandoned stream is not recorded."""
    recorder = StreamRecorder()
    try:
        async for chunk in chunks:
            recorder.add(chunk)
            shown = strip_chunk(chunk, asked)
            if shown is not None:
                yield f"data: {json.dumps(shown, ensure_ascii=False)}\n\n".encode()
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()
    try:
        registry.record(key, recorder.sampled(), stream=True,
                        model_seconds=time.perf_counter() - started, **context)
    except ProxyError as exc:
        if recorder.failed is None:  # the model's own error event was already relayed
            yield f"data: {json.dumps(exc.to_openai())}\n\n".encode()
    yield b"data: [DONE]\n\n"


async def _relay_events(events: anthropic.MessagesStream | responses.ResponsesStream,
                        chunks: AsyncIterator[dict[str, Any]], registry: EpisodeRegistry,
                        key: str, context: dict[str, Any], started: float
                        ) -> AsyncIterator[bytes]:
    """Send a stream's chunks as the API's events and record the turn once the model
    finished; the closing events follow the record, an error event replaces them."""
    recorder = StreamRecorder()
    try:
        async for chunk in chunks:
            recorder.add(chunk)
            for event in events.feed(chunk):
                yield event
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()
    try:
        sampled = recorder.sampled()
        registry.record(key, sampled, stream=True,
                        model_seconds=time.perf_counter() - started, **context)
    except ProxyError as exc:
        for event in events.error(exc):
            yield event
        return
    for event in events.finish(sampled):
        yield event
