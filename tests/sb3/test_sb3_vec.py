"""SB3 vectorisation over the real Docker env: SubprocVecEnv (2 workers) + VecMonitor and SB3's
make_vec_env run episodes, keep SB3's info keys intact, and leave no container behind."""

from __future__ import annotations

import docker  # core dependency; stable_baselines3 comes with the sb3 extra
import numpy as np
import pytest
from stable_baselines3.common.vec_env import SubprocVecEnv, VecMonitor  # noqa: E402

from opd_gym.sandboxes.reaper import LABEL, PID  # noqa: E402
from opd_gym.sb3 import make_env, make_vec_env  # noqa: E402
from opd_gym.sb3.demo import CORRECT_SLOT, K, demo_candidates, demo_tasks  # noqa: E402

pytestmark = pytest.mark.docker

ENV_KWARGS = dict(tasks=demo_tasks(), max_turns=2, binary_correctness=True, pool_size=1)


def containers_of(pids: set[int]) -> list[str]:
    """Ids of opd_gym containers (any state) whose owner label is one of `pids`."""
    client = docker.from_env()
    try:
        found = client.api.containers(all=True, filters={"label": LABEL})  # one call, no races
        labels = [(c["Id"], c.get("Labels") or {}) for c in found]
        return [cid for cid, lab in labels if lab.get(PID, "").isdigit() and int(lab[PID]) in pids]
    finally:
        client.close()


def build_env():
    return make_env(demo_candidates, k=K, observation="hashed",
                    observation_kwargs={"n_features": 64}, **ENV_KWARGS)


def play_two_steps(venv) -> list[dict]:
    """Reset, then two steps: slot 3 ends each episode (submit), so both auto-reset."""
    obs = venv.reset()
    assert set(obs) == {"prompt", "text", "numeric"} and obs["text"].shape == (2, 64)
    masks = np.stack(venv.env_method("action_masks"))
    assert masks.shape == (2, K) and masks.dtype == bool
    infos: list[dict] = []
    for _ in range(2):
        obs, rewards, dones, step_infos = venv.step(np.array([3, 3]))
        assert dones.all() and rewards.shape == (2,)
        infos.extend(step_infos)
    return infos


def test_subproc_vec_env_with_vec_monitor_closes_without_leaks():
    venv = VecMonitor(SubprocVecEnv([build_env, build_env]))
    pids = {proc.pid for proc in venv.venv.processes}
    try:
        infos = play_two_steps(venv)
        assert containers_of(pids), "the workers should own running sandboxes"
    finally:
        venv.close()
    for info in infos:
        # SB3's own keys are SB3's: the terminal observation is our Dict obs, not the env's text
        assert set(info["terminal_observation"]) == {"prompt", "text", "numeric"}
        assert info["TimeLimit.truncated"] is False
        assert info["episode"]["l"] == 1 and info["end_reason"] == "submitted"
        assert info["task_id"] in CORRECT_SLOT
    assert containers_of(pids) == []


def test_sb3_make_vec_env_subprocess_runs_and_closes_without_leaks():
    venv = make_vec_env(2, demo_candidates, k=K, observation="tokens",
                        observation_kwargs={"max_length": 64}, seed=3, **ENV_KWARGS)
    assert isinstance(venv, SubprocVecEnv)
    pids = {proc.pid for proc in venv.processes}
    try:
        obs = venv.reset()
        assert obs["token_ids"].shape == (2, 64) and obs["token_mask"].shape == (2, 64)
        _, _, dones, infos = venv.step(np.array([3, 3]))
        assert dones.all()
        assert all(info["episode"]["l"] == 1 for info in infos)  # from make_vec_env's Monitor
    finally:
        venv.close()
    assert containers_of(pids) == []
