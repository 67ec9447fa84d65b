"""Synthesis manifests: the records of synthesized repository tasks (project, mutation,
statement, FAIL_TO_PASS / PASS_TO_PASS), written by `tasks synth` and the `repo` suite's
generator, and read back into tasks by replaying each mutation on its rebuilt project.

Reading a manifest imports none of the authoring tools (`opd_gym.authoring`).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from opd_gym.errors import DatasetError
from opd_gym.records.task import RepoInfo, Task
from opd_gym.tasks.mutation import Mutation
from opd_gym.tasks.project import Project, project_from_source
from opd_gym.tasks.pytest_config import read_pytest_config

MANIFEST_VERSION = 2  # 2: PASS_TO_PASS may be stored compactly (`compact_records`)
READABLE_VERSIONS = (1, 2)

def task_id(project_name: str, mutation: Mutation) -> str:
    """A synthesized task's id: the project and the mutation's key."""
    return f"{project_name}-{mutation.key}"


WORKSPACE_INI = "pytest.ini"


def working_copy(project: Project, text: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """The agent's workspace as a real working copy: the project's own test suite beside its
    code, so `python3 -m pytest` runs as in the project, and, when the settings pytest would
    read there differ from the ones the tests are graded with (options of plugins this
    environment lacks, a curated ini), those go into a root `pytest.ini` (pytest reads it
    first), with a note for the prompt. The hidden copies of the tests are what grade: an
    edit to a test file never counts."""
    files = {**text, **project.tests}
    own = read_pytest_config(files)
    if own.source and own.ini == project.ini:
        return files, ""
    where = f"the settings in {own.source}" if own.source else "pytest's defaults"
    files[WORKSPACE_INI] = (f"# The pytest settings this task is graded with; they replace "
                            f"{where}.\n{project.ini}")
    graded = read_pytest_config({WORKSPACE_INI: project.ini}).addopts
    left_out = [o for o in own.addopts if o not in graded]
    why = (f" ({shlex.join(left_out)} left out: this environment lacks those plugins)"
           if left_out else "")
    return files, ("\n\n(The project's test suite is in the workspace; `python3 -m pytest` "
                   f"runs it with the settings in {WORKSPACE_INI}, the ones it is graded "
                   f"with, which replace {where}{why}.)")


def build_task(project: Project, record: Mapping[str, Any]) -> Task:
    """The repository task a manifest record describes, rebuilt from the project's tree."""
    mutation = Mutation(**record["mutation"])
    if mutation.path not in project.workspace:
        raise DatasetError(f"{project.name}: {mutation.path} is not in the project")
    text, binary = project.text_files()
    original = text[mutation.path]
    text[mutation.path] = mutation.apply(original)
    files, note = working_copy(project, text)
    level = record.get("difficulty") or difficulty(mutation, record["fail_to_pass"],
                                                   record.get("failures", 0))
    return Task(
        id=record.get("id") or task_id(project.name, mutation),
        prompt=record["statement"] + note,
        files=files,
        tests=dict(project.tests),
        solution={mutation.path: original},
        timeout=float(record.get("timeout", 300.0)),
        difficulty="hard",
        tags=("repo", "synthesized", project.name),
        metadata={"library": project.name, "version": project.version,
                  "difficulty": dict(level)},
        pytest_ini=project.ini,
        repo=RepoInfo(name=project.name, fail_to_pass=tuple(record["fail_to_pass"]),
                      pass_to_pass=tuple(record["pass_to_pass"]), synthesized=True),
        # the project's files that are not UTF-8 text (data a suite reads: sqlparse's
        # encoding tests), in the workspace and every grading run as they are
        assets={path: project.workspace[path] for path in binary},
    )


def difficulty(mutation: Mutation, fail_to_pass: Sequence[str], failures: int
               ) -> dict[str, Any]:
    """How hard a task is, as recorded per task: its kind(s), the lines the change touches,
    its FAIL_TO_PASS count and the tests that failed on the mutant (before the cap)."""
    return {"kinds": list(mutation.kinds), "lines_changed": mutation.lines_changed,
            "fail_to_pass": len(fail_to_pass), "tests_failing": failures}


def write_manifest(path: Path, project: Project, records: Sequence[Mapping[str, Any]],
                   stats: Mapping[str, Any] | None = None) -> None:
    """Write a one-project manifest (replayable with `load_manifest`)."""
    data = {"version": MANIFEST_VERSION,
            "projects": {project.name: {"version": project.version,
                                        "source": dict(project.source),
                                        **dict(stats or {})}},
            "tasks": list(records)}
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def load_manifest(path: Path) -> list[Task]:
    """The tasks of a manifest written by `tasks synth` (projects rebuilt from their source)."""
    return manifest_tasks(read_manifest(path), str(path))


