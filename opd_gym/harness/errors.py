"""Errors of the harness runners (all `OPDGymError`s, so callers catch one family)."""

from __future__ import annotations

from opd_gym.errors import ConfigError, OPDGymError


class HarnessError(OPDGymError, RuntimeError):
    """The harness and the env fell out of step (e.g. a command with no recorded model turn)."""


class HarnessNotInstalled(HarnessError, ConfigError):
    """The harness package is missing: install the `harness` extra (scripts/setup.sh does)."""
