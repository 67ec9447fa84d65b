"""Task suites stored as data: `envs/<name>/tasks/<id>/` (task.toml, starter, tests, solution)."""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path
from typing import Any

from opd_gym.errors import DatasetError
from opd_gym.records.task import Task
from opd_gym.resources import data_path

TASK_FILE = "task.toml"
_TASK_KEYS = {"prompt", "difficulty", "tags", "timeout", "metadata"}
_SKIP_DIRS = {"__pycache__", ".pytest_cache"}


def read_tree(root: Path) -> dict[str, str]:
    """Read every text file under `root` as {relative posix path: text}; a missing root is empty."""
    if not root.is_dir():
        return {}
    files: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and not _SKIP_DIRS.intersection(rel.parts) and path.suffix != ".pyc":
            files[rel.as_posix()] = path.read_text(encoding="utf-8")
    return files


def load_task_dir(path: str | Path) -> Task:
    """Load one task folder; its id is the folder name."""
    path = Path(path)
    spec_file = path / TASK_FILE
    with spec_file.open("rb") as fh:
        spec = tomllib.load(fh)
    unknown = sorted(set(spec) - _TASK_KEYS)
    if unknown:
        raise DatasetError(f"{spec_file}: unknown key(s) {unknown}; allowed: {sorted(_TASK_KEYS)}")
    if "prompt" not in spec:
        raise DatasetError(f"{spec_file}: key 'prompt' is missing")
    options: dict[str, Any] = {k: spec[k] for k in ("difficulty", "tags", "metadata") if k in spec}
    if "timeout" in spec:
        options["timeout"] = float(spec["timeout"])
    return Task(
        id=path.name,
        prompt=spec["prompt"],
        files=read_tree(path / "starter"),
        tests=read_tree(path / "tests"),
        solution=read_tree(path / "solution"),
        **options,
    )


def load_suite_dir(path: str | Path) -> list[Task]:
    """Load tasks from an env folder (with `tasks/`), a folder of task folders, or one task."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"task suite directory {str(path)!r} does not exist")
    if (path / TASK_FILE).is_file():
        return [load_task_dir(path)]
    if (path / "tasks").is_dir():
        path = path / "tasks"
    dirs = sorted(p for p in path.iterdir() if (p / TASK_FILE).is_file())
    if not dirs:
        raise DatasetError(f"{str(path)!r} holds no task folders (each needs a {TASK_FILE})")
    return [load_task_dir(p) for p in dirs]


def available_suites() -> list[str]:
    """Built-in suites: folders under the shipped `envs/` with a `tasks/` dir, or with a
    `manifest.json` of synthesized repository tasks (the `repo` suite, see repo_suite.py)."""
    try:
        root = data_path("envs")
    except FileNotFoundError:
        return []
    return sorted(p.name for p in root.iterdir()
                  if (p / "tasks").is_dir() or (p / "manifest.json").is_file())


@functools.cache
def _cached_suite(name: str) -> tuple[Task, ...]:
    if name not in available_suites():
        raise DatasetError(f"unknown built-in suite {name!r}; available: {available_suites()}")
    if not data_path("envs", name).joinpath("tasks").is_dir():  # a synthesized suite
        from opd_gym.tasks.repo_suite import load_repo_suite

        return tuple(load_repo_suite())
    return tuple(load_suite_dir(data_path("envs", name, "tasks")))


def load_suite(name: str = "coding") -> list[Task]:
    """Load a built-in suite by name, sorted by task id (tasks are immutable, so this is cached)."""
    return list(_cached_suite(name))


def load_env_spec(name: str = "coding") -> dict[str, Any]:
    """Read `envs/<name>/env.toml`: description, tool list, max turns and reward weights."""
    with data_path("envs", name, "env.toml").open("rb") as fh:
        return tomllib.load(fh)
