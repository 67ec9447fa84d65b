"""TrajectoryRecorder: one JSON line per episode with messages, tool results, rewards, tokens."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

from opd_gym import CodingEnv, TokenText
from opd_gym.records.opd_record import OPDRecord
from opd_gym.tools import format_tool_call
from opd_gym.wrappers import TrajectoryRecorder

pytestmark = pytest.mark.filterwarnings("ignore:opd_gym local sandbox")


def test_records_finished_and_cut_short_episodes(tmp_path, toy_task):
    path = tmp_path / "runs" / "traj.jsonl"
    env = TrajectoryRecorder(CodingEnv(tasks=[toy_task], sandbox="local", pool_size=1), path)
    env.reset(seed=3)
    solution = "def add(a, b):\n    return a + b\n"
    write = format_tool_call("write_file", {"path": "calc.py", "content": solution})
    env.step(TokenText(write, token_ids=[1, 2, 3], logprobs=[-0.5, -0.25, -0.125]))
    env.step(format_tool_call("terminal", {"command": "echo ok"}))
    *_, terminated, _, _ = env.step(format_tool_call("submit"))
    assert terminated and env.episodes_written == 1
    env.reset()  # nothing stepped yet: nothing recorded on the next reset
    env.reset()
    env.step("no tool call")
    env.close()  # the unfinished episode is written on close
    env.close()

    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 2
    first, second = lines
    assert first["finished"] and first["terminated"] and not first["truncated"]
    assert (first["task_id"], first["seed"], first["length"]) == ("toy_add", 3, 3)
    assert first["rewards"][:2] == [0.0, 0.0] and first["return"] == first["rewards"][-1] > 0.9
    assert first["reward_breakdown"]["correctness"] == 1.0 and first["grade"]["passed"] == 3
    assert first["end_reason"] == "submitted"
    assert [m["role"] for m in first["messages"]][:3] == ["system", "user", "assistant"]
    turns = first["turns"]
    assert turns[0]["token_ids"] == [1, 2, 3] and turns[0]["logprobs"] == [-0.5, -0.25, -0.125]
    assert turns[1]["tool_results"][0]["content"] == "ok\n[exit code: 0]"
    assert turns[2]["grade"]["score"] == 1.0
    assert [t["function"]["name"] for t in first["tools"]][-1] == "submit"
    assert not second["finished"] and second["length"] == 1 and second["return"] == 0.0
    assert second["turns"][0]["format_errors"]
    assert "opd" not in first and "opd_metrics" not in first  # no OPDWrapper, no OPD fields


def test_several_recorders_share_one_file(tmp_path, toy_task):
    path = tmp_path / "shared.jsonl"
    envs = [TrajectoryRecorder(CodingEnv(tasks=[toy_task], sandbox="local", pool_size=1), path)
            for _ in range(2)]
    for env in envs:
        env.reset()
        env.step(format_tool_call("submit"))
    for env in envs:
        env.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line)["finished"] for line in lines)


class FakeOPD(gym.Wrapper):
    """Puts OPD records into infos as OPDWrapper does: one per step, a list at the end."""

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        turn = len(self.env.unwrapped.turns) - 1
        record = OPDRecord.unscored([7, 8], "no teacher in this test", topk=2, turn_index=turn)
        if terminated or truncated:
            info["opd"] = [record]
            info["opd_metrics"] = {"opd/turns": float(turn + 1)}
        else:
            info["opd"] = record
        return obs, reward, terminated, truncated, info


def test_records_opd_records_and_metrics(tmp_path, toy_task):
    path = tmp_path / "traj.jsonl"
    env = TrajectoryRecorder(FakeOPD(CodingEnv(tasks=[toy_task], sandbox="local", pool_size=1)),
                             path)
    env.reset(seed=0)
    env.step(format_tool_call("terminal", {"command": "echo hi"}))
    env.step(format_tool_call("submit"))
    env.reset(seed=1)
    env.step("no tool call")
    env.close()
    finished, cut = [json.loads(line) for line in path.read_text().splitlines()]
    records = [OPDRecord.from_dict(r) for r in finished["opd"]]
    assert [r.turn_index for r in records] == [0, 1] and records[0].token_ids.tolist() == [7, 8]
    assert finished["opd_metrics"] == {"opd/turns": 2.0}
    assert len(cut["opd"]) == 1 and cut["opd_metrics"] is None
