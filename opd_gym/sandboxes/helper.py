"""Host side of the in-sandbox helper (`sandbox/agentd.py`): transports and the shared Sandbox.

Every backend starts the same helper once per sandbox and talks JSON lines to it, so the
behaviour (persistent shell, timeouts, output caps, path confinement) is identical across
Docker, bubblewrap and local; backends differ only in how the helper process is reached.
"""

from __future__ import annotations

import base64
import json
import os
import select
import socket
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from functools import cache
from typing import Any

from opd_gym.resources import data_path
from opd_gym.sandboxes.base import (
    DEFAULT_FILE_CAP,
    DEFAULT_OUTPUT_CAP,
    DirEntry,
    FileTooLarge,
    PathRefused,
    RunResult,
    SandboxDied,
    SandboxError,
    SandboxFileNotFound,
    SandboxTimeout,
)

# Time the host allows the helper beyond a command's own timeout before declaring it hung.
REPLY_MARGIN = 15.0
ERRORS = {"path": PathRefused, "size": FileTooLarge, "notfound": SandboxFileNotFound}


@cache
def helper_source() -> str:
    """The helper's Python source, passed with `python3 -c` so images need no copy of it."""
    return data_path("sandbox", "agentd.py").read_text()


def elide_marker(n: int) -> str:
    return f"\n... [{n} bytes elided] ...\n"


