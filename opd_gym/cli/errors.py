"""The CLI's one error of its own: a mistake the user can fix, shown as one line."""

from __future__ import annotations

from opd_gym.errors import ConfigError


class UserError(ConfigError):
    """An error the user can fix; printed as one line, exit status 2, no traceback."""


__all__ = ["UserError"]
