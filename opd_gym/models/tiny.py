"""Build a tiny seeded tool-aware causal LM locally, loadable by transformers and by vLLM.

No weights can be downloaded on the machines this project runs on, so tests and benchmarks
build their own model: a standard Llama architecture with seeded random fp32 weights and a
byte-level BPE tokenizer trained on local text, saved with ``save_pretrained``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from opd_gym.errors import ConfigError
from opd_gym.models.corpus import default_corpus
from opd_gym.models.template import (
    CHAT_TEMPLATE,
    CONTROL_TOKENS,
    END_OF_TEXT,
    IM_END,
    MARKUP_TOKENS,
)

# Bump when the build recipe changes, so cached folders from older recipes are rebuilt.
BUILD_VERSION = 1
MARKER = "opd_gym_tiny.json"
_REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def build_params(
    *,
    seed: int = 0,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 2,
    vocab_size: int = 2048,
    max_position_embeddings: int = 4096,
    corpus: str | None = None,
) -> dict[str, object]:
    """The canonical parameter dict of a build; its hash names and validates cached folders."""
    text = default_corpus() if corpus is None else corpus
    return {
        "build_version": BUILD_VERSION,
        "seed": seed,
        "hidden_size": hidden_size,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "vocab_size": vocab_size,
        "max_position_embeddings": max_position_embeddings,
        "corpus_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
    }


def params_hash(params: dict[str, object]) -> str:
    """A short stable hash of build parameters, used in cache folder names."""
    blob = json.dumps(params, sort_keys=True).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:12]


def default_model_dir(**params: object) -> Path:
    """Per-user cache folder for a tiny model built with `params` (same keywords as the builder)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "opd_gym" / f"tiny-{params_hash(build_params(**params))}"


def is_complete(path: str | os.PathLike[str], params: dict[str, object]) -> bool:
    """True when `path` holds a finished build made with exactly `params`."""
    folder = Path(path)
    marker = folder / MARKER
    if not marker.is_file() or not all((folder / f).is_file() for f in _REQUIRED_FILES):
        return False
    try:
        return json.loads(marker.read_text(encoding="utf-8")) == params
    except (OSError, ValueError):
        return False


def build_tiny_model(
    path: str | os.PathLike[str],
    *,
    seed: int = 0,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 2,
    vocab_size: int = 2048,
    max_position_embeddings: int = 4096,
    corpus: str | None = None,
) -> Path:
    """Build (or reuse a cached) tiny Llama + BPE tokenizer + chat template at `path`; return it.

    head_dim = hidden_size // num_heads must be a multiple of 8 and at least 32 (vLLM's CPU
    attention rejects 16; 64 is known to work).
    """
    if hidden_size % num_heads:
        raise ConfigError(f"hidden_size {hidden_size} is not divisible by num_heads {num_heads}")
    head_dim = hidden_size // num_heads
    if head_dim < 32 or head_dim % 8:
        raise ConfigError(f"head_dim {head_dim} unsupported: use a multiple of 8, at least 32 (64)")
    min_vocab = 256 + len(CONTROL_TOKENS) + len(MARKUP_TOKENS)
    if vocab_size < min_vocab:
        raise ConfigError(f"vocab_size {vocab_size} too small: need at least {min_vocab}")
    text = default_corpus() if corpus is None else corpus
    params = build_params(
        seed=seed,
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads,
        vocab_size=vocab_size,
        max_position_embeddings=max_position_embeddings,
        corpus=text,
    )
    target = Path(path)
    if is_complete(target, params):
        return target
    if target.exists() and any(target.iterdir()) and not (target / MARKER).exists():
        raise FileExistsError(f"{target} is not empty and holds no opd_gym tiny model; "
                              "refusing to overwrite it")

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        tokenizer = _build_tokenizer(text, vocab_size, max_position_embeddings)
        tokenizer.save_pretrained(staging)
        model = _build_model(params, tokenizer)
        model.save_pretrained(staging, safe_serialization=True)
        (staging / MARKER).write_text(json.dumps(params, sort_keys=True, indent=1), "utf-8")
        if is_complete(target, params):  # another process finished first
            return target
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def ensure_tiny_model(**params: object) -> Path:
    """Return the default tiny model folder for `params`, building it on first use."""
    return build_tiny_model(default_model_dir(**params), **params)  # type: ignore[arg-type]


def _build_tokenizer(text: str, vocab_size: int, max_length: int):
    """Train a byte-level BPE on `text` and wrap it as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = [*CONTROL_TOKENS, *MARKUP_TOKENS]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(text.splitlines(keepends=True), trainer=trainer)

    # The trainer marks every reserved token special; markup tokens must stay visible text.
    spec = json.loads(tok.to_str())
    for added in spec["added_tokens"]:
        added["special"] = added["content"] in CONTROL_TOKENS
    tok = Tokenizer.from_str(json.dumps(spec))

    # Small corpora cannot fill a large vocabulary: pad with reserved control tokens so that
    # every id the model can emit decodes to something.
    missing = vocab_size - tok.get_vocab_size(with_added_tokens=True)
    if missing > 0:
        from tokenizers import AddedToken

        start = tok.get_vocab_size(with_added_tokens=True)
        tok.add_special_tokens(
            [AddedToken(f"<|reserved_{start + i}|>", special=True, normalized=False)
             for i in range(missing)]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        chat_template=CHAT_TEMPLATE,
        model_max_length=max_length,
        clean_up_tokenization_spaces=False,
    )


def _build_model(params: dict[str, object], tokenizer):
    """A seeded, randomly initialised fp32 Llama whose special ids match `tokenizer`."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    hidden = int(params["hidden_size"])  # type: ignore[arg-type]
    heads = int(params["num_heads"])  # type: ignore[arg-type]
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    pad_id = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    config = LlamaConfig(
        vocab_size=int(params["vocab_size"]),  # type: ignore[arg-type]
        hidden_size=hidden,
        intermediate_size=((8 * hidden // 3 + 63) // 64) * 64,
        num_hidden_layers=int(params["num_layers"]),  # type: ignore[arg-type]
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=hidden // heads,
        max_position_embeddings=int(params["max_position_embeddings"]),  # type: ignore[arg-type]
        rms_norm_eps=1e-6,
        initializer_range=0.02,
        tie_word_embeddings=False,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    with torch.random.fork_rng(devices=[]):  # seed locally, leave the caller's RNG untouched
        torch.manual_seed(int(params["seed"]))  # type: ignore[arg-type]
        model = LlamaForCausalLM(config).to(torch.float32).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=pad_id, eos_token_id=[eos_id, pad_id], pad_token_id=pad_id
    )
    return model
