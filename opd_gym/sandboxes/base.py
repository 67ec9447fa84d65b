"""The sandbox protocol every backend implements, its result type and its errors."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from opd_gym.errors import OPDGymError

DEFAULT_OUTPUT_CAP = 16384
DEFAULT_FILE_CAP = 10 << 20
# What a snapshot carries by default: as many bytes as a sandbox workspace holds (the tmpfs
# size of the Docker and bubblewrap backends), so whatever fits in the agent's workspace
# also fits in the grading sandbox's, and up to this many files.
DEFAULT_WORKSPACE_BYTES = 256 << 20
DEFAULT_SNAPSHOT_FILES = 100_000


def size_bytes(size: str | int) -> int:
    """Bytes in a Docker/tmpfs size such as "256m", "1g", "4096k" or a plain number."""
    if isinstance(size, int):
        return size
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = size.strip().lower().removesuffix("b")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


class SandboxError(OPDGymError, RuntimeError):
    """Base class of every error a sandbox raises on purpose."""


class SandboxUnavailable(SandboxError):
    """The backend cannot run here (no Docker engine, no image, no bwrap binary...)."""


class SandboxDied(SandboxError):
    """The sandbox went away mid-episode (container killed, helper crashed, OOM...)."""


class SandboxProtocolError(SandboxDied):
    """The helper's reply was malformed, oversized or inconsistent: the sandbox is unusable."""


class SandboxTimeout(SandboxError):
    """The sandbox did not answer a request in time (distinct from a command timing out)."""


class PathRefused(SandboxError, ValueError):
    """A file path points outside the workspace."""


class FileTooLarge(SandboxError, ValueError):
    """A file is over the configured size cap."""


class SandboxFileNotFound(SandboxError, FileNotFoundError):
    """A file or directory does not exist in the workspace."""


class NotARegularFile(SandboxError, OSError):
    """The path is a directory, FIFO, device or socket where a regular file is needed."""


class SandboxPermissionDenied(SandboxError, PermissionError):
    """The agent's uid may not read or write the path (e.g. a file it made unreadable)."""


@dataclass(frozen=True, slots=True)
class RunResult:
    """Outcome of one command: `output` is stdout+stderr, capped as head + tail."""

    exit_code: int
    output: str
    timed_out: bool = False
    truncated: bool = False
    duration: float = 0.0
    output_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass(frozen=True, slots=True)
class DirEntry:
    """One directory entry; `other` is a FIFO, socket or device."""

    name: str
    type: Literal["file", "dir", "symlink", "other"]
    size: int


class Snapshot(dict[str, bytes]):
    """A workspace snapshot (path -> bytes) that also says what it left out and why.

    `skipped` holds up to 100 notes "path: reason" (over the total or per-file limit,
    symlink, not a regular file, unreadable, too deep...); `skipped_count` is the exact
    number left out. Whatever is left out is named here: a snapshot never drops silently.
    """

    def __init__(self, files: dict[str, bytes] | None = None, skipped: list[str] | None = None,
                 skipped_count: int = 0) -> None:
        super().__init__(files or {})
        self.skipped = list(skipped or [])
        self.skipped_count = skipped_count


@runtime_checkable
class Sandbox(Protocol):
    """A workspace with a persistent shell: cwd and exported variables survive between runs.

    Process rule: a command's background processes may outlive it (e.g. a server used by the
    next command), but a command that times out, a `snapshot` (taken at submit) and `close`
    first kill every process the agent started, setsid escapees included, so nothing the
    agent left running can change the workspace during or after a snapshot. File operations
    take paths relative to the workspace (symlinks leading out, '..' above it and absolute
    paths elsewhere are refused) and act only on regular files.
    """

    workspace: str

    def start(self) -> None: ...

    def run(self, command: str, timeout: float | None = None) -> RunResult: ...

    def write_file(self, path: str, content: str | bytes, mode: int | None = None) -> None: ...

    def read_file(self, path: str, max_bytes: int | None = None) -> bytes: ...

    def list_dir(self, path: str = ".") -> list[DirEntry]: ...

    def write_files(self, files: Mapping[str, str | bytes]) -> None: ...

    def snapshot(self, max_bytes: int | None = None,
                 max_files: int = DEFAULT_SNAPSHOT_FILES) -> Snapshot: ...

    @property
    def alive(self) -> bool: ...

    def close(self) -> None: ...

    def __enter__(self) -> Sandbox: ...

    def __exit__(self, *exc: object) -> None: ...
