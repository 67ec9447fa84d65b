"""The ONE registry of spec strings: teachers, judges, policies, sandboxes and tokenizers.

A spec is a name ("tiny", "rule", "demo", "docker") or SCHEME:TARGET ("hf:/models/x",
"vllm:http://127.0.0.1:8000", "openai:http://host/v1", "replay:run/trajectories.jsonl").
Every spec string is parsed and checked here (an unknown one is a ConfigError listing the
known ones), and the local models, tokenizers and sandboxes a spec names are resolved here.
This module sits with the parts (models, sandboxes) and imports nothing above them: the
objects of the layers above are built where they live, from the parsed spec:
`opd_gym.opd.teachers.make_teacher`, `opd_gym.opd.judges.make_judge`,
`opd_gym.agents.policies.make_policy`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from opd_gym.errors import ConfigError

# kind -> (names without a target, schemes that need one); the help text of every kind
# (CLI, errors) is derived from these tables.
KINDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "teacher": (("auto", "tiny", "smollm2"), ("hf", "vllm", "vllm-engine")),
    "judge": (("rule", "none"), ("openai", "vllm")),
    "policy": (("demo", "reference", "tiny", "smollm2"), ("hf", "openai", "vllm", "replay")),
    "sandbox": (("auto", "docker", "bwrap", "local"), ()),
    "tokenizer": (("tiny", "smollm2"), ("hf",)),
}
TARGETS = {"hf": "PATH", "vllm-engine": "PATH", "vllm": "URL", "openai": "URL",
           "replay": "FILE"}
MODEL_NAMES = ("tiny", "smollm2")  # local models built or fetched on first use


def known(kind: str) -> str:
    """The specs of `kind` for help texts and errors, e.g. "rule | none | openai:URL"."""
    names, schemes = KINDS[kind]
    return " | ".join([*names, *(f"{s}:{TARGETS[s]}" for s in schemes)])


@dataclass(frozen=True)
class Spec:
    """A parsed spec string: its kind, scheme (or name) and target ("" for a plain name)."""

    kind: str
    scheme: str
    target: str = ""

    def __str__(self) -> str:
        return f"{self.scheme}:{self.target}" if self.target else self.scheme


def parse(kind: str, spec: str) -> Spec:
    """Split and check a spec string of `kind`; ConfigError naming the known specs if unknown."""
    if kind not in KINDS:
        raise ConfigError(f"unknown spec kind {kind!r}; known: {sorted(KINDS)}")
    names, schemes = KINDS[kind]
    if not isinstance(spec, str):
        raise ConfigError(f"a {kind} spec must be a string, got {type(spec).__name__}; "
                          f"use one of: {known(kind)}")
    if spec in names:
        return Spec(kind, spec)
    scheme, sep, target = spec.partition(":")
    if sep and scheme in schemes:
        if not target:
            raise ConfigError(f"the {kind} spec {spec!r} has no {TARGETS[scheme]} after "
                              f"'{scheme}:'")
        return Spec(kind, scheme, target)
    if sep and schemes:
        raise ConfigError(f"unknown {kind} scheme {scheme!r} in the spec {spec!r}; use one "
                          f"of: {known(kind)}")
    form = " (a SCHEME:TARGET spec, e.g. hf:/models/x, or a name)" if schemes else ""
    raise ConfigError(f"unknown {kind} spec {spec!r}; use one of: {known(kind)}{form}")


def check(kind: str, spec: Any) -> None:
    """Refuse a malformed spec string at construction time (objects and mappings pass)."""
    if isinstance(spec, str):
        parse(kind, spec)
    elif isinstance(spec, Mapping) and kind == "teacher":
        if "spec" not in spec:
            raise ConfigError("a teacher mapping needs a 'spec' key, e.g. "
                              "{'spec': 'hf:/models/x', 'dtype': 'float32'}")
        parse(kind, spec["spec"])


# -- local models ----------------------------------------------------------------------------
def model_path(spec: str) -> str:
    """The local folder of "tiny" (built once), "smollm2" (fetched and converted once) or
    "hf:PATH"; a ModelError if SmolLM2 cannot be had."""
    if spec == "tiny":
        from opd_gym.models.tiny import ensure_tiny_model

        return str(ensure_tiny_model())
    if spec == "smollm2":
        from opd_gym.models.smollm2 import ensure_smollm2

        return str(ensure_smollm2())
    parsed = parse("tokenizer", spec)
    return parsed.target


def resolve_model(spec: Any) -> Any:
    """"tiny" / "smollm2" (also as a mapping's "spec") -> "hf:PATH"; "auto" -> SmolLM2 when it
    can be had, else tiny; anything else unchanged."""
    if isinstance(spec, Mapping):
        return {**spec, "spec": resolve_model(spec.get("spec"))} if "spec" in spec else spec
    if spec == "auto":
        spec = auto_teacher()
    if spec in MODEL_NAMES:
        return f"hf:{model_path(spec)}"
    return spec


def auto_teacher() -> str:
    """What the "auto" teacher is here: "smollm2" when it can be had (fetched and converted
    once), else "tiny" (a notice says why)."""
    from opd_gym.models.smollm2 import default_teacher

    return "tiny" if default_teacher() == "tiny" else "smollm2"


def local_model(spec: Any) -> str | None:
    """The local model folder a teacher/policy spec runs (None for servers and objects)."""
    if isinstance(spec, Mapping):
        spec = spec.get("spec")
    if not isinstance(spec, str):
        return None
    spec = resolve_model(spec)
    scheme, _, target = spec.partition(":")
    return target if scheme in ("hf", "vllm-engine") and target else None


def tokenizer(spec: Any) -> Any:
    """A tokenizer: None, a tokenizer object, "tiny", "smollm2", "hf:PATH" or a model folder."""
    from opd_gym.models.tokenizer import load_tokenizer

    if spec is None or not isinstance(spec, str):
        return load_tokenizer(spec)
    if spec in MODEL_NAMES or spec.startswith("hf:"):
        return load_tokenizer(model_path(spec))
    return load_tokenizer(spec)


def policy_tokenizer(spec: str) -> str | None:
    """The tokenizer spec of a policy whose tokens are sampled here ("tiny", "smollm2",
    "hf:PATH"), or replayed (the recorded run's policy); None for scripted policies (text
    only: the teacher tokenizes it) and served ones (their client learns it from the server)."""
    parsed = parse("policy", spec)
    if parsed.scheme in MODEL_NAMES:
        return parsed.scheme
    if parsed.scheme == "replay":  # the recorded run's policy, from its config.json
        import json
        from pathlib import Path

        config = Path(parsed.target).parent / "config.json"
        try:
            recorded = json.loads(config.read_text()).get("policy")
        except (OSError, ValueError, AttributeError):
            return None
        return policy_tokenizer(recorded) if isinstance(recorded, str) and \
            not recorded.startswith("replay:") else None
    return str(parsed) if parsed.scheme == "hf" else None


def validate(role: str, spec: Any) -> None:
    """Fail in one line naming `role` when a spec points at nothing: an hf:/vllm-engine: PATH
    without a model folder, or a vllm:/openai: URL that does not answer. Names and objects
    pass (they are built or were given)."""
    if isinstance(spec, Mapping):
        spec = spec.get("spec")
    if not isinstance(spec, str):
        return
    kind = "policy" if role == "policy" else ("judge" if role == "judge" else "teacher")
    parsed = parse(kind, spec)
    if parsed.scheme in ("hf", "vllm-engine"):
        import os

        path = os.path.expanduser(parsed.target)
        if not os.path.isfile(os.path.join(path, "config.json")):
            what = "no such folder" if not os.path.isdir(path) else "a folder without config.json"
            raise ConfigError(f"the {role} {spec!r}: {what}; give the path of a transformers "
                              "model folder (config.json, weights, tokenizer), or a name "
                              f"({', '.join(MODEL_NAMES)})")
    elif parsed.scheme in ("vllm", "openai"):
        from opd_gym.errors import ModelError
        from opd_gym.models.client import ModelClient

        url = parsed.target
        root = parsed.scheme == "openai"
        try:
            with ModelClient(url, timeout=10.0, retries=0, api_root=root) as client:
                client.models()
        except ModelError as exc:
            raise ConfigError(f"the {role} server {url} does not answer ({exc}); start it, or "
                              f"fix the {role} URL") from None


# -- teachers --------------------------------------------------------------------------------
TEACHER_OPTIONS_APPLY = ("tiny", "smollm2", "auto", "hf", "vllm-engine")
MODEL_OPTIONS = ("dtype", "device", "max_model_len")  # how a model is loaded, not served


def resolve_teacher(spec: Any, options: Mapping[str, Any]) -> tuple[Spec, dict[str, Any]]:
    """A teacher spec (a string or a mapping {"spec": ..., **options}) and options, resolved in
    one pass: the mapping's options merged under `options`, the options checked against the
    scheme, and a name ("auto", "tiny", "smollm2") turned into the hf: spec of its folder.
    What comes back always has a scheme the teacher builders know (hf, vllm, vllm-engine)."""
    merged = dict(options)
    if isinstance(spec, Mapping):
        if "spec" not in spec:
            raise ConfigError("a teacher mapping needs a 'spec' key, e.g. "
                              "{'spec': 'hf:/models/x', 'dtype': 'float32'}")
        merged = {**{k: v for k, v in spec.items() if k != "spec"}, **merged}
        spec = spec["spec"]
    check_teacher_options(spec, merged)
    parsed = parse("teacher", spec)
    if parsed.scheme in ("auto", *MODEL_NAMES):
        parsed = parse("teacher", resolve_model(parsed.scheme))
    return parsed, merged


def check_teacher_options(spec: Any, options: Mapping[str, Any]) -> None:
    """Model options (dtype, device, max_model_len) apply where the model is loaded here;
    client options of a vllm: teacher (max_in_flight, timeout, ...) pass."""
    model_options = [name for name in options if name in MODEL_OPTIONS]
    if not model_options or not isinstance(spec, str):
        return
    scheme = parse("teacher", spec).scheme
    if scheme not in TEACHER_OPTIONS_APPLY:
        name = model_options[0]
        raise ConfigError(f"the teacher option {name!r} applies to hf: and vllm-engine: "
                          f"teachers; a {scheme}: server sets it when it is started")


# -- sandboxes -------------------------------------------------------------------------------
def sandbox_backend(spec: Any = "auto") -> str:
    """The backend a sandbox spec means here ("auto": docker, else bwrap, else local)."""
    from opd_gym.sandboxes.factory import resolve_backend

    if isinstance(spec, str):
        parse("sandbox", spec)
    return resolve_backend(spec)


def make_sandbox_factory(spec: Any = "docker") -> Callable[[], Any]:
    """A zero-argument callable making unstarted sandboxes (see `sandboxes.sandbox_factory`)."""
    from opd_gym.sandboxes.factory import sandbox_factory

    if isinstance(spec, str):
        parse("sandbox", spec)
    return sandbox_factory(spec)


def make_pool(spec: Any = "docker", size: int = 2, **kwargs: Any) -> Any:
    """A warm pool of sandboxes of backend `spec` (a name or {"backend": name, **options})."""
    from opd_gym.sandboxes.factory import make_pool as build

    if isinstance(spec, str):
        parse("sandbox", spec)
    return build(spec, size=size, **kwargs)


__all__ = [
    "KINDS",
    "Spec",
    "auto_teacher",
    "check",
    "known",
    "local_model",
    "check_teacher_options",
    "make_pool",
    "make_sandbox_factory",
    "model_path",
    "parse",
    "policy_tokenizer",
    "resolve_model",
    "validate",
    "sandbox_backend",
    "tokenizer",
]
