"""The OPD record: teacher targets for one scored assistant turn, aligned to the student's tokens.

Position j always refers to the j-th token the student sampled. Positions without a teacher
signal have ``mask[j] == False`` and NaN teacher values (never a 0.0 filler, which a trainer
would read as a real "probability 1" target).

JSON form (``to_dict``): arrays become nested lists; non-finite floats, which JSON cannot
hold, become the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (the spellings of
JavaScript and Python's ``float()``), so the round trip is lossless. Top-K padding is
id ``-1`` with logprob ``"-Infinity"``.

``teacher_tail_logprobs[j]`` is log(1 - teacher top-K mass) at position j, the "other"
bucket a top-K trainer adds to make the K probabilities a full distribution. It is derived
from the top-K logprobs (older records without it load and get it computed), clamped to
``TAIL_FLOOR`` when the top-K carries (numerically) all the mass, 0.0 when K is 0, and NaN
where the mask is False, like every other teacher value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

import numpy as np

from opd_gym.errors import DatasetError


class SkipReason(StrEnum):
    """Why a turn carries no teacher signal: a stable name beside the free-text `error`."""

    JUDGE_ERROR = "judge_error"
    EMPTY_TURN = "empty_turn"
    NO_HINT = "no_hint"
    TEACHER_INPUT = "teacher_input"
    HISTORY_REWRITTEN = "history_rewritten"
    TEACHER_ERROR = "teacher_error"
    CONTEXT_TOO_LONG = "context_too_long"  # the teacher input is longer than its window
    COPIED_HINT = "copied_hint"
    OTHER = "other"

    @classmethod
    def from_error(cls, error: str | None) -> SkipReason | None:
        """The reason an older record's message names (records before this field existed)."""
        if not error:
            return None
        head = error.split(":", 1)[0].strip().lower().replace(" ", "_")
        try:
            return cls(head)
        except ValueError:
            return cls.OTHER


SCHEMA = "opd_gym.opd_record/1"
SCOPES = ("turn", "episode")
PAD_ID = -1
# The tail logprob when the top-K holds all the mass up to float32 rounding: log(float32 eps),
# a finite "practically nothing left" value instead of -inf (or NaN from log of a negative).
TAIL_FLOOR = float(np.log(np.finfo(np.float32).eps))


