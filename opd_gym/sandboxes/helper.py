"""Host side of the in-sandbox helper (`sandbox/agentd.py`): transports and the shared Sandbox.

Every backend starts the same helper once per sandbox and talks JSON lines to it, so the
behaviour (persistent shell, timeouts, output caps, path confinement) is identical across
Docker, bubblewrap and local; backends differ only in how the helper process is reached.

Trust: the host never believes a reply it has not checked. Each reply line is capped in size
(a cap derived from the request's own limits, so an endless line cannot grow this process),
must be one JSON object echoing the request's id, and must have exactly the shape and the
bounds its op allows (a read never returns more than was asked for, a snapshot never more
files or bytes than its limits, paths stay relative...). Anything else raises
`SandboxProtocolError` (a `SandboxDied`: the env ends the episode with the reason) and the
sandbox is unusable from then on.

Backends differ in who can write to the reply stream. Docker runs the helper as root and the
agent as another uid, so no agent process can open the helper's stdout: replies are the
helper's own. bubblewrap and local run helper and agent as one uid; the helper makes itself
non-dumpable (which closes /proc/<helper>/fd to processes without CAP_SYS_PTRACE), but a
process with that capability (e.g. a local backend run as root) could still write forged
replies that pass these checks: use Docker when the agent is untrusted.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import select
import socket
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any

from opd_gym.resources import data_path
from opd_gym.sandboxes.base import (
    DEFAULT_FILE_CAP,
    DEFAULT_OUTPUT_CAP,
    DEFAULT_SNAPSHOT_FILES,
    DEFAULT_WORKSPACE_BYTES,
    DirEntry,
    FileTooLarge,
    NotARegularFile,
    PathRefused,
    RunResult,
    SandboxDied,
    SandboxError,
    SandboxFileNotFound,
    SandboxPermissionDenied,
    SandboxProtocolError,
    SandboxTimeout,
    Snapshot,
)

# Time the host allows the helper beyond a command's own timeout before declaring it hung
# (starting a command may retry a dead shell for up to 2 x 10 s, collecting its status 10 s).
REPLY_MARGIN = 45.0
# Every error kind the helper reports (`Refused(kind, ...)` in agentd.py), mapped to our class.
ERRORS: dict[str, type[SandboxError]] = {
    "path": PathRefused,
    "size": FileTooLarge,
    "notfound": SandboxFileNotFound,
    "isdir": NotARegularFile,
    "type": NotARegularFile,
    "permission": SandboxPermissionDenied,
    "spawn": SandboxError,
    "protocol": SandboxError,
    "internal": SandboxError,
}
SMALL_REPLY = 64 << 10  # cap on replies that carry no data (ping, write, errors)
# write_files sends this many write requests back to back before reading their replies: the
# replies (a few dozen bytes, an error at most a few kB) wait in the helper's output pipe
# meanwhile, so a batch stays far below what the pipe holds.
WRITE_BATCH_FILES = 32
WRITE_BATCH_BYTES = 8 << 20
MAX_ERROR_CHARS = 2000
MAX_LS_ENTRIES = 2000  # the helper lists at most this many entries
MAX_SKIPPED = 100  # the helper returns at most this many skipped-path notes
MAX_NOTE_CHARS = 300
MAX_FRAME = 1 << 24  # a Docker exec stream frame larger than this is corrupt
MAX_TIMEOUT = 86400.0
ENTRY_TYPES = ("file", "dir", "symlink", "other")


@cache
def helper_source() -> str:
    """The helper's Python source, passed with `python3 -c` so images need no copy of it."""
    return data_path("sandbox", "agentd.py").read_text()


def elide_marker(n: int) -> str:
    """The marker put between the head and tail of truncated output."""
    return f"\n... [{n} bytes elided] ...\n"


def run_reply_limit(output_cap: int) -> int:
    """Longest valid `run` reply line: head + tail, each byte at worst a 6-char JSON escape."""
    return 6 * output_cap + SMALL_REPLY


def data_reply_limit(max_bytes: int) -> int:
    """Longest valid reply carrying `max_bytes` of base64 data."""
    return 4 * max_bytes // 3 + SMALL_REPLY


SNAPSHOT_PAGE_BYTES = 8 << 20  # data and path text of one snapshot reply


