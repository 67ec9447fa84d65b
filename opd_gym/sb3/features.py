"""Fixed-size numeric features of the env's text observations and step info (numpy only).

Everything here is deterministic across processes (crc32, not Python's salted `hash`), so
the workers of a `SubprocVecEnv` featurise text identically.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from opd_gym.errors import ConfigError

_WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)
_PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|errors?|xfailed|xpassed)\b")

#: Names of the `numeric` feature vector, in order; every value lies in [0, 1].
NUMERIC_FEATURES: tuple[str, ...] = (
    "turn_fraction",  # turns used / max_turns
    "last_exit_ok",  # the step's last terminal command exited 0
    "last_exit_failed",  # ... exited non-zero (or timed out)
    "step_errors",  # format and tool errors this step, min(n, 4) / 4
    "format_error_streak",  # consecutive turns without a valid call, min(n, 4) / 4
    "files_changed",  # a write_file/edit_file call succeeded this episode
    "checked_since_change",  # a terminal command completed after the last file change
    "tests_seen",  # a pytest summary was seen in a terminal output, or the episode was graded
    "tests_passed_fraction",  # passed / (passed + failed + errors) of the latest such summary
    "graded",  # the episode ended and hidden tests graded it
)


class HashedNgrams:
    """Hashed bag of word n-grams: log(1 + count) per bucket, L2-normalised, in [0, 1]."""

    def __init__(
        self, n_features: int = 512, ngram_range: tuple[int, int] = (1, 2), lowercase: bool = True
    ) -> None:
        lo, hi = ngram_range
        if n_features < 1 or lo < 1 or hi < lo:
            raise ConfigError("need n_features >= 1 and 1 <= ngram_range[0] <= ngram_range[1]")
        self.n_features = n_features
        self.ngram_range = (lo, hi)
        self.lowercase = lowercase

    def __call__(self, text: str) -> np.ndarray:
        """The feature vector (float32, shape (n_features,)) of `text`."""
        out = np.zeros(self.n_features, dtype=np.float32)
        words = _WORD.findall(text.lower() if self.lowercase else text)
        lo, hi = self.ngram_range
        for n in range(lo, hi + 1):
            for i in range(len(words) - n + 1):
                gram = " ".join(words[i : i + n]).encode("utf-8", "surrogatepass")
                out[zlib.crc32(gram) % self.n_features] += 1.0
        np.log1p(out, out=out)
        norm = float(np.linalg.norm(out))
        if norm > 0:
            out /= norm
        return np.clip(out, 0.0, 1.0, out=out)


class ByteTokenizer:
    """UTF-8 bytes as token ids 1..256 (0 is padding): a tokenizer with no dependency."""

    vocab_size = 257

    def __call__(self, text: str) -> list[int]:
        """Token ids of `text`."""
        return [b + 1 for b in text.encode("utf-8", "surrogatepass")]


def as_tokenizer(
    tokenizer: Any, vocab_size: int | None
) -> tuple[Callable[[str], Sequence[int]], int]:
    """A `str -> ids` callable and its vocabulary size, from None, a callable or an HF tokenizer."""
    if tokenizer is None:
        byte = ByteTokenizer()
        return byte, byte.vocab_size
    if hasattr(tokenizer, "encode") and not callable(getattr(tokenizer, "vocab_size", None)):
        size = vocab_size or len(tokenizer)

        def encode(text: str) -> Sequence[int]:
            return tokenizer.encode(text, add_special_tokens=False)

        return encode, int(size)
    if not callable(tokenizer):
        raise TypeError("tokenizer must be None, a callable str -> ids, or have .encode()")
    size = vocab_size or getattr(tokenizer, "vocab_size", None)
    if not isinstance(size, int) or size < 2:
        raise ConfigError("give vocab_size (> 1) with a tokenizer callable")
    return tokenizer, size


def pad_ids(
    ids: Sequence[int], max_length: int, vocab_size: int, keep: str = "end"
) -> tuple[np.ndarray, np.ndarray]:
    """`ids` cut to `max_length` (keeping the start or the end) and padded with 0, and the mask."""
    if keep not in ("start", "end"):
        raise ConfigError("keep must be 'start' or 'end'")
    ids = list(ids)
    if len(ids) > max_length:
        ids = ids[:max_length] if keep == "start" else ids[-max_length:]
    out = np.zeros(max_length, dtype=np.int64)
    mask = np.zeros(max_length, dtype=np.float32)
    if ids:
        arr = np.asarray(ids, dtype=np.int64)
        if arr.min() < 0 or arr.max() >= vocab_size:
            raise ConfigError(f"token id outside [0, {vocab_size}) from the tokenizer")
        out[: len(arr)] = arr
        mask[: len(arr)] = 1.0
    return out, mask


def pytest_counts(text: str) -> tuple[int, int] | None:
    """(passed, total) of the last pytest summary line in `text`, or None if there is none."""
    for line in reversed(text.splitlines()):
        found = _PYTEST_COUNT.findall(line)
        if found and (" in " in line or line.lstrip().startswith("=")):
            counts: dict[str, int] = {}
            for number, kind in found:
                counts[kind.rstrip("s") if kind.startswith("error") else kind] = int(number)
            passed = counts.get("passed", 0) + counts.get("xfailed", 0)
            total = passed + counts.get("failed", 0) + counts.get("error", 0)
            total += counts.get("xpassed", 0)
            return passed, total
    return None


class EpisodeTracker:
    """Keeps the episode-level facts behind `NUMERIC_FEATURES`, from what reset/step return."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget the previous episode."""
        self.values = dict.fromkeys(NUMERIC_FEATURES, 0.0)

    def update(self, observation: str, info: Mapping[str, Any]) -> np.ndarray:
        """Fold one reset/step return into the features; returns the vector (float32)."""
        v = self.values
        max_turns = max(int(info.get("max_turns", 1) or 1), 1)
        v["turn_fraction"] = min(float(info.get("turns", 0)) / max_turns, 1.0)
        v["format_error_streak"] = min(int(info.get("format_error_streak", 0)), 4) / 4
        v["step_errors"] = min(len(info.get("errors", ()) or ()), 4) / 4
        v["last_exit_ok"] = v["last_exit_failed"] = 0.0
        for result in info.get("tool_results", ()) or ():
            name = result.get("name")
            if name in ("write_file", "edit_file") and result.get("ok"):
                v["files_changed"], v["checked_since_change"] = 1.0, 0.0
            elif name == "terminal" and result.get("error") in (None, "", "timeout"):
                failed = bool(result.get("timed_out")) or int(result.get("exit_code", 0)) != 0
                v["last_exit_ok"], v["last_exit_failed"] = float(not failed), float(failed)
                if not result.get("timed_out"):
                    v["checked_since_change"] = 1.0
        counts = pytest_counts(observation) if info.get("tool_results") else None
        grade = info.get("grade")
        if isinstance(grade, Mapping) and grade.get("total"):
            counts = (int(grade.get("passed", 0)), int(grade["total"]))
            v["graded"] = 1.0
        if counts is not None and counts[1] > 0:
            v["tests_seen"], v["tests_passed_fraction"] = 1.0, counts[0] / counts[1]
        return self.vector()

    def vector(self) -> np.ndarray:
        """The current features, in `NUMERIC_FEATURES` order."""
        return np.array([self.values[name] for name in NUMERIC_FEATURES], dtype=np.float32)
