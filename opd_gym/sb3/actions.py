"""Action wrapper: `Discrete(K)` over candidate tool calls, with masks for MaskablePPO.

The candidates are a fixed macro list, or come per step from a callable (for example an
LLM proposing K actions). Slot i's text is sent to the env as the model output; empty
slots are masked in `action_masks()`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, SupportsFloat, TypeAlias

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from opd_gym.errors import ConfigError
from opd_gym.tools import format_tool_call

#: One candidate: model text, one call `{"name", "arguments"}` or `(name, arguments)`, a list
#: of calls run in one turn, or None for an empty (masked) slot.
Candidate: TypeAlias = (
    str | Mapping[str, Any] | tuple[str, Mapping[str, Any]] | Sequence[Any] | None
)
CandidateFn: TypeAlias = Callable[[str, Mapping[str, Any]], Sequence[Candidate]]

#: Ready-made macros for a coding meta-controller.
RUN_TESTS = format_tool_call(  # pytest's own exit code, the summary at the end
    "terminal", {"command": "(set -o pipefail; python3 -m pytest -q 2>&1 | tail -n 15)"}
)
LIST_FILES = format_tool_call("terminal", {"command": "ls -la"})
SUBMIT = format_tool_call("submit")

#: Text sent when the policy picks an empty slot: no tool call, so the env answers with a
#: format error (it never crashes), and `max_format_errors` such turns end the episode.
EMPTY_SLOT = "(no action: the chosen candidate slot is empty)"


def candidate_text(candidate: Candidate) -> str | None:
    """The model-output text of a candidate (None for an empty slot)."""
    if candidate is None or isinstance(candidate, str):
        return candidate
    if isinstance(candidate, Mapping):
        return format_tool_call(str(candidate["name"]), dict(candidate.get("arguments") or {}))
    if (isinstance(candidate, tuple) and len(candidate) == 2 and isinstance(candidate[0], str)
            and (candidate[1] is None or isinstance(candidate[1], Mapping))):
        return format_tool_call(candidate[0], dict(candidate[1] or {}))
    if isinstance(candidate, Sequence):
        texts = [candidate_text(part) for part in candidate]
        if not texts or any(text is None for text in texts):
            raise ConfigError("a list of calls must be non-empty and hold no empty slot")
        return "\n".join(t for t in texts if t is not None)
    raise TypeError(f"unsupported candidate {type(candidate).__name__}")


class DiscreteToolCalls(gym.ActionWrapper[str, np.int64, Any]):
    """`Discrete(K)` actions over candidate tool calls; `action_masks()` marks the filled slots.

    `candidates` is a fixed list (macros) or a callable `(observation, info) -> list`
    called after `reset` and after every step that does not end the episode; it may
    return fewer than K candidates (the rest are masked), never more. The observation is
    passed through unchanged, so put an observation wrapper (`HashedTextObservation`,
    `TokenIdObservation`) outside this one. `info["candidates"]` lists the texts of the
    next step's slots (None when empty) unless `candidates_in_info=False`.
    """

    def __init__(
        self,
        env: gym.Env[Any, Any],
        candidates: Sequence[Candidate] | CandidateFn,
        k: int | None = None,
        candidates_in_info: bool = True,
    ) -> None:
        super().__init__(env)
        if callable(candidates):
            if k is None:
                raise ConfigError("give k (the number of slots) with a candidate callable")
            self._fn: CandidateFn | None = candidates
            fixed: list[str | None] = []
        else:
            self._fn = None
            fixed = [candidate_text(c) for c in candidates]
            k = len(fixed) if k is None else k
        if k < 1:
            raise ConfigError("need at least one candidate slot")
        self.k = k
        self.action_space = spaces.Discrete(k)
        self.candidates_in_info = candidates_in_info
        self._fixed = fixed
        self._slots: list[str | None] = [None] * k
        if self._fn is None:
            self._slots = self._fill(fixed)

    def _fill(self, texts: Sequence[str | None]) -> list[str | None]:
        if len(texts) > self.k:
            raise ConfigError(f"{len(texts)} candidates for {self.k} slots")
        return list(texts) + [None] * (self.k - len(texts))

    def _refresh(self, observation: Any, info: dict[str, Any]) -> None:
        if self._fn is not None:
            self._slots = self._fill([candidate_text(c) for c in self._fn(observation, info)])
        if self.candidates_in_info:
            info["candidates"] = list(self._slots)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._refresh(obs, info)
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(self.action(action))
        if not (terminated or truncated):
            self._refresh(obs, info)
        return obs, reward, terminated, truncated, info

    def action(self, action: Any) -> str:
        """The text of slot `action` (`EMPTY_SLOT` when that slot is empty)."""
        index = int(np.asarray(action).reshape(()))
        if not 0 <= index < self.k:
            raise ConfigError(f"action {index} outside Discrete({self.k})")
        text = self._slots[index]
        return EMPTY_SLOT if text is None else text

    def action_masks(self) -> np.ndarray:
        """Which slots hold a candidate now (bool, shape (K,)); what MaskablePPO reads."""
        mask = np.array([text is not None for text in self._slots], dtype=bool)
        if not mask.any():  # a policy must be able to act: leave every slot open
            mask[:] = True
        return mask

    @property
    def slots(self) -> list[str | None]:
        """The current candidate texts (None for an empty slot)."""
        return list(self._slots)
