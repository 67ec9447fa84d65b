"""Faults: a server killed mid-episode, a top-K above the server's cap, a slow server."""

from __future__ import annotations

import json
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gymnasium as gym
import numpy as np
import pytest

import opd_gym  # noqa: F401  (registers the env)
from opd_gym.opd.teachers import ScoreRequest
from opd_gym.opd.teachers.vllm_server import (
    LogprobCapError,
    ServerUnavailable,
    VLLMServerTeacher,
)
from opd_gym.opd.wrapper import OPDWrapper
from opd_gym.tools.parsing import format_tool_call

pytestmark = [pytest.mark.vllm, pytest.mark.filterwarnings("ignore::RuntimeWarning")]

SCRIPT = [
    format_tool_call("terminal", {"command": "python3 -c 'import solution'"}),
    format_tool_call(
        "write_file", {"path": "solution.py", "content": "def fizzbuzz(n):\n    return []\n"}
    ),
    format_tool_call(
        "terminal", {"command": "python3 -c 'import solution; print(solution.fizzbuzz(3))'"}
    ),
    format_tool_call("submit"),
]


def make_env():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gym.make("opd_gym/Coding-v0", tasks=["fizzbuzz"], sandbox="local", pool_size=1,
                        max_turns=6)


def test_topk_above_server_cap_is_a_clear_error(server_teacher, tiny_tokenizer):
    ids = tiny_tokenizer.encode("def total(xs):\n    return sum(xs)\n")
    with pytest.raises(LogprobCapError, match=r"--max-logprobs 51"):
        server_teacher.score([ScoreRequest(ids, [(2, len(ids))])], 51)


def test_topk_above_cap_through_the_wrapper(server_teacher):
    """The run goes on: every turn's record is unscored and names the flag to restart with."""
    env = OPDWrapper(make_env(), teacher=server_teacher, judge="rule", topk=51)
    obs, info = env.reset(seed=0)
    _, _, _, _, info = env.step(SCRIPT[0])
    env.close()
    [record] = info["opd"]
    assert not record.scored and "--max-logprobs 51" in record.error
    assert record.num_tokens > 0 and np.isnan(record.teacher_token_logprobs).all()


class _SlowHandler(BaseHTTPRequestHandler):
    """Answers /v1/models at once and every completion only after `delay` seconds."""

    delay = 5.0

    def log_message(self, *args):  # keep pytest output clean
        pass

    def _json(self, payload):
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._json({"data": [{"id": "slow", "max_model_len": 4096}]})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        time.sleep(self.delay)
        try:
            self._json({"choices": []})
        except OSError:
            pass  # the client gave up, as it should


def test_slow_server_timeouts_fire(tiny_tokenizer):
    """A loopback HTTP server that stalls on /v1/completions stands in for a slow vLLM."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    teacher = VLLMServerTeacher(url, tokenizer=tiny_tokenizer, check_tokenizer=False,
                                timeout=0.5, retries=1, backoff=0.1)
    ids = tiny_tokenizer.encode("print('hello world')")
    try:
        started = time.monotonic()
        with pytest.raises(ServerUnavailable, match="2 attempt"):
            teacher.score([ScoreRequest(ids, [(1, len(ids))])] * 3, 5)
        elapsed = time.monotonic() - started
    finally:
        teacher.close()
        server.shutdown()
        server.server_close()
    assert elapsed < 3.0, f"timeouts did not bound the wait ({elapsed:.1f} s)"


def test_server_killed_mid_episode(server_factory, tiny_tokenizer):
    """Own server, killed after two scored turns: the rest are unscored with an error, the
    episode and its data stay intact, and the next episode runs (unscored, not crashed)."""
    server = server_factory("killed")
    teacher = None
    try:
        teacher = VLLMServerTeacher(server.url, tokenizer=tiny_tokenizer, timeout=10,
                                    retries=1, backoff=0.1)
        env = OPDWrapper(make_env(), teacher=teacher, judge="rule", topk=5)
        obs, info = env.reset(seed=0)
        records, rewards = [], []
        for i, action in enumerate(SCRIPT):
            if i == 2:
                server.kill()
                assert not server.alive()
            obs, reward, terminated, truncated, info = env.step(action)
            records.extend(info["opd"])
            rewards.append(reward)
            if terminated or truncated:
                break
        assert terminated  # the episode ran to its verdict
        assert [r.turn_index for r in records] == [0, 1, 2, 3]
        assert records[0].scored and records[1].scored
        for record in records[2:]:
            assert not record.scored and record.error and "teacher error" in record.error
            assert record.num_tokens > 0 and not record.mask.any()
            assert np.isnan(record.teacher_token_logprobs).all()
            assert record.votes  # the judge's output is kept
        assert info["opd_metrics"]["opd/turns_scored"] == 2
        # The run goes on: a new episode steps normally, its turns unscored with an error.
        env.reset(seed=1)
        _, _, _, _, info = env.step(SCRIPT[0])
        [record] = info["opd"]
        assert not record.scored and "teacher error" in record.error
        env.close()
    finally:
        if teacher is not None:
            teacher.close()
        server.stop()
