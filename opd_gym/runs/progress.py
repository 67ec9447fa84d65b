"""The progress display of a run: a bar (tqdm when installed, else status lines on stderr)
moved per finished episode and per turn; shared by the local and the Ray runner."""

from __future__ import annotations

import sys
import time
from typing import Any

from opd_gym.records.rows import EpisodeRow


class Progress:
    """A progress bar (tqdm when installed, else a line per episode on stderr) that also
    moves per turn, so slow policies show life between episodes."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled, self.count = total, enabled, 0
        self.bar: Any = None
        self._last_line = 0.0
        if not enabled:
            return
        try:
            from tqdm import tqdm
        except ImportError:
            return
        self.bar = tqdm(total=total, unit="ep", dynamic_ncols=True)

    def __call__(self, row: EpisodeRow) -> None:
        """Episode `row` was played."""
        if not self.enabled:
            return
        self.count += 1
        reward = f"{row.task_id} r={row.reward:.2f}"
        if self.bar is None:
            print(f"[{self.count}/{self.total}] {reward}", file=sys.stderr)
            return
        self.bar.set_postfix_str(reward, refresh=False)
        self.bar.update(1)

    def turn(self, episode: int, turns: int) -> None:
        """Episode `episode` finished turn `turns`."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_postfix_str(f"episode {episode} turn {turns}")
            return
        now = time.monotonic()
        if now - self._last_line >= 5.0:  # a status line at most every 5 s
            self._last_line = now
            print(f"[{self.count}/{self.total}] episode {episode}: turn {turns}", file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


__all__ = ["Progress"]
