"""Text spaces and token-carrying actions: any Unicode string, TokenText, and action mappings."""

from __future__ import annotations

import pickle

import pytest
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from opd_gym.actions import TokenText, to_model_output
from opd_gym.spaces import ModelOutput, UnicodeText


def test_unicode_text_holds_code_and_any_script():
    space = UnicodeText()
    for text in ["", "def f():\n\treturn 'é'  # 中文 🚀\n", " " * 10, "\x00"]:
        assert space.contains(text)
    assert not space.contains(b"bytes") and not space.contains(3) and not space.contains(None)
    assert not UnicodeText(5).contains("toolong") and UnicodeText(5, min_length=2).contains("ab")
    with pytest.raises(ValueError):
        UnicodeText(1, min_length=2)


def test_sample_is_seeded_and_in_space():
    space = UnicodeText(seed=3)
    samples = [space.sample() for _ in range(50)]
    assert all(space.contains(s) for s in samples)
    assert any(not s.isascii() for s in samples) and any(" " in s for s in samples)
    again = UnicodeText(seed=3)
    assert [again.sample() for _ in range(50)] == samples


def test_action_space_accepts_every_action_form():
    space = ModelOutput()
    assert space.contains("text") and space.contains(TokenText("t", [1, 2], [-0.1, -0.2]))
    assert space.contains({"text": "<tool_call>...", "token_ids": [1], "logprobs": [-1.0]})
    assert space.contains({"role": "assistant", "content": None, "tool_calls": []})
    assert space.contains({"role": "assistant", "content": "hi"})
    assert not space.contains({"role": "user", "content": "hi"})
    assert not space.contains({"token_ids": [1]}) and not space.contains({"text": 5})
    assert not space.contains(42)
    assert space == ModelOutput() and space != UnicodeText()


def test_spaces_batch_for_vector_envs():
    space = UnicodeText()
    batched = batch_space(space, 3)
    items = ("a", "bé", "")
    assert concatenate(space, items, create_empty_array(space, 3)) == items
    assert list(iterate(batched, items)) == list(items)


def test_token_text_is_a_str_that_carries_tokens_and_pickles():
    action = TokenText("hello", token_ids=[5, 6], logprobs=[-0.5, -0.25], prompt_ids=[1])
    assert action == "hello" and isinstance(action, str)
    clone = pickle.loads(pickle.dumps(action))
    assert type(clone) is TokenText
    assert (clone.token_ids, clone.logprobs, clone.prompt_ids) == ([5, 6], [-0.5, -0.25], [1])
    with pytest.raises(ValueError, match="align"):
        TokenText("x", token_ids=[1, 2], logprobs=[-1.0])
    assert "2 token ids" in repr(action)


def test_to_model_output_normalises_and_never_raises():
    out = to_model_output(TokenText("t", [1], [-0.1]))
    assert (out.text, out.token_ids, out.logprobs, out.tool_calls) == ("t", [1], [-0.1], None)
    out = to_model_output({"text": "t", "token_ids": (1, 2), "logprobs": None})
    assert out.token_ids == [1, 2] and out.logprobs is None and out.problem is None
    calls = [{"type": "function", "function": {"name": "submit", "arguments": "{}"}}]
    out = to_model_output({"role": "assistant", "content": None, "tool_calls": calls})
    assert out.text == "" and out.tool_calls == calls
    plain = {"role": "assistant", "content": "x", "tool_calls": []}
    assert to_model_output(plain).tool_calls is None
    assert "must be the model's text" in to_model_output(None).problem
    assert "tool_calls must be a list" in to_model_output({"tool_calls": "x"}).problem
    assert "no 'text'" in to_model_output({"token_ids": [1]}).problem
    assert to_model_output({"text": "x", "token_ids": ["a"]}).token_ids is None
