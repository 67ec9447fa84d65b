"""Shared helper: grade a task locally (no sandbox) with the real harness on a temp dir."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from opd_gym.grading import parse_verdict, run_harness_here, test_paths
from opd_gym.grading.grader import boundary_modules
from opd_gym.tasks import Task

Grader = Callable[..., subprocess.CompletedProcess]


def write_files(root: Path, files: Mapping[str, str]) -> None:
    """Write {relative path: text} under root, creating folders."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def run_hidden_tests(workdir: Path, task: Task, overlay: Mapping[str, str] | None = None):
    """Place starter files, then `overlay`; run the real grading harness on them, unsandboxed
    (across the process boundary where the task says so: `grader.boundary_modules`).

    Returns a CompletedProcess whose returncode is pytest's exit status and whose stdout is
    pytest's output, as the harness reports them.
    """
    write_files(workdir, task.files)
    write_files(workdir, overlay or {})
    raw = run_harness_here(workdir, [dict(task.tests)] * 2, ini=task.pytest_ini,
                           args=test_paths(task), timeout=task.timeout,
                           boundary=boundary_modules(task) or None)
    verdict = parse_verdict(raw)["variants"][0]  # both variants hold the real tests here
    return subprocess.CompletedProcess(
        ["opd-grade", task.id], verdict["exit"], verdict["output"], ""
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
