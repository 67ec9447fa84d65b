"""Collect work submitted from several threads into batches run by one of them (leader/follower).

`BatchScheduler.submit(items)` blocks until `run(items...)` has produced its results. The first
caller that finds no batch running becomes the leader: it waits up to `window_s` for other
threads' submissions (only while more than one thread is submitting, so a lone caller never
waits, and only until every recently active thread has submitted) or until `max_tokens`
worth of work is queued, runs everything collected as one call of
`run`, hands each caller its results and steps down; the next queued caller leads the next
batch. No background thread, so nothing to start or stop. `enabled=False` runs each
submission on its own (still one at a time).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from opd_gym.errors import ConfigError

T = TypeVar("T")
R = TypeVar("R")

# A thread counts as a concurrent submitter for this long after its last submission.
_ACTIVE_S = 1.0


class _Job(Generic[T, R]):
    """One submission: its items, then its results or the error of the batch it ran in."""

    __slots__ = ("items", "tokens", "results", "error", "done")

    def __init__(self, items: list[T], tokens: int) -> None:
        self.items = items
        self.tokens = tokens
        self.results: list[R] | None = None
        self.error: BaseException | None = None
        self.done = False


class BatchScheduler(Generic[T, R]):
    """Thread-safe batching of submissions (see module doc); `batches` counts runs."""

    def __init__(
        self,
        run: Callable[[list[T]], list[R]],
        *,
        window_s: float = 0.002,
        max_tokens: int = 65536,
        size: Callable[[T], int] = lambda _item: 1,
        enabled: bool = True,
    ) -> None:
        if window_s < 0:
            raise ConfigError(f"batch window must be >= 0 seconds, got {window_s!r}")
        if max_tokens < 1:
            raise ConfigError(f"batch max_tokens must be >= 1, got {max_tokens!r}")
        self._run = run
        self.window_s = float(window_s)
        self.max_tokens = int(max_tokens)
        self._size = size
        self.enabled = bool(enabled)
        self._cv = threading.Condition()
        self._pending: list[_Job[T, R]] = []
        self._leading = False
        self._seen: dict[int, float] = {}  # thread id -> last submission time
        self.batches = 0
        self.batched_jobs = 0

    def submit(self, items: Sequence[T]) -> list[R]:
        """Run `items` (possibly together with other threads' items); return their results."""
        job: _Job[T, R] = _Job(list(items), sum(self._size(x) for x in items))
        with self._cv:
            now = time.monotonic()
            self._seen[threading.get_ident()] = now
            self._seen = {k: v for k, v in self._seen.items() if now - v < _ACTIVE_S}
            self._pending.append(job)
            self._cv.notify_all()
            while not job.done:
                if self._leading:
                    self._cv.wait()
                    continue
                self._leading = True
                try:
                    batch = self._collect()
                except BaseException:
                    self._leading = False
                    self._cv.notify_all()
                    raise
                self._cv.release()
                try:
                    self._execute(batch)
                finally:
                    self._cv.acquire()
                    self._leading = False
                    self._cv.notify_all()
        if job.error is not None:
            raise job.error
        assert job.results is not None
        return job.results

    def _collect(self) -> list[_Job[T, R]]:
        """Wait (lock held) for the window or the token budget; take the jobs to run."""
        if not self.enabled:
            return [self._pending.pop(0)]
        if len(self._seen) > 1 and self.window_s > 0:
            deadline = time.monotonic() + self.window_s
            while sum(j.tokens for j in self._pending) < self.max_tokens \
                    and len(self._pending) < len(self._seen):  # all active threads are in
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cv.wait(left)
        batch, tokens = [], 0
        while self._pending and (not batch or tokens + self._pending[0].tokens <= self.max_tokens):
            job = self._pending.pop(0)
            batch.append(job)
            tokens += job.tokens
        return batch

    def _execute(self, batch: list[_Job[T, R]]) -> None:
        """Run one batch (lock not held) and hand results or the error to its jobs."""
        flat = [item for job in batch for item in job.items]
        try:
            results = self._run(flat)
            if len(results) != len(flat):
                raise RuntimeError(f"batch runner returned {len(results)} results for "
                                   f"{len(flat)} items")
        except BaseException as exc:  # every caller of the batch sees the error
            for job in batch:
                job.error = exc
                job.done = True
            return
        at = 0
        for job in batch:
            job.results = results[at:at + len(job.items)]
            job.done = True
            at += len(job.items)
        self.batches += 1
        self.batched_jobs += len(batch)
