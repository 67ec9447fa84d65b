"""The server end to end: a real uvicorn on loopback (in a thread of this process, so the
tests can see its sessions), real Docker sandboxes from the shared warm pool, and
openenv-core's own client. One server serves the whole module; the built-in `coding` suite
and the scripted demo policy keep episodes cheap."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import docker
import httpx
import pytest
from openenv.core.generic_client import GenericEnvClient
from websockets.asyncio.client import connect

from opd_gym.agents.demo import DemoAgent, demo_script
from opd_gym.rollout_core import build_env, play_episode
from opd_gym.runs import RunDirectory
from opd_gym.runs.config import RolloutConfig
from opd_gym.serve import ServeConfig, ServerThread
from opd_gym.tasks.resolve import resolve_tasks
from opd_gym.tools.parsing import format_tool_call

pytestmark = pytest.mark.docker

SESSIONS = 32
MAX_BODY = 64 * 1024
VOLATILE = ("duration", "served")  # wall times; the served marker


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    config = ServeConfig(port=0, out_dir=str(tmp_path_factory.mktemp("served")),
                         max_sessions=SESSIONS, pool_size=8, idle_timeout=300,
                         max_body_bytes=MAX_BODY, grace=5)
    with ServerThread(config) as srv:
        yield srv


@pytest.fixture(scope="module")
def tasks():
    return {task.id: task for task in resolve_tasks("coding")}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def wait_until(predicate, timeout: float = 10.0) -> float:
    """Seconds until `predicate()` held; fails the test after `timeout`."""
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout, "condition not reached in time"
        time.sleep(0.05)
    return time.monotonic() - start


LS_TIME = re.compile(r"\b[A-Z][a-z]{2} +\d{1,2} +\d{2}:\d{2}\b")


def comparable(data: Any) -> Any:
    """A row without what differs between any two plays of an episode: wall times, and the
    grader's captured pytest output (random temp paths and object addresses)."""
    if isinstance(data, list):
        return [comparable(item) for item in data]
    if isinstance(data, str):  # `ls -la` shows minutes: two plays may straddle one
        return LS_TIME.sub("<time>", data)
    if not isinstance(data, dict):
        return data
    grade = "passed" in data and "output" in data
    return {k: comparable(v) for k, v in data.items()
            if k not in VOLATILE and not (grade and k == "output")}


def test_rows_equal_in_process_rows(server, tasks, tmp_path) -> None:
    """Demo episodes played over the wire give the rows the same seeds give in process."""
    plan = [(sorted(tasks)[0], 11), (sorted(tasks)[0], 12)]  # one task: one calibration

    async def remote() -> list[int]:
        numbers = []
        async with GenericEnvClient(base_url=server.url) as client:
            for task_id, seed in plan:
                result = await client.reset(seed=seed, task_id=task_id)
                assert result.observation["info"]["task_id"] == task_id
                for output in demo_script(tasks[task_id]):
                    result = await client.step({"text": output})
                    if result.done:
                        break
                state = await client.state()
                assert state["done"] and state["seed"] == seed
                numbers.append(state["episode"])
        return numbers

    numbers = run(remote())
    served = {row.episode: row.to_dict() for row in RunDirectory(server.runtime.run.root)
              .episodes()}
    config = RolloutConfig(out_dir=str(tmp_path), tasks="coding", opd=False)
    recorder = build_env(config, tasks=list(tasks.values()), pool=server.runtime.pool,
                         grader=server.runtime.grader)
    try:
        for number, (task_id, seed) in zip(numbers, plan, strict=True):
            local = play_episode(recorder, DemoAgent(tasks.values()), number, task_id, seed)
            remote_row = served[number]
            assert remote_row["finished"] and remote_row["grade"]["passed"] is not None
            assert comparable(remote_row) == comparable(local.to_dict())
    finally:
        recorder.close()


