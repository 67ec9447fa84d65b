"""The harness runner's pieces that need no model server: submit detection, the output
handed back to mini-swe-agent, and the CLI's refusals before a run folder exists."""

from __future__ import annotations

import pytest

from opd_gym import cli
from opd_gym.harness.sandbox_env import command_output, is_submit_command


@pytest.mark.parametrize("command, submits", [
    ("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", True),
    ("  echo 'COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT' && git diff", True),
    ("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUTS", False),
    ("ls && echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", False),
    ("cat notes.txt", False),
])
def test_submit_command_is_mini_swe_agents_marker_first(command, submits):
    assert is_submit_command(command) is submits


def test_the_harness_gets_the_commands_own_output():
    assert command_output("a\nb\n[exit code: 0]") == "a\nb"
    assert command_output("(no output)\n[exit code: 1]") == ""
    timed_out = "partial\n[timed out after 5 s: the command and its children were killed]"
    assert command_output(timed_out) == "partial"
    assert command_output("[exit code: 0] in the text\n[exit code: 2]") == \
        "[exit code: 0] in the text"


def test_rollout_refuses_a_harness_without_a_served_policy(tmp_path, capsys):
    out = tmp_path / "run"
    code = cli.main(["rollout", "--harness", "mini-swe-agent", "--policy", "demo",
                     "--teacher", "tiny", "--out", str(out), "--episodes", "1"])
    assert code == 2 and not out.exists()
    assert "--harness mini-swe-agent needs --policy vllm:URL" in capsys.readouterr().err


def test_extends_previous_compares_the_prompt_with_the_last_prompt_and_sample():
    """The OPD record's marker: True when the prompt continues the previous turn token for
    token, False when history was rewritten or truncated, None without ids or a previous."""
    from types import SimpleNamespace

    from opd_gym.opd.wrapper import extends_previous

    def turn(prompt, sampled=(9,)):
        return SimpleNamespace(prompt_ids=prompt, token_ids=sampled)

    first = turn((1, 2, 3), (4, 5))
    assert extends_previous(None, first) is None
    assert extends_previous(first, turn((1, 2, 3, 4, 5, 6))) is True
    assert extends_previous(first, turn((1, 2, 3, 4, 5))) is True
    assert extends_previous(first, turn((1, 2, 3, 4))) is False          # truncated
    assert extends_previous(first, turn((1, 2, 7, 4, 5, 6))) is False    # rewritten
    assert extends_previous(first, turn(None)) is None
    assert extends_previous(turn(None), turn((1, 2))) is None
