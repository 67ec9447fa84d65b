"""MaskablePPO learns to pick the passing candidate in the real env (Docker sandbox, hidden tests).

Three tasks, K=4 slots each (three write-and-submit candidates, one empty on one task, and
"submit unchanged"); the passing slot is 0, 2 and 1, so a constant action solves at most a
third. A uniformly random masked policy solves (1/4 + 1/4 + 1/3) / 3 = 0.28 in expectation.
After 48 one-step training episodes the greedy policy must solve >= 0.9 on the same
evaluation seeds as the random policy and clearly beat it. Figures print with `-s`.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import sb3_contrib  # the sb3 extra is part of the test install: a missing one fails
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor  # noqa: E402

from opd_gym.sandboxes import make_pool  # noqa: E402
from opd_gym.sb3 import make_env  # noqa: E402
from opd_gym.sb3.demo import CORRECT_SLOT, K, demo_candidates, demo_tasks  # noqa: E402

pytestmark = pytest.mark.docker

TRAIN_STEPS = 48
EVAL_SEEDS = (1000, 1001, 1002)
PPO_KWARGS = dict(
    n_steps=16, batch_size=16, n_epochs=30, learning_rate=5e-3, clip_range=0.3,
    ent_coef=0.05, policy_kwargs=dict(net_arch=[]), seed=0, device="cpu", verbose=0,
)


def evaluate(env, choose) -> dict[str, float]:
    """Mean reward and correctness of `choose(obs, mask, rng)` over EVAL_SEEDS x every task."""
    rewards, correct = [], []
    for seed in EVAL_SEEDS:
        for task_id in CORRECT_SLOT:
            obs, info = env.reset(seed=seed, options={"task_id": task_id})
            mask = env.get_wrapper_attr("action_masks")()
            action = choose(obs, mask, np.random.default_rng(seed))
            obs, reward, terminated, truncated, info = env.step(action)
            assert terminated or truncated
            rewards.append(reward)
            correct.append(info["reward_breakdown"]["correctness"])
    return {"reward": float(np.mean(rewards)), "correctness": float(np.mean(correct)),
            "episodes": len(rewards)}


def test_maskable_ppo_beats_random_on_candidate_choice(capsys):
    started = time.monotonic()
    pool = make_pool("docker", size=3)
    kwargs = dict(tasks=demo_tasks(), sandbox=pool, max_turns=2, binary_correctness=True)

    def build():
        return make_env(demo_candidates, k=K, observation="hashed",
                        observation_kwargs={"n_features": 256}, **kwargs)

    venv = VecMonitor(DummyVecEnv([build]))
    eval_env = build()
    try:
        def random_choice(obs, mask, rng):
            return int(rng.choice(np.flatnonzero(mask)))

        baseline = evaluate(eval_env, random_choice)

        model = sb3_contrib.MaskablePPO("MultiInputPolicy", venv, **PPO_KWARGS)
        model.learn(TRAIN_STEPS)

        def greedy(obs, mask, rng):
            action, _ = model.predict(obs, deterministic=True, action_masks=mask)
            return int(action)

        trained = evaluate(eval_env, greedy)
    finally:
        venv.close()
        eval_env.close()
        pool.close()
    elapsed = time.monotonic() - started
    with capsys.disabled():
        print(f"\n[sb3 learning] random: {baseline}  trained ({TRAIN_STEPS} steps): {trained}  "
              f"seeds {EVAL_SEEDS} x {len(CORRECT_SLOT)} tasks  {elapsed:.0f} s")
    assert trained["correctness"] >= 0.9, (baseline, trained)
    assert trained["correctness"] >= baseline["correctness"] + 0.4, (baseline, trained)
    assert trained["reward"] > baseline["reward"] + 0.3, (baseline, trained)
