"""`serve --opd --tokenizer`: token-exact served turns, end to end. A real server (uvicorn in
a thread), real Docker sandboxes, openenv-core's own client, the tiny model as teacher and as
the client's sampler (scoring the demo policy's text, so each turn has real logprobs of real
ids). The records are exact (no retokenized, no reconstructed turn), every export takes them,
the no-hint turns' teacher logprobs are the client's own, and a refused step leaves the
sandbox, the transcript and the counters as they were."""

from __future__ import annotations

import asyncio
import json
import warnings
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.client import connect

from opd_gym import specs
from opd_gym.agents.demo import demo_script
from opd_gym.exports import FORMATS, export_run
from opd_gym.opd.teachers import make_teacher
from opd_gym.opd.teachers.base import ScoreRequest
from opd_gym.runs import RunDirectory
from opd_gym.serve import ServeConfig, ServerThread
from opd_gym.serve.client import Sampled, TurnSequence, play_episode
from opd_gym.tasks.resolve import resolve_tasks
from opd_gym.tools.parsing import format_tool_call

pytestmark = pytest.mark.docker

OPD = {"teacher": "tiny", "judge": "rule", "topk": 5}
NOT_EXPORTED = {"swebench-predictions"}  # predictions of repository tasks: none here


@pytest.fixture(scope="module")
def exact_server(tmp_path_factory):
    config = ServeConfig(port=0, out_dir=str(tmp_path_factory.mktemp("exact")), opd=True,
                         opd_options=OPD, tokenizer="tiny", pool_size=2, max_sessions=4,
                         grace=5)
    with ServerThread(config) as srv:
        yield srv


@pytest.fixture(scope="module")
def task():
    return sorted(resolve_tasks("coding"), key=lambda t: t.id)[0]


@pytest.fixture(scope="module")
def sampler_model():
    """The client's model: the tiny model the server's teacher is, loaded by the client."""
    from opd_gym.records.policy import close

    model = make_teacher("tiny")
    yield model
    close(model)


def make_sampler(task: Any, model: Any) -> Any:
    """The demo policy's turns as a sampler would return them: the ids of the text under the
    student's tokenizer (with the end-of-turn id), their logprobs under the client's model
    given the prompt the server offered (`info["student_prompt"]`)."""
    tok = model.tokenizer
    script = iter(demo_script(task))

    def sample(info: dict[str, Any]) -> Sampled:
        prompt = list(info["student_prompt"]["ids"])
        text = next(script)
        ids = [*tok.encode(text, add_special_tokens=False), tok.eos_token_id]
        [[scores]] = model.score([ScoreRequest(tuple(prompt + ids),
                                               ((len(prompt), len(prompt) + len(ids)),), None)], 0)
        return Sampled(text, ids, scores.token_logprobs.astype(float).tolist(), prompt)

    return sample


def test_exact_served_turns_give_exact_records_every_export_takes(exact_server, task,
                                                                   sampler_model, tmp_path):
    played = asyncio.run(play_episode(exact_server.url, task.id, 3,
                                      make_sampler(task, sampler_model)))
    [row] = [r for r in RunDirectory(exact_server.runtime.run.root).episodes() if r.seed == 3]
    assert row.finished and row.grade["passed"] is not None
    records = row.records()
    assert len(records) == played["turns"] == len(row.turns) > 2
    assert not any(r.retokenized or r.reconstructed or r.ids_unchecked for r in records)
    assert all(r.student_logprobs is not None for r in records)
    assert [r.extends_previous for r in records] == [None] + [True] * (len(records) - 1)
    hinted = [r for r in records if r.hint]
    plain = [r for r in records if not r.hint]
    assert hinted and plain  # the demo's failing step gets the rule judge's hint
    for record in plain:  # no hint: the teacher saw the client's own context and ids
        gap = np.abs(record.teacher_token_logprobs - record.student_logprobs)[record.mask]
        assert gap.size and gap.max() < 1e-4, gap.max()
    for record in hinted:
        assert np.abs(record.teacher_token_logprobs - record.student_logprobs)[
            record.mask].max() > 1e-3
    # the sequence the model saw: the first prompt, then every turn's ids with the env's in
    # between; it is the last turn's prompt followed by that turn's sampled ids
    last = row.turns[-1]
    assert played["prompt_ids"] + played["completion_ids"] == last["prompt_ids"] + last[
        "token_ids"]
    mask = np.array(played["env_mask"], bool)
    assert mask.sum() == sum(len(t["token_ids"]) for t in row.turns) < mask.size
    between = sampler_model.tokenizer.decode(np.array(played["completion_ids"])[~mask])
    assert "<tool_response>" in between
    assert all(lp == 0.0 for lp, m in zip(played["logprobs"], mask, strict=True) if not m)
    tok = specs.tokenizer("tiny")
    for fmt in sorted(set(FORMATS) - NOT_EXPORTED):
        path = export_run(exact_server.runtime.run.root, fmt, tmp_path / f"{fmt}.out",
                          tokenizer=tok)
        assert path.stat().st_size > 0, fmt
    # Harbor's ATIF: the served episode's tool calls and exact ids, valid under Harbor's model
    from harbor_check import harbor_validate

    (trajectory,) = (tmp_path / "atif.out").glob("*/agent/trajectory.json")
    assert harbor_validate([trajectory]) == {str(trajectory): "ok"}
    agent = [s for s in json.loads(trajectory.read_text())["steps"] if s["source"] == "agent"]
    assert [s["metrics"]["completion_token_ids"] for s in agent] == [t["token_ids"]
                                                                     for t in row.turns]
    assert [s["metrics"]["prompt_token_ids"] for s in agent] == [t["prompt_ids"]
                                                                 for t in row.turns]
    assert all(s["observation"]["results"][0]["source_call_id"] == s["tool_calls"][0][
        "tool_call_id"] for s in agent)
    # read back (score-trajectories, tests/exports/test_atif_in.py): the server's teacher and
    # judge score the trajectory's exact ids, tool calls and results to the served records
    from opd_gym.exports.atif_in import score_trajectory

    again = score_trajectory(json.loads(trajectory.read_text()), **OPD, student_tokenizer="tiny",
                             student_temperature=records[0].student_temperature)
    assert [{k: v for k, v in r.to_dict().items() if k != "timing"} for r in again] == [
        {k: v for k, v in r.to_dict().items() if k != "timing"} for r in records]


