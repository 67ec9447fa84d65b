"""How long an episode's context may grow, beside the teacher's context window.

A teacher scores a turn only when the whole context before it (plus the turn) fits its window;
a turn over it is left unscored (`SkipReason.CONTEXT_TOO_LONG`). `opd-gym rollout` compares the
two before the first episode and says so in one line, instead of leaving the turns to be
skipped one by one. Cheap by design: a local teacher's window is read from its config.json
(no weights), a vLLM server's from its `/v1/models` entry.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

CHARS_PER_TOKEN = 4  # a rough average for code and English under BPE tokenizers
UNLIMITED_RESULT_CHARS = 32_768  # with no budget: the most one read_file returns


def episode_tokens(max_turns: int, max_tool_output_chars: int | None,
                   max_new_tokens: int) -> int:
    """A rough size in tokens an episode may reach: per turn, one tool result at its budget
    and one sampled turn at its cap (the prompt and any further calls come on top)."""
    result_chars = max_tool_output_chars or UNLIMITED_RESULT_CHARS
    return max_turns * (result_chars // CHARS_PER_TOKEN + max_new_tokens)


def config_window(folder: str | os.PathLike[str]) -> int | None:
    """`max_position_embeddings` from a model folder's config.json (its text config for a
    multimodal one); None when the file or the key is missing."""
    try:
        with open(os.path.join(os.path.expanduser(folder), "config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    for part in (config, config.get("text_config")):
        value = part.get("max_position_embeddings") if isinstance(part, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def teacher_window(spec: Any, options: Mapping[str, Any] | None = None) -> tuple[int | None, str]:
    """(the teacher's context window in tokens, where it comes from), without loading it:
    the `max_model_len` option when given, else a local model's max_position_embeddings or a
    vLLM server's served max_model_len; (None, "") when unknown (an object, no answer)."""
    from opd_gym import specs

    given = (options or {}).get("max_model_len")
    if isinstance(given, int) and not isinstance(given, bool) and given > 0:
        return given, "max_model_len"
    if isinstance(spec, Mapping):
        spec = spec.get("spec")
    if not isinstance(spec, str):
        return None, ""
    folder = specs.local_model(spec)
    if folder is not None:
        window = config_window(folder)
        return window, "max_position_embeddings" if window else ""
    if spec.startswith("vllm:"):
        return _served_window(spec.removeprefix("vllm:"))
    return None, ""


def _served_window(url: str) -> tuple[int | None, str]:
    from opd_gym.errors import OPDGymError
    from opd_gym.models.client import ModelClient

    try:
        with ModelClient(url, timeout=10.0, retries=0) as client:
            value = client.served_model().get("max_model_len")
    except (OPDGymError, OSError, LookupError, AttributeError):
        return None, ""
    if isinstance(value, int) and not isinstance(value, bool) and value > 1:
        return value - 1, "served max_model_len - 1"
    return None, ""


def context_warning(window: int | None, source: str, *, max_turns: int,
                    max_tool_output_chars: int | None, max_new_tokens: int) -> str | None:
    """One line when an episode may outgrow the teacher's window (None when it fits or the
    window is unknown): both numbers and what to change."""
    if window is None:
        return None
    need = episode_tokens(max_turns, max_tool_output_chars, max_new_tokens)
    if need <= window:
        return None
    output = (f"{max_tool_output_chars} characters" if max_tool_output_chars
              else "no limit, up to 32768 characters")
    return (f"warning: the teacher's context window is {window} tokens ({source}), but an "
            f"episode may reach about {need} tokens ({max_turns} turns x (tool output "
            f"budget {output} / {CHARS_PER_TOKEN} + {max_new_tokens} new tokens)); turns "
            "past the window are left unscored (context too long): lower --max-turns or "
            "--max-tool-output, or use a teacher with a longer context")


__all__ = ["CHARS_PER_TOKEN", "config_window", "context_warning", "episode_tokens",
           "teacher_window"]
