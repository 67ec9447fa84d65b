"""The rollout core on real parts (the built-in tasks, the local sandbox, scripted policies):
one function plays an episode into an `EpisodeRow` whatever ends it, the recorder writes that
row as strict JSON, the policy contract is a protocol, and the TRL adapter builds its env stack
from the same run config (a tool-call format given there is the one its calls are written in).
"""

from __future__ import annotations

import json
import math

import pytest

from opd_gym.agents.scripted import ReferenceAgent
from opd_gym.records.policy import Policy, SeededPolicy, TokenPolicy, seed_episode
from opd_gym.rollout_core import (
    EpisodeOutcome,
    RowSink,
    build_agent,
    build_env,
    play,
)
from opd_gym.runs import EpisodeRow, RunDirectory
from opd_gym.runs.config import RolloutConfig
from opd_gym.runs.interrupt import EpisodeInterrupted
from opd_gym.sandboxes import make_pool
from opd_gym.tasks import load_suite

pytestmark = pytest.mark.filterwarnings("ignore:opd_gym local sandbox:RuntimeWarning")

TASK_ID = "mystery_checksum"  # shortest reference solution in the built-in suite


@pytest.fixture
def stack(tmp_path):
    """One runner slot's env stack (no OPD) on the local sandbox, and its pool."""
    tasks = [t for t in load_suite() if t.id == TASK_ID]
    config = RolloutConfig(out_dir=str(tmp_path / "run"), tasks=tasks, sandbox="local",
                           max_turns=6, opd=False)
    pool = make_pool("local", size=2)
    recorder = build_env(config, tasks=tasks, pool=pool)
    yield recorder, tasks
    recorder.close()
    pool.close()


class _Breaks:
    """A policy whose second turn raises (a model server gone mid-episode)."""

    def __init__(self, tasks):
        self.inner = ReferenceAgent(tasks)
        self.turns = 0

    def reset(self, observation, info):
        self.inner.reset(observation, info)

    def act(self, observation, info):
        self.turns += 1
        if self.turns == 2:
            raise ConnectionError("policy server went away")
        return self.inner.act(observation, info)


def test_a_finished_episode_is_one_row_and_the_recorder_wrote_the_same(stack):
    recorder, tasks = stack
    agent = build_agent(recorder, lambda env: ReferenceAgent(tasks))
    outcome = play(recorder, agent, 7, TASK_ID, seed=3)
    row = outcome.row
    assert outcome.error is None and isinstance(row, EpisodeRow)
    assert (row.episode, row.task_id, row.seed, row.finished, row.passed) == (7, TASK_ID, 3,
                                                                               True, True)
    assert row.played and row.length == row.num_turns >= 2
    assert row.to_dict() == recorder.last_record  # what the recorder wrote is this row
    again = EpisodeOutcome.from_dict(json.loads(json.dumps(outcome.to_dict())))
    assert again.row == row and again.error is None  # crosses a process boundary unchanged


def test_a_raising_policy_gives_the_partial_row_and_the_error(stack):
    recorder, tasks = stack
    outcome = play(recorder, _Breaks(tasks), 4, TASK_ID, seed=0)
    assert outcome.error == "ConnectionError: policy server went away"
    row = outcome.row
    assert row is not None and not row.finished and not row.played and not row.interrupted
    assert (row.episode, row.length, row.extra["error"]) == (4, 1, outcome.error)


def test_a_cancelled_episode_is_marked_interrupted_and_is_no_failure(stack):
    recorder, tasks = stack
    checks = []

    def check():
        checks.append(1)
        if len(checks) == 2:
            raise EpisodeInterrupted

    outcome = play(recorder, ReferenceAgent(tasks), 0, TASK_ID, seed=0, check=check)
    assert outcome.error is None and outcome.row is not None
    assert outcome.row.interrupted and not outcome.row.finished and outcome.row.length == 1
    # raised while the run was cancelling: the error is the cancellation's, not a failure
    outcome = play(recorder, _Breaks(tasks), 1, TASK_ID, seed=0, cancelled=lambda: True)
    assert outcome.error is None and outcome.row.interrupted
    # finished after the cancel: it may have been graded on a closed sandbox, not a result
    outcome = play(recorder, ReferenceAgent(tasks), 2, TASK_ID, seed=0, cancelled=lambda: True)
    assert outcome.row.interrupted and not outcome.row.played


