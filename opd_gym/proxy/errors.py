"""The proxy's errors: each knows the HTTP status and OpenAI-style body the client gets."""

from __future__ import annotations

from typing import Any

from opd_gym.errors import ConfigError, ModelError, OPDGymError


class ProxyError(OPDGymError):
    """A call the proxy refuses or cannot serve; it is answered in OpenAI's error shape."""

    status = 500
    error_type = "server_error"
    code: str | None = None

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI error body (`{"error": {...}}`) a client library understands."""
        return {"error": {"message": str(self), "type": self.error_type, "param": None,
                          "code": self.code}}


class ProxyRequestError(ProxyError, ConfigError):
    """The request is malformed or asks for something the proxy cannot record (400)."""

    status = 400
    error_type = "invalid_request_error"
    code = "invalid_request"


class UnknownEpisode(ProxyError, LookupError):
    """The call names no episode or one that is not open on this proxy (404)."""

    status = 404
    error_type = "invalid_request_error"
    code = "episode_not_found"


class UpstreamError(ProxyError, ModelError):
    """The model server failed, or answered without the token ids the record needs (502)."""

    status = 502
    error_type = "upstream_error"
    code = "upstream_error"

    def __init__(self, message: str, *, status: int = 502,
                 body: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body

    def to_openai(self) -> dict[str, Any]:
        """The model server's own OpenAI error body when it sent one, else ours."""
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            return self.body
        return super().to_openai()
