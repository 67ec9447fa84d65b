"""The shared model client against a real local HTTP server (an OpenAI-compatible stand-in
that fails on demand: 503s, 429s, slow answers, garbage; a healthy server does not produce
those faults when asked, so this small server plays one)."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from opd_gym.errors import ConfigError, ModelError
from opd_gym.models.client import ModelClient, ModelRejected, ModelUnavailable, split_base_url

MODELS = {"object": "list", "data": [{"id": "tiny", "root": "/models/tiny"},
                                     {"id": "other", "root": "/models/other"}]}


class Server:
    """A threaded HTTP server answering from `plan`: a list of (status, body, delay) for the
    first requests, then `default`; every request is recorded."""

    def __init__(self, plan=(), default=(200, None, 0.0)):
        self.plan = list(plan)
        self.default = default
        self.requests: list[tuple[str, str, dict | None]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, method):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                server.requests.append((method, self.path, body))
                status, reply, delay = server.plan.pop(0) if server.plan else server.default
                time.sleep(delay)
                if reply is None:
                    reply = MODELS if self.path.endswith("/models") else {"echo": body}
                data = reply if isinstance(reply, str) else json.dumps(reply)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data.encode())))
                self.end_headers()
                self.wfile.write(data.encode())

            def do_GET(self):  # noqa: N802
                self._answer("GET")

            def do_POST(self):  # noqa: N802
                self._answer("POST")

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server_factory():
    servers = []

    def make(*args, **kwargs):
        servers.append(Server(*args, **kwargs))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def test_urls_of_a_vllm_server_and_of_an_openai_api_root():
    assert split_base_url("http://h:8000") == ("http://h:8000", "http://h:8000/v1")
    assert split_base_url("http://h:8000/v1/") == ("http://h:8000", "http://h:8000/v1")
    assert split_base_url("http://h/openai/v1", api_root=True) == ("http://h/openai",
                                                                    "http://h/openai/v1")
    assert split_base_url("http://h/api", api_root=True) == ("http://h/api", "http://h/api")


def test_5xx_and_429_are_retried_with_backoff_until_an_answer(server_factory):
    server = server_factory([(503, "busy", 0.0), (429, "slow down", 0.0)])
    with ModelClient(server.url, retries=2, backoff=0.05) as client:
        started = time.monotonic()
        answer = client.call("POST", "completions", {"prompt": [1, 2]})
        waited = time.monotonic() - started
    assert answer == {"echo": {"prompt": [1, 2]}}
    assert [path for _, path, _ in server.requests] == ["/v1/completions"] * 3
    assert waited >= 0.05 + 0.1  # backoff 0.05 then 0.1 seconds


def test_retries_run_out_with_a_clear_model_error(server_factory):
    server = server_factory(default=(503, "still busy", 0.0))
    with ModelClient(server.url, retries=2, backoff=0.01) as client, \
            pytest.raises(ModelUnavailable, match=r"after 3 attempt\(s\).*HTTP 503"):
        client.call("GET", "/health")
    assert len(server.requests) == 3


def test_4xx_is_refused_at_once_with_the_servers_message(server_factory):
    server = server_factory([(400, {"error": {"message": "prompt too long"}}, 0.0)])
    with ModelClient(server.url, retries=3, backoff=0.01) as client, \
            pytest.raises(ModelRejected, match="prompt too long") as caught:
        client.call("POST", "completions", {})
    assert caught.value.status == 400 and len(server.requests) == 1
    assert isinstance(caught.value, ModelError) and isinstance(caught.value, ValueError)


def test_a_timeout_fires_and_is_retried(server_factory):
    server = server_factory(default=(200, {"ok": 1}, 1.5))
    with ModelClient(server.url, timeout=0.2, retries=1, backoff=0.01) as client:
        started = time.monotonic()
        with pytest.raises(ModelUnavailable, match="Timeout"):
            client.call("GET", "models")
        assert time.monotonic() - started < 1.4
    assert len(server.requests) == 2


def test_connection_refused_is_retried_then_named():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once the block ends
    with ModelClient(f"http://127.0.0.1:{port}", retries=1, backoff=0.01) as client, \
            pytest.raises(ModelUnavailable, match="ConnectError"):
        client.served_model()


def test_malformed_json_is_a_model_error(server_factory):
    server = server_factory(default=(200, "<html>not json</html>", 0.0))
    with ModelClient(server.url, retries=0) as client, \
            pytest.raises(ModelUnavailable, match="malformed JSON"):
        client.call("GET", "models")


def test_model_discovery_asks_once_and_finds_by_name(server_factory):
    server = server_factory()
    with ModelClient(f"{server.url}/v1", retries=0) as client:
        assert client.model_id() == "tiny"
        assert client.served_model("other")["root"] == "/models/other"
        assert client.model_id("named") == "named"
        with pytest.raises(ConfigError, match=r"does not serve 'nope'.*\['tiny', 'other'\]"):
            client.served_model("nope")
    assert [path for _, path, _ in server.requests] == ["/v1/models"]  # discovered once


def test_an_empty_model_list_is_refused(server_factory):
    server = server_factory(default=(200, {"data": []}, 0.0))
    with ModelClient(server.url, retries=0) as client, \
            pytest.raises(ModelUnavailable, match="serves no model"):
        client.model_id()


def test_close_aborts_a_backoff_wait(server_factory):
    server = server_factory(default=(503, "down", 0.0))
    client = ModelClient(server.url, retries=3, backoff=5.0)
    timer = threading.Timer(0.3, client.close)
    timer.start()
    started = time.monotonic()
    with pytest.raises(ModelUnavailable):
        client.call("GET", "models")
    assert time.monotonic() - started < 3.0  # not 5 + 10 + 20 seconds of backoff
    timer.join()


def test_bad_client_settings_are_refused():
    with pytest.raises(ConfigError, match="retries >= 0"):
        ModelClient("http://127.0.0.1:9", retries=-1)
    with pytest.raises(ConfigError, match="timeout > 0"):
        ModelClient("http://127.0.0.1:9", timeout=0)