def test_a_refused_step_changes_nothing(exact_server, task) -> None:
    """Token data the server cannot take (an id outside the student's vocabulary, a negative
    prompt id, ragged top-K rows), sent after a good step, is refused before the turn runs:
    its command never ran, the transcript has no trace of it and the step count stays; the
    next step plays as the second. The message names what was wrong (what OpenEnv's client
    shows)."""
    touch = format_tool_call("terminal", {"command": "touch refused.txt"})
    size = len(specs.tokenizer("tiny"))
    refused = [{"text": touch, "token_ids": [5, size + 1], "logprobs": [-1.0, -2.0]},
               {"text": touch, "token_ids": [5], "prompt_ids": [1, -4]},
               {"text": touch, "token_ids": [5, 6], "topk_ids": [[1, 2], [3]]}]

    async def main() -> list[dict[str, Any]]:
        answers = []
        async with connect(exact_server.url.replace("http", "ws") + "/ws") as ws:
            messages = [{"type": "reset", "data": {"seed": 4, "task_id": task.id}},
                        {"type": "step", "data": {"text": format_tool_call(
                            "terminal", {"command": "echo first > good.txt"})}},
                        {"type": "state"},
                        *({"type": "step", "data": data} for data in refused),
                        {"type": "state"},
                        {"type": "step", "data": {"text": format_tool_call(
                            "terminal", {"command": "ls -a; echo listed"})}}]
            for message in messages:
                await ws.send(json.dumps(message))
                answers.append(json.loads(await ws.recv()))
        return answers

    reset, good, before, *errors, state, step = asyncio.run(main())
    assert good["type"] == "observation" and before["data"]["step_count"] == 1
    assert [e["data"]["code"] for e in errors] == ["EXECUTION_ERROR"] * 3
    assert f"token_ids[1] is {size + 1}" in errors[0]["data"]["message"]
    assert "vocabulary of --tokenizer tiny" in errors[0]["data"]["message"]
    assert "prompt_ids[1] is -4" in errors[1]["data"]["message"]
    assert "different widths" in errors[2]["data"]["message"]
    assert state["data"] == before["data"]  # step count, episode, reward: as they were
    observation = step["data"]["observation"]
    assert "listed" in observation["text"] and "refused.txt" not in observation["text"]
    assert "good.txt" in observation["text"]  # the workspace: the good step's file alone
    info = observation["info"]
    assert info["turns"] == 2 and "refused.txt" not in json.dumps(info["messages"])
    assert info["messages"][:-2] == good["data"]["observation"]["info"]["messages"]
    assert len(info["messages"]) == len(reset["data"]["observation"]["info"]["messages"]) + 4


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the local backend's warning
def test_opd_without_a_tokenizer_refuses_token_ids_before_running(tmp_path, task) -> None:
    """`--opd` without `--tokenizer`: token ids cannot be checked against the teacher's, so a
    step carrying them is refused, saying how to start the server, and nothing of it ran."""
    config = ServeConfig(tasks=[task], port=0, out_dir=str(tmp_path / "run"), opd=True,
                         opd_options=OPD, sandbox="local", pool_size=1, max_sessions=1,
                         grace=5)
    touch = format_tool_call("terminal", {"command": "touch refused.txt"})

    async def main(url: str) -> list[dict[str, Any]]:
        answers = []
        async with connect(url.replace("http", "ws") + "/ws") as ws:
            for message in ({"type": "reset", "data": {"seed": 1}},
                            {"type": "step", "data": {"text": touch, "token_ids": [5, 6]}},
                            {"type": "step", "data": {"text": format_tool_call(
                                "terminal", {"command": "ls -a"})}}):
                await ws.send(json.dumps(message))
                answers.append(json.loads(await ws.recv()))
        return answers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with ServerThread(config) as srv:
            _, refused, listed = asyncio.run(main(srv.url))
    assert refused["type"] == "error" and "--opd --tokenizer" in refused["data"]["message"]
    assert listed["type"] == "observation"
    assert "refused.txt" not in listed["data"]["observation"]["text"]
    assert listed["data"]["observation"]["info"]["turns"] == 1


def test_a_prompt_that_rewrites_history_is_no_single_sequence() -> None:
    """TurnSequence refuses a turn whose prompt does not extend what came before (no
    sequence holds what the model saw then) and misaligned logprobs."""
    sequence = TurnSequence()
    sequence.add([1, 2, 3], [7, 8], [-0.1, -0.2])
    sequence.add([1, 2, 3, 7, 8, 4, 5], [9], [-0.3])
    assert sequence.to_dict() == {"prompt_ids": [1, 2, 3], "completion_ids": [7, 8, 4, 5, 9],
                                  "logprobs": [-0.1, -0.2, 0.0, 0.0, -0.3],
                                  "env_mask": [1, 1, 0, 0, 1]}
    with pytest.raises(ValueError, match="differ at position 3"):
        sequence.add([1, 2, 3, 6], [9], [-0.3])
    with pytest.raises(ValueError, match="1 logprobs for 2 token ids"):
        sequence.add([1, 2, 3, 7, 8, 4, 5, 9], [1, 2], [-0.3])
