"""The typed run config: everything that decides which episodes a rollout plays, and how.

Runners (local threads, Ray workers) receive this object whole, never a mutated gym registry,
so every process builds the same env stack from it (`opd_gym.runs.core.build_env`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opd_gym.opd.config import OPDConfig


@dataclass
class RolloutConfig:
    """Everything a rollout needs; plain data so it can be saved beside the results."""

    out_dir: str
    episodes: int = 8
    tasks: Any = "coding"
    task_ids: list[str] | None = None
    sandbox: Any = "docker"
    parallel: int = 1
    seed: int = 0
    max_turns: int = 15
    resume: bool = False
    opd: bool = True
    opd_options: Mapping[str, Any] | OPDConfig = field(default_factory=dict)
    tool_format: str = "hermes"  # how the policy writes tool calls (tools/formats)
    repeat: int = 1  # rollouts per task in a row (a group: GRPO, pass@k), each its own seed

    def plan(self, episode: int, task_ids: list[str]) -> tuple[str, int]:
        """(task id, seed) of episode `episode`: task (i // repeat) mod n, seed `seed + i`
        (with repeat 1: task i mod n)."""
        return task_ids[(episode // max(self.repeat, 1)) % len(task_ids)], self.seed + episode


def plain_config(config: RolloutConfig) -> dict[str, Any]:
    """The rollout's settings as JSON-able data for summary.json (tasks by id, objects by a
    short repr), so the report can show what produced the run."""
    def plain(value: Any) -> Any:
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if isinstance(value, OPDConfig):
            value = value.to_kwargs()
        if isinstance(value, Mapping):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        ident = getattr(value, "id", None)  # a Task by its id, never its files
        return ident if isinstance(ident, str) else repr(value)[:200]

    return {name: plain(getattr(config, name)) for name in config.__dataclass_fields__}


__all__ = ["RolloutConfig", "plain_config"]
