"""Train MaskablePPO to pick the passing candidate among K tool-call candidates, and compare it
with a random policy on the same seeds.

    python examples/sb3_ppo.py                    # Docker sandbox, 48 training episodes
    python examples/sb3_ppo.py --sandbox bwrap --timesteps 64

Needs the `sb3` extra. Each episode is one turn: the policy picks a slot, the slot's tool calls
(write a candidate solution and submit, or submit unchanged) run in the sandbox, and the
hidden tests grade the workspace. SB3 trains the small policy choosing among the candidates,
not the LLM that would propose them (here `demo_candidates` stands in for that LLM).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from sb3_contrib import MaskablePPO
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

from opd_gym.sandboxes import make_pool
from opd_gym.sb3 import make_env
from opd_gym.sb3.demo import CORRECT_SLOT, K, demo_candidates, demo_tasks


def evaluate(env: Any, choose: Callable[..., int], seeds: list[int]) -> dict[str, float]:
    """Mean reward and correctness of `choose(obs, mask, rng)` over seeds x tasks."""
    rewards, correct = [], []
    for seed in seeds:
        for task_id in CORRECT_SLOT:
            obs, _ = env.reset(seed=seed, options={"task_id": task_id})
            mask = env.get_wrapper_attr("action_masks")()
            action = choose(obs, mask, np.random.default_rng(seed))
            _, reward, _, _, info = env.step(action)
            rewards.append(float(reward))
            correct.append(info["reward_breakdown"]["correctness"])
    return {"mean_reward": round(float(np.mean(rewards)), 3),
            "correctness": round(float(np.mean(correct)), 3), "episodes": len(rewards)}


def main() -> None:
    """Train, evaluate, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandbox", default="docker", help="docker | bwrap | local")
    parser.add_argument("--timesteps", type=int, default=48)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1000, 1001, 1002])
    args = parser.parse_args()

    pool = make_pool(args.sandbox, size=3)
    env_kwargs = dict(tasks=demo_tasks(), sandbox=pool, max_turns=2, binary_correctness=True)

    def build() -> Any:
        return make_env(demo_candidates, k=K, observation="hashed",
                        observation_kwargs={"n_features": 256}, **env_kwargs)

    venv = VecMonitor(DummyVecEnv([build]))
    eval_env = build()
    started = time.monotonic()
    try:
        random_stats = evaluate(
            eval_env, lambda obs, mask, rng: int(rng.choice(np.flatnonzero(mask))), args.seeds)
        model = MaskablePPO(
            "MultiInputPolicy", venv, n_steps=16, batch_size=16, n_epochs=30,
            learning_rate=5e-3, clip_range=0.3, ent_coef=0.05,
            policy_kwargs={"net_arch": []}, seed=0, device="cpu", verbose=0,
        )
        model.learn(args.timesteps)

        def greedy(obs: Any, mask: np.ndarray, rng: np.random.Generator) -> int:
            action, _ = model.predict(obs, deterministic=True, action_masks=mask)
            return int(action)

        trained_stats = evaluate(eval_env, greedy, args.seeds)
    finally:
        venv.close()
        eval_env.close()
        pool.close()
    print(f"{'policy':<22}{'mean reward':>12}{'correctness':>13}{'episodes':>10}")
    for name, stats in (("random (masked)", random_stats),
                        (f"MaskablePPO ({args.timesteps} st)", trained_stats)):
        print(f"{name:<22}{stats['mean_reward']:>12}{stats['correctness']:>13}"
              f"{stats['episodes']:>10}")
    print(f"seeds {args.seeds} x {len(CORRECT_SLOT)} tasks, sandbox {args.sandbox}, "
          f"{time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
