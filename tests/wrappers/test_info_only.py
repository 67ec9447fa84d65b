"""Wrappers need only what `step` returns: OPDWrapper and TrajectoryRecorder over an env that
is NOT a CodingEnv, replaying the (obs, reward, terminated, truncated, info) a real CodingEnv
produced, give the same records as over the CodingEnv itself."""

from __future__ import annotations

import json
import warnings

import gymnasium as gym
import numpy as np
import pytest

from opd_gym.env import CodingEnv
from opd_gym.opd.teachers import TransformersTeacher
from opd_gym.opd.wrapper import OPDWrapper
from opd_gym.spaces import ModelOutput, UnicodeText
from opd_gym.tools.parsing import format_tool_call
from opd_gym.wrappers.recorder import TrajectoryRecorder

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # local backend notice

SCRIPT = [
    format_tool_call("terminal", {"command": "python3 -c 'import solution'"}),
    "no tool call in this turn",
    format_tool_call("write_file", {"path": "solution.py",
                                    "content": "def fizzbuzz(n):\n    return []\n"}),
    format_tool_call("submit"),
]


class ReplayEnv(gym.Env):
    """Returns recorded reset/step results; has none of CodingEnv's attributes."""

    def __init__(self, reset_result, steps):
        self.observation_space, self.action_space = UnicodeText(), ModelOutput()
        self._reset, self._steps, self._at = reset_result, steps, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._at = 0
        return self._reset

    def step(self, action):
        self._at += 1
        obs, reward, terminated, truncated, info = self._steps[self._at - 1]
        return obs, reward, terminated, truncated, dict(info)


def _coding_env():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CodingEnv(tasks=["fizzbuzz"], sandbox="local", pool_size=1, max_turns=6)


def _play(env):
    first = env.reset(seed=0)
    steps = []
    for action in SCRIPT:
        step = env.step(action)
        steps.append(step)
        if step[2] or step[3]:
            break
    return first, steps


@pytest.fixture(scope="module")
def recorded():
    env = _coding_env()
    try:
        return _play(env)
    finally:
        env.close()


@pytest.fixture(scope="module")
def teacher(tiny_model, tiny_tokenizer):
    return TransformersTeacher(tiny_model, tokenizer=tiny_tokenizer)


def _records(steps):
    return [record for step in steps for record in step[4]["opd"]]


@pytest.mark.parametrize("delivery,async_scoring", [
    ("per_step", False), ("per_step", True), ("per_episode", False), ("per_episode", True)])
def test_opd_wrapper_works_from_step_results_alone(recorded, teacher, delivery, async_scoring):
    options = dict(teacher=teacher, judge="rule", topk=4, delivery=delivery,
                   async_scoring=async_scoring)
    real = OPDWrapper(_coding_env(), **options)
    replay = OPDWrapper(ReplayEnv(*recorded), **options)
    try:
        expected, got = _records(_play(real)[1]), _records(_play(replay)[1])
    finally:
        real.close()
        replay.close()
    assert [r.turn_index for r in got] == list(range(len(SCRIPT)))
    assert [r.turn_index for r in expected] == [r.turn_index for r in got]
    for want, have in zip(expected, got, strict=True):
        assert have.hint == want.hint and have.error == want.error
        np.testing.assert_array_equal(have.token_ids, want.token_ids)
        np.testing.assert_allclose(have.teacher_token_logprobs, want.teacher_token_logprobs,
                                   atol=1e-5)
    assert any(r.hint for r in got), "the rule judge hints the failing import and format error"


def test_opd_wrapper_names_missing_info_keys(teacher):
    class Bare(ReplayEnv):
        def step(self, action):
            return "obs", 0.0, False, False, {}

    env = OPDWrapper(Bare(("prompt", {}), []), teacher=teacher, judge="rule", topk=4)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="turn_snapshot"):
        env.step("anything")


def test_recorder_works_from_step_results_alone(recorded, tmp_path):
    env = TrajectoryRecorder(ReplayEnv(*recorded), tmp_path / "replay.jsonl")
    _play(env)
    env.close()
    row = json.loads((tmp_path / "replay.jsonl").read_text())
    steps = recorded[1]
    assert [t["text"] for t in row["turns"]] == SCRIPT
    assert row["turns"] == json.loads(json.dumps(
        [step[4]["turn_snapshot"].to_dict() for step in steps], default=str))
    assert row["messages"] == steps[-1][4]["messages"]
    assert row["grade"] == steps[-1][4]["grade"] and row["return"] == steps[-1][1]
    assert row["end_reason"] == "submitted" and row["finished"]
