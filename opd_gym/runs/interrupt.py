"""Ctrl-C for a run: the first stops new episodes and lets running ones finish within a grace
period, the second aborts at once.

Python delivers SIGINT to the main thread only, so the runner's main thread installs
`Interrupt` while it waits: the first signal sets `stopping` (workers take no new episode)
and says so on stderr; the runner cancels what still runs when the grace period ends (sets
`cancelled`, then closes the sandboxes); the second signal raises KeyboardInterrupt there.
An episode that ends while `cancelled` is set is recorded as interrupted, never as played.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

DEFAULT_GRACE_S = 30.0  # how long running episodes may take to finish after the first Ctrl-C


class EpisodeInterrupted(Exception):
    """An episode was cut short because the run was cancelled (not a fault of the episode)."""


class Interrupt:
    """The run's stop state: `stopping` after the first Ctrl-C, `cancelled` after the grace."""

    def __init__(self, grace: float = DEFAULT_GRACE_S, *, running: Callable[[], int] = lambda: 0,
                 stream: Any = None) -> None:
        self.grace = grace
        self.stopping = threading.Event()
        self.cancelled = threading.Event()
        self.deadline: float | None = None
        self._running = running
        self._stream = stream

    def say(self, message: str) -> None:
        print(f"opd-gym: {message}", file=self._stream or sys.stderr, flush=True)

    def stop(self) -> None:
        """Take no new episode; running ones get until `deadline` to finish."""
        if self.stopping.is_set():
            return
        self.deadline = time.monotonic() + self.grace
        self.stopping.set()
        self.say(f"interrupted: starting no new episodes; {self._running()} running may finish "
                 f"within {self.grace:g} s (Ctrl-C again to abort now)")

    def cancel(self) -> None:
        """Running episodes are cancelled: whatever they return now is recorded as interrupted."""
        self.stopping.set()
        self.cancelled.set()

    def overdue(self) -> bool:
        """Whether the grace period after the first Ctrl-C is over."""
        return self.deadline is not None and time.monotonic() >= self.deadline

    def check(self) -> None:
        """Raise EpisodeInterrupted when cancelled (called by episodes between turns)."""
        if self.cancelled.is_set():
            raise EpisodeInterrupted("the run was interrupted")

    @contextmanager
    def installed(self) -> Iterator[Interrupt]:
        """Handle SIGINT while inside (only in the main thread; elsewhere a no-op)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return

        def handler(signum: int, frame: Any) -> None:
            if not self.stopping.is_set():
                self.stop()
                return
            self.cancel()
            self.say("aborted: cancelling the running episodes now")
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGINT, handler)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)


__all__ = ["DEFAULT_GRACE_S", "EpisodeInterrupted", "Interrupt"]