class Transport(ABC):
    """A byte pipe to the helper's stdin/stdout, read line by line with deadlines."""

    def __init__(self) -> None:
        self._buf = bytearray()

    @abstractmethod
    def send(self, data: bytes) -> None: ...

    @abstractmethod
    def _read_some(self, timeout: float) -> bytes | None:
        """Next stdout bytes; b'' at end of stream, None if nothing arrived in `timeout`."""

    @abstractmethod
    def close(self) -> None: ...

    def diagnostics(self) -> str:
        """Whatever the helper wrote to stderr, for error messages."""
        return ""

    def recv_line(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                return line
            left = deadline - time.monotonic()
            if left <= 0:
                raise SandboxTimeout(f"the sandbox helper did not answer within {timeout:.0f} s")
            chunk = self._read_some(left)
            if chunk == b"":
                raise SandboxDied("the sandbox helper's output stream closed")
            if chunk:
                self._buf += chunk


class PipeTransport(Transport):
    """The helper as a local child process (bubblewrap and local backends)."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None, **popen: Any) -> None:
        super().__init__()
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
            **popen,
        )
        self._err = bytearray()
        self._poll = select.poll()
        self._poll.register(self.proc.stdout.fileno(), select.POLLIN | select.POLLHUP)
        os.set_blocking(self.proc.stderr.fileno(), False)

    def send(self, data: bytes) -> None:
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError) as exc:
            raise SandboxDied(f"the sandbox helper is gone ({exc})") from None

    def _read_some(self, timeout: float) -> bytes | None:
        if not self._poll.poll(timeout * 1000):
            return None
        return os.read(self.proc.stdout.fileno(), 1 << 20)

    def diagnostics(self) -> str:
        try:
            self._err += self.proc.stderr.read() or b""
        except (OSError, ValueError):
            pass
        return self._err[-2000:].decode("utf-8", "replace").strip()

    def close(self) -> None:
        try:  # EOF on stdin asks the helper to kill its background jobs and exit
            self.proc.stdin.close()
            self.proc.wait(timeout=2)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass


class DockerExecTransport(Transport):
    """The helper as a `docker exec` session, read from the engine's multiplexed stream."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self.sock = sock
        self._raw = bytearray()
        self._err = bytearray()

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise SandboxDied(f"the sandbox's exec stream is gone ({exc})") from None

    def _read_some(self, timeout: float) -> bytes | None:
        out = bytearray()
        while not out:
            self.sock.settimeout(max(timeout, 0.001))
            try:
                chunk = self.sock.recv(1 << 20)
            except TimeoutError:
                return None
            except OSError as exc:
                raise SandboxDied(f"the sandbox's exec stream broke ({exc})") from None
            if not chunk:
                return b""
            self._raw += chunk
            # Frames: 1 byte stream id, 3 zero bytes, 4-byte big-endian length, payload.
            while len(self._raw) >= 8:
                size = int.from_bytes(self._raw[4:8], "big")
                if len(self._raw) < 8 + size:
                    break
                stream, payload = self._raw[0], bytes(self._raw[8 : 8 + size])
                del self._raw[: 8 + size]
                if stream == 2:
                    self._err = (self._err + payload)[-4000:]
                else:
                    out += payload
        return bytes(out)

    def diagnostics(self) -> str:
        return self._err.decode("utf-8", "replace").strip()

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class HelperSandbox(ABC):
    """A Sandbox implemented over the helper protocol; subclasses provide the transport."""

    workspace: str = "/workspace"

    def __init__(
        self,
        *,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        file_cap: int = DEFAULT_FILE_CAP,
        default_timeout: float = 60.0,
    ) -> None:
        self.output_cap = output_cap
        self.file_cap = file_cap
        self.default_timeout = default_timeout
        self._transport: Transport | None = None
        self._lock = threading.Lock()
        self._closed = False

    # -- backend hooks -------------------------------------------------------------------
    @abstractmethod
    def _open(self) -> Transport:
        """Create the isolation unit if needed and start the helper in it."""

    @abstractmethod
    def _teardown(self) -> None:
        """Destroy the isolation unit (idempotent, never raises)."""

    def _death_reason(self) -> str:
        """Backend-specific words on why the sandbox is gone (e.g. container OOM-killed)."""
        return ""

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        if self._transport is not None:
            return
        if self._closed:
            raise SandboxError("this sandbox was closed; create a new one")
        transport = self._open()
        try:
            ready = json.loads(transport.recv_line(60.0))
        except (SandboxError, ValueError) as exc:
            detail = transport.diagnostics()
            transport.close()
            self._teardown()
            raise SandboxError(f"the sandbox helper failed to start: {exc}. {detail}") from None
        if not ready.get("ready"):
            raise SandboxError(f"unexpected first message from the sandbox helper: {ready}")
        self._transport = transport

    @property
    def alive(self) -> bool:
        if self._transport is None or self._closed:
            return False
        try:
            self._call({"op": "ping"}, timeout=5.0)
            return True
        except SandboxError:
            return False

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        transport, self._transport = self._transport, None
        if transport is not None:
            try:
                transport.close()
            except Exception:
                pass
        try:
            self._teardown()
        except Exception:
            pass

    def __enter__(self) -> HelperSandbox:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # -- requests --------------------------------------------------------------------------
    def _call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        if self._transport is None:
            if self._closed:
                raise SandboxError("this sandbox is closed")
            self.start()
        transport = self._transport
        assert transport is not None
        with self._lock:
            try:
                transport.send(json.dumps(request).encode() + b"\n")
                reply = json.loads(transport.recv_line(timeout))
            except (SandboxDied, OSError, ValueError) as exc:
                if self._closed:
                    raise SandboxError("the sandbox was closed while a request ran") from None
                reason = self._death_reason() or transport.diagnostics()
                raise SandboxDied(
                    f"{exc}: the sandbox died mid-episode. {reason}".strip()
                ) from None
        if not reply.get("ok"):
            raise ERRORS.get(reply.get("kind"), SandboxError)(reply.get("error", "unknown error"))
        return reply

    def run(self, command: str, timeout: float | None = None) -> RunResult:
        """Run `command` in the persistent shell; never raises for the command's own failure."""
        timeout = float(timeout if timeout is not None else self.default_timeout)
        reply = self._call(
            {"op": "run", "cmd": command, "timeout": timeout, "cap": self.output_cap},
            timeout=timeout + REPLY_MARGIN,
        )
        elided = reply["elided"]
        output = reply["head"] + (elide_marker(elided) if elided > 0 else "") + reply["tail"]
        return RunResult(
            exit_code=reply["exit_code"],
            output=output,
            timed_out=reply["timed_out"],
            truncated=elided > 0,
            duration=reply["duration"],
            output_bytes=reply["total"],
        )

    def write_file(self, path: str, content: str | bytes, mode: int | None = None) -> None:
        data = content.encode() if isinstance(content, str) else bytes(content)
        if len(data) > self.file_cap:
            raise FileTooLarge(f"content is {len(data)} bytes, over the {self.file_cap}-byte limit")
        request = {
            "op": "write",
            "path": path,
            "data": base64.b64encode(data).decode(),
            "max_bytes": self.file_cap,
            "mode": mode,
        }
        self._call(request, timeout=60.0)

    def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        request = {"op": "read", "path": path, "max_bytes": max_bytes or self.file_cap}
        return base64.b64decode(self._call(request, timeout=60.0)["data"])

    def list_dir(self, path: str = ".") -> list[DirEntry]:
        entries = self._call({"op": "ls", "path": path}, timeout=30.0)["entries"]
        return [DirEntry(**e) for e in entries]

    def snapshot(self, max_bytes: int = 32 << 20, max_files: int = 2000) -> dict[str, bytes]:
        """Every regular file of the workspace (path -> bytes), e.g. to grade elsewhere."""
        request = {"op": "snapshot", "max_bytes": max_bytes, "max_files": max_files}
        files = self._call(request, timeout=120.0)["files"]
        return {path: base64.b64decode(data) for path, data in files.items()}
