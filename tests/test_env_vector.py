"""Vector envs: Sync/Async (shared_memory=False) and make_vec with 4 envs, full episodes.

Info values must aggregate cleanly: scalars become arrays, nested dicts stay dicts, lists
become object arrays, and RecordEpisodeStatistics can add its `episode` key.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv
from gymnasium.wrappers.vector import RecordEpisodeStatistics

from opd_gym import TokenText
from opd_gym.agents import ReferenceAgent
from opd_gym.tasks import load_suite

pytestmark = pytest.mark.filterwarnings("ignore:opd_gym local sandbox")

N = 4
TASK_IDS = ["fizzbuzz", "two_sum", "bank_account", "geometry_package"]
TASKS = load_suite("coding")


def make_vector(kind: str, backend: str):
    kwargs = {"sandbox": backend, "pool_size": 1, "tasks": TASK_IDS}
    if kind == "make_vec":
        return gym.make_vec("opd_gym/Coding-v0", num_envs=N, vectorization_mode="async",
                            vector_kwargs={"shared_memory": False}, **kwargs)
    fns = [lambda: gym.make("opd_gym/Coding-v0", **kwargs)] * N
    return SyncVectorEnv(fns) if kind == "sync" else AsyncVectorEnv(fns, shared_memory=False)


def drive(venv, episodes: int):
    """Run the reference agent in every sub-env until `episodes` episodes have finished."""
    venv = RecordEpisodeStatistics(venv)
    agents = [ReferenceAgent(TASKS) for _ in range(N)]
    obs, infos = venv.reset(seed=7)
    assert isinstance(obs, tuple) and len(obs) == N and all(isinstance(o, str) for o in obs)
    for i, agent in enumerate(agents):
        agent.reset(obs[i], {"task_id": infos["task_id"][i]})
    finished, returns, stats = 0, [], []
    needs_reset = np.zeros(N, dtype=bool)
    for _ in range(episodes * 10):
        texts = [agent.act(obs[i], {}) for i, agent in enumerate(agents)]
        # token-exact actions survive the trip to worker processes
        actions = tuple(TokenText(t, token_ids=[1, 2], logprobs=[-0.5, -0.5]) for t in texts)
        obs, rewards, terminated, truncated, infos = venv.step(actions)
        stepped = infos["_turn"]  # sub-envs that were auto-reset this step have no turn
        assert infos["turn"]["has_token_ids"][stepped].all()
        assert (infos["turn"]["num_tokens"][stepped] == 2).all()
        assert rewards.dtype == np.float64 and rewards.shape == (N,)
        assert isinstance(infos["turns"], np.ndarray) and infos["turns"].dtype.kind == "i"
        assert isinstance(infos["messages"], np.ndarray) and infos["messages"].dtype == object
        assert isinstance(infos["turn"], dict) and "_turn" in infos
        for i in np.flatnonzero(needs_reset):  # next-step autoreset: this obs is a new episode
            agents[i].reset(obs[i], {"task_id": infos["task_id"][i]})
        done = terminated | truncated
        for i in np.flatnonzero(done):
            returns.append(float(rewards[i]))
            grade = {key: values[i] for key, values in infos["grade"].items()}
            assert infos["reward_breakdown"]["correctness"][i] == 1.0, grade
            assert infos["grade"]["passed"][i] == infos["grade"]["total"][i] > 0
        if "episode" in infos:
            stats.extend(infos["episode"]["r"][infos["_episode"]].tolist())
        finished += int(done.sum())
        needs_reset = done
        if finished >= episodes:
            break
    venv.close()
    return returns, stats


@pytest.mark.parametrize("kind", ["sync", "async", "make_vec"])
def test_vector_envs_local(kind):
    returns, stats = drive(make_vector(kind, "local"), episodes=N)
    assert len(returns) >= N and all(r > 0.9 for r in returns)
    assert np.allclose(sorted(stats), sorted(returns), atol=1e-5)


@pytest.mark.docker
@pytest.mark.parametrize("kind", ["sync", "async", "make_vec"])
def test_vector_envs_docker(kind):
    returns, stats = drive(make_vector(kind, "docker"), episodes=N)
    assert len(returns) >= N and all(r > 0.9 for r in returns)
    assert np.allclose(sorted(stats), sorted(returns), atol=1e-5)
