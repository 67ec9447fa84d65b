"""Model dtypes: default to the checkpoint's own dtype, never silently to a lower precision.

vLLM's `dtype="auto"` turns an fp32 checkpoint into bf16 (0.27 nats off on the empty-hint
control of a real model); transformers' default loads fp32. Every teacher and policy of this
package resolves `dtype=None`/"auto"/"checkpoint" to the dtype the checkpoint was saved in.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from opd_gym.errors import ConfigError

DTYPES = ("float32", "bfloat16", "float16", "float64")
DEFAULTS = (None, "auto", "checkpoint")
_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16",
            "float": "float32", "fp64": "float64", "double": "float64"}


def checkpoint_dtype(model_dir: str | os.PathLike[str]) -> str | None:
    """The dtype in a model folder's config.json (`dtype` or `torch_dtype`).

    float32 when the config names none (transformers' convention); None when there is no
    readable local config (e.g. a hub name: the backend then decides).
    """
    path = Path(model_dir) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for holder in (config, config.get("text_config") or {}):
        value = holder.get("dtype") or holder.get("torch_dtype")
        if isinstance(value, str):
            return normalize_dtype(value.removeprefix("torch."))
    return "float32"


def normalize_dtype(dtype: str) -> str:
    """A canonical dtype name ("float32", "bfloat16", "float16", "float64")."""
    name = _ALIASES.get(dtype, dtype)
    if name not in DTYPES:
        raise ConfigError(f"dtype must be one of {DTYPES} or 'auto' (the checkpoint's), "
                         f"got {dtype!r}")
    return name


def resolve_dtype(dtype: str | None, model_dir: str | os.PathLike[str] | None) -> str:
    """`dtype` by name, or the checkpoint's dtype for None/"auto"/"checkpoint".

    "auto" comes back only when the checkpoint's dtype cannot be read locally.
    """
    if dtype in DEFAULTS:
        found = checkpoint_dtype(model_dir) if model_dir is not None else None
        return found or "auto"
    return normalize_dtype(str(dtype))
