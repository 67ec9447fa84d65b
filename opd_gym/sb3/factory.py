"""Factories: a CodingEnv wrapped for SB3, and SB3 vector envs of them (Subproc or Dummy)."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv

from opd_gym.errors import ConfigError
from opd_gym.sb3.actions import Candidate, CandidateFn, DiscreteToolCalls
from opd_gym.sb3.observations import HashedTextObservation, TokenIdObservation

OBSERVATIONS = ("hashed", "hashed-flat", "tokens")


def make_env(
    candidates: Sequence[Candidate] | CandidateFn,
    k: int | None = None,
    observation: str = "hashed",
    observation_kwargs: Mapping[str, Any] | None = None,
    **env_kwargs: Any,
) -> gym.Env[Any, Any]:
    """A `CodingEnv(**env_kwargs)` with `DiscreteToolCalls` inside and an observation wrapper
    outside: `"hashed"` (Dict, MultiInputPolicy), `"hashed-flat"` (Box, MlpPolicy) or
    `"tokens"` (Dict for `TokenEmbeddingExtractor`)."""
    from opd_gym.env import CodingEnv

    if observation not in OBSERVATIONS:
        raise ConfigError(f"observation must be one of {OBSERVATIONS}")
    env: gym.Env[Any, Any] = DiscreteToolCalls(CodingEnv(**env_kwargs), candidates, k=k)
    kwargs = dict(observation_kwargs or {})
    if observation == "tokens":
        return TokenIdObservation(env, **kwargs)
    if observation == "hashed-flat":
        kwargs["flatten"] = True
    return HashedTextObservation(env, **kwargs)


def make_vec_env(
    n_envs: int,
    candidates: Sequence[Candidate] | CandidateFn,
    k: int | None = None,
    observation: str = "hashed",
    observation_kwargs: Mapping[str, Any] | None = None,
    subprocess: bool = True,
    seed: int | None = None,
    **env_kwargs: Any,
) -> VecEnv:
    """SB3's `make_vec_env` over `make_env(...)`: each env in a `Monitor` (episode stats in
    `info["episode"]`), in a `SubprocVecEnv` (default; one process per env) or a
    `DummyVecEnv`. Every env's containers are released by the vec env's `close()`."""
    factory = functools.partial(
        make_env, candidates, k, observation, observation_kwargs, **env_kwargs
    )
    return sb3_make_vec_env(
        factory, n_envs=n_envs, seed=seed,
        vec_env_cls=SubprocVecEnv if subprocess else DummyVecEnv,
    )
