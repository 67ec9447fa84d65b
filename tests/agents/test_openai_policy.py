"""The OpenAI chat policy and the LLM judge on the shared model client: a real local HTTP
server stands in for an OpenAI-compatible endpoint that fails on demand (503s, then an
answer; a healthy server does not fail when asked)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from opd_gym.agents.policies import OpenAIChatPolicy
from opd_gym.errors import ModelError
from opd_gym.opd.judges import JudgeInput, LLMJudge


class FlakyServer:
    """Answers /v1/models and /v1/chat/completions; the first `failures` requests get 503."""

    def __init__(self, failures: int, contents: list[str]):
        self.failures = failures
        self.paths: list[str] = []
        self.bodies: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, status: int, data: dict | str) -> None:
                text = data if isinstance(data, str) else json.dumps(data)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(text.encode())))
                self.end_headers()
                self.wfile.write(text.encode())

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    server.bodies.append(json.loads(self.rfile.read(length)))
                server.paths.append(self.path)
                if server.failures > 0:
                    server.failures -= 1
                    return self._reply(503, "overloaded")
                if self.path == "/v1/models":
                    return self._reply(200, {"data": [{"id": "served-model"}]})
                n = (server.bodies[-1] or {}).get("n", 1)
                return self._reply(200, {"choices": [
                    {"index": i, "message": {"role": "assistant", "content": c,
                                             "tool_calls": []}}
                    for i, c in enumerate(contents[:n])]})

            do_GET = do_POST = _serve  # noqa: N815

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def flaky():
    servers: list[FlakyServer] = []

    def make(failures: int, contents: list[str]) -> FlakyServer:
        servers.append(FlakyServer(failures, contents))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


INFO = {"messages": [{"role": "user", "content": "fix it"}], "tools": []}


def test_chat_policy_retries_503s_and_discovers_the_model(flaky):
    server = flaky(2, ["I will run the tests."])
    policy = OpenAIChatPolicy(server.url, retries=2, backoff=0.01, seed=3)
    try:
        message = policy.act("", INFO)
    finally:
        policy.close()
    assert message["content"] == "I will run the tests."
    # two 503s on discovery, then the model list, then the chat request
    assert server.paths == ["/v1/models"] * 3 + ["/v1/chat/completions"]
    assert server.bodies[-1]["model"] == "served-model" and "seed" in server.bodies[-1]


def test_chat_policy_gives_up_with_a_model_error(flaky):
    server = flaky(10, [])
    policy = OpenAIChatPolicy(server.url, model="m", retries=1, backoff=0.01)
    try:
        with pytest.raises(ModelError, match=r"after 2 attempt\(s\).*HTTP 503"):
            policy.act("", INFO)
    finally:
        policy.close()


def test_llm_judge_discovers_its_model_and_retries(flaky):
    server = flaky(1, ["\\boxed{1} [HINT_START]Read the traceback first.[HINT_END]"] * 3)
    judge = LLMJudge(server.url, votes=3, retries=1, backoff=0.01)
    try:
        verdict = judge(JudgeInput(index=0, task="t", text="x"), "IndexError")
    finally:
        judge.close()
    assert verdict.hint == "Read the traceback first." and verdict.error is None
    assert judge.model == "served-model"
    assert server.paths == ["/v1/models", "/v1/models", "/v1/chat/completions"]
