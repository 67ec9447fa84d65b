"""Tokenizers: loading them (a path, a tokenizer object, a served model's path) and rendering
a chat with tools to the exact token ids a model sees. Policies, teachers, exports and the
viewer all build on these, so every layer renders prompts the same way."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from opd_gym.errors import ConfigError


def render_ids(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    *,
    add_generation_prompt: bool,
) -> list[int]:
    """Token ids of the chat template applied to `messages` with `tools` in the prompt."""
    ids = tokenizer.apply_chat_template(
        [dict(m) for m in messages],
        tools=list(tools) if tools else None,
        add_generation_prompt=add_generation_prompt,
        tokenize=True,
        return_dict=False,
    )
    if isinstance(ids, Mapping):  # older transformers versions ignore return_dict
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def load_tokenizer(source: Any) -> Any:
    """A tokenizer from a local model folder (str or path); a tokenizer object or None as is.

    Spec strings ("tiny", "smollm2", "hf:PATH") are resolved by `opd_gym.specs.tokenizer`."""
    if source is None or hasattr(source, "convert_ids_to_tokens"):
        return source
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(os.fspath(source))


def served_tokenizer(tokenizer: Any, info: Mapping[str, Any]) -> tuple[Any, str | None]:
    """(tokenizer, its source path) for a served model: the given object, a path, or the path
    the server reports for the model (its `/v1/models` entry's `root`)."""
    if tokenizer is not None and not isinstance(tokenizer, str | os.PathLike):
        return tokenizer, getattr(tokenizer, "name_or_path", None)
    source = os.fspath(tokenizer) if tokenizer is not None else str(info.get("root") or info["id"])
    try:
        return load_tokenizer(source), source
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load the tokenizer of the served model from {source!r} "
                          f"({exc}); pass tokenizer= a local path or tokenizer object of the "
                          "model the server runs") from exc


__all__ = ["load_tokenizer", "render_ids", "served_tokenizer"]
