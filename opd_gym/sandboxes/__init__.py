"""Sandboxes that run an agent's commands: one protocol, Docker/bubblewrap/local backends."""

from __future__ import annotations

from opd_gym.sandboxes.base import (
    DirEntry,
    FileTooLarge,
    NotARegularFile,
    PathRefused,
    RunResult,
    Sandbox,
    SandboxDied,
    SandboxError,
    SandboxFileNotFound,
    SandboxPermissionDenied,
    SandboxProtocolError,
    SandboxTimeout,
    SandboxUnavailable,
    Snapshot,
)
from opd_gym.sandboxes.factory import BACKENDS, make_pool, resolve_backend, sandbox_factory
from opd_gym.sandboxes.pool import SandboxPool

__all__ = [
    "BACKENDS",
    "DirEntry",
    "FileTooLarge",
    "NotARegularFile",
    "PathRefused",
    "RunResult",
    "Sandbox",
    "SandboxDied",
    "SandboxError",
    "SandboxFileNotFound",
    "SandboxPermissionDenied",
    "SandboxPool",
    "SandboxProtocolError",
    "SandboxTimeout",
    "SandboxUnavailable",
    "Snapshot",
    "make_pool",
    "resolve_backend",
    "sandbox_factory",
]
