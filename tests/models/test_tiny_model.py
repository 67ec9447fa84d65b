"""The locally built tiny model: loadable, tool-aware chat template, deterministic, cached."""

from __future__ import annotations

import hashlib
import json

import pytest

from opd_gym.models import build_tiny_model, default_model_dir, ensure_tiny_model
from opd_gym.models.template import CONTROL_TOKENS, MARKUP_TOKENS

TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "m", seed=0)


def _digests(path):
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(path.iterdir()) if f.is_file()}


def test_loads_with_from_pretrained(built):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built)
    model = AutoModelForCausalLM.from_pretrained(built)
    assert model.config.architectures == ["LlamaForCausalLM"]
    assert model.dtype == torch.float32
    assert model.config.hidden_size // model.config.num_attention_heads == 64
    assert len(tok) == model.config.vocab_size == 2048
    assert model.config.eos_token_id == tok.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    with torch.no_grad():
        logits = model(torch.tensor([tok.encode("def total(values):")])).logits
    assert logits.shape[-1] == 2048 and torch.isfinite(logits).all()


def test_special_and_markup_tokens_are_single_ids(built):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built)
    for token in (*CONTROL_TOKENS, *MARKUP_TOKENS):
        assert tok.encode(token) == [tok.convert_tokens_to_ids(token)], token
    text = '<tool_call>\n{"name": "x"}\n</tool_call><|im_end|>'
    # Markup survives skip_special_tokens (servers decode that way); control tokens do not.
    assert tok.decode(tok.encode(text), skip_special_tokens=True) == text[: -len("<|im_end|>")]
    assert tok.decode(tok.encode(text)) == text


def test_chat_template_renders_tools_calls_and_results(built):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Show main.py"},
        {"role": "assistant", "content": "Reading it.", "tool_calls": [
            {"type": "function", "function": {"name": "read_file",
                                              "arguments": {"path": "main.py"}}}]},
        {"role": "tool", "content": "print(1)"},
        {"role": "tool", "content": "second result"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "read_file",
                                              "arguments": '{"path": "b.py"}'}}]},
        {"role": "tool", "content": "x = 2"},
    ]
    text = tok.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True,
                                   tokenize=False)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert "<tools>\n" + json.dumps(TOOLS[0], ensure_ascii=False) + "\n</tools>" in text
    assert ('<|im_start|>assistant\nReading it.\n<tool_call>\n{"name": "read_file", '
            '"arguments": {"path": "main.py"}}\n</tool_call><|im_end|>\n') in text
    assert ("<|im_start|>user\n<tool_response>\nprint(1)\n</tool_response>\n<tool_response>\n"
            "second result\n</tool_response><|im_end|>\n") in text
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "read_file", "arguments": '
            '{"path": "b.py"}}\n</tool_call><|im_end|>\n') in text
    assert text.endswith("<tool_response>\nx = 2\n</tool_response><|im_end|>\n"
                         "<|im_start|>assistant\n")
    plain = tok.apply_chat_template(messages[1:2], add_generation_prompt=False, tokenize=False)
    assert plain == "<|im_start|>user\nShow main.py<|im_end|>\n"
    ids = tok.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True,
                                  tokenize=True, return_dict=False)
    assert tok.decode(ids) == text


def test_deterministic_across_builds(tmp_path, built):
    again = build_tiny_model(tmp_path / "again", seed=0)
    assert _digests(again) == _digests(built)
    other = build_tiny_model(tmp_path / "other", seed=1)
    digests = _digests(other)
    assert digests["model.safetensors"] != _digests(built)["model.safetensors"]
    assert digests["tokenizer.json"] == _digests(built)["tokenizer.json"]


def test_cache_reuse_rebuild_and_refusal(tmp_path):
    path = build_tiny_model(tmp_path / "m", hidden_size=64, num_heads=1, vocab_size=512)
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_model(path, hidden_size=64, num_heads=1, vocab_size=512) == path
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp
    build_tiny_model(path, hidden_size=64, num_heads=1, vocab_size=640)  # new params: rebuild
    assert json.loads((path / "config.json").read_text())["vocab_size"] == 640
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        build_tiny_model(foreign)
    with pytest.raises(ValueError, match="head_dim"):
        build_tiny_model(tmp_path / "bad", hidden_size=64, num_heads=4)


def test_default_dir_and_ensure(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    small = {"hidden_size": 64, "num_heads": 1, "vocab_size": 512}
    folder = default_model_dir(**small)
    assert folder.parent == tmp_path / "opd_gym" and folder.name.startswith("tiny-")
    assert default_model_dir(**small) == folder
    assert default_model_dir(**small, seed=3) != folder
    assert ensure_tiny_model(**small) == folder
    assert (folder / "config.json").is_file()