def test_disconnect_returns_the_sandbox(server) -> None:
    """A client that vanishes without a goodbye: its session and container are gone within
    seconds."""

    async def vanish() -> str:
        ws = await connect(server.url.replace("http", "ws") + "/ws")
        await ws.send(json.dumps({"type": "reset", "data": {"seed": 5}}))
        answer = json.loads(await ws.recv())
        assert answer["type"] == "observation"
        env = next(iter(server.runtime._live))
        container = env._stack.unwrapped.sandbox.container.id
        ws.transport.abort()  # no close frame, no close message: the TCP connection drops
        return container

    container = run(vanish())
    engine = docker.from_env()

    def gone() -> bool:
        try:
            engine.containers.get(container)
        except docker.errors.NotFound:
            return True
        return False

    wait_until(lambda: server.runtime.live_sessions == 0, timeout=5)
    wait_until(gone, timeout=10)


def test_protocol_errors(server) -> None:
    """Malformed JSON, unknown message types, actions in the wrong format, a step before
    reset and unknown tasks get clear errors, and the session keeps working after them."""

    async def main() -> list[dict[str, Any]]:
        answers = []
        async with connect(server.url.replace("http", "ws") + "/ws") as ws:
            for message in ['{"type": "reset", ', json.dumps({"type": "teleport"}),
                            json.dumps({"type": "step", "data": {"text": "hi"}}),
                            json.dumps({"type": "reset", "data": {"task_id": "no_such"}}),
                            json.dumps({"type": "reset", "data": {"seed": 1, "colour": 3}}),
                            json.dumps({"type": "reset", "data": {"seed": 1}}),
                            json.dumps({"type": "step", "data": {"bogus": 1}}),
                            json.dumps({"type": "step", "data": {"text": "a",
                                                                 "tool_calls": []}}),
                            json.dumps({"type": "step", "data": {"text": format_tool_call(
                                "terminal", {"command": "echo still-here"})}})]:
                await ws.send(message)
                answers.append(json.loads(await ws.recv()))
        return answers

    answers = run(main())
    codes = [a["data"].get("code") if a["type"] == "error" else a["type"] for a in answers]
    assert codes == ["INVALID_JSON", "UNKNOWN_TYPE", "EXECUTION_ERROR", "EXECUTION_ERROR",
                     "EXECUTION_ERROR", "observation", "VALIDATION_ERROR", "VALIDATION_ERROR",
                     "observation"]
    assert "send reset before step" in answers[2]["data"]["message"]
    assert "unknown task_id 'no_such'" in answers[3]["data"]["message"]
    assert "colour" in answers[4]["data"]["message"]
    assert "exactly one of" in json.dumps(answers[7]["data"]["errors"])
    assert "exactly one of" in answers[7]["data"]["message"]  # what a client shows
    assert "bogus: Extra inputs are not permitted" in answers[6]["data"]["message"]
    assert "still-here" in answers[8]["data"]["observation"]["text"]


def test_the_stock_client_shows_the_reason_and_the_reset_text_has_the_instructions(
        server, tasks) -> None:
    """openenv-core's client shows only an error's `message`: it carries the reason, not
    "Invalid message"; the reset text is what a `gym.make` episode's system and user messages
    say (the tool-call instructions, then the task), so a text-only client can call tools."""
    task_id = sorted(tasks)[0]

    async def main() -> tuple[Any, list[str]]:
        shown = []
        async with GenericEnvClient(base_url=server.url) as client:
            result = await client.reset(seed=1, task_id=task_id)
            for data in ({"text": "a", "tool_calls": []}, {"text": "a", "logprobs": [-1.0]},
                         {"text": format_tool_call("terminal", {"command": "ls"}),
                          "token_ids": [-3]}):
                try:
                    await client.step(data)
                except RuntimeError as exc:
                    shown.append(str(exc))
        return result, shown

    result, shown = run(main())
    assert len(shown) == 3
    assert "exactly one of 'text'" in shown[0] and "VALIDATION_ERROR" in shown[0]
    assert "logprobs and topk_ids need token_ids" in shown[1]
    assert "token_ids[0] is -3" in shown[2] and "EXECUTION_ERROR" in shown[2]
    text = result.observation["text"]
    system, user = result.observation["info"]["messages"][:2]
    assert text == f"{system['content']}\n\n{user['content']}"
    assert "Call a tool by writing" in text and "<tool_call>" in text
    assert tasks[task_id].prompt.strip()[:60] in text


