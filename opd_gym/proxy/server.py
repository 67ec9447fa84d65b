"""`RecordingProxy`: the proxy as a Python object, serving on loopback from a thread.

Open an episode, point an unmodified agent harness at `proxy.base_url(key)` (or send the
`X-OPD-Episode` header to `proxy.url + "/v1"`), and read the recorded turns with
`proxy.turns(key)` / `proxy.wait_for_turns(key, n)`; `close_episode(key)` ends it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

from opd_gym.errors import ConfigError, ModelError
from opd_gym.proxy.app import build_app
from opd_gym.proxy.backends.base import Backend
from opd_gym.proxy.recording import EpisodeRegistry, ProxyTurn

LOOPBACK = ("127.0.0.1", "::1", "localhost")


class RecordingProxy:
    """An OpenAI-compatible recording proxy for `backend` on `host`:`port` (0: any free).

    Use as a context manager, or `start()` / `stop()`. `serve_forever()` runs it in the
    calling thread instead (the CLI).
    """

    def __init__(self, backend: Backend, *, host: str = "127.0.0.1", port: int = 0,
                 log_level: str = "warning") -> None:
        if host not in LOOPBACK:
            raise ConfigError(f"the recording proxy serves on loopback only, not {host!r}")
        self.backend = backend
        self.registry = EpisodeRegistry()
        self.app = build_app(backend, self.registry)
        self.host = host
        self._sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((host, port))
            # listening from here on: a client that read `url` (the CLI prints it before
            # serving) waits in the backlog instead of being refused until uvicorn starts
            self._sock.listen(128)
        except OSError as exc:
            self._sock.close()
            raise ConfigError(f"cannot listen on {host}:{port} ({exc})") from exc
        self.port = int(self._sock.getsockname()[1])
        import uvicorn

        self._server = uvicorn.Server(uvicorn.Config(
            self.app, log_level=log_level, access_log=False, lifespan="on",
            timeout_graceful_shutdown=5))
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The proxy's root URL (the OpenAI API is under `/v1` or `/<key>/v1`)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def base_url(self, key: str) -> str:
        """The OpenAI base URL that records into episode `key`."""
        return f"{self.url}/{key}/v1"

    def start(self, timeout: float = 30.0) -> RecordingProxy:
        """Serve from a daemon thread; returns once the server accepts connections."""
        if self._thread is not None:
            raise ConfigError("the proxy was already started")
        self._thread = threading.Thread(target=self._server.run,
                                        kwargs={"sockets": [self._sock]},
                                        name="opd-gym-proxy", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise ModelError("the recording proxy did not start")
            time.sleep(0.01)
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (Ctrl-C), then raise KeyboardInterrupt.
        uvicorn shuts down gracefully on the signal and re-raises it, but inside asyncio.run,
        whose own SIGINT handler may swallow it when the server's task is already finishing:
        the command's exit status (130) would then depend on that race."""
        self._server.run(sockets=[self._sock])
        if getattr(self._server, "_captured_signals", None):
            raise KeyboardInterrupt

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving (open streams get `timeout` s) and release the port."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._sock.close()

    def open_episode(self, key: str | None = None,
                     metadata: Mapping[str, Any] | None = None) -> str:
        """Open an episode (a random key when None); calls naming it are recorded."""
        return self.registry.open(key, metadata)

    def turns(self, key: str) -> list[ProxyTurn]:
        """The turns episode `key` recorded so far."""
        return self.registry.turns(key)

    def wait_for_turns(self, key: str, count: int, timeout: float | None = None
                       ) -> list[ProxyTurn]:
        """Block until episode `key` has `count` turns (or `timeout` s); its turns."""
        return self.registry.wait_for_turns(key, count, timeout)

    def close_episode(self, key: str) -> list[ProxyTurn]:
        """Close episode `key` (later calls naming it are refused); its turns."""
        return self.registry.close(key)

    def __enter__(self) -> RecordingProxy:
        return self.start() if self._thread is None else self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
