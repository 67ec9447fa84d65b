"""The tool-output budget: every tool result the agent sees keeps its head and tail around a
marker naming what was elided (`max_tool_output_chars`), through a real env episode."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest

from opd_gym.episode import DEFAULT_TOOL_OUTPUT_CHARS, EpisodeSettings
from opd_gym.errors import ConfigError
from opd_gym.tools.executor import MIN_OUTPUT_CHARS, clip_output
from opd_gym.tools.parsing import format_tool_call

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # local backend notice

MARKER = re.compile(r"\n\[\.\.\. (\d+) characters elided: this result is over the (\d+)-"
                    r"character limit for one tool result[^\n]*\]\n")


def split(text: str) -> tuple[str, int, int, str]:
    """(head, elided, limit, tail) of a clipped text; fails when there is no single marker."""
    parts = MARKER.split(text)
    assert len(parts) == 4, f"expected exactly one elision marker in {text[:300]!r}..."
    head, elided, limit, tail = parts
    return head, int(elided), int(limit), tail


def test_clip_keeps_half_the_budget_each_side_and_counts_the_rest():
    text = "".join(chr(ord("a") + i % 26) for i in range(5001))
    clipped, elided = clip_output(text, 1001)
    head, said, limit, tail = split(clipped)
    assert (len(head), len(tail), elided, said, limit) == (500, 501, 4000, 4000, 1001)
    assert head == text[:500] and tail == text[-501:]
    assert "read_file with offset and limit" in clipped and "head, tail, grep" in clipped
    assert clip_output(text, 5001) == (text, 0) and clip_output(text, None) == (text, 0)


def test_long_terminal_output_is_clipped_in_a_real_episode(local_pool, toy_task):
    env = gym.make("opd_gym/Coding-v0", tasks=[toy_task], sandbox=local_pool, max_turns=3,
                   max_tool_output_chars=1000)
    try:
        env.reset(seed=0)
        command = "python3 -c \"print('A' * 3000 + 'B' * 3000)\""
        obs, _, _, _, info = env.step(format_tool_call("terminal", {"command": command}))
        head, elided, limit, tail = split(obs)
        assert (limit, elided) == (1000, 5000)
        assert head == "A" * 500
        assert tail == "B" * 500 + "\n[exit code: 0]"  # the status line is kept whole
        assert info["tool_results"][0]["truncated"] is True
        assert info["messages"][-1]["content"] == obs  # what the policy is shown next
        # read_file stops at a line boundary within the budget and says where to go on
        env.unwrapped.sandbox.write_file("big.txt", "".join(f"line {i:04d}\n"
                                                            for i in range(400)))
        obs, *_ = env.step(format_tool_call("read_file", {"path": "big.txt"}))
        body, note = obs.rsplit("\n", 1)
        assert len(body) <= 1000 and MARKER.search(obs) is None
        assert note == "[lines 1-100 of 400; call read_file with offset=101 to continue]"
    finally:
        env.close()


def test_short_output_and_the_unlimited_setting_are_untouched(local_pool, toy_task):
    env = gym.make("opd_gym/Coding-v0", tasks=[toy_task], sandbox=local_pool, max_turns=3,
                   max_tool_output_chars=0)
    try:
        env.reset(seed=0)
        command = "python3 -c \"print('x' * 12000)\""
        obs, *_ = env.step(format_tool_call("terminal", {"command": command}))
        assert obs == "x" * 12000 + "\n[exit code: 0]"
        assert env.unwrapped.settings.max_tool_output_chars is None
    finally:
        env.close()


def test_default_budget():
    assert EpisodeSettings().max_tool_output_chars == DEFAULT_TOOL_OUTPUT_CHARS == 10_000
    assert EpisodeSettings(max_tool_output_chars=None).max_tool_output_chars is None


@pytest.mark.parametrize("value", [-1, 5, MIN_OUTPUT_CHARS - 1, 2.5, "10k", True])
def test_a_bad_budget_is_one_config_error(value):
    with pytest.raises(ConfigError) as caught:
        EpisodeSettings(max_tool_output_chars=value)
    message = str(caught.value)
    assert message.startswith("max_tool_output_chars must be a whole number of characters")
    assert message.count(". ") == 0 and repr(value) in message