def test_a_client_that_closes_cleanly_is_not_an_interruption(server, tasks) -> None:
    """A client that leaves mid-episode with a clean close: its row is unfinished (it says
    the client left) but not interrupted: only a server shutdown interrupts an episode."""
    task_id = sorted(tasks)[0]

    async def leave() -> int:
        async with GenericEnvClient(base_url=server.url) as client:
            await client.reset(seed=21, task_id=task_id)
            await client.step({"text": demo_script(tasks[task_id])[0]})
            return (await client.state())["episode"]

    number = run(leave())
    wait_until(lambda: server.runtime.live_sessions == 0, timeout=5)
    [row] = [r for r in RunDirectory(server.runtime.run.root).episodes() if r.episode == number]
    assert not row.finished and not row.interrupted and "client left" in row.extra["error"]
    assert server.runtime.interrupted_sessions == 0


def test_token_exact_turns_travel_and_misaligned_ones_are_refused(server) -> None:
    """A client that sampled the turn itself sends its ids and logprobs with the text: the
    env takes them as `TokenText` (token-exact); misaligned token data is a VALIDATION_ERROR."""
    call = format_tool_call("terminal", {"command": "echo exact"})

    async def main() -> list[dict[str, Any]]:
        answers = []
        async with connect(server.url.replace("http", "ws") + "/ws") as ws:
            for data in [None, {"text": call, "token_ids": [5, 6, 7], "logprobs": [-0.5]},
                         {"tool_calls": [{"name": "terminal", "arguments": {}}],
                          "token_ids": [1]},
                         {"text": call, "logprobs": [-0.1]},
                         {"text": call, "token_ids": [5, 6, 7], "logprobs": [-0.5, -1, -2],
                          "prompt_ids": [1, 2, 3, 4]}]:
                message = ({"type": "reset", "data": {"seed": 2}} if data is None
                           else {"type": "step", "data": data})
                await ws.send(json.dumps(message))
                answers.append(json.loads(await ws.recv()))
        return answers

    answers = run(main())
    kinds = [a["data"].get("code") if a["type"] == "error" else a["type"] for a in answers]
    assert kinds == ["observation", "VALIDATION_ERROR", "VALIDATION_ERROR", "VALIDATION_ERROR",
                     "observation"]
    assert "logprobs has 1 entries but token_ids has 3" in json.dumps(answers[1]["data"])
    assert "go with 'text'" in json.dumps(answers[2]["data"])
    assert "need token_ids" in json.dumps(answers[3]["data"])
    turn = answers[4]["data"]["observation"]["info"]["turn"]
    assert turn["has_token_ids"] and turn["num_tokens"] == 3
    assert "exact" in answers[4]["data"]["observation"]["text"]
    wait_until(lambda: server.runtime.live_sessions == 0, timeout=5)


def test_oversized_payloads_are_refused(server) -> None:
    """Over the byte limit: HTTP 413 before the route runs; a WebSocket closed with 1009."""
    big = {"action": {"text": "x" * (MAX_BODY + 1)}}
    answer = httpx.post(server.url + "/step", json=big, timeout=30)
    assert answer.status_code == 413 and "over" in answer.json()["detail"]
    assert httpx.post(server.url + "/reset", content=b"{not json",
                      headers={"content-type": "application/json"}).status_code == 422
    # HTTP /step is stateless in OpenEnv (no session to name): refused with the reason
    sessionless = httpx.post(server.url + "/step", json={"action": {"text": "hi"}}, timeout=30)
    assert sessionless.status_code == 409 and "send reset" in sessionless.json()["detail"]

    async def main() -> int | None:
        async with connect(server.url.replace("http", "ws") + "/ws",
                           max_size=None) as ws:
            await ws.send(json.dumps({"type": "step", "data": big["action"]}))
            try:
                await ws.recv()
            except Exception:
                pass
            return ws.close_code

    assert run(main()) == 1009
    wait_until(lambda: server.runtime.live_sessions == 0, timeout=5)


