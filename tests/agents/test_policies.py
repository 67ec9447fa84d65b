"""Policy specs: replaying a recorded run reproduces it; unknown specs are refused."""

from __future__ import annotations

import pytest

from opd_gym.agents.policies import make_agent_factory
from opd_gym.rollout import RolloutConfig, read_trajectories, run_rollout
from opd_gym.tasks import load_suite

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # local backend notice


def test_replay_reproduces_a_recorded_run(tmp_path):
    tasks = load_suite()
    ids = ["fizzbuzz", "rle_codec", "fix_leap_year"]
    first = RolloutConfig(
        out_dir=str(tmp_path / "a"), episodes=3, task_ids=ids, sandbox="local", opd=False
    )
    run_rollout(first, make_agent_factory("demo", tasks), progress=False)
    recorded = tmp_path / "a" / "trajectories.jsonl"
    again = RolloutConfig(
        out_dir=str(tmp_path / "b"), episodes=3, task_ids=ids, sandbox="local", opd=False
    )
    summary = run_rollout(again, make_agent_factory(f"replay:{recorded}", tasks), progress=False)
    assert summary.episodes == 3 and not summary.failures
    before = {r["task_id"]: r for r in read_trajectories(recorded)}
    after = {r["task_id"]: r for r in read_trajectories(tmp_path / "b" / "trajectories.jsonl")}
    assert before.keys() == after.keys() == set(ids)
    for task_id in ids:
        assert [t["text"] for t in after[task_id]["turns"]] == [
            t["text"] for t in before[task_id]["turns"]
        ]
        assert after[task_id]["rewards"] == pytest.approx(before[task_id]["rewards"])


def test_unknown_policy_spec_is_refused():
    with pytest.raises(ValueError, match="unknown policy"):
        make_agent_factory("gpt-magic", load_suite())


def test_parallel_replay_uses_each_recorded_episode_once(tmp_path):
    tasks = load_suite()
    ids = ["fizzbuzz", "rle_codec"]
    record = RolloutConfig(
        out_dir=str(tmp_path / "a"), episodes=4, task_ids=ids, sandbox="local", opd=False
    )
    run_rollout(record, make_agent_factory("demo", tasks), progress=False)
    recorded = tmp_path / "a" / "trajectories.jsonl"
    # 5 episodes ask for fizzbuzz 3 times; only 2 were recorded, so exactly one must fail
    # (workers share the recorded episodes instead of each replaying all of them).
    replay = RolloutConfig(
        out_dir=str(tmp_path / "b"),
        episodes=5,
        task_ids=ids,
        sandbox="local",
        opd=False,
        parallel=2,
    )
    summary = run_rollout(replay, make_agent_factory(f"replay:{recorded}", tasks), progress=False)
    assert summary.episodes == 4
    assert (
        len(summary.failures) == 1
        and "no (more) episodes of task 'fizzbuzz'" in summary.failures[0]
    )


def test_rollout_closes_the_agents_it_builds_and_checks_opd_options_first(tmp_path):
    from opd_gym.agents.scripted import ReferenceAgent
    from opd_gym.errors import ConfigError

    tasks = load_suite()
    closed = []

    class ClosingAgent(ReferenceAgent):  # a real scripted agent that also has connections
        def close(self):
            closed.append(self)

    config = RolloutConfig(out_dir=str(tmp_path / "a"), episodes=2, task_ids=["fizzbuzz"],
                           sandbox="local", parallel=2, opd=False)
    summary = run_rollout(config, lambda env: ClosingAgent(tasks), progress=False)
    assert summary.episodes == 2 and len(closed) == 2  # one agent per worker, each closed
    bad = RolloutConfig(out_dir=str(tmp_path / "b"), episodes=1, sandbox="local",
                        opd_options={"topk": -1})
    with pytest.raises(ConfigError, match="topk must be an integer >= 0"):
        run_rollout(bad, lambda env: ClosingAgent(tasks), progress=False)
    assert not (tmp_path / "b" / "trajectories.jsonl").exists()  # refused before any work
