"""The server process: uvicorn on the guarded app; Ctrl-C drains sessions, then exits.

`serve(config)` blocks (the CLI); `ServerThread` runs the same server in a thread of this
process (tests, benchmarks, notebooks). Shutdown: uvicorn stops accepting, closes open
WebSockets (their sessions return their sandboxes) and waits up to `grace` seconds for
requests in flight; then every session still open is closed (its row marked interrupted),
the pool is closed and `summary.json` written.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading
import time
from typing import Any

from opd_gym.runs import RunSummary
from opd_gym.serve.config import ServeConfig
from opd_gym.serve.errors import ServeError
from opd_gym.serve.runtime import ServeRuntime


def _uvicorn_config(app: Any, config: ServeConfig) -> Any:
    """uvicorn's options: the bind, the WebSocket message limit, the drain time."""
    import uvicorn

    return uvicorn.Config(
        app, host=config.host, port=config.port, log_level="warning", lifespan="on",
        ws_max_size=config.max_body_bytes, timeout_graceful_shutdown=max(config.grace, 0.1),
        ws_ping_interval=20.0, ws_ping_timeout=20.0, access_log=False)


def _uvicorn_server(app: Any, runtime: ServeRuntime) -> Any:
    """A uvicorn server that marks `runtime` as stopping when a signal starts the drain."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            """Mark the runtime stopping first: sessions closed now are interrupted."""
            runtime.stopping = True
            super().handle_exit(sig, frame)

    return Server(_uvicorn_config(app, runtime.config))


class ServerThread:
    """A running server in a background thread: `url`, `runtime`, `stop()` (drain + close)."""

    def __init__(self, config: ServeConfig) -> None:
        from opd_gym.serve.app import build_app

        if config.port == 0:
            config.port = free_port(config.host)
        self.config = config
        self.runtime = ServeRuntime(config)
        try:
            app, self.app, self.server = build_app(self.runtime)
            self._uvicorn = _uvicorn_server(app, self.runtime)
        except BaseException:
            self.runtime.close()
            raise
        self._thread = threading.Thread(target=self._uvicorn.run, name="opd-gym-serve",
                                        daemon=True)
        self.summary: RunSummary | None = None

    @property
    def url(self) -> str:
        """The base URL clients connect to (http://host:port)."""
        host = self.config.host if ":" not in self.config.host else f"[{self.config.host}]"
        return f"http://{host}:{self.config.port}"

    def start(self, timeout: float = 30.0) -> ServerThread:
        """Start serving; returns once the port accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._uvicorn.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise ServeError(f"the server did not start on {self.url}")
            time.sleep(0.02)
        return self

    def stop(self) -> RunSummary:
        """Drain and stop; returns the run's summary (idempotent)."""
        if self.summary is None:
            self.runtime.stopping = True
            self._uvicorn.should_exit = True
            if self._thread.is_alive():
                self._thread.join(self.config.grace + 10)
            self.summary = self.runtime.close()
        return self.summary

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` now."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM as Ctrl-C: unwind through the cleanup instead of dying mid-way."""
    raise KeyboardInterrupt


def serve(config: ServeConfig) -> RunSummary:
    """Serve until Ctrl-C (or SIGTERM); drain, close everything, write the summary, then
    raise KeyboardInterrupt (the CLI exits 130). Returns the summary when the server stopped
    without a signal (`should_exit` set from another thread)."""
    from opd_gym.serve.app import build_app

    runtime = ServeRuntime(config)
    try:
        app, _, _ = build_app(runtime)
        server = _uvicorn_server(app, runtime)
        scheme = "auth: token required" if config.token else "no token (loopback only)"
        print(f"opd-gym serve: http://{config.host}:{config.port} (OpenEnv /ws, /reset, "
              f"/step, /state), up to {config.max_sessions} sessions, {scheme}; rows -> "
              f"{runtime.run.root}; Ctrl-C drains and stops", file=sys.stderr, flush=True)
        # uvicorn drains on SIGINT/SIGTERM, then re-raises the signal: a KeyboardInterrupt
        # here, so the finally below closes the sessions and pool (SIGTERM's default would
        # kill the process first)
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _interrupt) if main else None
        try:
            server.run()
        finally:
            if main:
                signal.signal(signal.SIGTERM, previous)
        # uvicorn re-raises the signal inside asyncio.run, whose own SIGINT handler may
        # swallow it when the server's task is already finishing: the exit status (130)
        # would depend on that race, so a signal that stopped the server is raised here
        # (as RecordingProxy.serve_forever does)
        if getattr(server, "_captured_signals", None):
            raise KeyboardInterrupt
    finally:
        summary = runtime.close()
        print(f"opd-gym serve: stopped; {summary.episodes} episode(s) played, rows in "
              f"{runtime.run.root}", file=sys.stderr, flush=True)
    return summary


__all__ = ["ServerThread", "free_port", "serve"]
