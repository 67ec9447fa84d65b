"""Token heatmap of one assistant turn: colour buckets, token names, and the HTML spans.

Each student token is a `<span class="tk CLASS">` whose data attributes carry what the hover
tooltip shows: position `j`, id `i`, teacher logprob `t`, student logprob `s` and the
teacher's top-K `k` ("id:logprob" pairs). The colour is teacher minus student logprob on a
diverging scale when the student's logprobs are known, else the teacher logprob on a
sequential scale; masked positions (no teacher signal) are grey.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

import numpy as np

from opd_gym.records.opd_record import OPDRecord

MAX_TOKENS = 4000  # per turn
MAX_TOTAL_TOKENS = 150_000  # per report (about 20-25 MB of HTML)
TOPK_SHOWN = 8

# Teacher minus student logprob (nats): upper edges of the buckets d0..d8 (d4 is ~0).
DIVERGING_EDGES = (-2.0, -1.0, -0.5, -0.15, 0.15, 0.5, 1.0, 2.0)
DIVERGING_COLOURS = ("#b2182b", "#d6604d", "#f4a582", "#fddbc7", "#ececec",
                     "#d1e5f0", "#92c5de", "#4393c3", "#2166ac")
# Teacher probability: lower edges of the buckets q0..q7 (q0 is p >= 0.9).
SEQUENTIAL_PROBS = (0.9, 0.5, 0.25, 0.1, 0.03, 0.01, 0.001)
SEQUENTIAL_COLOURS = ("#fff7ec", "#fee8c8", "#fdd49e", "#fdbb84", "#fc8d59", "#ef6548",
                      "#d7301f", "#990000")
DARK_BUCKETS = ("d0", "d1", "d7", "d8", "q6", "q7")  # need light text


def diverging_bucket(delta: float) -> str:
    """The class of a teacher-minus-student logprob (red: teacher less likely, blue: more)."""
    return f"d{sum(delta > edge for edge in DIVERGING_EDGES)}"


def sequential_bucket(logprob: float) -> str:
    """The class of a teacher logprob (light: likely under the teacher, dark: surprising)."""
    return f"q{sum(logprob < math.log(p) for p in SEQUENTIAL_PROBS)}"


def visible(text: str) -> str:
    """Token text with newlines, tabs and other control characters made visible."""
    if text and not text.strip(" "):
        return "\u00b7" * len(text)  # a run of spaces (indentation) as middle dots
    out = []
    for char in text:
        if char == "\n":
            out.append("\u21b5\n")
        elif char == "\t":
            out.append("\u21e5")
        elif char == "\r":
            out.append("\u240d")
        elif ord(char) < 32 or ord(char) == 127:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return "".join(out)


class TokenNames:
    """Display text of token ids via a transformers tokenizer, cached; `#id` without one."""

    def __init__(self, tokenizer: Any = None) -> None:
        self.tokenizer = tokenizer
        self.used: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        if token_id in self.used:
            return self.used[token_id]
        text = self._decode(token_id)
        if self.tokenizer is not None:
            self.used[token_id] = text
        return text

    def _decode(self, token_id: int) -> str:
        """Decode one id (special tokens kept), falling back to the raw vocabulary entry."""
        if self.tokenizer is None:
            return f"#{token_id}"
        text = None
        try:
            text = self.tokenizer.decode([token_id], skip_special_tokens=False,
                                         clean_up_tokenization_spaces=False)
        except Exception:
            pass
        if not text:
            try:
                text = self.tokenizer.convert_ids_to_tokens(token_id)
            except Exception:
                text = None
        return text if isinstance(text, str) and text else f"#{token_id}"


@dataclass
class TurnTokens:
    """The tokens of one assistant turn with whatever teacher/student signal exists."""

    token_ids: list[int]
    record: OPDRecord | None = None
    student_logprobs: list[float] | None = None

    @classmethod
    def build(cls, record: OPDRecord | None, turn: dict[str, Any]) -> TurnTokens | None:
        """From the turn's OPD record, else the ids/logprobs the agent handed in; None if none."""
        raw_lps = turn.get("logprobs")
        if record is not None:
            ids = record.token_ids.tolist()
            if record.student_logprobs is not None:
                student = [float(x) for x in record.student_logprobs]
            else:
                student = _floats(raw_lps, len(ids))
            return cls(ids, record, student)
        raw_ids = turn.get("token_ids")
        if not isinstance(raw_ids, list) or not raw_ids:
            return None
        try:
            ids = [int(x) for x in raw_ids]
        except (TypeError, ValueError):
            return None
        return cls(ids, None, _floats(raw_lps, len(ids)))

    @property
    def diverging(self) -> bool:
        """True when colour means teacher minus student (some position has both logprobs)."""
        if self.record is None or self.student_logprobs is None:
            return False
        teacher = self.record.teacher_token_logprobs
        return any(math.isfinite(s) and m and math.isfinite(float(t)) for s, m, t in
                   zip(self.student_logprobs, self.record.mask, teacher, strict=False))

    def stats(self) -> dict[str, Any]:
        """Per-turn numbers for the heatmap header."""
        out: dict[str, Any] = {"tokens": len(self.token_ids)}
        record = self.record
        if record is None:
            return out
        on = record.mask
        out["scored"] = int(on.sum())
        if on.any():
            out["mean teacher lp"] = float(record.teacher_token_logprobs[on].mean())
            if record.topk:
                best = np.argmax(np.nan_to_num(record.teacher_topk_logprobs[on], nan=-np.inf), 1)
                top1 = record.teacher_topk_ids[on][np.arange(len(best)), best]
                out["teacher top-1 = sampled"] = float((top1 == record.token_ids[on]).mean())
        if self.diverging:
            deltas = [float(t) - s for t, s, m in zip(record.teacher_token_logprobs,
                                                        self.student_logprobs or [], on,
                                                        strict=False)
                      if m and math.isfinite(s)]
            out["mean teacher - student"] = sum(deltas) / len(deltas)
        return out

    def spans(self, names: TokenNames, count: int, topk_shown: int = TOPK_SHOWN) -> str:
        """The HTML spans of the first `count` tokens."""
        ids = self.token_ids[:count]
        student = (self.student_logprobs or [])[:count]
        student += [math.nan] * (len(ids) - len(student))
        record = self.record
        if record is None:
            mask, teacher, topk = [None] * len(ids), [math.nan] * len(ids), [""] * len(ids)
        else:
            mask = record.mask[:count].tolist()
            teacher = record.teacher_token_logprobs[:count].tolist()
            topk = _topk_rows(record, count, topk_shown, names)
        diverging = self.diverging
        parts = []
        for j, (token_id, s, on, t, k) in enumerate(zip(ids, student, mask, teacher, topk,
                                                         strict=True)):
            attrs = f'data-j="{j}" data-i="{token_id}"'
            if math.isfinite(s):
                attrs += f' data-s="{s:.3f}"'
            if on is None:
                cls = "n"
            elif not on:
                cls = "m"
            else:
                attrs += f' data-t="{t:.3f}"'
                cls = (diverging_bucket(t - s) if diverging and math.isfinite(s)
                       else sequential_bucket(t))
                if k:
                    attrs += f' data-k="{k}"'
            text = escape(visible(names(token_id)), quote=False)
            parts.append(f'<span class="tk {cls}" {attrs}>{text}</span>')
        return "".join(parts)


