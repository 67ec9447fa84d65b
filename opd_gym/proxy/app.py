"""The proxy's HTTP surface (FastAPI): OpenAI chat completions per episode, and a small
control API to open episodes and read their turns.

Routes: `POST /<key>/v1/chat/completions` (or `/v1/chat/completions` with the episode in
the `X-OPD-Episode` header), `GET [/<key>]/v1/models`, and `POST /opd/episodes`,
`GET|DELETE /opd/episodes/<key>`. Every refusal is an OpenAI-style error body; a call is
recorded only when the model answered completely with its exact ids.
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


def error_response(error: ProxyError) -> JSONResponse:
    """An OpenAI-style error response for `error`."""
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
        return error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        error = ProxyRequestError(f"{request.method} {request.url.path}: {exc.detail}")
        error.status = exc.status_code
        return error_response(error)

    async def read_json(request: Request) -> Any:
        raw = await request.body()
        try:
            return json.loads(raw) if raw else None
        except ValueError as exc:
            raise ProxyRequestError(f"the request body is not valid JSON ({exc})") from exc

    async def chat(request: Request, path_key: str | None) -> Response:
        key = episode_key(path_key, request.headers)
        registry.get(key)  # refuse unknown episodes before anything reaches the model
        body = check_request(await read_json(request))
        asked = {"logprobs": body.get("logprobs"), "return_token_ids":
                 body.get("return_token_ids")}
        sent = with_exact_ids(body)
        context = {"messages": body["messages"], "tools": body.get("tools"),
                   "sampling": sampling_of(body)}
        started = time.perf_counter()
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

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        return JSONResponse(await backend.models(request.headers))

    @app.get("/{key}/v1/models")
    async def models_by_path(key: str, request: Request) -> Response:
        registry.get(episode_key(key, request.headers))
        return JSONResponse(await backend.models(request.headers))

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
