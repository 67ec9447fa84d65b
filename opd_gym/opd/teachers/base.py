"""The Teacher protocol: score given token ids of a student response under a teacher model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from opd_gym.errors import ConfigError, ModelError


class ContextTooLong(ConfigError):
    """A teacher input longer than the teacher's context window (`context_limit`)."""


@dataclass(frozen=True)
class ScoreRequest:
    """One teacher input and the half-open ranges of it whose tokens are to be scored.

    `ids` is the full teacher input (context + hint + student response tokens). Each span
    (start, end) selects student tokens ids[start:end]; position j of a span's scores is
    log p(ids[start + j] | ids[:start + j]). One span per request in "turn" hint scope, one
    per turn in "episode" scope.

    `candidates` (optional) asks for the teacher's logprobs of given token ids at each scored
    position (e.g. the student's own top-K): one entry per span, None or an int array
    [end - start, C] of token ids; the scores come back as SpanScores.candidate_logprobs.
    """

    ids: tuple[int, ...]
    spans: tuple[tuple[int, int], ...]
    candidates: tuple[np.ndarray | None, ...] | None

    def __init__(self, ids: Sequence[int], spans: Sequence[tuple[int, int]],
                 candidates: Sequence[Any] | None = None) -> None:
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
        object.__setattr__(self, "candidates", _check_candidates(candidates, self.spans))

    @property
    def has_candidates(self) -> bool:
        """True when any span asks for candidate logprobs."""
        return self.candidates is not None and any(c is not None for c in self.candidates)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ScoreRequest):
            return NotImplemented
        if self.ids != other.ids or self.spans != other.spans:
            return False
        a, b = self.candidates or (), other.candidates or ()
        a = a if any(c is not None for c in a) else ()
        b = b if any(c is not None for c in b) else ()
        if len(a) != len(b):
            return False
        return all((x is None and y is None) or (x is not None and y is not None
                                                 and np.array_equal(x, y))
                   for x, y in zip(a, b, strict=True))

    def __hash__(self) -> int:
        return hash((self.ids, self.spans))


def _check_candidates(candidates: Sequence[Any] | None,
                      spans: tuple[tuple[int, int], ...]) -> tuple[np.ndarray | None, ...] | None:
    """Validate per-span candidate ids: None or an integer array [span length, C]."""
    if candidates is None:
        return None
    if isinstance(candidates, np.ndarray) or not isinstance(candidates, Sequence):
        raise ValueError("ScoreRequest candidates must be a sequence with one entry per span "
                         f"(None or an int array [T, C]), got {type(candidates).__name__}")
    if len(candidates) != len(spans):
        raise ValueError(f"ScoreRequest candidates has {len(candidates)} entries for "
                         f"{len(spans)} spans (one per span, None where not wanted)")
    out: list[np.ndarray | None] = []
    for k, (c, (start, end)) in enumerate(zip(candidates, spans, strict=True)):
        if c is None:
            out.append(None)
            continue
        arr = np.asarray(c)
        if arr.ndim != 2 or arr.shape[0] != end - start:
            raise ValueError(f"ScoreRequest candidates[{k}] has shape {arr.shape}, expected "
                             f"[{end - start}, C] for span ({start}, {end})")
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"ScoreRequest candidates[{k}] must hold integer token ids, "
                             f"got dtype {arr.dtype}")
        if arr.size and arr.min() < 0:
            raise ValueError(f"ScoreRequest candidates[{k}] holds a negative token id "
                             f"{int(arr.min())}")
        arr = arr.astype(np.int64, copy=True)
        arr.setflags(write=False)
        out.append(arr)
    return tuple(out)


@dataclass(frozen=True)
class SpanScores:
    """Teacher scores of one span: float32 token_logprobs [T], int32 topk_ids and
    float32 raw (not renormalised) topk_logprobs [T, K], top-K sorted by descending logprob;
    float32 candidate_logprobs [T, C] when the request gave candidates for the span, else None."""

    token_logprobs: np.ndarray
    topk_ids: np.ndarray
    topk_logprobs: np.ndarray
    candidate_logprobs: np.ndarray | None = None

    def __post_init__(self) -> None:
        t = self.token_logprobs.shape[0]
        if self.token_logprobs.shape != (t,) or self.topk_ids.shape[:1] != (t,) or \
                self.topk_ids.shape != self.topk_logprobs.shape or self.topk_ids.ndim != 2:
            raise ValueError(
                f"SpanScores: inconsistent shapes token_logprobs {self.token_logprobs.shape}, "
                f"topk_ids {self.topk_ids.shape}, topk_logprobs {self.topk_logprobs.shape}")
        c = self.candidate_logprobs
        if c is not None and (c.ndim != 2 or c.shape[0] != t):
            raise ValueError(f"SpanScores: candidate_logprobs has shape {c.shape}, expected "
                             f"[{t}, C]")

    def __len__(self) -> int:
        return int(self.token_logprobs.shape[0])

    @classmethod
    def empty(cls, topk: int, candidates: int | None = None) -> SpanScores:
        """Scores of an empty span (with a [0, candidates] candidate array when one is asked)."""
        cand = None if candidates is None else np.zeros((0, candidates), np.float32)
        return cls(np.zeros(0, np.float32), np.zeros((0, topk), np.int32),
                   np.zeros((0, topk), np.float32), cand)


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


def context_limit(teacher: Any) -> int | None:
    """The most ids one teacher input may hold (its `context_limit`: the configured
    max_model_len, else the model's max_position_embeddings), or None when unknown."""
    limit = getattr(teacher, "context_limit", None)
    if isinstance(limit, bool) or not isinstance(limit, int | np.integer) or limit < 1:
        return None
    return int(limit)


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
        for k, cand in enumerate(req.candidates or ()):
            if cand is not None and cand.size and int(cand.max()) >= vocab_size:
                raise ValueError(f"request {i}: candidates[{k}] holds token id "
                                 f"{int(cand.max())}, outside the teacher's vocabulary "
                                 f"[0, {vocab_size})")


def reject_candidates(requests: Sequence[ScoreRequest], backend: str) -> None:
    """Raise ModelError when a request asks for candidate logprobs a backend cannot give."""
    for i, req in enumerate(requests):
        if isinstance(req, ScoreRequest) and req.has_candidates:
            raise ModelError(f"request {i}: candidate logprobs (ScoreRequest.candidates) are "
                             f"unsupported by this backend ({backend})")
