"""The Teacher protocol: score given token ids of a student response under a teacher model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class ScoreRequest:
    """One teacher input and the half-open ranges of it whose tokens are to be scored.

    `ids` is the full teacher input (context + hint + student response tokens). Each span
    (start, end) selects student tokens ids[start:end]; position j of a span's scores is
    log p(ids[start + j] | ids[:start + j]). One span per request in "turn" hint scope, one
    per turn in "episode" scope.
    """

    ids: tuple[int, ...]
    spans: tuple[tuple[int, int], ...]

    def __init__(self, ids: Sequence[int], spans: Sequence[tuple[int, int]]) -> None:
        object.__setattr__(self, "ids", tuple(int(i) for i in ids))
        object.__setattr__(self, "spans", tuple((int(s), int(e)) for s, e in spans))
        n = len(self.ids)
        for start, end in self.spans:
            if start < 1:
                raise ValueError(f"ScoreRequest span ({start}, {end}): start must be >= 1 "
                                 "(the first token has no context to be predicted from)")
            if end < start or end > n:
                raise ValueError(f"ScoreRequest span ({start}, {end}) is outside the "
                                 f"{n} input ids or reversed")


@dataclass(frozen=True)
class SpanScores:
    """Teacher scores of one span: float32 token_logprobs [T], int32 topk_ids and
    float32 raw (not renormalised) topk_logprobs [T, K], top-K sorted by descending logprob."""

    token_logprobs: np.ndarray
    topk_ids: np.ndarray
    topk_logprobs: np.ndarray

    def __post_init__(self) -> None:
        t = self.token_logprobs.shape[0]
        if self.token_logprobs.shape != (t,) or self.topk_ids.shape[:1] != (t,) or \
                self.topk_ids.shape != self.topk_logprobs.shape or self.topk_ids.ndim != 2:
            raise ValueError(
                f"SpanScores: inconsistent shapes token_logprobs {self.token_logprobs.shape}, "
                f"topk_ids {self.topk_ids.shape}, topk_logprobs {self.topk_logprobs.shape}")

    def __len__(self) -> int:
        return int(self.token_logprobs.shape[0])

    @classmethod
    def empty(cls, topk: int) -> SpanScores:
        """Scores of an empty span."""
        return cls(np.zeros(0, np.float32), np.zeros((0, topk), np.int32),
                   np.zeros((0, topk), np.float32))


@runtime_checkable
class Teacher(Protocol):
    """Anything that scores student tokens: a local transformers model, a vLLM server, ..."""

    name: str
    tokenizer: Any

    @property
    def vocab_size(self) -> int:
        """Number of rows of the teacher's output distribution (top-K is bounded by it)."""
        ...

    def score(self, requests: Sequence[ScoreRequest], topk: int) -> list[list[SpanScores]]:
        """Per request, per span: the teacher's scores (see ScoreRequest for alignment)."""
        ...


def validate_requests(requests: Sequence[ScoreRequest], topk: int, vocab_size: int) -> None:
    """Raise a clear error for a bad top-K or ids outside the teacher's vocabulary."""
    if isinstance(topk, bool) or not isinstance(topk, int | np.integer):
        raise TypeError(f"topk must be an int, got {type(topk).__name__}")
    if topk < 0:
        raise ValueError(f"topk must be >= 0, got {topk}")
    if topk > vocab_size:
        raise ValueError(f"topk={topk} exceeds the teacher's vocabulary size {vocab_size}")
    for i, req in enumerate(requests):
        if not isinstance(req, ScoreRequest):
            raise TypeError(f"request {i} is a {type(req).__name__}, expected ScoreRequest")
        if req.ids and (min(req.ids) < 0 or max(req.ids) >= vocab_size):
            bad = next(t for t in req.ids if t < 0 or t >= vocab_size)
            raise ValueError(f"request {i}: token id {bad} is outside the teacher's "
                             f"vocabulary [0, {vocab_size}) - tokenizer mismatch?")
