"""Second line of defence against a student that writes its own hint.

If a hint contains text the student produced (a judge quoting command output, an LLM judge
copying the assistant's message), the hinted teacher rates the student's tokens of that text
far higher than the student did, and a reverse-KL trainer rewards echoing text into the next
state. Positions of the scored response that reproduce an n-gram of the hint (``min_words``
consecutive words, compared case-insensitively on ``\\w+`` words) are found here; the scorer
reports them per record (``OPDRecord.copied``) and in the run metrics, and masks them by
default so they carry no teacher signal.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from opd_gym.errors import ConfigError

WORD_RE = re.compile(r"\w+", re.UNICODE)
COPY_GUARDS = ("mask", "keep")


def _words(text: str) -> list[tuple[str, int, int]]:
    """Lower-cased words of `text` with their character spans."""
    return [(m.group().lower(), m.start(), m.end()) for m in WORD_RE.finditer(text)]


def token_spans(tokenizer: Any, ids: Sequence[int]) -> tuple[str, list[tuple[int, int]]]:
    """The response decoded token by token, and each token's character span in that text."""
    pieces = [tokenizer.decode([int(i)], skip_special_tokens=False) for i in ids]
    spans, at = [], 0
    for piece in pieces:
        spans.append((at, at + len(piece)))
        at += len(piece)
    return "".join(pieces), spans


def copied_ranges(response: str, hint: str, min_words: int = 4) -> list[tuple[int, int]]:
    """Character ranges of `response` that reproduce `min_words` consecutive words of `hint`."""
    if min_words < 1:
        raise ConfigError("min_words must be >= 1")
    hint_words = [w for w, _, _ in _words(hint)]
    grams = {
        tuple(hint_words[i:i + min_words]) for i in range(len(hint_words) - min_words + 1)
    }
    if not grams:
        return []
    words = _words(response)
    ranges = []
    for i in range(len(words) - min_words + 1):
        if tuple(w for w, _, _ in words[i:i + min_words]) in grams:
            ranges.append((words[i][1], words[i + min_words - 1][2]))
    return ranges


def copied_positions(
    tokenizer: Any, ids: Sequence[int], hint: str | None, min_words: int = 4
) -> np.ndarray:
    """Bool [T]: True where response token j overlaps text that reproduces an n-gram of `hint`."""
    out = np.zeros(len(ids), np.bool_)
    if not hint or not len(ids):
        return out
    text, spans = token_spans(tokenizer, ids)
    for lo, hi in copied_ranges(text, hint, min_words):
        for j, (a, b) in enumerate(spans):
            if a < hi and b > lo:
                out[j] = True
    return out
