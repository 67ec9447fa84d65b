"""The `Policy` protocol: what a runner may ask of an agent, and the optional capabilities.

Every runner (local threads, Ray workers, the OPD wrapper's binding) talks to agents through
these protocols instead of probing attributes one by one: a policy `reset`s at the start of
an episode and `act`s once per turn; it may also be reseeded per episode (`SeededPolicy`),
hold resources to release (`Closeable`) or sample token ids the OPD records keep
(`TokenPolicy`: its tokenizer and the temperature its logprobs are at).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Policy(Protocol):
    """An agent: `reset` at the start of an episode, `act` once per turn.

    `act` returns an action the env accepts: text, a `TokenText` (text with the sampled ids),
    or an assistant message mapping."""

    def reset(self, observation: str, info: Mapping[str, Any]) -> None: ...

    def act(self, observation: str, info: Mapping[str, Any]) -> Any: ...


@runtime_checkable
class SeededPolicy(Protocol):
    """A policy whose sampling is reseeded per episode (so a seed gives the same episode
    whichever worker plays it)."""

    def seed_episode(self, seed: int) -> None: ...


@runtime_checkable
class Closeable(Protocol):
    """Anything holding resources (connections, a model) released by `close()`."""

    def close(self) -> None: ...


@runtime_checkable
class TokenPolicy(Protocol):
    """A policy sampling token ids here: its tokenizer (checked against the teacher's) and the
    temperature of the logprobs it returns (None: not known)."""

    tokenizer: Any
    logprob_temperature: float | None


def seed_episode(policy: Policy, seed: int) -> None:
    """Reseed `policy` for the episode of `seed` when it is a `SeededPolicy`."""
    if isinstance(policy, SeededPolicy):
        policy.seed_episode(seed)


def close(obj: Any) -> None:
    """Close `obj` when it is `Closeable` (a served policy, a teacher, a judge)."""
    if isinstance(obj, Closeable):
        obj.close()


__all__ = ["Closeable", "Policy", "SeededPolicy", "TokenPolicy", "close", "seed_episode"]
