"""build_app: OpenEnv's FastAPI app and routes (its wire format) for a `ServeRuntime`,
behind the `RequestGuard`. Sessions are OpenEnv's WebSocket sessions (`/ws`): one
`CodingEnvironment` each, reaped after `idle_timeout` seconds without a message."""

from __future__ import annotations

import functools
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from openenv.core.env_server.types import ConcurrencyConfig

from opd_gym.errors import OPDGymError
from opd_gym.serve.environment import CodingEnvironment
from opd_gym.serve.guard import DetailedErrors, RequestGuard
from opd_gym.serve.models import CodingAction, CodingObservation
from opd_gym.serve.runtime import ServeRuntime
from opd_gym.serve.sessions import SessionServer


def build_server(runtime: ServeRuntime) -> SessionServer:
    """OpenEnv's session server over `CodingEnvironment`s bound to `runtime`."""
    config = runtime.config
    return SessionServer(
        functools.partial(CodingEnvironment, runtime), CodingAction, CodingObservation,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=config.max_sessions,
                                             session_timeout=config.idle_timeout))


def build_app(runtime: ServeRuntime) -> tuple[Any, FastAPI, SessionServer]:
    """(the ASGI app to serve, the FastAPI app inside the guard, OpenEnv's server)."""
    server = build_server(runtime)
    app = FastAPI(title="opd_gym over OpenEnv", docs_url=None, redoc_url=None)
    server.register_routes(app)

    @app.exception_handler(OPDGymError)
    async def _refused(request: Request, exc: OPDGymError) -> JSONResponse:
        """An opd_gym refusal on the HTTP routes: 409 with the one-line reason, not a 500."""
        return JSONResponse(status_code=409, content={"detail": str(exc)})

    guarded = RequestGuard(DetailedErrors(app), token=runtime.config.token,
                           max_body_bytes=runtime.config.max_body_bytes)
    return guarded, app, server


__all__ = ["build_app", "build_server"]
