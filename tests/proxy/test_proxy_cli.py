"""`opd-gym proxy` as a user runs it: a real process serving the tiny model on loopback."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import httpx

from opd_gym.cli import main


def test_proxy_command_serves_records_and_stops_on_ctrl_c(tiny_model_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "opd_gym.cli", "proxy", "--model", str(tiny_model_path),
         "--port", "0", "--episode", "cli-1", "--max-tokens", "4"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"})
    try:
        first = process.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+", first).group(0)
        reply = httpx.post(f"{url}/cli-1/v1/chat/completions", timeout=60, json={
            "model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert reply.status_code == 200, reply.text
        turns = httpx.get(f"{url}/opd/episodes/cli-1").json()["turns"]
        assert len(turns) == 1 and 1 <= len(turns[0]["token_ids"]) <= 4
        assert httpx.post(f"{url}/cli-2/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hi"}]}).status_code == 404
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 130  # a clean stop; 130 as every command on Ctrl-C
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_proxy_command_needs_exactly_one_backend(capsys):
    assert main(["proxy"]) == 2
    assert "exactly one of --upstream" in capsys.readouterr().err
