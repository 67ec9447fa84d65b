"""The models a recording proxy can forward to: a vLLM server or an in-process HF model."""

from opd_gym.proxy.backends.base import Backend
from opd_gym.proxy.backends.transformers import TransformersBackend
from opd_gym.proxy.backends.vllm import VLLMBackend

__all__ = ["Backend", "TransformersBackend", "VLLMBackend"]
