"""The built-in `repo` suite: synthesized, validated bugs in pinned real libraries.

Only a manifest is committed (`envs/repo/manifest.json`: per task the library, the mutation,
the statement, the FAIL_TO_PASS / PASS_TO_PASS ids (PASS_TO_PASS: every test still passing)
and its difficulty); no library code. At load
time each library's sdist is read from setup's cache (`opd_gym.tasks.libraries`) and every
task is rebuilt by replaying its mutation, checked byte for byte. A missing sdist raises
DatasetError telling to run scripts/setup.sh. Loaded tasks are cached per process.

Loading imports none of the authoring tools: generating, merging and revalidating the suite
is `python -m opd_gym.authoring.repo_suite` (see there).
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Sequence
from pathlib import Path

from opd_gym.errors import DatasetError
from opd_gym.grading.canary import module_names
from opd_gym.grading.earning import earning_tests
from opd_gym.records.task import Task
from opd_gym.resources import data_path
from opd_gym.tasks.libraries import library, sdist_cache
from opd_gym.tasks.manifest import build_task, read_manifest
from opd_gym.tasks.project import Project, project_from_library

SUITE = "repo"
MANIFEST = "manifest.json"
REFUSED = "refused.jsonl"  # tasks whose gold the Grader refused (refused_path)


def manifest_path() -> Path:
    """The committed manifest of the `repo` suite."""
    return data_path("envs", SUITE, MANIFEST)


def refused_path() -> Path:
    """The committed list of suite tasks whose gold fix the default Grader refused (one JSON
    object per line: id, gold, base, reason), found by `scripts/grade_suite_golds.py`."""
    return data_path("envs", SUITE, REFUSED)


def refused_ids() -> frozenset[str]:
    """The ids `refused_path()` lists (the suite leaves them out: no grade could verify a
    fix of theirs)."""
    return frozenset(json.loads(line)["id"] for line in refused_path().read_text().splitlines()
                     if line.strip())


@functools.cache
def _project(name: str) -> Project:
    return project_from_library(library(name))


@functools.cache
def _tasks() -> tuple[Task, ...]:
    data = read_manifest(manifest_path())
    refused = refused_ids()
    tasks: list[Task] = []
    for record in data["tasks"]:
        project = _project(record["project"])
        expected = data["projects"][record["project"]]["version"]
        if project.version != expected:
            raise DatasetError(f"repo suite: {record['project']} is pinned at "
                               f"{project.version}, the manifest was made from {expected}")
        task = build_task(project, record)
        if task.id not in refused and can_earn(task):
            tasks.append(task)
    return tuple(sorted(tasks, key=lambda t: t.id))


def can_earn(task: Task) -> bool:
    """Whether a fix of `task` could be paid under the default Grader: grading's own answer
    (`opd_gym.grading.earning`) for its FAIL_TO_PASS tests. A task whose failing tests read
    their expectations from run-time data (a parametrize table shared by several tests, say)
    only gates: no grade could ever verify a fix, so the suite leaves it out rather than pay
    0 for every fix (docs/threat-model.md, answers read from the test). The answer is kept
    beside setup's sdists (seconds per library, paid once per machine)."""
    failing = [i for i in (task.test_ids or ()) if task.repo is None
               or i in task.repo.fail_to_pass]
    modules = module_names({**task.files, **task.solution})
    earning = earning_tests(task.tests, modules, cache=sdist_cache().parent / "earning")
    return earning.can_verify(failing)


def load_repo_suite() -> list[Task]:
    """Every task of the `repo` suite, sorted by id (rebuilt from the cached sdists)."""
    return list(_tasks())


def sample(tasks: Sequence[Task], per_library: int, seed: int = 0) -> list[Task]:
    """A fixed, seeded sample of `per_library` tasks from each library."""
    by_lib: dict[str, list[Task]] = {}
    for task in tasks:
        assert task.repo is not None
        by_lib.setdefault(task.repo.name, []).append(task)
    rng = random.Random(seed)
    out: list[Task] = []
    for name in sorted(by_lib):
        group = by_lib[name]
        out.extend(rng.sample(group, min(per_library, len(group))))
    return out
