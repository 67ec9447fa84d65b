"""Record finished episodes as JSON lines: messages, per-turn tool results, rewards, token ids.

Under an `OPDWrapper`, the OPD records found in step infos (`info["opd"]`, a list; a bare
record from older code is accepted too) are kept too, as `opd` (their `to_dict()`) with the
terminal step's `opd_metrics`.

Each line is an `opd_gym.records.rows.EpisodeRow` (the one row format), in strict JSON. One
line per episode, appended with a single `write` on an `O_APPEND` file, so several envs
(threads or processes) may share one file. An episode cut short by `reset` or `close` is
written too, with `"finished": false`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

from opd_gym.records.rows import EpisodeRow, dumps


class TrajectoryRecorder(gym.Wrapper):
    """Appends one JSON object per episode to `path` (a `.jsonl` file)."""

    def __init__(
        self,
        env: gym.Env,
        path: str | os.PathLike[str],
        *,
        include_tools: bool = True,
        fsync: bool = False,
    ):
        super().__init__(env)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.include_tools = include_tools
        self.fsync = fsync  # flush each line to disk: a killed run keeps every finished episode
        self.extra: dict[str, Any] = {}  # fields added to the next lines (e.g. an episode number)
        self.last_row: EpisodeRow | None = None  # the last episode written
        self._fd: int | None = None
        self._episode: dict[str, Any] | None = None
        self.episodes_written = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._flush(finished=False)
        observation, info = self.env.reset(seed=seed, options=options)
        self._episode = {
            "task_id": info.get("task_id"),
            "seed": seed,
            "started": time.time(),
            "rewards": [],
            "last_info": info,
            "turns": [],
            "opd": [],
            "opd_metrics": None,
        }
        return observation, info

    def step(self, action: Any):
        observation, reward, terminated, truncated, info = self.env.step(action)
        if self._episode is not None:
            self._episode["rewards"].append(float(reward))
            self._episode["last_info"] = info
            self._episode["terminated"] = bool(terminated)
            self._episode["truncated"] = bool(truncated)
            turn = info.get("turn_snapshot")
            if turn is not None:
                self._episode["turns"].append(turn.to_dict())
            self._collect_opd(info)
            if terminated or truncated:
                self._flush(finished=True)
        return observation, reward, terminated, truncated, info

    def close(self) -> None:
        self._flush(finished=False)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        super().close()

    def row(self, finished: bool) -> EpisodeRow | None:
        """The row of the current episode (None when none started or no step was taken)."""
        if self._episode is None or not self._episode["rewards"]:
            return None
        episode, info = self._episode, self._episode["last_info"]
        record: dict[str, Any] = {
            "task_id": episode["task_id"],
            "seed": episode["seed"],
            "finished": finished,
            "terminated": episode.get("terminated", False),
            "truncated": episode.get("truncated", False),
            "end_reason": info.get("end_reason", ""),
            "length": len(episode["rewards"]),
            "return": sum(episode["rewards"]),
            "rewards": episode["rewards"],
            "reward_breakdown": info.get("reward_breakdown"),
            "grade": info.get("grade"),
            "messages": info.get("messages", []),
            "turns": list(episode["turns"]),
            "duration": time.time() - episode["started"],
        }
        if info.get("diff") is not None:  # repository tasks: the agent's change
            record["diff"] = info["diff"]
        if episode["opd"] or episode["opd_metrics"] is not None:
            record["opd"] = [_opd_dict(item) for item in episode["opd"]]
            record["opd_metrics"] = episode["opd_metrics"]
        if self.include_tools:
            record["tools"] = info.get("tools", [])
        record.update(self.extra)
        return EpisodeRow.from_dict(record)

    @property
    def last_record(self) -> dict[str, Any] | None:
        """The last episode written, as stored."""
        return None if self.last_row is None else self.last_row.to_dict()

    def _collect_opd(self, info: dict[str, Any]) -> None:
        """Keep the OPD records and metrics an `OPDWrapper` put into this step's info."""
        assert self._episode is not None
        found = info.get("opd")
        if found is not None:
            items = found if isinstance(found, list | tuple) else [found]
            self._episode["opd"].extend(items)
        if info.get("opd_metrics") is not None:
            self._episode["opd_metrics"] = dict(info["opd_metrics"])

    def _flush(self, *, finished: bool) -> None:
        if self._episode is None:
            return
        row = self.row(finished)  # None: reset with no step taken, nothing to record
        self._episode = None
        if row is None:
            return
        self.last_row = row
        line = dumps(row.to_dict(), ensure_ascii=False) + "\n"
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        data = memoryview(line.encode("utf-8"))
        while data:
            data = data[os.write(self._fd, data):]
        if self.fsync:
            os.fsync(self._fd)
        self.episodes_written += 1


def _opd_dict(item: Any) -> Any:
    """An OPD record as JSON-able data (records have `to_dict`; dicts pass through)."""
    return item.to_dict() if hasattr(item, "to_dict") else item
