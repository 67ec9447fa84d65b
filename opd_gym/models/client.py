"""One OpenAI-compatible HTTP client for every model behind a server (policy, judge, teacher).

Retries with exponential backoff on connect errors, timeouts, 429 and 5xx answers; a 4xx is
refused at once (asking again will not help); model discovery through `/v1/models`; every
failure is a `ModelError` with a message naming the server. Endpoint specifics (vLLM's
prompt-logprob requests, chat payloads) stay with their callers and go through `call`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from opd_gym.errors import ConfigError, ModelError


class ModelUnavailable(ModelError):
    """The server could not be reached, kept failing after retries, or answered nonsense."""


class ModelRejected(ModelError, ValueError):
    """The server refused a request (HTTP 4xx): asking again will not help."""

    def __init__(self, message: str, status: int, detail: str) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


def split_base_url(base_url: str, *, api_root: bool = False) -> tuple[str, str]:
    """(server root, OpenAI API root) of a URL.

    By default "http://host:port" and "http://host:port/v1" both mean the server at
    host:port with its API under /v1 (vLLM). With `api_root` the URL is the API root as
    given (an OpenAI-compatible base URL such as ".../openai/v1"), and the server root is
    that URL without a trailing "/v1".
    """
    url = base_url.rstrip("/")
    root = url[: -len("/v1")] if url.endswith("/v1") else url
    return root, (url if api_root else f"{root}/v1")


class ModelClient:
    """JSON calls to an OpenAI-compatible server with timeouts, retries and clear errors.

    Args:
        base_url: the server ("http://host:port", "/v1" optional) or, with `api_root`, the
            OpenAI API root as given.
        api_key: sent as a bearer token when set.
        timeout: seconds for one response; connect_timeout: seconds to connect.
        retries: extra attempts after a connect error, a timeout, a 429 or a 5xx, each after
            `backoff * 2**attempt` seconds (`close()` aborts the wait).
        max_connections: connections kept to the server (concurrent callers share them).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = 300.0,
        connect_timeout: float = 10.0,
        retries: int = 2,
        backoff: float = 0.5,
        max_connections: int = 8,
        api_root: bool = False,
    ) -> None:
        try:
            import httpx
        except ImportError as exc:
            raise ImportError("talking to a model server needs httpx: "
                              "pip install 'opd_gym[llm]'") from exc
        if retries < 0 or timeout <= 0 or max_connections < 1 or backoff < 0:
            raise ConfigError("a model client needs retries >= 0, timeout > 0, backoff >= 0 "
                              "and max_connections >= 1")
        self.root, self.api = split_base_url(base_url, api_root=api_root)
        self.retries = int(retries)
        self.backoff = float(backoff)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=min(connect_timeout, timeout)),
            headers=headers,
            limits=httpx.Limits(max_connections=max_connections,
                                max_keepalive_connections=max_connections),
        )
        self._closed = threading.Event()
        self._models: list[Mapping[str, Any]] | None = None

    def url(self, path: str) -> str:
        """An absolute URL: `path` under the API root ("models") or the server root ("/x")."""
        if path.startswith(("http://", "https://")):
            return path
        if path.startswith("/"):
            return f"{self.root}{path}"
        return f"{self.api}/{path}"

    def call(
        self,
        method: str,
        url: str,
        body: Mapping[str, Any] | None = None,
        decode: Callable[[bytes], Any] | None = None,
    ) -> Any:
        """One JSON call (see `url` for relative paths); `decode` turns the response bytes
        into the result (default: json). Raises ModelRejected (4xx) or ModelUnavailable."""
        import httpx

        url = self.url(url)
        last: BaseException | None = None
        attempt = 0
        for attempt in range(self.retries + 1):
            if attempt and self._closed.wait(self.backoff * 2 ** (attempt - 1)):
                break
            if self._closed.is_set():
                last = RuntimeError("the client is closed")
                break
            try:
                response = self._http.request(method, url, json=body)
            except httpx.TransportError as exc:  # connect errors, timeouts, dropped connections
                last = exc
                continue
            except RuntimeError as exc:  # the client was closed under us
                last = exc
                break
            if response.status_code == 429 or response.status_code >= 500:
                last = RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")
                continue
            if response.status_code >= 400:
                detail = _error_message(response)
                raise ModelRejected(f"the server at {self.root} rejected {url} "
                                    f"(HTTP {response.status_code}): {detail}",
                                    response.status_code, detail)
            try:
                return decode(response.content) if decode else response.json()
            except ValueError as exc:
                raise ModelUnavailable(f"{url} answered with malformed JSON: {exc}") from exc
        raise ModelUnavailable(f"the server at {url} failed after {attempt + 1} attempt(s): "
                               f"{type(last).__name__}: {last}")

    def models(self) -> list[Mapping[str, Any]]:
        """The server's `/v1/models` entries (asked once, then remembered)."""
        if self._models is None:
            answer = self.call("GET", "models")
            try:
                listed = list(answer["data"])
            except (KeyError, TypeError) as exc:
                raise ModelUnavailable(f"{self.url('models')} answered without a model list "
                                       f"({type(exc).__name__}: {exc})") from None
            if not listed:
                raise ModelUnavailable(f"the server at {self.root} serves no model")
            self._models = listed
        return self._models

    def served_model(self, model: str | None = None) -> Mapping[str, Any]:
        """The `/v1/models` entry of `model` (the first served model when None)."""
        listed = self.models()
        if model is None:
            return listed[0]
        for entry in listed:
            if entry.get("id") == model:
                return entry
        names = [entry.get("id") for entry in listed]
        raise ConfigError(f"the server at {self.root} does not serve {model!r}; it serves "
                          f"{names}")

    def model_id(self, model: str | None = None) -> str:
        """`model` when given (no request), else the first served model's id."""
        return model if model is not None else str(self.served_model()["id"])

    def check(self) -> None:
        """Fail early, in one sentence, when the server does not answer `/v1/models`."""
        try:
            self.models()
        except ModelError as exc:
            raise ModelUnavailable(f"cannot reach the server at {self.api} ({exc}); is it "
                                   "running, and is the URL right?") from None

    def close(self) -> None:
        """Abort retries and close the connections."""
        self._closed.set()
        self._http.close()

    def __enter__(self) -> ModelClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _error_message(response: Any) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:500]


__all__ = ["ModelClient", "ModelRejected", "ModelUnavailable", "split_base_url"]