def test_the_row_sink_appends_counts_and_keeps_failures(stack, tmp_path):
    recorder, tasks = stack
    run = RunDirectory(tmp_path / "sink")
    run.open_for_run(resume=False)
    seen = []
    sink = RowSink(run, on_episode=lambda data, metrics: seen.append((data, metrics)))
    sink(play(recorder, ReferenceAgent(tasks), 0, TASK_ID, seed=0))
    sink(play(recorder, _Breaks(tasks), 1, TASK_ID, seed=1))
    sink(EpisodeOutcome(2, None, "its worker died 3 times"))
    rows = list(run.rows())
    assert [(r.episode, r.played) for r in rows] == [(0, True), (1, False)]
    assert [d["episode"] for d, _ in seen] == [0]  # only played episodes are reported
    assert sink.failures == ["episode 1: ConnectionError: policy server went away",
                             "episode 2: its worker died 3 times"]
    assert run.done() == {0}  # resume plays the broken episode again


def test_the_recorder_writes_strict_json(tmp_path, stack):
    """A non-finite reward is written as null, never a bare NaN other parsers reject."""
    from opd_gym.wrappers.recorder import TrajectoryRecorder

    inner, tasks = stack
    path = tmp_path / "rows.jsonl"
    recorder = TrajectoryRecorder(inner.env, path)
    recorder.reset(options={"task_id": TASK_ID})
    recorder.step("no tool call here")
    recorder._episode["rewards"].append(math.nan)  # what a broken reward function would give
    recorder.close()
    text = path.read_text()
    assert "NaN" not in text
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in the row"))
    assert data["rewards"][-1] is None and data["finished"] is False


class _Sampler:
    def __init__(self):
        self.seeds = []
        self.tokenizer, self.logprob_temperature = object(), 0.7

    def reset(self, observation, info):
        pass

    def act(self, observation, info):
        return ""

    def seed_episode(self, seed):
        self.seeds.append(seed)


def test_the_policy_protocols_replace_attribute_probing(stack):
    recorder, tasks = stack
    sampler, scripted = _Sampler(), ReferenceAgent(tasks)
    assert isinstance(sampler, Policy) and isinstance(scripted, Policy)
    assert isinstance(sampler, SeededPolicy) and not isinstance(scripted, SeededPolicy)
    assert isinstance(sampler, TokenPolicy) and not isinstance(scripted, TokenPolicy)
    seed_episode(sampler, 11)
    seed_episode(scripted, 11)  # not seeded: nothing to do, no error
    assert sampler.seeds == [11]
    with pytest.raises(TypeError, match="has no reset"):
        build_agent(recorder, lambda env: object())


def test_trl_instances_are_the_run_configs_env_stack(tmp_path):
    """The TRL adapter builds the same stack as a rollout from a RolloutConfig: its tool-call
    format is the one the instance writes its calls in, and a finished episode's row is kept."""
    from opd_gym.trl import environment_factory

    tasks = [t for t in load_suite() if t.id == TASK_ID]
    config = RolloutConfig(out_dir="", tasks=tasks, sandbox="local", max_turns=5, opd=False,
                           tool_format="qwen3_coder")
    factory = environment_factory(config=config)
    try:
        instance = factory()
        assert factory.config is config
        assert instance.coding_env.tool_format.name == "qwen3_coder"
        instance.reset(task_id=TASK_ID)
        for path, text in sorted(tasks[0].solution.items()):
            out = instance.write_file(path, text)
            assert "error" not in out.lower()[:80], out  # the call parsed in that format
        instance.submit()
        assert instance.grade is not None and instance.grade.all_passed
        assert instance.get_reward() == instance.coding_env.reward_breakdown.total
        assert isinstance(instance.row, EpisodeRow) and instance.row.passed
        written = [m.get("raw_content") or m.get("content") or "" for m in instance.row.messages
                   if m.get("role") == "assistant"]
        assert written and all("<function=" in text for text in written), written
        with pytest.raises(Exception, match="either config or"):
            environment_factory(tasks, config=config)
    finally:
        factory.close()
