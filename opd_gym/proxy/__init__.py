"""A recording model proxy: an OpenAI-compatible chat endpoint on loopback (also serving
Anthropic Messages and OpenAI Responses, converted to the same chat call) that forwards each
call to a vLLM server or an in-process transformers model and records, per episode, the
exact prompt ids, sampled ids and logprobs of every call (token-exact turns for the env).

Names load on first use, so `opd-gym` builds its parser without importing the web stack.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "EpisodeRegistry": "opd_gym.proxy.recording",
    "ProxyTurn": "opd_gym.proxy.recording",
    "Sampled": "opd_gym.proxy.recording",
    "ProxyError": "opd_gym.proxy.errors",
    "ProxyRequestError": "opd_gym.proxy.errors",
    "UnknownEpisode": "opd_gym.proxy.errors",
    "UpstreamError": "opd_gym.proxy.errors",
    "RecordingProxy": "opd_gym.proxy.server",
    "TransformersBackend": "opd_gym.proxy.backends.transformers",
    "VLLMBackend": "opd_gym.proxy.backends.vllm",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    """Import the module defining `name` on first access."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'opd_gym.proxy' has no attribute {name!r}")
