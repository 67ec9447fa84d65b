"""Task resolution: every form a user may name tasks in, turned into a list of `Task`s once.

The env, the rollout and the CLI all accept the same forms (a suite name, a path, ids of the
built-in suite, Tasks or rows, or a loader mapping); this module is the one place that reads
them, and the one place that picks an episode's task from reset options.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from opd_gym.errors import ConfigError
from opd_gym.records.task import Task
from opd_gym.tasks.loaders import TaskList, load_hf_dataset, load_tasks

DEFAULT_SUITE = "coding"
HARBOR_PREFIX = "harbor:"  # `harbor:FOLDER`: a Harbor task folder, or a folder of them


def resolve_tasks(spec: Any) -> list[Task]:
    """Tasks from a suite name, a path, a list of ids (of the built-in suite), Tasks or rows.

    A mapping is a loader call: `{"source": path_or_suite, "schema": ..., "ids": [...]}`
    (with `"repos": {"owner/name": history}` or a folder for SWE-bench-style rows) or
    `{"dataset": hub_name_or_path, "schema": ..., "split": ..., "limit": ...}` or
    `{"swebench": rows_file, "repos": {"owner/name": checkout_or_bundle} or folder}` or
    `{"harbor": task_folder_or_folder_of_them}` (also the string `"harbor:FOLDER"`), each with
    `"skip_invalid": True` to skip bad rows. The result is a `TaskList` (its `.skipped` names
    the rows skipped).
    """
    if spec is None:
        spec = DEFAULT_SUITE
    if isinstance(spec, Task):
        tasks: list[Task] = TaskList([spec])
    elif isinstance(spec, str) and spec.startswith(HARBOR_PREFIX):
        from opd_gym.tasks.harbor import load_harbor

        tasks = load_harbor(spec[len(HARBOR_PREFIX):])
    elif isinstance(spec, str):
        tasks = load_tasks(spec)
    elif isinstance(spec, Mapping):
        options = dict(spec)
        ids = options.pop("ids", None)
        if "dataset" in options:
            tasks = load_hf_dataset(options.pop("dataset"), **options)
        elif "harbor" in options:
            from opd_gym.tasks.harbor import load_harbor

            tasks = load_harbor(options.pop("harbor"))
        elif "swebench" in options:  # SWE-bench-style rows + {"repos": {name: checkout}}
            from opd_gym.tasks.swebench import load_swebench

            tasks = load_swebench(options.pop("swebench"), options.pop("repos", {}), **options)
        else:
            tasks = load_tasks(options.pop("source", DEFAULT_SUITE), **options)
        if ids is not None:
            tasks = TaskList(select_ids(tasks, ids), getattr(tasks, "skipped", ()))
    elif isinstance(spec, Sequence) and spec and all(isinstance(t, str) for t in spec):
        tasks = TaskList(select_ids(list(load_tasks(DEFAULT_SUITE)), spec))
    elif isinstance(spec, Sequence):
        tasks = load_tasks(list(spec))
    else:
        kind = type(spec).__name__
        raise TypeError(f"tasks must be a suite name, path, list or mapping, got {kind}")
    if not tasks:
        raise ConfigError(f"no tasks found for tasks={spec!r}")
    return tasks


def select_ids(tasks: Sequence[Task], ids: Sequence[str]) -> list[Task]:
    """The tasks with these ids, in the order given (unknown ids are refused, naming some)."""
    by_id = {task.id: task for task in tasks}
    missing = [i for i in ids if i not in by_id]
    if missing:
        known = ", ".join(sorted(by_id)[:20])
        raise ConfigError(f"unknown task id(s) {missing}; known ids include: {known}")
    return [by_id[i] for i in ids]


def pick_task(tasks: Sequence[Task], options: Mapping[str, Any],
              rng: np.random.Generator) -> Task:
    """The task of a new episode: `options["task"]` (a Task or id), `options["task_id"]`
    (one of `tasks`), else one of `tasks` drawn with the env's seeded `rng`."""
    if options.get("task") is not None:
        task = options["task"]
        return task if isinstance(task, Task) else resolve_tasks([task])[0]
    task_id = options.get("task_id")
    if task_id is not None:
        found = [task for task in tasks if task.id == task_id]
        if not found:
            known = ", ".join(sorted(task.id for task in tasks)[:20])
            raise ConfigError(f"unknown task_id {task_id!r}; known ids include: {known}")
        return found[0]
    return tasks[int(rng.integers(len(tasks)))]


__all__ = ["DEFAULT_SUITE", "pick_task", "resolve_tasks", "select_ids"]
