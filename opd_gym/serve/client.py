"""Client side of `opd-gym serve` for trainers: play an episode token-exact, build its sequence.

`TurnSequence` is what a GRPO trainer's `rollout_func` returns for one multi-turn episode:
the sequence the model saw, i.e. the first prompt's ids, then each turn's sampled ids with
the ids the env put between turns (tool output, the chat template's role markers) in between,
masked out (`env_mask` 0, logprob 0.0), never the turns' sampled ids glued together.
`play_episode` drives one served episode with openenv-core's own client, sending each turn's
`token_ids`, `logprobs` and `prompt_ids`; `rollout_func` plays one per prompt, concurrently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Sampled:
    """One turn as the client's sampler produced it: the text and the ids behind it."""

    text: str
    token_ids: list[int]
    logprobs: list[float]
    prompt_ids: list[int]  # the ids the model was prompted with for this turn


@dataclass
class TurnSequence:
    """An episode's token sequence as the model saw it, in TRL's `rollout_func` terms."""

    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)  # 1: sampled by the model, 0: the env's
    turns: int = 0

    def add(self, prompt_ids: Sequence[int], token_ids: Sequence[int],
            logprobs: Sequence[float]) -> None:
        """Append one turn sampled from `prompt_ids`; raises ValueError when that prompt does
        not extend the sequence so far (the chat template rewrote the history, so no single
        sequence is what the model saw) or when the logprobs do not align with the ids."""
        if len(logprobs) != len(token_ids):
            raise ValueError(f"{len(logprobs)} logprobs for {len(token_ids)} token ids")
        prompt = [int(i) for i in prompt_ids]
        if not self.prompt_ids and not self.completion_ids:
            self.prompt_ids = prompt
        else:
            seen = self.prompt_ids + self.completion_ids
            if prompt[:len(seen)] != seen:
                at = next((i for i, (a, b) in enumerate(zip(prompt, seen, strict=False))
                           if a != b), min(len(prompt), len(seen)))
                raise ValueError(
                    f"turn {self.turns}: its prompt does not extend the sequence so far (they "
                    f"differ at position {at}): the chat template rewrote the history; train "
                    "on each turn as its own sequence")
            between = prompt[len(seen):]
            self.completion_ids += between
            self.logprobs += [0.0] * len(between)
            self.env_mask += [0] * len(between)
        self.completion_ids += [int(i) for i in token_ids]
        self.logprobs += [float(p) for p in logprobs]
        self.env_mask += [1] * len(token_ids)
        self.turns += 1

    def to_dict(self) -> dict[str, Any]:
        """The fields a `rollout_func` returns per episode (TRL reads `env_mask` as its
        tool mask: only the model's own tokens are trained on)."""
        return {"prompt_ids": list(self.prompt_ids), "completion_ids": list(self.completion_ids),
                "logprobs": list(self.logprobs), "env_mask": list(self.env_mask)}


Sampler = Callable[[dict[str, Any]], Sampled]  # the observation's info -> the sampled turn


async def play_episode(url: str, task_id: str | None, seed: int, sample: Sampler, *,
                       message_timeout_s: float = 600.0) -> dict[str, Any]:
    """Play one served episode: reset, then `sample(info)` and a token-exact step per turn
    until it ends; the episode's `TurnSequence` fields plus `env_reward` and `turns`."""
    from openenv.core.generic_client import GenericEnvClient

    sequence = TurnSequence()
    async with GenericEnvClient(base_url=url, message_timeout_s=message_timeout_s) as env:
        result = await env.reset(seed=seed, **({"task_id": task_id} if task_id else {}))
        while not result.done:
            turn = sample(result.observation["info"])
            sequence.add(turn.prompt_ids, turn.token_ids, turn.logprobs)
            result = await env.step({"text": turn.text, "token_ids": turn.token_ids,
                                     "logprobs": turn.logprobs, "prompt_ids": turn.prompt_ids})
    return {**sequence.to_dict(), "env_reward": float(result.reward or 0.0),
            "turns": sequence.turns}


def rollout_func(url: str, sample: Sampler, *, seed_base: int = 1000
                 ) -> Callable[[list[str], Any], dict[str, list[Any]]]:
    """A `GRPOTrainer(rollout_func=...)`: each prompt is a task id, played as one episode on
    the server at `url`, all at once (up to its --max-sessions); seeds differ per step."""
    def run(prompts: list[str], trainer: Any) -> dict[str, list[Any]]:
        step = int(getattr(getattr(trainer, "state", None), "global_step", 0) or 0)

        async def play_all() -> list[dict[str, Any]]:
            return await asyncio.gather(*(play_episode(url, task_id, step * seed_base + i,
                                                       sample)
                                          for i, task_id in enumerate(prompts)))
        rows = asyncio.run(play_all())
        return {key: [row[key] for row in rows] for key in rows[0]}
    return run


__all__ = ["Sampled", "Sampler", "TurnSequence", "play_episode", "rollout_func"]
