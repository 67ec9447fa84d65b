"""Shared helper: grade a task locally (no sandbox) by running its hidden tests in a temp dir."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from opd_gym.tasks import Task

Grader = Callable[..., subprocess.CompletedProcess]


def write_files(root: Path, files: Mapping[str, str]) -> None:
    """Write {relative path: text} under root, creating folders."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def run_hidden_tests(workdir: Path, task: Task, overlay: Mapping[str, str] | None = None):
    """Place starter files, then `overlay`, then the hidden tests; run pytest on the tests only."""
    write_files(workdir, task.files)
    write_files(workdir, overlay or {})
    write_files(workdir, task.tests)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *task.tests]
    return subprocess.run(
        cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def grade(tmp_path_factory: pytest.TempPathFactory) -> Grader:
    """Return grade(task, overlay=None) -> CompletedProcess, each call in a fresh directory."""

    def _grade(task: Task, overlay: Mapping[str, str] | None = None):
        return run_hidden_tests(tmp_path_factory.mktemp("ws"), task, overlay)

    return _grade


def run_many(jobs: Iterable[tuple[Task, Mapping[str, str] | None]]) -> list:
    """Run several (task, overlay) gradings concurrently, each in its own temp dir."""

    def one(job):
        with tempfile.TemporaryDirectory(prefix="opd-grade-") as workdir:
            return run_hidden_tests(Path(workdir), *job)

    with ThreadPoolExecutor(max_workers=max(2, (os.cpu_count() or 1) * 2)) as pool:
        return list(pool.map(one, jobs))


@pytest.fixture(scope="session")
def grade_many() -> Callable[..., list]:
    """Return run_many, for module-scoped fixtures that grade a whole suite at once."""
    return run_many
