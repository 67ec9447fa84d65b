"""The Task record: what an episode asks for, what the agent starts with, and how it is graded."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from opd_gym.errors import DatasetError

# Task.metadata key of a task graded across the process boundary: the solution modules its
# hidden tests call into through `opd_grading.entry` (opd_gym.grading.grader.boundary_modules)
BOUNDARY_KEY = "boundary"


def _frozen(files: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(files or {}))


def _rebuild(cls: type, state: dict[str, Any]) -> Any:
    """Unpickle a record: built again through its checks, which freeze its mappings again."""
    return cls(**state)


def _reduce(record: Any) -> tuple:
    """Pickle a record as its fields with read-only mappings thawed to dicts (a mappingproxy
    cannot be pickled), so tasks cross process pools and Ray workers as themselves."""
    state = {f.name: getattr(record, f.name) for f in fields(record)}
    return _rebuild, (type(record), {k: dict(v) if isinstance(v, MappingProxyType) else v
                                     for k, v in state.items()})


@dataclass(frozen=True)
class RepoInfo:
    """What makes a Task a repository task: the project, its history, and the test split.

    The Task's `files` hold the project tree at the base commit (what the agent starts with),
    `tests` the pristine test files (the hidden test patch applied), `solution` the files the
    gold patch changes, and `test_ids` exactly `fail_to_pass + pass_to_pass`.
    """

    name: str  # the project, e.g. "toolz" or "owner/repo"
    fail_to_pass: tuple[str, ...]  # node ids failing at the base commit, passing once fixed
    pass_to_pass: tuple[str, ...] = ()  # node ids passing at both: a regression gates the grade
    base_commit: str = ""  # the base commit in `history` ("" with no history: synthesized)
    history: str | None = None  # a git bundle, repository, or tarball of one: base_commit;
    # None: the workspace gets one commit of the base tree (a synthesized bug shows no change)
    image: str | None = None  # an existing environment image; None: the sandbox image
    setup: tuple[str, ...] = ()  # shell steps that build the environment image offline
    synthesized: bool = False

    def __post_init__(self) -> None:
        for name in ("fail_to_pass", "pass_to_pass", "setup"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not isinstance(self.name, str) or not self.name:
            raise DatasetError("a repository task needs its project name")
        if self.history is not None:
            object.__setattr__(self, "history", os.fspath(self.history))
        if self.image is not None and (not isinstance(self.image, str) or not self.image):
            raise DatasetError(f"repository task {self.name!r}: image must be an image name")
        if not all(isinstance(s, str) and s.strip() for s in self.setup):
            raise DatasetError(f"repository task {self.name!r}: setup steps must be commands")
        if not self.fail_to_pass:
            raise DatasetError(f"repository task {self.name!r}: FAIL_TO_PASS is empty")
        ids = [*self.fail_to_pass, *self.pass_to_pass]
        if not all(isinstance(i, str) and "::" in i for i in ids):
            raise DatasetError(f"repository task {self.name!r}: test ids must be pytest node ids")
        if len(set(ids)) != len(ids):
            raise DatasetError(f"repository task {self.name!r}: a test id is listed twice")

    @property
    def test_ids(self) -> tuple[str, ...]:
        return (*self.fail_to_pass, *self.pass_to_pass)

    def mark_tests(self, grade: dict[str, Any]) -> dict[str, Any]:
        """`grade` (a GradeReport's dict) with `kind` on each test: "FAIL_TO_PASS",
        "PASS_TO_PASS", or None for a test in neither list (the report shows the split)."""
        from opd_gym.nodeids import display_name  # the name a grade shows

        kinds: dict[str, str] = {}
        for ids, kind in ((self.pass_to_pass, "PASS_TO_PASS"),
                          (self.fail_to_pass, "FAIL_TO_PASS")):
            kinds.update({name: kind for i in ids for name in (i, display_name(i))})
        for test in grade.get("tests") or ():
            if isinstance(test, dict):
                test["kind"] = kinds.get(str(test.get("name")))
        return grade


@dataclass(frozen=True)
class HarborInfo:
    """What makes a Task a Harbor task: its folder, its environment and its verifier's limits.

    The task plays in the image built from `environment` (its Dockerfile), the agent working
    in `workdir`; it is graded by running `tests/test.sh` (the Task's `tests`, copied to
    `/tests` only then) in a fresh container of the agent's final filesystem, whose reward
    file gives the score. `notes` say what of task.toml was changed to fit opd_gym (e.g. a
    network asked for and not given), shown at load and in the task's metadata.
    """

    directory: str  # the task folder (task.toml, instruction.md, environment/, tests/)
    environment: str  # the Docker build context: environment/ (holds the Dockerfile)
    workdir: str = "/app"  # where the agent works (the Dockerfile's last WORKDIR)
    verifier_timeout: float = 600.0
    agent_timeout: float | None = None
    build_timeout: float = 600.0
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    verifier_env: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "notes", tuple(self.notes))
        object.__setattr__(self, "verifier_env", MappingProxyType(dict(self.verifier_env)))
        if not self.workdir.startswith("/"):
            raise DatasetError(f"Harbor task {self.directory!r}: workdir must be absolute")

    __reduce__ = _reduce


@dataclass(frozen=True)
class Task:
    """One coding task.

    `files` are the starter files placed in the workspace at reset; `tests` are the hidden
    test files (pytest), written only when grading, never visible to the agent; `solution`
    holds reference files that, written over the starter files, pass every hidden test.
    `pytest_ini` is the ini text the hidden tests run with (None: an empty `[pytest]`);
    `test_ids` the exact pytest node ids the run must report, for tests too dynamic for a
    static reading of the test files (None: read them statically, see grading/expected.py).
    `assets` are binary files of the workspace (data a suite reads, or generates tests from),
    path -> bytes: placed at reset beside `files`, and in every calibration run.
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
    repo: RepoInfo | None = None
    harbor: HarborInfo | None = None
    assets: Mapping[str, bytes] = field(default_factory=dict)

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
        if not all(isinstance(k, str) and isinstance(v, bytes) for k, v in self.assets.items()):
            raise DatasetError(f"task {self.id!r}: assets must map path strings to bytes")
        object.__setattr__(self, "assets", MappingProxyType(dict(self.assets)))
        if self.pytest_ini is not None and not isinstance(self.pytest_ini, str):
            raise DatasetError(f"task {self.id!r}: pytest_ini must be text")
        if self.test_ids is not None:
            ids = tuple(self.test_ids)
            if not ids or not all(isinstance(i, str) and "::" in i for i in ids):
                raise DatasetError(f"task {self.id!r}: test_ids must be pytest node ids")
            object.__setattr__(self, "test_ids", ids)
        if self.repo is not None:
            if not isinstance(self.repo, RepoInfo):
                raise DatasetError(f"task {self.id!r}: repo must be a RepoInfo")
            if self.test_ids is None:
                object.__setattr__(self, "test_ids", self.repo.test_ids)
            elif tuple(self.test_ids) != self.repo.test_ids:
                raise DatasetError(f"task {self.id!r}: test_ids must be the repository task's "
                                   "FAIL_TO_PASS + PASS_TO_PASS")
        if self.harbor is not None and not isinstance(self.harbor, HarborInfo):
            raise DatasetError(f"task {self.id!r}: harbor must be a HarborInfo")
        if self.harbor is not None and self.repo is not None:
            raise DatasetError(f"task {self.id!r}: a task is a repository or a Harbor task")
        object.__setattr__(self, "tags", tuple(self.tags))
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))

    __reduce__ = _reduce