def test_32_concurrent_sessions_are_isolated(server, tasks) -> None:
    """32 clients at once, each its own sandbox: a file one writes is seen by it alone;
    a 33rd is refused while they are open; all sandboxes are returned after they leave."""
    task_id = sorted(tasks)[0]
    opened = asyncio.Barrier(SESSIONS + 1)

    async def one(i: int) -> str:
        async with GenericEnvClient(base_url=server.url, message_timeout_s=120) as client:
            await client.reset(seed=i, task_id=task_id)
            command = f"echo s{i} > mine.txt; cat *.txt"
            result = await client.step({"tool_calls": [
                {"name": "terminal", "arguments": {"command": command}}]})
            state = await client.state()
            assert state["seed"] == i and state["step_count"] == 1
            await opened.wait()  # every session holds its sandbox now
            await opened.wait()  # ... until the extra client was refused
            return result.observation["text"]

    async def extra() -> str:
        await opened.wait()
        try:  # the server answers the 33rd connection with CAPACITY_REACHED and closes it
            async with connect(server.url.replace("http", "ws") + "/ws") as ws:
                return await ws.recv()
        finally:
            await opened.wait()

    async def main() -> tuple[list[str], str]:
        *texts, refused = await asyncio.gather(*(one(i) for i in range(SESSIONS)), extra())
        return texts, refused

    texts, refused = run(main())
    for i, text in enumerate(texts):
        mine = [line for line in text.splitlines() if line.strip().startswith("s")
                and line.strip()[1:].isdigit()]
        assert mine == [f"s{i}"], text
    assert "CAPACITY_REACHED" in refused
    wait_until(lambda: server.runtime.live_sessions == 0 and not server.server.session_ids)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the local backend's warning
def test_a_task_no_grade_can_vouch_for_is_refused_at_reset_or_skipped(tasks, tmp_path) -> None:
    """A session's reset calibrates its task first: one whose starter already passes every
    test is refused with a message naming it and why; `skip_unverifiable` (the CLI's
    `--skip-unverifiable`) draws another task instead, unless that one was asked for by id."""
    import dataclasses

    fizz = tasks["fizzbuzz"]
    solved = dataclasses.replace(fizz, id="fizzbuzz-solved", files={**fizz.files,
                                                                   **fizz.solution})

    async def resets(url: str) -> list[dict[str, Any]]:
        answers = []
        async with connect(url.replace("http", "ws") + "/ws") as ws:
            for data in ({"task_id": "fizzbuzz-solved"}, {"seed": 0}, {"seed": 1}):
                await ws.send(json.dumps({"type": "reset", "data": data}))
                answers.append(json.loads(await ws.recv()))
        return answers

    def serve(out: str, **kw: Any) -> list[dict[str, Any]]:
        config = ServeConfig(tasks=[solved, fizz], port=0, out_dir=str(tmp_path / out),
                             sandbox="local", pool_size=2, max_sessions=2, grace=5, **kw)
        with ServerThread(config) as srv:
            return run(resets(srv.url))

    refused, *_ = serve("refusing")
    assert refused["type"] == "error"
    assert "fizzbuzz-solved: the task cannot be verified" in refused["data"]["message"]
    assert "starter-passes" in refused["data"]["message"]
    by_id, *drawn = serve("skipping", skip_unverifiable=True)
    assert by_id["type"] == "error" and "fizzbuzz-solved" in by_id["data"]["message"]
    assert [a["data"]["observation"]["info"]["task_id"] for a in drawn] == ["fizzbuzz"] * 2
