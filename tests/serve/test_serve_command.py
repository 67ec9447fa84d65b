"""`opd-gym serve` as a real process: a public bind refused without a token; with a token,
OPD on, requests without it refused, an OPD episode written, an idle session reaped, and
Ctrl-C draining an open session and exiting with nothing left behind (Docker sandboxes,
openenv-core's client)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import httpx
import pytest
from openenv.core.generic_client import GenericEnvClient

from opd_gym.agents.demo import demo_script
from opd_gym.runs import RunDirectory
from opd_gym.serve.server import free_port
from opd_gym.tasks.resolve import resolve_tasks

TOKEN = "test-token-0123456789"
CLI = [sys.executable, "-m", "opd_gym.cli", "serve"]


def test_public_bind_without_token_is_refused() -> None:
    done = subprocess.run([*CLI, "--host", "0.0.0.0"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "OPD_GYM_SERVE_TOKEN": ""})
    assert done.returncode == 2
    assert "--token" in done.stderr and "exposes the server" in done.stderr


def test_tokenizer_without_opd_or_unknown_is_refused() -> None:
    """`--tokenizer` (alias `--student-tokenizer`) names the student's tokenizer for the OPD
    teacher: without `--opd`, or an unknown spec, the server refuses to start (exit 2)."""
    for flags, said in ((["--student-tokenizer", "tiny"], "it takes --opd"),
                        (["--opd", "--tokenizer", "vllm:http://x"], "unknown tokenizer")):
        done = subprocess.run([*CLI, *flags], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and said in done.stderr, done.stderr


def wait_up(proc: subprocess.Popen, url: str, headers: dict[str, str] | None = None,
            timeout: float = 60) -> httpx.Response:
    """The first answer of /health once the server accepts connections."""
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, proc.stderr.read()
        try:
            return httpx.get(url + "/health", headers=headers, timeout=1)
        except httpx.TransportError:
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.2)


def test_ctrl_c_exits_130_after_draining(tmp_path: Path) -> None:
    """SIGINT (Ctrl-C) on a real `opd-gym serve` process: it drains, writes summary.json and
    exits 130, as every command does (uvicorn's re-raised signal alone could be swallowed)."""
    port, out = free_port(), tmp_path / "run"
    proc = subprocess.Popen([*CLI, "--port", str(port), "--out", str(out), "--sandbox", "local",
                             "--pool-size", "1", "--grace", "2"], stderr=subprocess.PIPE,
                            text=True)
    try:
        assert wait_up(proc, f"http://127.0.0.1:{port}").status_code == 200
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "stopped" in proc.stderr.read()
    assert json.loads((out / "summary.json").read_text())["episodes"] == 0


@pytest.mark.docker
def test_served_process_auth_opd_idle_and_ctrl_c(tmp_path: Path) -> None:
    port, out = free_port(), tmp_path / "run"
    proc = subprocess.Popen(
        [*CLI, "--port", str(port), "--token", TOKEN, "--out", str(out), "--opd",
         "--teacher", "tiny", "--judge", "rule", "--pool-size", "2", "--idle-timeout", "2",
         "--grace", "5"], stderr=subprocess.PIPE, text=True)
    url, authed = f"http://127.0.0.1:{port}", f"http://opd:{TOKEN}@127.0.0.1:{port}"
    try:
        answer = wait_up(proc, url)  # up once /health answers (refused without the token)
        assert answer.status_code == 401
        assert httpx.get(url + "/health", headers={"Authorization": f"Bearer {TOKEN}"}
                         ).status_code == 200
        assert httpx.get(url + "/health", headers={"Authorization": "Bearer wrong-token"}
                         ).status_code == 401
        tasks = {task.id: task for task in resolve_tasks("coding")}
        task_id = sorted(tasks)[0]

        async def refused() -> str:
            try:
                async with GenericEnvClient(base_url=url) as client:
                    await client.reset(seed=1)
            except ConnectionError as exc:
                return str(exc)
            return "admitted"

        async def opd_episode() -> list[dict]:
            async with GenericEnvClient(base_url=authed) as client:
                result = await client.reset(seed=7, task_id=task_id)
                for output in demo_script(tasks[task_id]):
                    result = await client.step({"text": output})
                    if result.done:
                        return result.observation["info"].get("opd") or []
            raise AssertionError("the demo episode did not end")

        async def idle() -> str:
            async with GenericEnvClient(base_url=authed) as client:
                await client.reset(seed=3)
                await asyncio.sleep(8)  # timeout 2 s; OpenEnv's reaper looks every 5 s
                try:
                    await client.step({"text": "hello"})
                except RuntimeError as exc:
                    return str(exc)
            return "still open"

        async def main() -> tuple[str, list[dict], str]:
            return await asyncio.gather(refused(), opd_episode(), idle())

        why, records, reaped = asyncio.run(main())
        assert "403" in why  # the WebSocket handshake is rejected before any session exists
        assert records, "the OPD wrapper's records travel in the last step's info"
        assert "session is closed" in reaped and "idle over 2 s" in reaped

        async def left_open() -> None:  # a session in mid-episode when Ctrl-C comes
            client = GenericEnvClient(base_url=authed)
            await client.connect()
            await client.reset(seed=9, task_id=task_id)
            await client.step({"text": demo_script(tasks[task_id])[0]})

        asyncio.run(left_open())
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "stopped" in proc.stderr.read()
    rows = list(RunDirectory(out).episodes())
    finished = [row for row in rows if row.finished]
    assert len(finished) == 1 and finished[0].opd and finished[0].seed == 7
    assert any(row.extra.get("interrupted") and row.seed == 9 for row in rows)
    assert json.loads((out / "summary.json").read_text())["episodes"] == 1
    left = docker.from_env().containers.list(
        all=True, filters={"label": f"opd_gym.owner.pid={proc.pid}"})
    assert left == []
    from opd_gym.cli import main

    assert main(["export", str(out), "--to", "trl", "--out", str(tmp_path / "t.jsonl")]) == 0
    assert main(["view", str(out)]) == 0
