"""Refused calls get OpenAI-style errors (the official client raises its own error types)
and are never recorded; a model server that does not answer is a 502."""

from __future__ import annotations

import httpx
import openai
import pytest

from opd_gym.errors import ConfigError
from opd_gym.opd.teachers.vllm_launch import free_port
from opd_gym.proxy import RecordingProxy, VLLMBackend

MESSAGES = [{"role": "user", "content": "hello"}]


def _error(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and {"message", "type", "code"} <= set(body["error"])
    return body["error"]


def test_unknown_and_unnamed_episodes_are_refused(hf_proxy, client_for):
    with pytest.raises(openai.NotFoundError, match="not open"):
        client_for(hf_proxy.base_url("never-opened")).chat.completions.create(
            model="tiny", messages=MESSAGES, max_tokens=2)
    response = httpx.post(f"{hf_proxy.url}/v1/chat/completions",
                          json={"model": "tiny", "messages": MESSAGES})
    assert response.status_code == 404 and _error(response)["code"] == "episode_not_found"
    key = hf_proxy.open_episode()
    hf_proxy.close_episode(key)
    with pytest.raises(openai.NotFoundError):
        client_for(hf_proxy.base_url(key)).chat.completions.create(
            model="tiny", messages=MESSAGES, max_tokens=2)
    assert _error(httpx.get(f"{hf_proxy.url}/no/such/route"))["type"] == \
        "invalid_request_error"


@pytest.mark.parametrize("body", [
    b"{not json", b"[1, 2]", b'{"model": "tiny"}', b'{"messages": []}',
    b'{"messages": [{"content": "no role"}]}', b'{"messages": [{"role": "user"}], "n": 2}',
    b'{"messages": [{"role": "user"}], "tools": "terminal"}',
    b'{"messages": [{"role": "user"}], "stream": "yes"}',
])
def test_malformed_requests_get_400_and_are_not_recorded(hf_proxy, body):
    key = hf_proxy.open_episode()
    response = httpx.post(f"{hf_proxy.base_url(key)}/chat/completions", content=body,
                          headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert _error(response)["type"] == "invalid_request_error"
    assert hf_proxy.close_episode(key) == []


def test_url_and_header_must_agree(hf_proxy, client_for, tools):
    key = hf_proxy.open_episode()
    client = client_for(hf_proxy.base_url(key), default_headers={"X-OPD-Episode": "other"})
    with pytest.raises(openai.BadRequestError, match="header"):
        client.chat.completions.create(model="tiny", messages=MESSAGES, tools=tools)
    assert hf_proxy.close_episode(key) == []


def test_an_unreachable_model_server_is_a_502_and_not_recorded(client_for):
    # a real refused connection: nothing listens on this freshly picked port
    with RecordingProxy(VLLMBackend(f"http://127.0.0.1:{free_port()}", timeout=5)) as proxy:
        key = proxy.open_episode()
        client = client_for(proxy.base_url(key))
        with pytest.raises(openai.APIStatusError, match="did not answer") as caught:
            client.chat.completions.create(model="m", messages=MESSAGES)
        assert caught.value.status_code == 502
        with pytest.raises(openai.APIStatusError):
            client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        assert proxy.close_episode(key) == []


def test_the_proxy_serves_on_loopback_only():
    with pytest.raises(ConfigError, match="loopback"):
        RecordingProxy(VLLMBackend("http://127.0.0.1:1"), host="0.0.0.0")


def test_a_proxy_accepts_connections_from_the_moment_it_has_a_url():
    # the CLI prints the URL before it serves: a client connecting in between must wait in
    # the backlog, not be refused (a CI run once lost that race)
    import socket

    proxy = RecordingProxy(VLLMBackend("http://127.0.0.1:1", timeout=5))
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5):
            pass
    finally:
        proxy._sock.close()


def test_an_anthropic_clients_key_reaches_vllm_as_its_bearer_token():
    """Claude Code sends its key as `x-api-key`; vLLM's `--api-key` reads Authorization: the
    key is forwarded as that bearer token, a client's own Authorization and the proxy's
    `api_key` taking precedence, and nothing else of the client's headers goes upstream."""
    backend = VLLMBackend("http://127.0.0.1:9")
    sent = backend._headers({"X-Api-Key": "k1", "anthropic-version": "2023-06-01"})
    assert sent == {"authorization": "Bearer k1"}
    assert backend._headers({"x-api-key": "k1", "Authorization": "Bearer k2"}) == {
        "authorization": "Bearer k2"}
    assert VLLMBackend("http://127.0.0.1:9", api_key="k3")._headers({"x-api-key": "k1"}) == {
        "authorization": "Bearer k3"}
