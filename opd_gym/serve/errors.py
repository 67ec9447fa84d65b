"""Errors of the OpenEnv server: one family under `OPDGymError`, so the CLI prints one line."""

from __future__ import annotations

from opd_gym.errors import ConfigError, OPDGymError


class ServeError(OPDGymError, RuntimeError):
    """A served session cannot do what was asked (reset first, a closed or reaped session)."""


class ServeConfigError(ConfigError):
    """The server's options are unsafe or inconsistent (e.g. a public bind without a token)."""


class MissingServeExtra(ServeError):
    """openenv-core, which the server and its client come from, is not installed."""


__all__ = ["MissingServeExtra", "ServeConfigError", "ServeError"]
