"""Chat-template set-up TRL needs for tool calling: a response template to parse tool calls.

TRL's GRPOTrainer parses the model's completions with ``tokenizer.parse_response``, which
needs a ``response_template`` (transformers >= 5.13). TRL sets one itself for the chat
templates it knows (Qwen2.5/3, Llama 3.1/3.2, GLM-4, GPT-OSS, ...); the tiny model's template
is ChatML with Hermes ``<tool_call>`` blocks, rendered like Qwen's, but not byte-identical to
any template TRL knows, so it gets TRL's Qwen3 response template here.
"""

from __future__ import annotations

from typing import Any

from opd_gym.errors import ConfigError
from opd_gym.models.template import CHAT_TEMPLATE


def prepare_tokenizer(tokenizer: Any) -> Any:
    """Give `tokenizer` the response template TRL needs to read tool calls; returns it.

    The tiny model's template gets TRL's Qwen3 template (same ChatML + Hermes markup);
    templates TRL recognises get TRL's own (`trl.chat_template_utils.add_response_schema`);
    a tokenizer that already has one is left alone. Anything else is a ConfigError naming
    what to set.
    """
    from trl.chat_template_utils import add_response_schema, qwen3_template

    if getattr(tokenizer, "response_template", None) is not None:
        return tokenizer
    if tokenizer.chat_template == CHAT_TEMPLATE:
        tokenizer.response_template = qwen3_template
        return tokenizer
    try:
        return add_response_schema(tokenizer)
    except ValueError as exc:
        raise ConfigError(
            "TRL cannot parse tool calls with this chat template: set "
            "tokenizer.response_template (see the transformers docs on response parsing; "
            "for ChatML + <tool_call> JSON templates, trl.chat_template_utils.qwen3_template "
            f"fits) before building GRPOTrainer ({exc})") from exc
