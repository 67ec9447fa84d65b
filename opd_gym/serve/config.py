"""ServeConfig: every option of `opd-gym serve`, checked once (a public bind needs a token)."""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opd_gym.serve.errors import ServeConfigError

LOOPBACK_NAMES = ("localhost",)
DEFAULT_PORT = 8000
DEFAULT_MAX_BODY = 1 << 20  # bytes of one HTTP body or WebSocket message


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the server on this machine (127.0.0.0/8, ::1, localhost)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: treated as public


@dataclass
class ServeConfig:
    """Options of one server process; `check()` refuses unsafe or impossible ones."""

    tasks: Any = "coding"
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    max_sessions: int = 32
    token: str | None = None  # required beyond loopback; then every request must carry it
    idle_timeout: float = 300.0  # seconds without a message before a session is reaped
    out_dir: str | None = None  # run directory (default runs/serve-<time>)
    sandbox: Any = "docker"
    pool_size: int = 4  # warm sandboxes shared by every session
    max_turns: int = 15
    tool_format: str = "hermes"
    max_tool_output_chars: int | None = 10_000
    opd: bool = False
    opd_options: Mapping[str, Any] = field(default_factory=dict)
    max_body_bytes: int = DEFAULT_MAX_BODY
    grace: float = 30.0  # after Ctrl-C, seconds sessions may take to finish
    verify_tasks: bool = True  # a session's reset refuses a task no grade can vouch for
    skip_unverifiable: bool = False  # ... or draws another one (a task asked for by id: refused)
    tokenizer: str | None = None  # with opd: the student's tokenizer (tiny, smollm2, hf:PATH)
    calibrations: str | None = None  # a calibration store the grader reads (grading/store.py)

    def check(self) -> ServeConfig:
        """Refuse a public bind without a token and nonsensical limits; returns self."""
        if not is_loopback(self.host) and not self.token:
            raise ServeConfigError(
                f"binding {self.host} exposes the server beyond this machine: pass --token "
                "(or OPD_GYM_SERVE_TOKEN) so that requests without it are refused")
        if self.token is not None and len(self.token) < 8:
            raise ServeConfigError("--token must be at least 8 characters")
        for name in ("max_sessions", "max_body_bytes", "max_turns"):
            if int(getattr(self, name)) < 1:
                raise ServeConfigError(f"{name} must be at least 1")
        if self.idle_timeout <= 0 or self.grace < 0 or self.pool_size < 0:
            raise ServeConfigError("idle_timeout must be > 0, grace and pool_size >= 0")
        if not 0 <= int(self.port) <= 65535:
            raise ServeConfigError(f"port {self.port} is not a TCP port")
        if self.tokenizer is not None and not self.opd:
            raise ServeConfigError("--tokenizer names the student's tokenizer for the OPD "
                                   "teacher: it takes --opd (without it no token id is scored)")
        if self.tokenizer is not None:
            from opd_gym import specs
            from opd_gym.errors import OPDGymError

            try:
                specs.parse("tokenizer", self.tokenizer)
            except OPDGymError as exc:
                raise ServeConfigError(f"--tokenizer: {exc}") from None
        return self

    def run_dir(self) -> str:
        """The run directory rows go to (chosen once)."""
        if self.out_dir is None:
            self.out_dir = time.strftime("runs/serve-%Y%m%d-%H%M%S")
        return self.out_dir


__all__ = ["DEFAULT_MAX_BODY", "DEFAULT_PORT", "ServeConfig", "is_loopback"]
