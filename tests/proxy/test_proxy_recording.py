"""Episode registry and turn conversion: keys, prefix extension, token-exact actions."""

from __future__ import annotations

import threading

import pytest

from opd_gym.actions import TokenText, to_model_output
from opd_gym.errors import ConfigError, OPDGymError
from opd_gym.proxy import EpisodeRegistry, ProxyRequestError, Sampled, UnknownEpisode


def _sampled(prompt, ids):
    return Sampled(prompt_ids=prompt, token_ids=ids, logprobs=[-0.5] * len(ids),
                   content="x", tool_calls=None, finish_reason="stop", model="m")


def _record(registry, key, prompt, ids):
    return registry.record(key, _sampled(prompt, ids), messages=[{"role": "user"}],
                           tools=None, sampling={}, stream=False, model_seconds=0.0)


def test_turns_say_whether_their_prompt_extends_the_previous_turn():
    registry = EpisodeRegistry()
    key = registry.open()
    first = _record(registry, key, [1, 2, 3], [4, 5])
    grown = _record(registry, key, [1, 2, 3, 4, 5, 9, 9], [6])
    rewritten = _record(registry, key, [1, 2, 3, 4, 5, 9, 8], [7])  # history edited
    truncated = _record(registry, key, [1, 2], [3])
    assert [t.index for t in registry.turns(key)] == [0, 1, 2, 3]
    assert first.extends_previous is None
    assert grown.extends_previous is True
    assert rewritten.extends_previous is False
    assert truncated.extends_previous is False


def test_keys_are_checked_and_unknown_or_closed_episodes_refused():
    registry = EpisodeRegistry()
    assert registry.open("run1-ep.0") == "run1-ep.0"
    for bad in ("v1", "a/b", "-x", "x" * 200):
        with pytest.raises(ProxyRequestError):
            registry.open(bad)
    with pytest.raises(ProxyRequestError, match="already open"):
        registry.open("run1-ep.0")
    with pytest.raises(UnknownEpisode):
        registry.get(None)
    registry.close("run1-ep.0")
    with pytest.raises(UnknownEpisode):
        _record(registry, "run1-ep.0", [1], [2])
    # the errors sit in the library's tree
    assert issubclass(ProxyRequestError, ConfigError) and issubclass(UnknownEpisode, OPDGymError)


def test_wait_for_turns_returns_once_a_turn_is_recorded():
    registry = EpisodeRegistry()
    key = registry.open()
    timer = threading.Timer(0.05, _record, (registry, key, [1], [2]))
    timer.start()
    assert len(registry.wait_for_turns(key, 1, timeout=5)) == 1
    assert registry.wait_for_turns(key, 2, timeout=0.01)[0].token_ids == [2]


def test_a_turn_converts_to_the_envs_token_exact_actions(tiny_tokenizer):
    registry = EpisodeRegistry()
    key = registry.open()
    ids = [*tiny_tokenizer.encode("ls -la", add_special_tokens=False),
           tiny_tokenizer.eos_token_id]
    turn = _record(registry, key, [1, 2, 3], ids)
    text = turn.to_token_text(tiny_tokenizer)
    assert isinstance(text, TokenText) and str(text) == "ls -la"
    assert (text.token_ids, text.prompt_ids) == (ids, [1, 2, 3])
    data = to_model_output(turn.to_action())
    assert (data.token_ids, data.prompt_ids, data.logprobs, data.problem) == \
        (ids, [1, 2, 3], [-0.5] * len(ids), None)


def test_sampled_ids_and_logprobs_must_align():
    with pytest.raises(ValueError, match="align"):
        Sampled(prompt_ids=[1], token_ids=[2, 3], logprobs=[0.0], content="", tool_calls=None,
                finish_reason="stop", model="m")