@dataclass
class TokenBudget:
    """Caps that keep the report small: tokens per turn, top-K per token, tokens in all."""

    per_turn: int = MAX_TOKENS
    topk: int = TOPK_SHOWN
    total: int = MAX_TOTAL_TOKENS
    used: int = 0

    def take(self, wanted: int) -> int:
        """How many of `wanted` tokens one turn may render (and count them as used)."""
        granted = max(0, min(wanted, self.per_turn, self.total - self.used))
        self.used += granted
        return granted


def _topk_rows(record: OPDRecord, count: int, shown: int, names: TokenNames) -> list[str]:
    """Per position, the teacher's best `shown` of its top-K as "id:logprob" pairs, by rank."""
    if not record.topk or shown <= 0:
        return [""] * min(count, record.num_tokens)
    lps = np.nan_to_num(record.teacher_topk_logprobs[:count], nan=-np.inf)
    order = np.argsort(-lps, axis=1, kind="stable")[:, :shown]
    ids = np.take_along_axis(record.teacher_topk_ids[:count], order, 1).tolist()
    lps = np.take_along_axis(lps, order, 1).tolist()
    rows = []
    for row_ids, row_lps in zip(ids, lps, strict=True):
        pairs = []
        for token_id, logprob in zip(row_ids, row_lps, strict=True):
            if token_id >= 0 and math.isfinite(logprob):
                names(token_id)
                pairs.append(f"{token_id}:{logprob:.2f}")
        rows.append(" ".join(pairs))
    return rows


def _floats(value: Any, length: int) -> list[float] | None:
    """A list of `length` floats (None/"NaN" -> nan) or None if the shape does not fit."""
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != length:
        return None
    out = []
    for item in value:
        try:
            out.append(float(item) if item is not None else math.nan)
        except (TypeError, ValueError):
            out.append(math.nan)
    return out


def load_tokenizer(spec: Any) -> Any:
    """A tokenizer for naming tokens: None, a tokenizer, "tiny", "hf:PATH" or a model folder
    (resolved by the spec registry, `opd_gym.specs.tokenizer`)."""
    from opd_gym.specs import tokenizer

    return tokenizer(spec)
