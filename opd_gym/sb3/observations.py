"""Observation wrappers: the env's text observation as fixed-size numeric `Dict`/`Box` spaces.

They read only what `reset`/`step` return (the observation text and `info`), never the
env's internals, so they work over any wrapper stack, including `DiscreteToolCalls`.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from opd_gym.errors import ConfigError
from opd_gym.sb3.features import (
    NUMERIC_FEATURES,
    EpisodeTracker,
    HashedNgrams,
    as_tokenizer,
    pad_ids,
)

_NUMERIC_SPACE = spaces.Box(0.0, 1.0, shape=(len(NUMERIC_FEATURES),), dtype=np.float32)


class _TextFeatures(gym.ObservationWrapper[Any, Any, str]):
    """Shared part: tracks the episode from (obs, info) and keeps the task prompt."""

    def __init__(self, env: gym.Env[str, Any]) -> None:
        super().__init__(env)
        self._tracker = EpisodeTracker()
        self._prompt = ""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._tracker.reset()
        self._tracker.update(str(obs), info)
        self._start_episode(str(obs))
        return self.observation(obs), info

    def _start_episode(self, prompt: str) -> None:
        """Keep what the episode's first observation (the task prompt) gives."""
        self._prompt = prompt

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._tracker.update(str(obs), info)
        return self.observation(obs), reward, terminated, truncated, info


class HashedTextObservation(_TextFeatures):
    """Dict obs for `MultiInputPolicy`: hashed n-grams of the prompt and the latest text, and
    `numeric` episode features (`NUMERIC_FEATURES`); or one flat Box with `flatten=True`.

    Keys: `prompt` (the task prompt, fixed for the episode; omitted with
    `include_prompt=False`), `text` (the latest observation), `numeric`.
    """

    def __init__(
        self,
        env: gym.Env[str, Any],
        n_features: int = 512,
        ngram_range: tuple[int, int] = (1, 2),
        include_prompt: bool = True,
        include_numeric: bool = True,
        flatten: bool = False,
    ) -> None:
        super().__init__(env)
        self.hasher = HashedNgrams(n_features, ngram_range)
        box = spaces.Box(0.0, 1.0, shape=(n_features,), dtype=np.float32)
        parts: dict[str, spaces.Box] = {}
        if include_prompt:
            parts["prompt"] = box
        parts["text"] = box
        if include_numeric:
            parts["numeric"] = _NUMERIC_SPACE
        self._keys = tuple(parts)
        self.flatten = flatten
        if flatten:
            size = sum(int(space.shape[0]) for space in parts.values())
            self.observation_space = spaces.Box(0.0, 1.0, shape=(size,), dtype=np.float32)
        else:
            self.observation_space = spaces.Dict(parts)
        self._prompt_features = np.zeros(n_features, dtype=np.float32)

    def _start_episode(self, prompt: str) -> None:
        self._prompt = prompt
        self._prompt_features = self.hasher(prompt)

    def observation(self, observation: str) -> dict[str, np.ndarray] | np.ndarray:
        """The features of the latest observation text, with the prompt and numeric ones."""
        values = {
            "prompt": self._prompt_features.copy(),
            "text": self.hasher(str(observation)),
            "numeric": self._tracker.vector(),
        }
        if self.flatten:
            return np.concatenate([values[key] for key in self._keys]).astype(np.float32)
        return {key: values[key] for key in self._keys}


class TokenIdObservation(_TextFeatures):
    """Dict obs of padded token ids with a 0/1 mask, for an embedding extractor
    (`TokenEmbeddingExtractor`), plus the `numeric` episode features.

    Keys: `token_ids` (int64, 0-padded) and `token_mask` (float32 1/0) of the latest
    observation (its last `max_length` tokens by default, where pytest summaries are);
    `prompt_ids`/`prompt_mask` (the task prompt's first `prompt_length` tokens) when
    `prompt_length > 0`; `numeric`. The tokenizer is UTF-8 bytes by default, or any
    callable `str -> ids` with `vocab_size`, or a Hugging Face tokenizer.
    """

    def __init__(
        self,
        env: gym.Env[str, Any],
        max_length: int = 256,
        tokenizer: Any = None,
        vocab_size: int | None = None,
        keep: str = "end",
        prompt_length: int = 0,
        include_numeric: bool = True,
    ) -> None:
        super().__init__(env)
        if max_length < 1 or prompt_length < 0:
            raise ConfigError("max_length must be >= 1 and prompt_length >= 0")
        self.encode, self.vocab_size = as_tokenizer(tokenizer, vocab_size)
        self.max_length, self.keep, self.prompt_length = max_length, keep, prompt_length
        pad_ids([], 1, self.vocab_size, keep)  # validates `keep` now, not at the first reset

        def ids_space(n: int) -> spaces.Box:
            return spaces.Box(0, self.vocab_size - 1, shape=(n,), dtype=np.int64)

        def mask_space(n: int) -> spaces.Box:
            return spaces.Box(0.0, 1.0, shape=(n,), dtype=np.float32)

        parts: dict[str, spaces.Box] = {
            "token_ids": ids_space(max_length),
            "token_mask": mask_space(max_length),
        }
        if prompt_length:
            parts["prompt_ids"] = ids_space(prompt_length)
            parts["prompt_mask"] = mask_space(prompt_length)
        if include_numeric:
            parts["numeric"] = _NUMERIC_SPACE
        self.observation_space = spaces.Dict(parts)
        self._prompt_ids = np.zeros(prompt_length, dtype=np.int64)
        self._prompt_mask = np.zeros(prompt_length, dtype=np.float32)

    def _start_episode(self, prompt: str) -> None:
        self._prompt = prompt
        if self.prompt_length:
            self._prompt_ids, self._prompt_mask = pad_ids(
                self.encode(prompt), self.prompt_length, self.vocab_size, "start"
            )

    def observation(self, observation: str) -> dict[str, np.ndarray]:
        """Token ids and mask of the latest observation text, with the numeric features."""
        ids, mask = pad_ids(self.encode(str(observation)), self.max_length, self.vocab_size,
                            self.keep)
        out = {"token_ids": ids, "token_mask": mask}
        if self.prompt_length:
            out["prompt_ids"] = self._prompt_ids.copy()
            out["prompt_mask"] = self._prompt_mask.copy()
        if "numeric" in self.observation_space.spaces:
            out["numeric"] = self._tracker.vector()
        return out
