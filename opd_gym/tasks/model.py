"""The Task record: what an episode asks for, what the agent starts with, and how it is graded."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from opd_gym.errors import DatasetError


def _frozen(files: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(files or {}))


@dataclass(frozen=True)
class Task:
    """One coding task.

    `files` are the starter files placed in the workspace at reset; `tests` are the hidden
    test files (pytest), written only when grading, never visible to the agent; `solution`
    holds reference files that, written over the starter files, pass every hidden test.
    """

    id: str
    prompt: str
    files: Mapping[str, str] = field(default_factory=dict)
    tests: Mapping[str, str] = field(default_factory=dict)
    solution: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 60.0
    difficulty: str = "easy"
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.id or not isinstance(self.id, str):
            raise DatasetError("task id must be a non-empty string")
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise DatasetError(f"task {self.id!r}: prompt must be a non-empty string")
        if not self.tests:
            raise DatasetError(f"task {self.id!r}: at least one hidden test file is required")
        for name in ("files", "tests", "solution"):
            value = getattr(self, name)
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
                raise DatasetError(f"task {self.id!r}: {name} must map path strings to text")
            object.__setattr__(self, name, _frozen(value))
        object.__setattr__(self, "tags", tuple(self.tags))
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))
