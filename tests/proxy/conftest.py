"""Recording-proxy fixtures: one real loopback proxy in front of the tiny in-process model."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def hf_proxy(tiny_model, tiny_tokenizer):
    """A RecordingProxy (real uvicorn on 127.0.0.1) over the shared tiny transformers model."""
    from opd_gym.proxy import RecordingProxy, TransformersBackend

    backend = TransformersBackend(tiny_model, tokenizer=tiny_tokenizer, model_name="tiny",
                                  max_tokens=16)
    with RecordingProxy(backend) as proxy:
        yield proxy


@pytest.fixture
def client_for():
    """`client_for(base_url, **kw)`: an official OpenAI client (closed after the test)."""
    from openai import OpenAI

    made = []

    def make(base_url: str, **kwargs):
        made.append(OpenAI(base_url=base_url, api_key="unused", max_retries=0, **kwargs))
        return made[-1]

    yield make
    for client in made:
        client.close()
