"""Teachers score the student's sampled tokens; `make_teacher` builds one from a spec (string,
mapping or object), the one place teachers are built."""

from __future__ import annotations

from collections.abc import Mapping
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


def make_teacher(spec: Any, **options: Any) -> Teacher:
    """A teacher from a spec string, a mapping {"spec": ..., **options}, or a Teacher object
    (passed through unchanged; options then need a spec).

    - "tiny" (a locally built demo model), "smollm2" (the real small model from PyPI),
      "auto" (SmolLM2 when it can be had, else tiny);
    - "hf:/path/to/model": a local transformers folder (e.g. dtype="bfloat16", chunk_rows=128);
    - "vllm:http://127.0.0.1:8000": a running vLLM server (e.g. max_in_flight=8, timeout=60);
    - "vllm-engine:/path/to/model": an in-process vllm.LLM (e.g. max_logprobs=50,
      enforce_eager=True).
    """
    from opd_gym import specs
    from opd_gym.errors import ConfigError

    if hasattr(spec, "score") and hasattr(spec, "tokenizer"):  # a built teacher
        if options:
            raise ConfigError(f"teacher options {sorted(options)} need a spec, not a teacher "
                              "object (build the object with them)")
        return spec
    if isinstance(spec, Mapping):
        merged = dict(spec)
        target = merged.pop("spec", None)
        if target is None:
            specs.check("teacher", spec)
        return make_teacher(target, **{**merged, **options})
    specs.check_teacher_options(spec, options)
    parsed = specs.parse("teacher", spec)
    if parsed.scheme in ("auto", *specs.MODEL_NAMES):
        return make_teacher(specs.resolve_model(spec), **options)
    if parsed.scheme == "hf":
        from opd_gym.opd.teachers.transformers import TransformersTeacher

        return TransformersTeacher(parsed.target, **options)
    if parsed.scheme == "vllm":
        from opd_gym.opd.teachers.vllm_server import VLLMServerTeacher

        return VLLMServerTeacher(parsed.target, **options)
    from opd_gym.opd.teachers.vllm_engine import VLLMEngineTeacher

    return VLLMEngineTeacher(parsed.target, **options)


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
