"""ServeConfig and the request guard's token parsing: no server, no Docker."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from opd_gym.errors import ConfigError
from opd_gym.serve import OPENENV_PIN
from opd_gym.serve.config import ServeConfig, is_loopback
from opd_gym.serve.guard import presented_token


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.5.0.1", True), ("::1", True), ("localhost", True),
    ("0.0.0.0", False), ("10.0.0.5", False), ("::", False), ("example.org", False)])
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_public_bind_needs_a_token() -> None:
    with pytest.raises(ConfigError, match="--token"):
        ServeConfig(host="0.0.0.0").check()
    with pytest.raises(ConfigError, match="8 characters"):
        ServeConfig(host="0.0.0.0", token="short").check()
    assert ServeConfig(host="0.0.0.0", token="long-enough-token").check().token


@pytest.mark.parametrize("field, value", [("max_sessions", 0), ("max_body_bytes", 0),
                                          ("idle_timeout", 0), ("port", 70000)])
def test_bad_limits_are_refused(field: str, value: int) -> None:
    with pytest.raises(ConfigError):
        ServeConfig(**{field: value}).check()


def test_token_from_bearer_or_basic_auth() -> None:
    basic = base64.b64encode(b"anyone:s3cret-token").decode()
    assert presented_token([(b"authorization", b"Bearer s3cret-token")]) == "s3cret-token"
    assert presented_token([(b"Authorization", f"Basic {basic}".encode())]) == "s3cret-token"
    assert presented_token([(b"authorization", b"Basic %%%")]) is None
    assert presented_token([(b"x-other", b"1")]) is None


def test_setup_installs_the_pinned_openenv() -> None:
    """setup.sh installs exactly the openenv-core the code is written against."""
    setup = (Path(__file__).parents[2] / "scripts" / "setup.sh").read_text()
    extras = re.search(r"EXTRAS=\$\{OPD_GYM_EXTRAS:-([^}]*)\}", setup)
    assert f'"{OPENENV_PIN}"' in setup and extras and "serve" in extras.group(1).split(",")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the local backend's warning
def test_the_verify_flags_reach_the_sessions_run_config(tmp_path: Path) -> None:
    """`--skip-unverifiable` and `--no-verify` become the run config every session's env
    stack is built from (as rollout's flags do)."""
    import argparse

    from opd_gym.cli.serve import add_arguments, config_from
    from opd_gym.serve.runtime import ServeRuntime

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    default = config_from(parser.parse_args([]))
    assert (default.verify_tasks, default.skip_unverifiable) == (True, False)
    skipping = config_from(parser.parse_args(["--skip-unverifiable"]))
    assert (skipping.verify_tasks, skipping.skip_unverifiable) == (True, True)
    assert config_from(parser.parse_args(["--no-verify"])).verify_tasks is False
    runtime = ServeRuntime(config_from(parser.parse_args(
        ["--skip-unverifiable", "--sandbox", "local", "--pool-size", "0",
         "--out", str(tmp_path / "served")])))
    try:
        assert runtime.rollout.verify_tasks and runtime.rollout.skip_unverifiable
        env = runtime.env_stack().unwrapped
        assert env.verify_tasks and env.skip_unverifiable
        env.close()
    finally:
        runtime.close()


def test_calibrations_reach_the_servers_grader(tmp_path: Path) -> None:
    """`--calibrations DIR`: the sessions' grader reads and fills that store, with its secret."""
    import argparse

    from opd_gym.cli.serve import add_arguments, config_from
    from opd_gym.grading import CalibrationStore
    from opd_gym.serve.runtime import ServeRuntime

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    store = tmp_path / "cal"
    runtime = ServeRuntime(config_from(parser.parse_args(
        ["--calibrations", str(store), "--sandbox", "local", "--pool-size", "0",
         "--out", str(tmp_path / "served")])))
    try:
        assert runtime.rollout.calibrations == str(store)
        assert runtime.grader._store == store
        assert runtime.grader._secret == CalibrationStore.open(store).secret
    finally:
        runtime.close()
