"""The 20-line OpenAI-client loop of docs/harness.md, run as written (real proxy, real tiny
transformers model, real Docker env): the docs stay true."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "harness.md"


def doc_loop() -> str:
    """The python block that follows the `openai-loop` marker in docs/harness.md."""
    text = DOC.read_text()
    found = re.search(r"<!-- openai-loop[^>]*-->\n```python\n(.*?)```", text, re.DOTALL)
    assert found, "docs/harness.md lost its openai-loop block"
    return found.group(1)


@pytest.mark.docker
def test_the_documented_openai_loop_plays_a_token_exact_episode(tiny_model_path, capsys):
    code = doc_loop()
    assert len(code.strip().splitlines()) <= 24  # "in 20 lines" (plus imports' blank lines)
    code = code.replace('"path/to/a/chat/model"', repr(str(tiny_model_path)), 1)
    scope: dict = {}
    exec(compile(code, str(DOC), "exec"), scope)
    turns, info = scope["turns"], scope["info"]
    assert 1 <= len(turns) <= 3 and "correctness" in info["reward_breakdown"]
    assert f"{len(turns)} model calls" in capsys.readouterr().out
    env_turns = scope["env"].unwrapped.turns
    assert len(env_turns) == len(turns)
    for recorded, played in zip(turns, env_turns, strict=True):  # token-exact, id for id
        assert list(played.token_ids) == recorded.token_ids
        assert list(played.prompt_ids) == recorded.prompt_ids
        assert list(played.logprobs) == pytest.approx(recorded.logprobs)
