"""One error tree: every family is an OPDGymError and still the builtin callers caught before."""

from __future__ import annotations

import pytest

import opd_gym
from opd_gym.grading import VerdictError, parse_verdict
from opd_gym.sandboxes import PathRefused, SandboxDied, SandboxProtocolError, SandboxUnavailable


@pytest.mark.parametrize("cls, builtin", [
    (opd_gym.ConfigError, ValueError), (opd_gym.DatasetError, ValueError),
    (opd_gym.ModelError, RuntimeError), (SandboxDied, RuntimeError),
    (SandboxProtocolError, RuntimeError), (SandboxUnavailable, RuntimeError),
    (PathRefused, ValueError), (VerdictError, ValueError),
])
def test_families_share_the_root_and_keep_their_builtin(cls, builtin):
    assert issubclass(cls, opd_gym.OPDGymError) and issubclass(cls, builtin)


def test_a_real_failure_is_caught_at_the_root():
    with pytest.raises(opd_gym.OPDGymError, match="no verdict"):
        parse_verdict(b"")