def tail_logprobs(topk_logprobs: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """log(1 - sum(exp(topk))) per row, float32 [T], computed stably; never NaN where scored.

    Uses log(-expm1(m)) near m = 0 and log1p(-exp(m)) below log(1/2) (m = logsumexp of the
    row), clamps to `TAIL_FLOOR` when the mass is (numerically) 1 or more, gives 0.0 for an
    empty or all-padding row (nothing in the top-K: all mass in the tail) and NaN where
    `mask` is False.
    """
    lps = np.asarray(topk_logprobs, np.float64)
    if lps.ndim != 2:
        raise ValueError(f"tail_logprobs: expected [T, K] logprobs, got shape {lps.shape}")
    t = lps.shape[0]
    out = np.zeros(t, np.float64)
    if lps.shape[1]:
        finite = np.where(np.isfinite(lps), lps, -np.inf)
        top = finite.max(axis=1)
        has = np.isfinite(top)
        safe_top = np.where(has, top, 0.0)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            m = safe_top + np.log(np.exp(finite - safe_top[:, None]).sum(axis=1))
            m = np.where(has, m, -np.inf)
            near = m > -np.log(2.0)
            tail = np.where(near, np.log(-np.expm1(np.minimum(m, 0.0))),
                            np.log1p(-np.exp(m)))
        tail = np.where(np.isfinite(tail), tail, TAIL_FLOOR)
        out = np.where(has, np.maximum(tail, TAIL_FLOOR), 0.0)
    if mask is not None:
        out = np.where(np.asarray(mask, np.bool_), out, np.nan)
    return out.astype(np.float32)


class SpanScoresLike(Protocol):
    """What a teacher returns for one span (see ``opd_gym.opd.teachers.base.SpanScores``)."""

    token_logprobs: np.ndarray
    topk_ids: np.ndarray
    topk_logprobs: np.ndarray


def _as_array(name: str, value: Any, kind: str, dtype: type, ndim: int) -> np.ndarray:
    """Convert `value` to a `dtype` array, refusing lossy kinds (e.g. floats as token ids)."""
    arr = np.asarray(value)
    if arr.size == 0 and arr.dtype.kind == "f" and kind != "f":
        arr = arr.astype(dtype)  # np.asarray([]) is float64; an empty list is fine anywhere
    if arr.dtype.kind not in kind:
        raise TypeError(f"OPDRecord.{name}: expected dtype kind {kind!r}, got {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"OPDRecord.{name}: expected {ndim}-D array, got shape {arr.shape}")
    if kind == "iu" and arr.size and (arr.min() < np.iinfo(np.int32).min or
                                      arr.max() > np.iinfo(np.int32).max):
        raise ValueError(f"OPDRecord.{name}: values do not fit in int32")
    return np.ascontiguousarray(arr, dtype=dtype)


@dataclass(eq=False)
class OPDRecord:
    """Teacher top-K and sampled-token logprobs for one assistant turn (schema: docs/opd.md)."""

    token_ids: np.ndarray
    teacher_token_logprobs: np.ndarray
    teacher_topk_ids: np.ndarray
    teacher_topk_logprobs: np.ndarray
    mask: np.ndarray
    student_logprobs: np.ndarray | None = None
    hint: str | None = None
    votes: list[Any] = field(default_factory=list)
    turn_index: int = 0
    retokenized: bool = False
    error: str | None = None
    timing: dict[str, float] = field(default_factory=dict)
    scope: str = "turn"
    copied: np.ndarray | None = None
    context: str = ""
    skip_reason: SkipReason | None = None
    teacher_tail_logprobs: np.ndarray | None = None
    student_topk_ids: np.ndarray | None = None
    teacher_candidate_logprobs: np.ndarray | None = None
    # footing of the numbers: the temperatures the logprobs are at, and how the ids are known
    student_temperature: float | None = None
    teacher_temperature: float = 1.0
    ids_unchecked: bool = False
    reconstructed: bool = False
    control_teacher_logprobs: np.ndarray | None = None
    # where student_logprobs come from when the policy gave none (None: from the policy)
    student_logprobs_source: str | None = None
    # whether the turn's prompt ids extend the previous turn's prompt + sampled ids token for
    # token (False: the agent rewrote or truncated its history; None: first turn or no ids)
    extends_previous: bool | None = None

    def __post_init__(self) -> None:
        self.token_ids = _as_array("token_ids", self.token_ids, "iu", np.int32, 1)
        t = self.token_ids.shape[0]
        self.teacher_token_logprobs = _as_array(
            "teacher_token_logprobs", self.teacher_token_logprobs, "fiu", np.float32, 1)
        self.teacher_topk_ids = _as_array("teacher_topk_ids", self.teacher_topk_ids, "iu",
                                          np.int32, 2)
        self.teacher_topk_logprobs = _as_array(
            "teacher_topk_logprobs", self.teacher_topk_logprobs, "fiu", np.float32, 2)
        self.mask = _as_array("mask", self.mask, "b", np.bool_, 1)
        if self.student_logprobs is not None:
            self.student_logprobs = _as_array(
                "student_logprobs", self.student_logprobs, "fiu", np.float32, 1)
        k = self.teacher_topk_ids.shape[1]
        expected = {
            "teacher_token_logprobs": (self.teacher_token_logprobs.shape, (t,)),
            "teacher_topk_ids": (self.teacher_topk_ids.shape, (t, k)),
            "teacher_topk_logprobs": (self.teacher_topk_logprobs.shape, (t, k)),
            "mask": (self.mask.shape, (t,)),
        }
        if self.student_logprobs is not None:
            expected["student_logprobs"] = (self.student_logprobs.shape, (t,))
        if self.copied is not None:
            self.copied = _as_array("copied", self.copied, "b", np.bool_, 1)
            expected["copied"] = (self.copied.shape, (t,))
        if self.teacher_tail_logprobs is not None:
            self.teacher_tail_logprobs = _as_array(
                "teacher_tail_logprobs", self.teacher_tail_logprobs, "fiu", np.float32, 1)
            expected["teacher_tail_logprobs"] = (self.teacher_tail_logprobs.shape, (t,))
        if self.control_teacher_logprobs is not None:  # the no-hint control's teacher logprobs
            self.control_teacher_logprobs = _as_array(
                "control_teacher_logprobs", self.control_teacher_logprobs, "fiu", np.float32, 1)
            expected["control_teacher_logprobs"] = (self.control_teacher_logprobs.shape, (t,))
        if self.student_topk_ids is not None:  # the student's own top-K ids [T, C]
            self.student_topk_ids = _as_array("student_topk_ids", self.student_topk_ids, "iu",
                                              np.int32, 2)
            expected["student_topk_ids"] = (self.student_topk_ids.shape[:1], (t,))
        if self.teacher_candidate_logprobs is not None:  # the teacher's logprobs of those ids
            self.teacher_candidate_logprobs = _as_array(
                "teacher_candidate_logprobs", self.teacher_candidate_logprobs, "fiu",
                np.float32, 2)
            width = None if self.student_topk_ids is None else self.student_topk_ids.shape
            expected["teacher_candidate_logprobs"] = (self.teacher_candidate_logprobs.shape,
                                                      width)
        for name, (got, want) in expected.items():
            if got != want:
                raise ValueError(f"OPDRecord.{name}: shape {got} does not match "
                                 f"{want} (T={t} tokens, K={k})")
        if self.teacher_candidate_logprobs is not None:  # no signal where the turn is unscored
            self.teacher_candidate_logprobs = np.where(
                self.mask[:, None], self.teacher_candidate_logprobs, np.float32(np.nan))
        if self.scope not in SCOPES:
            raise ValueError(f"OPDRecord.scope must be one of {SCOPES}, got {self.scope!r}")
        self.votes = list(self.votes)
        self.student_temperature = (None if self.student_temperature is None
                                    else float(self.student_temperature))
        self.teacher_temperature = float(self.teacher_temperature)
        self.ids_unchecked = bool(self.ids_unchecked)
        self.reconstructed = bool(self.reconstructed)
        self.extends_previous = (None if self.extends_previous is None
                                 else bool(self.extends_previous))
        self.timing = {str(key): float(v) for key, v in dict(self.timing).items()}
        self._check_fill_rules()
        if self.teacher_tail_logprobs is None:
            self.teacher_tail_logprobs = tail_logprobs(self.teacher_topk_logprobs, self.mask)
        else:
            tail = self.teacher_tail_logprobs
            if np.isnan(tail[self.mask]).any() or (tail[self.mask] > 0).any():
                raise ValueError("OPDRecord: teacher_tail_logprobs must be finite and <= 0 where "
                                 "mask is True")
            if not np.isnan(tail[~self.mask]).all():
                raise ValueError("OPDRecord: teacher_tail_logprobs must be NaN where mask is False")

    def _check_fill_rules(self) -> None:
        """Unscored positions hold NaN/-1; scored ones hold real values; padding is -1/-inf."""
        off = ~self.mask
        if off.any():
            if not np.isnan(self.teacher_token_logprobs[off]).all():
                raise ValueError("OPDRecord: teacher_token_logprobs must be NaN where mask is "
                                 "False (never a 0.0 filler)")
            if not np.isnan(self.teacher_topk_logprobs[off]).all():
                raise ValueError("OPDRecord: teacher_topk_logprobs must be NaN where mask is False")
            if not (self.teacher_topk_ids[off] == PAD_ID).all():
                raise ValueError("OPDRecord: teacher_topk_ids must be -1 where mask is False")
        on = self.mask
        if on.any():
            if np.isnan(self.teacher_token_logprobs[on]).any():
                raise ValueError("OPDRecord: teacher_token_logprobs has NaN where mask is True")
            ids, lps = self.teacher_topk_ids[on], self.teacher_topk_logprobs[on]
            if np.isnan(lps).any():
                raise ValueError("OPDRecord: teacher_topk_logprobs has NaN where mask is True")
            if not np.array_equal(ids == PAD_ID, np.isneginf(lps)):
                raise ValueError("OPDRecord: top-K padding must pair id -1 with logprob -inf")
            if (ids < PAD_ID).any():
                raise ValueError("OPDRecord: teacher_topk_ids has negative ids other than -1")

    @property
    def num_tokens(self) -> int:
        """T, the number of student tokens in the turn."""
        return int(self.token_ids.shape[0])

    @property
    def topk(self) -> int:
        """K, the width of the top-K arrays."""
        return int(self.teacher_topk_ids.shape[1])

    @property
    def num_copied(self) -> int:
        """Positions that reproduce an n-gram of the hint (masked unless the guard keeps them)."""
        return 0 if self.copied is None else int(self.copied.sum())

    @property
    def scored(self) -> bool:
        """True when at least one position carries a teacher signal."""
        return bool(self.mask.any())

    @classmethod
    def unscored(
        cls,
        token_ids: Sequence[int] | np.ndarray,
        error: str,
        *,
        reason: SkipReason | str | None = None,
        topk: int = 0,
        student_logprobs: Sequence[float] | np.ndarray | None = None,
        **fields: Any,
    ) -> OPDRecord:
        """A record for a turn the teacher could not score: mask all False, NaN teacher values;
        `reason` (a SkipReason) is the stable name of why, `error` the message."""
        if not error:
            raise ValueError("OPDRecord.unscored needs a non-empty error explaining why")
        ids = np.asarray(token_ids, dtype=np.int32).reshape(-1)
        t = ids.shape[0]
        return cls(
            token_ids=ids,
            teacher_token_logprobs=np.full(t, np.nan, np.float32),
            teacher_topk_ids=np.full((t, topk), PAD_ID, np.int32),
            teacher_topk_logprobs=np.full((t, topk), np.nan, np.float32),
            mask=np.zeros(t, np.bool_),
            student_logprobs=student_logprobs,
            error=error,
            skip_reason=SkipReason(reason) if reason else SkipReason.from_error(error),
            **fields,
        )

    @classmethod
    def from_scores(
        cls,
        token_ids: Sequence[int] | np.ndarray,
        scores: SpanScoresLike,
        *,
        student_logprobs: Sequence[float] | np.ndarray | None = None,
        **fields: Any,
    ) -> OPDRecord:
        """Build a record from a teacher's span scores; rows the teacher left NaN are masked off."""
        token_lp = np.asarray(scores.token_logprobs, np.float32).copy()
        topk_ids = np.asarray(scores.topk_ids, np.int32).copy()
        topk_lp = np.asarray(scores.topk_logprobs, np.float32).copy()
        mask = ~np.isnan(token_lp)
        topk_ids[~mask] = PAD_ID
        topk_lp[~mask] = np.nan
        return cls(
            token_ids=token_ids,
            teacher_token_logprobs=token_lp,
            teacher_topk_ids=topk_ids,
            teacher_topk_logprobs=topk_lp,
            mask=mask,
            student_logprobs=student_logprobs,
            **fields,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (lists; non-finite floats as "NaN"/"Infinity"/"-Infinity")."""
        return {
            "schema": SCHEMA,
            "token_ids": self.token_ids.tolist(),
            "teacher_token_logprobs": _floats_to_json(self.teacher_token_logprobs),
            "teacher_topk_ids": self.teacher_topk_ids.tolist(),
            "teacher_topk_logprobs": _floats_to_json(self.teacher_topk_logprobs),
            "topk": self.topk,
            "mask": self.mask.tolist(),
            "student_logprobs": (None if self.student_logprobs is None
                                 else _floats_to_json(self.student_logprobs)),
            "hint": self.hint,
            "votes": list(self.votes),
            "turn_index": int(self.turn_index),
            "retokenized": bool(self.retokenized),
            "error": self.error,
            "timing": dict(self.timing),
            "scope": self.scope,
            "copied": None if self.copied is None else self.copied.tolist(),
            "context": self.context,
            "skip_reason": None if self.skip_reason is None else str(self.skip_reason),
            "teacher_tail_logprobs": _floats_to_json(self.teacher_tail_logprobs),
            "student_temperature": self.student_temperature,
            "teacher_temperature": self.teacher_temperature,
            "ids_unchecked": self.ids_unchecked,
            "reconstructed": self.reconstructed,
            "extends_previous": self.extends_previous,
        } | ({} if self.control_teacher_logprobs is None else {
            "control_teacher_logprobs": _floats_to_json(self.control_teacher_logprobs),
        }) | ({} if self.student_logprobs_source is None else {
            "student_logprobs_source": self.student_logprobs_source,
        }) | ({} if self.student_topk_ids is None else {
            "student_topk_ids": self.student_topk_ids.tolist(),
            "teacher_candidate_logprobs": (None if self.teacher_candidate_logprobs is None else
                                           _floats_to_json(self.teacher_candidate_logprobs)),
        })

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OPDRecord:
        """Inverse of `to_dict`; validates like the constructor."""
        schema = data.get("schema", SCHEMA)
        if schema != SCHEMA:
            raise DatasetError(f"OPDRecord.from_dict: unsupported schema {schema!r} "
                             f"(expected {SCHEMA!r})")
        t = len(data["token_ids"])
        k = int(data.get("topk", 0))
        student = data.get("student_logprobs")
        return cls(
            token_ids=np.asarray(data["token_ids"], np.int64).reshape(t),
            teacher_token_logprobs=_floats_from_json(data["teacher_token_logprobs"], (t,)),
            teacher_topk_ids=np.asarray(data["teacher_topk_ids"], np.int64).reshape(t, k),
            teacher_topk_logprobs=_floats_from_json(data["teacher_topk_logprobs"], (t, k)),
            mask=np.asarray(data["mask"], np.bool_).reshape(t),
            student_logprobs=None if student is None else _floats_from_json(student, (t,)),
            hint=data.get("hint"),
            votes=list(data.get("votes") or []),
            turn_index=int(data.get("turn_index", 0)),
            retokenized=bool(data.get("retokenized", False)),
            error=data.get("error"),
            timing=dict(data.get("timing") or {}),
            scope=data.get("scope", "turn"),
            copied=None if data.get("copied") is None
            else np.asarray(data["copied"], np.bool_).reshape(t),
            context=str(data.get("context") or ""),
            skip_reason=_skip_reason(data),
            teacher_tail_logprobs=None if data.get("teacher_tail_logprobs") is None
            else _floats_from_json(data["teacher_tail_logprobs"], (t,)),
            student_temperature=data.get("student_temperature"),
            teacher_temperature=float(data.get("teacher_temperature", 1.0)),
            ids_unchecked=bool(data.get("ids_unchecked", False)),
            reconstructed=bool(data.get("reconstructed", False)),
            control_teacher_logprobs=None if data.get("control_teacher_logprobs") is None
            else _floats_from_json(data["control_teacher_logprobs"], (t,)),
            student_logprobs_source=data.get("student_logprobs_source"),
            extends_previous=data.get("extends_previous"),
            **_candidates_from_json(data, t),
        )


def _candidates_from_json(data: Mapping[str, Any], t: int) -> dict[str, Any]:
    """The student's top-K ids and the teacher's logprobs of them, when the record has them."""
    ids = data.get("student_topk_ids")
    if ids is None:
        return {}
    try:
        topk = np.asarray(ids, np.int64).reshape(t, -1) if t else np.zeros((0, 0), np.int64)
    except (TypeError, ValueError) as exc:
        raise DatasetError(f"OPDRecord.from_dict: bad student_topk_ids: {exc}") from exc
    lps = data.get("teacher_candidate_logprobs")
    return {"student_topk_ids": topk, "teacher_candidate_logprobs":
            None if lps is None else _floats_from_json(lps, topk.shape)}


def _skip_reason(data: Mapping[str, Any]) -> SkipReason | None:
    """The stored reason, or the one an older record's error message names."""
    stored = data.get("skip_reason")
    if stored:
        try:
            return SkipReason(stored)
        except ValueError:
            return SkipReason.OTHER
    mask = data.get("mask") or []
    return None if any(mask) else SkipReason.from_error(data.get("error"))


def _floats_to_json(arr: np.ndarray) -> list[Any]:
    """Nested lists of floats with non-finite values spelled as strings."""
    if np.isfinite(arr).all():
        return arr.tolist()
    obj = arr.astype(object)
    obj[np.isnan(arr)] = "NaN"
    obj[np.isposinf(arr)] = "Infinity"
    obj[np.isneginf(arr)] = "-Infinity"
    return obj.tolist()


def _floats_from_json(value: Any, shape: tuple[int, ...]) -> np.ndarray:
    """Inverse of `_floats_to_json` (float() parses "NaN", "Infinity" and "-Infinity")."""
    try:
        return np.asarray(value, dtype=object).astype(np.float32).reshape(shape)
    except (TypeError, ValueError) as exc:
        raise DatasetError(f"OPDRecord.from_dict: bad float array of expected shape {shape}: "
                         f"{exc} (non-finite values are spelled \"NaN\", \"Infinity\", "
                         f"\"-Infinity\")") from exc
