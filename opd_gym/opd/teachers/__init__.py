"""Teachers score the student's sampled tokens; `make_teacher` builds one from a spec string."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opd_gym.opd.teachers.base import ScoreRequest, SpanScores, Teacher, validate_requests

if TYPE_CHECKING:
    from opd_gym.opd.teachers.transformers import TransformersTeacher
    from opd_gym.opd.teachers.vllm_engine import VLLMEngineTeacher
    from opd_gym.opd.teachers.vllm_server import VLLMServerTeacher

__all__ = [
    "ScoreRequest",
    "SpanScores",
    "Teacher",
    "TransformersTeacher",
    "VLLMEngineTeacher",
    "VLLMServerTeacher",
    "make_teacher",
    "validate_requests",
]

SCHEMES = ("hf", "vllm", "vllm-engine")


def make_teacher(spec: str, **options: Any) -> Teacher:
    """Build a teacher from a spec (forwards to the registry, `opd_gym.specs.make_teacher`).

    - "hf:/path/to/model": a local transformers folder (e.g. dtype="bfloat16", chunk_rows=128);
    - "vllm:http://127.0.0.1:8000": a running vLLM server (e.g. max_in_flight=8, timeout=60);
    - "vllm-engine:/path/to/model": an in-process vllm.LLM (e.g. max_logprobs=50,
      enforce_eager=True).
    """
    from opd_gym.specs import make_teacher as build

    return build(spec, **options)


_LAZY = {
    "TransformersTeacher": "opd_gym.opd.teachers.transformers",
    "VLLMServerTeacher": "opd_gym.opd.teachers.vllm_server",
    "VLLMEngineTeacher": "opd_gym.opd.teachers.vllm_engine",
}


def __getattr__(name: str) -> Any:
    """Import the heavy teachers lazily, so the core package needs neither torch nor vLLM."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
