"""Shared fixtures for OPD tests: a seeded tiny model built once per session, and an episode."""

from __future__ import annotations

import pytest

from opd_gym.models import build_tiny_model
from opd_gym.opd.chat import EpisodeTurn, make_hint_message, render_ids

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "terminal",
            "description": "Run a shell command in the workspace.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    }
]


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory):
    """Folder of a tiny seeded model + tokenizer, built locally once per test session."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)


@pytest.fixture(scope="session")
def tiny_model(tiny_model_path):
    """The tiny model in fp32 eval mode (shared: do not cast or train it in a test)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()


@pytest.fixture(scope="session")
def tools():
    return TOOLS


def _assistant(i: int) -> dict:
    command = ["ls -la", "cat main.py", "python -m pytest -q", "sed -n 1,20p main.py"][i % 4]
    return {
        "role": "assistant",
        "content": f"Step {i}: let me run a command to check the state of the code.",
        "tool_calls": [{"type": "function",
                        "function": {"name": "terminal", "arguments": {"command": command}}}],
    }


@pytest.fixture(scope="session")
def episode(tiny_tokenizer):
    """A 4-turn synthetic episode: (turns without hints, hint messages per turn).

    Each turn's student ids are the template's rendering of its assistant message up to and
    including <|im_end|>, i.e. exactly what a student following the template would sample.
    """
    context = [
        {"role": "system", "content": "You are a careful coding assistant."},
        {"role": "user", "content": "The function total() returns the wrong value. Fix it."},
    ]
    turns, hints = [], []
    for i in range(4):
        message = _assistant(i)
        prompt = render_ids(tiny_tokenizer, context, TOOLS, add_generation_prompt=True)
        full = render_ids(tiny_tokenizer, [*context, message], TOOLS, add_generation_prompt=False)
        block = full[len(prompt):]
        end = block.index(tiny_tokenizer.eos_token_id) + 1
        turns.append(EpisodeTurn(list(context), block[:end]))
        hints.append(make_hint_message(f"Turn {i} output showed the loop skips the last item."))
        output = f"exit code {i % 2}\n" + "\n".join(f"line {j}: value = {i * j}" for j in range(6))
        context = [*context, message, {"role": "tool", "content": output}]
    return turns, hints
