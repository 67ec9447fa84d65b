"""RequestGuard: the ASGI layer in front of OpenEnv's routes: the token and the body limit.

Every HTTP request and WebSocket handshake must carry the token when one is set
(`Authorization: Bearer TOKEN`, or Basic auth with TOKEN as password, which is what
OpenEnv's client sends for `http://user:TOKEN@host`); refused ones get 401 (HTTP) or a
403 handshake rejection (WebSocket) before any route runs. HTTP bodies over the limit get
413; WebSocket messages over it are closed by the server (1009, uvicorn's `ws_max_size`).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.websockets import WebSocketDisconnect

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def presented_token(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The token a request carries: a Bearer token, or the password of Basic auth."""
    for name, value in headers:
        if name.lower() != b"authorization":
            continue
        scheme, _, rest = value.decode("latin-1").strip().partition(" ")
        if scheme.lower() == "bearer":
            return rest.strip()
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(rest.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                return None
            return decoded.partition(":")[2]
    return None


class _TooLarge(Exception):
    """The body grew past the limit while it was read."""


class RequestGuard:
    """Refuse requests without the token, and HTTP bodies over `max_body_bytes`."""

    def __init__(self, app: ASGIApp, *, token: str | None, max_body_bytes: int) -> None:
        self.app, self.token, self.max_body_bytes = app, token, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the token, then pass the request on (HTTP with its body limited)."""
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if self.token is not None and not self._authorized(scope):
            if kind == "websocket":
                await send({"type": "websocket.close", "code": 1008,
                            "reason": "missing or wrong token"})
            else:
                await _json(send, 401, {"detail": "missing or wrong token: send "
                                        "'Authorization: Bearer TOKEN'"},
                            [(b"www-authenticate", b'Bearer realm="opd-gym"')])
            return
        if kind == "http":
            await self._limited_http(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:  # OpenEnv closing a socket its client already dropped
            pass

    def _authorized(self, scope: Scope) -> bool:
        """Whether the request carries the token (compared in constant time)."""
        given = presented_token(scope.get("headers", []))
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    async def _limited_http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 413 for a declared or actual body over the limit, before the route runs."""
        limit = self.max_body_bytes
        for name, value in scope.get("headers", []):
            if name.lower() == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await _json(send, 400, {"detail": "invalid Content-Length"})
                    return
                if declared > limit:
                    await _json(send, 413, {"detail": f"request body over {limit} bytes"})
                    return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except _TooLarge:
            if not started:
                await _json(send, 413, {"detail": f"request body over {limit} bytes"})


class DetailedErrors:
    """Put a validation error's detail into its `message`: OpenEnv answers a malformed step
    with the message "Invalid message" and the reasons apart in `errors`, and its own client
    shows only the message ("Server error: Invalid message"). The `errors` list stays."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, rewriting the WebSocket error answers it sends."""
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return

        async def detailed(message: Message) -> None:
            text = message.get("text") if message["type"] == "websocket.send" else None
            if isinstance(text, str) and text.startswith('{"type":"error"'):
                message = {**message, "text": with_detail(text)}
            await send(message)

        await self.app(scope, receive, detailed)


def with_detail(text: str) -> str:
    """An OpenEnv error answer (JSON) whose `errors` are spelled out in its `message`."""
    try:
        answer = json.loads(text)
        data = answer["data"]
        errors = data["errors"]
    except (ValueError, KeyError, TypeError):
        return text
    if not isinstance(errors, list) or not errors:
        return text
    parts = []
    for error in errors[:5]:
        if not isinstance(error, dict):
            continue
        where = ".".join(str(part) for part in error.get("loc") or ())
        parts.append(f"{where}: {error.get('msg', '')}" if where else str(error.get("msg", "")))
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    data["message"] = f"{data.get('message') or 'Invalid message'}: {'; '.join(parts)}{more}"
    return json.dumps(answer)


async def _json(send: Send, status: int, body: dict[str, Any],
                headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """Answer with a small JSON body (the refusals, sent before any route runs)."""
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": data})


__all__ = ["DetailedErrors", "RequestGuard", "presented_token", "with_detail"]
