"""Teachers score the student's sampled tokens; `make_teacher` builds one from a spec (string,
mapping or object), the one place teachers are built."""

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

# scheme -> the teacher class that serves it (module, name): the one table teachers are built
# from, imported only when used (torch and vLLM are extras)
BUILDERS: dict[str, tuple[str, str]] = {
    "hf": ("opd_gym.opd.teachers.transformers", "TransformersTeacher"),
    "vllm": ("opd_gym.opd.teachers.vllm_server", "VLLMServerTeacher"),
    "vllm-engine": ("opd_gym.opd.teachers.vllm_engine", "VLLMEngineTeacher"),
}
_LAZY = {name: module for module, name in BUILDERS.values()}


def make_teacher(spec: Any, **options: Any) -> Teacher:
    """A teacher from a spec string, a mapping {"spec": ..., **options}, or a Teacher object
    (passed through unchanged; options then need a spec).

    - "tiny" (a locally built demo model), "smollm2" (the real small model from PyPI),
      "auto" (SmolLM2 when it can be had, else tiny);
    - "hf:/path/to/model": a local transformers folder (e.g. dtype="bfloat16", chunk_rows=128);
    - "vllm:http://127.0.0.1:8000": a running vLLM server (e.g. max_in_flight=8, timeout=60);
    - "vllm-engine:/path/to/model": an in-process vllm.LLM (e.g. max_logprobs=50,
      enforce_eager=True).

    The spec is resolved once (`specs.resolve_teacher`), then built from `BUILDERS`.
    """
    import importlib

    from opd_gym import specs
    from opd_gym.errors import ConfigError

    if hasattr(spec, "score") and hasattr(spec, "tokenizer"):  # a built teacher
        if options:
            raise ConfigError(f"teacher options {sorted(options)} need a spec, not a teacher "
                              "object (build the object with them)")
        return spec
    parsed, merged = specs.resolve_teacher(spec, options)
    module, name = BUILDERS[parsed.scheme]
    return getattr(importlib.import_module(module), name)(parsed.target, **merged)


def __getattr__(name: str) -> Any:
    """Import the heavy teachers lazily, so the core package needs neither torch nor vLLM."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