def is_manifest(data: Any) -> bool:
    """Whether parsed JSON is a synthesis manifest (`write_manifest`, the `repo` suite's):
    a `version`, a `projects` table and `tasks` records that each name a `mutation`."""
    return (isinstance(data, Mapping) and "version" in data
            and isinstance(data.get("projects"), Mapping) and isinstance(data.get("tasks"), list)
            and all(isinstance(r, Mapping) and "mutation" in r for r in data["tasks"]))


def manifest_tasks(data: Mapping[str, Any], where: str = "manifest") -> list[Task]:
    """The tasks of a parsed manifest (its version checked, each project rebuilt once);
    DatasetError names the manifest, the project or the task that cannot be rebuilt."""
    if data.get("version") not in READABLE_VERSIONS:
        raise DatasetError(f"{where}: manifest version {data.get('version')!r}, "
                           f"expected one of {READABLE_VERSIONS}")
    data = expand_records(data, where)
    projects: dict[str, Project] = {}
    for name, info in data["projects"].items():
        source = info.get("source") if isinstance(info, Mapping) else None
        if not isinstance(source, Mapping):
            raise DatasetError(f"{where}: project {name!r} names no source")
        try:
            projects[name] = project_from_source(source)
        except DatasetError as exc:
            raise DatasetError(f"{where}: project {name!r}: {exc}") from None
    tasks = []
    for number, record in enumerate(data["tasks"], 1):
        label = f"{where}: task {number} ({record.get('id', '?')!r})"
        project = projects.get(record.get("project"))
        if project is None:
            raise DatasetError(f"{label}: project {record.get('project')!r} is not in the "
                               "manifest's projects")
        try:
            tasks.append(build_task(project, record))
        except (KeyError, TypeError, ValueError) as exc:
            raise DatasetError(f"{label}: {exc}") from None
    return tasks


def read_manifest(path: Path) -> dict[str, Any]:
    """A manifest's JSON, checked for its version."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{path}: not a readable manifest ({exc})") from None
    if not isinstance(data, dict) or data.get("version") not in READABLE_VERSIONS:
        version = data.get("version") if isinstance(data, dict) else None
        raise DatasetError(f"{path}: manifest version {version!r}, "
                           f"expected one of {READABLE_VERSIONS}")
    return expand_records(data, str(path))


def compact_records(projects: Mapping[str, dict[str, Any]], records: Sequence[Mapping[str, Any]]
                    ) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """(projects, records) with PASS_TO_PASS stored once per project: each project gets
    `suite`, every id some record of it names, and each record `not_passing`, the ids of the
    suite outside its PASS_TO_PASS (its failing and flaky ones, a handful), instead of the
    whole list (every passing test guards, so PASS_TO_PASS is most of a suite of thousands).
    `expand_records` gives the lists back exactly."""
    suites: dict[str, set[str]] = {}
    for record in records:
        suites.setdefault(record["project"], set()).update(
            record["pass_to_pass"], record["fail_to_pass"])
    out_projects = {name: ({**info, "suite": sorted(suites[name])} if name in suites
                           else dict(info)) for name, info in projects.items()}
    out_records = []
    for record in records:
        row = {k: v for k, v in record.items() if k != "pass_to_pass"}
        row["not_passing"] = sorted(suites[record["project"]] - set(record["pass_to_pass"]))
        out_records.append(row)
    return out_projects, out_records


def expand_records(data: Mapping[str, Any], where: str = "manifest") -> dict[str, Any]:
    """A manifest with every record's `pass_to_pass` list (`compact_records` undone; records
    that carry the list already are left as they are)."""
    projects = data.get("projects")
    tasks = data.get("tasks")
    if not isinstance(projects, Mapping) or not isinstance(tasks, list):
        raise DatasetError(f"{where}: a manifest needs a `projects` table and a `tasks` list")
    expanded = []
    for record in tasks:
        if isinstance(record, Mapping) and "not_passing" in record:
            info = projects.get(record.get("project"))
            suite = info.get("suite") if isinstance(info, Mapping) else None
            if not isinstance(suite, list):
                raise DatasetError(f"{where}: task {record.get('id', '?')!r} stores its "
                                   "PASS_TO_PASS compactly, but its project has no `suite`")
            absent = set(record["not_passing"])
            record = {k: v for k, v in record.items() if k != "not_passing"}
            record["pass_to_pass"] = sorted(i for i in suite if i not in absent)
        expanded.append(record)
    return {**data, "tasks": expanded}
