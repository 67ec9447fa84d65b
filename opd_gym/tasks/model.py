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
    `pytest_ini` is the ini text the hidden tests run with (None: an empty `[pytest]`);
    `test_ids` the exact pytest node ids the run must report, for tests too dynamic for a
    static reading of the test files (None: read them statically, see grading/expected.py).
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
    pytest_ini: str | None = None
    test_ids: tuple[str, ...] | None = None

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
        if self.pytest_ini is not None and not isinstance(self.pytest_ini, str):
            raise DatasetError(f"task {self.id!r}: pytest_ini must be text")
        if self.test_ids is not None:
            ids = tuple(self.test_ids)
            if not ids or not all(isinstance(i, str) and "::" in i for i in ids):
                raise DatasetError(f"task {self.id!r}: test_ids must be pytest node ids")
            object.__setattr__(self, "test_ids", ids)
        object.__setattr__(self, "tags", tuple(self.tags))
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))
