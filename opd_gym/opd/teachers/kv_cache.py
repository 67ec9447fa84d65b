"""A pool of per-prefix KV caches under a token budget with LRU eviction, for the HF teacher.

Each entry holds the KV cache of one id sequence (typically the context an episode has been
scored on so far). A request checks out the entry sharing the longest prefix with it, extends
it and puts it back, so interleaved turns of different episodes (parallel envs sharing one
teacher) each extend their own prefix instead of evicting each other's single cache. Entries
are evicted least-recently-used first once the cached tokens exceed the budget. Not
thread-safe on its own: the teacher uses it under its model lock.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opd_gym.errors import ConfigError


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two id sequences (slices compare in C)."""
    n = min(len(a), len(b))
    if n and a[:n] == b[:n]:
        return n
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass
class CacheEntry:
    """The KV cache of `ids` (its sequence length always equals len(ids))."""

    ids: list[int]
    cache: Any
    last_used: int = 0
    key: int = field(default=0)

    @property
    def tokens(self) -> int:
        """Tokens held, the unit of the pool's budget."""
        return len(self.ids)


class KVCachePool:
    """Per-prefix KV caches, at most `budget_tokens` tokens in all, least recently used evicted.

    `max_entries` caps the number of sequences kept (None: only the token budget applies).
    Counters `hits`, `misses`, `evictions` and `reused_tokens` are for tests and benchmarks.
    """

    def __init__(self, budget_tokens: int, max_entries: int | None = None) -> None:
        if isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int) \
                or budget_tokens < 0:
            raise ConfigError(f"KV cache budget must be an int >= 0 tokens, got {budget_tokens!r}")
        if max_entries is not None and max_entries < 1:
            raise ConfigError(f"max_entries must be >= 1 or None, got {max_entries!r}")
        self.budget_tokens = budget_tokens
        self.max_entries = max_entries
        self._entries: dict[int, CacheEntry] = {}
        self._clock = itertools.count(1)
        self._keys = itertools.count(1)
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def tokens(self) -> int:
        """Tokens currently held by the pool (entries checked out are not counted)."""
        return sum(e.tokens for e in self._entries.values())

    def best(self, ids: Sequence[int], usable: int,
             exclude: set[int] | None = None) -> tuple[CacheEntry | None, int]:
        """The entry sharing the longest prefix (capped at `usable`) with `ids`, and that length."""
        best, best_n = None, 0
        for entry in self._entries.values():
            if exclude and entry.key in exclude:
                continue
            n = min(common_prefix(entry.ids, ids), usable)
            if n > best_n:
                best, best_n = entry, n
        return best, best_n

    def checkout(self, entry: CacheEntry | None, keep: int) -> CacheEntry | None:
        """Take `entry` out of the pool cropped to its first `keep` tokens (None if unusable)."""
        if entry is None or keep <= 0:
            self.misses += 1
            return None
        del self._entries[entry.key]
        remove = entry.tokens - keep
        if remove > 0:
            try:
                entry.cache.crop(-remove)  # negative = number of tokens to drop
            except (RuntimeError, ValueError, NotImplementedError):  # e.g. sliding windows
                self.misses += 1
                return None
            del entry.ids[keep:]
        if entry.cache.get_seq_length() != keep:
            self.misses += 1
            return None
        self.hits += 1
        self.reused_tokens += keep
        return entry

    def put(self, ids: list[int], cache: Any) -> None:
        """Keep the cache of `ids` (call `evict` once a batch is back); too large: dropped."""
        if not ids or len(ids) > self.budget_tokens:
            return
        key = next(self._keys)
        self._entries[key] = CacheEntry(ids, cache, next(self._clock), key)

    def evict(self) -> None:
        """Drop least recently used entries until the token budget and entry cap hold."""
        over = self.tokens - self.budget_tokens
        count = len(self._entries) - (self.max_entries or len(self._entries))
        for entry in sorted(self._entries.values(), key=lambda e: e.last_used):
            if over <= 0 and count <= 0:
                break
            del self._entries[entry.key]
            over -= entry.tokens
            count -= 1
            self.evictions += 1

    def clear(self) -> None:
        """Drop every entry (frees their memory)."""
        self._entries.clear()