def snapshot_reply_limit(page_bytes: int) -> int:
    """Longest valid `snapshot` page: base64 data and JSON paths share one byte budget."""
    # each note character is at worst a 12-char escaped surrogate pair
    return 2 * page_bytes + MAX_SKIPPED * 12 * MAX_NOTE_CHARS + SMALL_REPLY


LS_REPLY_LIMIT = MAX_LS_ENTRIES * (6 * 255 + 64) + SMALL_REPLY


class Transport(ABC):
    """A byte pipe to the helper's stdin/stdout, read line by line with deadlines.

    `close` may come from another thread while a command reads (a timeout, Ctrl-C, a pool
    shutting down). It wakes the reader (`_interrupt`) but frees the descriptors
    (`_release`) only once no read or write is inside (`_in_use`): a descriptor closed under
    a reader is a number the next connection may reuse, and the reader would then wait on,
    or write to, someone else's stream."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._guard = threading.Lock()
        self._users = 0
        self._closing = False
        self._interrupted = False
        self._released = False

    @abstractmethod
    def send(self, data: bytes) -> None:
        """Write bytes to the helper's stdin."""

    @abstractmethod
    def _read_some(self, timeout: float) -> bytes | None:
        """Next stdout bytes; b'' at end of stream, None if nothing arrived in `timeout`."""

    @abstractmethod
    def _interrupt(self) -> None:
        """End the stream so a blocked reader wakes (the helper then kills the agent's
        processes and exits); descriptors stay open."""

    @abstractmethod
    def _release(self) -> None:
        """Free the descriptors; called once, when closed and no read or write is inside."""

    @contextmanager
    def _in_use(self) -> Iterator[None]:
        """Hold the descriptors open around one read or write."""
        with self._guard:
            if self._closing:
                raise SandboxDied("the sandbox's stream is closed")
            self._users += 1
        try:
            yield
        finally:
            with self._guard:
                self._users -= 1
            self._release_when_idle()

    def close(self) -> None:
        """Close the stream, from any thread; a second call does nothing."""
        with self._guard:
            if self._closing:
                return
            self._closing = True
        try:
            self._interrupt()
        finally:
            with self._guard:
                self._interrupted = True
            self._release_when_idle()

    def _release_when_idle(self) -> None:
        with self._guard:
            if not self._interrupted or self._users or self._released:
                return
            self._released = True
        self._release()

    def diagnostics(self) -> str:
        """Whatever the helper wrote to stderr, for error messages."""
        return ""

    def recv_line(self, timeout: float, limit: int = SMALL_REPLY) -> bytes:
        """The next line (without newline); SandboxProtocolError once it exceeds `limit`."""
        deadline = time.monotonic() + timeout
        scanned = 0
        while True:
            nl = self._buf.find(b"\n", scanned)
            if nl > limit or (nl < 0 and len(self._buf) > limit):
                self._buf.clear()
                raise SandboxProtocolError(
                    f"the sandbox helper sent a reply line over the {limit}-byte cap"
                )
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                return line
            scanned = len(self._buf)
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
            with self._in_use():
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError) as exc:
            raise SandboxDied(f"the sandbox helper is gone ({exc})") from None

    def _read_some(self, timeout: float) -> bytes | None:
        with self._in_use():
            if not self._poll.poll(timeout * 1000):
                return None
            return os.read(self.proc.stdout.fileno(), 1 << 20)

    def diagnostics(self) -> str:
        for _ in range(16):  # bounded: a writer that never stops cannot keep us here
            try:
                chunk = os.read(self.proc.stderr.fileno(), 65536)
            except (OSError, ValueError):
                break
            if not chunk:
                break
            self._err = (self._err + chunk)[-4000:]
        return self._err[-2000:].decode("utf-8", "replace").strip()

    def _interrupt(self) -> None:
        try:  # EOF on stdin asks the helper to kill the agent's processes and exit
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

    def _release(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass


class DockerExecTransport(Transport):
    """The helper as a `docker exec` session, read from the engine's multiplexed stream.

    `stream` is what docker's `exec_start(socket=True)` returned: a wrapper around `sock`
    that alone keeps the HTTP response and connection behind it reachable. Dropped, they form
    a cycle the garbage collector finalizes at a moment of its choosing, and where it closes
    urllib3's response first, that closes the connection and with it `sock` under us
    ("Bad file descriptor" mid-grade). So the transport holds it while the stream is open."""

    def __init__(self, sock: socket.socket, stream: object = None) -> None:
        super().__init__()
        self.sock = sock
        self._stream = stream
        self._raw = bytearray()
        self._err = bytearray()

    def send(self, data: bytes) -> None:
        try:
            with self._in_use():
                self.sock.sendall(data)
        except OSError as exc:
            raise SandboxDied(f"the sandbox's exec stream is gone ({exc})") from None

    def _read_some(self, timeout: float) -> bytes | None:
        out = bytearray()
        while not out:
            try:
                with self._in_use():
                    self.sock.settimeout(max(timeout, 0.001))
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
                if size > MAX_FRAME or self._raw[0] not in (0, 1, 2):
                    raise SandboxProtocolError("the sandbox's exec stream is corrupt")
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

    def _interrupt(self) -> None:
        try:  # wakes a reader: its recv returns b''
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _release(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None and stream is not self.sock:
            try:  # a SocketIO holds a reference that defers the socket's own close
                stream.close()  # type: ignore[attr-defined]
            except OSError:
                pass
        self.sock.close()  # the collector's later finalization of the response: a no-op


# -- reply checks ----------------------------------------------------------------------------
class BadReply(Exception):
    """A reply that does not have the shape or bounds its op allows."""


def _need(condition: bool, why: str) -> None:
    if not condition:
        raise BadReply(why)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _field(reply: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = reply.get(key)
    if kind is bool:
        ok = isinstance(value, bool)
    else:
        ok = isinstance(value, kind) and not isinstance(value, bool)
    _need(ok, f"field {key!r} is missing or of the wrong type")
    return value


def _count(reply: dict[str, Any], key: str, high: int = 1 << 62) -> int:
    value = _field(reply, key, int)
    _need(0 <= value <= high, f"field {key!r} is out of range")
    return value


def _b64(text: Any, limit: int, what: str) -> bytes:
    _need(isinstance(text, str) and len(text) <= 4 * limit // 3 + 4, f"{what} is not data")
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise BadReply(f"{what} is not valid base64") from None
    _need(len(data) <= limit, f"{what} is larger than the {limit}-byte limit")
    return data


def _relative_path(path: Any) -> bool:
    if not isinstance(path, str) or not path or "\x00" in path or len(path) > 4096:
        return False
    parts = path.split("/")
    return all(p not in ("", ".", "..") for p in parts)


def check_run(reply: dict[str, Any], output_cap: int) -> RunResult:
    """A RunResult from a `run` reply, or BadReply."""
    head, tail = _field(reply, "head", str), _field(reply, "tail", str)
    _need(len(head) + len(tail) <= output_cap, "more output than the output cap")
    total, elided = _count(reply, "total"), _count(reply, "elided")
    _need(elided <= total, "more bytes elided than produced")
    code = _field(reply, "exit_code", int)
    _need(-(1 << 31) <= code < (1 << 31), "exit code out of range")
    timed_out = _field(reply, "timed_out", bool)
    duration = float(_field(reply, "duration", (int, float)))
    _need(math.isfinite(duration) and 0 <= duration <= 2 * MAX_TIMEOUT, "bad duration")
    output = head + (elide_marker(elided) if elided > 0 else "") + tail
    return RunResult(exit_code=code, output=output, timed_out=timed_out, truncated=elided > 0,
                     duration=duration, output_bytes=total)


def check_entries(reply: dict[str, Any]) -> list[DirEntry]:
    """DirEntries from an `ls` reply, or BadReply."""
    entries = _field(reply, "entries", list)
    _need(len(entries) <= MAX_LS_ENTRIES, "too many entries")
    out = []
    for entry in entries:
        _need(isinstance(entry, dict) and set(entry) == {"name", "type", "size"}, "bad entry")
        name = entry["name"]
        _need(isinstance(name, str) and 0 < len(name) <= 255 and "/" not in name
              and "\x00" not in name and name not in (".", ".."), "bad entry name")
        _need(entry["type"] in ENTRY_TYPES, "bad entry type")
        _need(_is_int(entry["size"]) and entry["size"] >= 0, "bad entry size")
        out.append(DirEntry(name=name, type=entry["type"], size=entry["size"]))
    return out


class SnapshotAssembly:
    """Checks snapshot pages one by one and joins their chunks into a Snapshot.

    A page's chunks must continue exactly where the last page stopped, name plain relative
    paths in increasing order, and stay within the count, byte, per-file and page limits; a
    file sent short (unreadable or changed when its turn came) is dropped with a note.
    """

    def __init__(self, max_bytes: int, max_files: int, max_file_bytes: int,
                 page_bytes: int) -> None:
        self.limits = (max_bytes, max_files, max_file_bytes, page_bytes)
        self.files: dict[str, bytes] = {}
        self.used = 0
        self.cursor: tuple[int, str, int] = (0, "", 0)
        self.pending: tuple[str, int, bytearray] | None = None
        self.last_path = ""
        self.skipped: list[str] = []
        self.skipped_count = 0
        self.pages = 0

    def _note(self, note: str) -> None:
        self.skipped_count += 1
        if len(self.skipped) < MAX_SKIPPED:
            self.skipped.append(note[:MAX_NOTE_CHARS])

    def _settle(self) -> None:
        if self.pending is None:
            return
        path, size, data = self.pending
        self.pending = None
        if len(data) == size:
            self.files[path] = bytes(data)
        else:
            self._note(f"{path}: not readable or changed while the snapshot was taken")

    def add(self, reply: dict[str, Any]) -> tuple[int, str, int] | None:
        """Take one page (BadReply if it lies); the cursor of the next page, or None."""
        max_bytes, max_files, max_file_bytes, page_bytes = self.limits
        self.pages += 1
        _need(self.pages <= max_files + max_bytes // (page_bytes // 2) + 2, "too many pages")
        if self.pages == 1:
            notes = _field(reply, "skipped", list)
            _need(len(notes) <= MAX_SKIPPED, "too many skipped notes")
            _need(all(isinstance(n, str) and len(n) <= MAX_NOTE_CHARS for n in notes),
                  "bad skipped note")
            count = _count(reply, "skipped_count")
            _need(count >= len(notes), "skipped count below the notes given")
            self.skipped, self.skipped_count = list(notes), count
        chunks = _field(reply, "chunks", list)
        page = 0
        for chunk in chunks:
            _need(isinstance(chunk, list) and len(chunk) == 4, "a chunk is not [path, offset, "
                  "size, data]")
            path, offset, size, text = chunk
            _need(_relative_path(path), "a snapshot path is not a plain relative path")
            _need(_is_int(offset) and _is_int(size) and 0 <= offset <= size <= max_file_bytes,
                  "a chunk's offset or size is out of range")
            data = _b64(text, page_bytes, "a snapshot chunk")
            page += len(data) + len(path)
            _need(page <= page_bytes, "more data than the page limit")
            if self.pending is not None and self.pending[0] == path:
                _need(offset == len(self.pending[2]), "a chunk does not continue its file")
            else:
                self._settle()
                _need(offset == 0 and path > self.last_path, "a file starts out of order")
                _need(len(self.files) < max_files, "more files than the snapshot limit")
                self.pending, self.last_path = (path, size, bytearray()), path
            pending = self.pending
            assert pending is not None
            pending[2].extend(data)
            self.used += len(data)
            _need(len(pending[2]) <= size, "a file is longer than its size")
            _need(self.used <= max_bytes, "more bytes than the snapshot limit")
            if len(pending[2]) == size:
                self._settle()
        following = reply.get("next")
        if following is None:
            self._settle()
            return None
        _need(isinstance(following, list) and len(following) == 3
              and _is_int(following[0]) and isinstance(following[1], str)
              and _is_int(following[2]), "the next cursor is malformed")
        cursor = (following[0], following[1], following[2])
        _need((cursor[0], cursor[2]) > (self.cursor[0], self.cursor[2]) and cursor[2] >= 0,
              "the next cursor does not advance")
        self.cursor = cursor
        return cursor

    def snapshot(self) -> Snapshot:
        return Snapshot(dict(sorted(self.files.items())), self.skipped, self.skipped_count)


def _plain_path(path: str) -> str:
    """`path` as a plain relative workspace path; PathRefused if it is not one."""
    text = path
    if not _relative_path(text):
        raise PathRefused(f"{path[:200]!r} is outside the workspace or not a plain relative "
                          "path (no '..', '.', empty parts or absolute paths)")
    return text


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
        self.helper_pid: int | None = None
        self.separated = False  # True when the agent runs under a uid other than the helper's
        self._transport: Transport | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._broken: str | None = None
        self._next_id = 0

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
        """Start the isolation unit and the helper; waits for the helper's ready line."""
        if self._transport is not None:
            return
        if self._closed:
            raise SandboxError("this sandbox was closed; create a new one")
        transport = self._open()
        try:
            ready = json.loads(transport.recv_line(60.0, SMALL_REPLY))
            _need(isinstance(ready, dict) and ready.get("ready") is True, "not a ready line")
            self.helper_pid = _count(ready, "pid")
            self.separated = ready.get("separated") is True
        except (SandboxError, ValueError, RecursionError, BadReply) as exc:
            detail = transport.diagnostics()
            transport.close()
            self._teardown()
            raise SandboxError(f"the sandbox helper failed to start: {exc}. {detail}") from None
        self._transport = transport

    @property
    def alive(self) -> bool:
        """True if the helper answers a ping."""
        if self._transport is None or self._closed or self._broken:
            return False
        try:
            self._call({"op": "ping"}, timeout=5.0)
            return True
        except SandboxError:
            return False

    def close(self) -> None:
        """Stop the helper (it kills the agent's processes) and destroy the sandbox."""
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
    def _fail(self, transport: Transport, reason: str) -> SandboxProtocolError:
        """Mark the sandbox unusable (its stream may be out of step) and say why."""
        self._broken = reason
        try:
            transport.close()
        except Exception:
            pass
        return SandboxProtocolError(f"{reason}: the sandbox cannot be trusted any more")

    def _call(self, request: dict[str, Any], timeout: float,
              limit: int = SMALL_REPLY) -> dict[str, Any]:
        """Send one request; the checked reply object (ok=True), or the error it stands for."""
        reply = self._call_many([request], timeout, limit)[0]
        if isinstance(reply, Exception):
            raise reply
        return reply

    def _call_many(self, requests: Sequence[dict[str, Any]], timeout: float,
                   limit: int = SMALL_REPLY) -> list[dict[str, Any] | SandboxError]:
        """Send `requests` back to back, then read their replies in order (one round trip for
        all). Each entry is the reply object (ok=True) or the error its reply stands for; a
        broken channel raises. Callers keep the requests' replies small: they queue up in
        the helper's output pipe until every request is sent."""
        if self._broken:
            raise SandboxDied(f"the sandbox is unusable: {self._broken}")
        if self._transport is None:
            if self._closed:
                raise SandboxError("this sandbox is closed")
            self.start()
        transport = self._transport
        assert transport is not None
        out: list[dict[str, Any] | SandboxError] = []
        with self._lock:
            sent: list[tuple[Any, int]] = []
            try:
                for request in requests:
                    self._next_id += 1
                    sent.append((request.get("op"), self._next_id))
                    transport.send(json.dumps({**request, "id": self._next_id}).encode() + b"\n")
                for op, rid in sent:
                    out.append(self._receive(transport, op, rid, timeout, limit))
            except SandboxProtocolError as exc:
                raise self._fail(transport, str(exc)) from None
            except SandboxTimeout:
                self._broken = f"no answer to a {sent[-1][0] if sent else '?'} request in time"
                raise
            except (SandboxDied, OSError, ValueError) as exc:
                if self._closed:
                    raise SandboxError("the sandbox was closed while a request ran") from None
                self._broken = "the sandbox died"
                reason = self._death_reason() or transport.diagnostics()
                raise SandboxDied(
                    f"{exc}: the sandbox died mid-episode. {reason}".strip()
                ) from None
        return out

    def _receive(self, transport: Any, op: Any, rid: int, timeout: float,
                 limit: int) -> dict[str, Any] | SandboxError:
        """The reply to request `rid`: the object, or the error it reports (returned, so the
        caller reads every pending reply before raising and the channel stays in step)."""
        line = transport.recv_line(timeout, limit)
        try:
            reply = json.loads(line)
        except (ValueError, RecursionError):
            raise SandboxProtocolError(f"the sandbox helper's reply to {op} is not JSON"
                                       ) from None
        if not isinstance(reply, dict) or reply.get("id") != rid:
            raise SandboxProtocolError(f"the sandbox helper's reply to {op} is out of step")
        ok = reply.get("ok")
        if ok is False:
            kind, error = reply.get("kind"), reply.get("error")
            if not isinstance(kind, str) or not isinstance(error, str):
                raise SandboxProtocolError(f"the sandbox helper's error for {op} is malformed")
            return ERRORS.get(kind, SandboxError)(error[:MAX_ERROR_CHARS])
        if ok is not True:
            raise SandboxProtocolError(f"the sandbox helper's reply to {op} has no status")
        return reply

    def _checked(self, op: str, reply: dict[str, Any], check: Any, *args: Any) -> Any:
        """Apply a reply check; a BadReply makes the sandbox unusable."""
        try:
            return check(reply, *args)
        except BadReply as exc:
            transport = self._transport
            self._broken = f"invalid reply to {op}: {exc}"
            if transport is not None:
                try:
                    transport.close()
                except Exception:
                    pass
            raise SandboxProtocolError(
                f"the sandbox helper sent an invalid reply to {op} ({exc}): the sandbox cannot be "
                "trusted any more"
            ) from None

    def run(self, command: str, timeout: float | None = None) -> RunResult:
        """Run `command` in the persistent shell; never raises for the command's own failure."""
        timeout = float(timeout if timeout is not None else self.default_timeout)
        if not math.isfinite(timeout) or timeout <= 0:
            raise SandboxError("timeout must be a positive number of seconds")
        timeout = min(timeout, MAX_TIMEOUT)
        reply = self._call(
            {"op": "run", "cmd": command, "timeout": timeout, "cap": self.output_cap},
            timeout=timeout + REPLY_MARGIN,
            limit=run_reply_limit(self.output_cap),
        )
        return self._checked("run", reply, check_run, self.output_cap)

    def write_file(self, path: str, content: str | bytes, mode: int | None = None) -> None:
        """Create or replace a regular file in the workspace (parents are created)."""
        if isinstance(content, str):
            try:
                data = content.encode()
            except UnicodeEncodeError as exc:
                raise SandboxError(
                    f"the content is not valid Unicode text ({exc.reason} at {exc.start})"
                ) from None
        else:
            data = bytes(content)
        self._write(path, data, self.file_cap, mode)

    def _write(self, path: str, data: bytes, cap: int, mode: int | None = None) -> None:
        if len(data) > cap:
            raise FileTooLarge(f"content is {len(data)} bytes, over the {cap}-byte limit")
        request = {
            "op": "write",
            "path": path,
            "data": base64.b64encode(data).decode(),
            "max_bytes": cap,
            "mode": mode,
        }
        reply = self._call(request, timeout=60.0 + len(data) / (8 << 20))

        def check(reply: dict[str, Any]) -> None:
            _need(_count(reply, "size") == len(data), "wrote a different size")

        self._checked("write", reply, check)

    def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        """The bytes of a regular file in the workspace (FileTooLarge over `max_bytes`)."""
        limit = max_bytes or self.file_cap
        request = {"op": "read", "path": path, "max_bytes": limit}
        reply = self._call(request, timeout=60.0, limit=data_reply_limit(limit))

        def check(reply: dict[str, Any]) -> bytes:
            data = _b64(reply.get("data"), limit, "the file data")
            _need(_count(reply, "size") == len(data), "size disagrees with the data")
            return data

        return self._checked("read", reply, check)

    def list_dir(self, path: str = ".") -> list[DirEntry]:
        """The entries of a workspace directory (at most 2000, sorted by name)."""
        reply = self._call({"op": "ls", "path": path}, timeout=30.0, limit=LS_REPLY_LIMIT)
        return self._checked("ls", reply, check_entries)

    @property
    def workspace_bytes(self) -> int:
        """How many bytes this sandbox's workspace holds (its tmpfs size where it has one)."""
        return DEFAULT_WORKSPACE_BYTES

    def write_files(self, files: Mapping[str, str | bytes]) -> None:
        """Create or replace many workspace files at once (parents are created).

        Every path is checked first (PathRefused names the first bad one and nothing is
        written); a file may be as large as the workspace holds (`workspace_bytes`), unlike
        `write_file`'s per-call cap. This backend writes them one request each; Docker
        overrides it with one archive.
        """
        plain = _plain_files(files)
        cap = max(self.file_cap, self.workspace_bytes)
        for path, data in plain.items():
            if len(data) > cap:
                raise FileTooLarge(f"{path}: {len(data)} bytes, over the {cap}-byte limit")
        batch: list[tuple[str, bytes]] = []
        for path, data in plain.items():
            batch.append((path, data))
            if (len(batch) == WRITE_BATCH_FILES
                    or sum(len(d) for _, d in batch) >= WRITE_BATCH_BYTES):
                self._write_batch(batch, cap)
                batch = []
        if batch:
            self._write_batch(batch, cap)

    def _write_batch(self, batch: Sequence[tuple[str, bytes]], cap: int) -> None:
        """Write files with one round trip (requests sent back to back); the first error
        is raised once every reply is read."""
        requests = [{"op": "write", "path": path, "data": base64.b64encode(data).decode(),
                     "max_bytes": cap, "mode": None} for path, data in batch]
        size = sum(len(data) for _, data in batch)
        replies = self._call_many(requests, timeout=60.0 + size / (8 << 20))
        for (_, data), reply in zip(batch, replies, strict=True):
            if isinstance(reply, Exception):
                raise reply

            def check(reply: dict[str, Any], expected: int = len(data)) -> None:
                _need(_count(reply, "size") == expected, "wrote a different size")

            self._checked("write", reply, check)

    def snapshot(self, max_bytes: int | None = None,
                 max_files: int = DEFAULT_SNAPSHOT_FILES,
                 max_file_bytes: int | None = None, stop_processes: bool = True,
                 page_bytes: int = SNAPSHOT_PAGE_BYTES) -> Snapshot:
        """Every regular file of the workspace (path -> bytes), e.g. to grade elsewhere.

        Every process of the agent is killed first (`stop_processes`), so nothing changes the
        workspace during or after the snapshot. By default it carries as much as a workspace
        holds (`workspace_bytes`, so whatever the agent could store fits in a grading
        sandbox like this one) and up to 100,000 files, in pages of `page_bytes`, a large
        file in pieces. What it leaves out is named in `Snapshot.skipped`: files over
        `max_file_bytes` (default: `max_bytes`), symlinks, non-regular or unreadable
        files, directories deeper than 256 levels, and files beyond the count/byte budget
        (the smallest files are kept first).
        """
        total = self.workspace_bytes if max_bytes is None else max_bytes
        per_file = total if max_file_bytes is None else min(max_file_bytes, total)
        assembly = SnapshotAssembly(total, max_files, per_file, page_bytes)
        cursor: tuple[int, str, int] | None = (0, "", 0)
        first = True
        while cursor is not None:
            request = {"op": "snapshot", "max_bytes": total, "max_files": max_files,
                       "max_file_bytes": per_file, "stop": stop_processes and first,
                       "page_bytes": page_bytes, "cursor": list(cursor)}
            reply = self._call(request, timeout=120.0, limit=snapshot_reply_limit(page_bytes))
            cursor = self._checked("snapshot", reply, assembly.add)
            first = False
        return assembly.snapshot()


def _plain_files(files: Mapping[str, str | bytes]) -> dict[str, bytes]:
    """{plain relative path: bytes}; PathRefused or SandboxError (bad text) before any write."""
    plain: dict[str, bytes] = {}
    for path, content in files.items():
        if not isinstance(path, str):
            raise PathRefused(f"a path must be a string, got {type(path).__name__}")
        if isinstance(content, str):
            try:
                data = content.encode()
            except UnicodeEncodeError as exc:
                raise SandboxError(f"{path}: the content is not valid Unicode text "
                                   f"({exc.reason} at {exc.start})") from None
        else:
            data = bytes(content)
        plain[_plain_path(path)] = data
    return plain
