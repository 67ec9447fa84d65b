"""Gymnasium spaces for text: arbitrary Unicode observations and model-output actions.

`gymnasium.spaces.Text` only holds characters of a fixed charset (by default no spaces, no
newlines, no non-ASCII), so it cannot describe source code or chat text. These spaces accept
any Python string within a length range; the action space also accepts the token-carrying
action forms described in `opd_gym.actions`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium.spaces import Space

from opd_gym.errors import ConfigError

# Characters `sample()` draws from: printable ASCII, whitespace and a spread of non-ASCII text.
SAMPLE_ALPHABET = (
    "".join(chr(c) for c in range(0x20, 0x7F))
    + "\n\t"
    + "éüßñçøÅΩπλЖжяשעربي中文字日本語한국어ไทย…“”‘’–—€£¥°±×÷→←✓✗😀🚀"
)
DEFAULT_MAX_LENGTH = 1 << 22


class UnicodeText(Space[str]):
    """Any `str` whose length lies in [min_length, max_length] (no charset restriction)."""

    def __init__(
        self,
        max_length: int = DEFAULT_MAX_LENGTH,
        *,
        min_length: int = 0,
        sample_max_length: int = 64,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        if min_length < 0 or max_length < min_length:
            raise ConfigError(f"need 0 <= min_length <= max_length, got {min_length}, {max_length}")
        self.min_length = int(min_length)
        self.max_length = int(max_length)
        self.sample_max_length = max(int(sample_max_length), self.min_length)
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A random string mixing ASCII, whitespace and non-ASCII characters."""
        if mask is not None or probability is not None:
            raise NotImplementedError(f"{type(self).__name__}.sample takes no mask or probability")
        high = min(self.max_length, self.sample_max_length)
        length = int(self.np_random.integers(self.min_length, high + 1))
        picks = self.np_random.integers(0, len(SAMPLE_ALPHABET), size=length)
        return "".join(SAMPLE_ALPHABET[i] for i in picks)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def to_jsonable(self, sample_n: Any) -> list[Any]:
        return list(sample_n)

    def from_jsonable(self, sample_n: list[Any]) -> list[Any]:
        return list(sample_n)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(min_length={self.min_length}, max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and other.min_length == self.min_length  # type: ignore[attr-defined]
            and other.max_length == self.max_length  # type: ignore[attr-defined]
        )

    __hash__ = None  # type: ignore[assignment]  # mutable rng state, like other spaces


class ModelOutput(UnicodeText):
    """The action space: model text, a `TokenText`, or a mapping carrying text or tool calls.

    Accepted mappings: `{"text": str, "token_ids": [...], "logprobs": [...]}` and an OpenAI
    assistant message `{"role": "assistant", "content": str | None, "tool_calls": [...]}`.
    """

    def contains(self, x: Any) -> bool:
        if isinstance(x, str):
            return super().contains(x)
        if not isinstance(x, Mapping):
            return False
        text = x.get("text", x.get("content"))
        if text is not None and not (isinstance(text, str) and len(text) <= self.max_length):
            return False
        if "text" in x:
            return isinstance(x["text"], str)
        return x.get("role", "assistant") == "assistant" and (
            isinstance(x.get("content"), str) or isinstance(x.get("tool_calls"), list)
        )
