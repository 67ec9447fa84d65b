"""Load tasks from files (JSONL/JSON/YAML/TOML), suite folders, built-in suites, rows, datasets."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from opd_gym.errors import DatasetError
from opd_gym.records.task import Task
from opd_gym.tasks.adapters import ADAPTERS, ID_FIELDS
from opd_gym.tasks.rows import TaskList, _file_rows, _jsonl_rows, _labelled, _Numbered  # noqa: F401
from opd_gym.tasks.suite import available_suites, load_suite, load_suite_dir

_REQUIRED = ("id", "prompt", "tests")
_OPTIONAL = ("files", "solution", "timeout", "difficulty", "tags", "metadata")
Source = str | os.PathLike[str] | Iterable[Task | Mapping[str, Any]]
# Where SWE-bench-style rows' repositories are: {"owner/name": history} or a folder of them.
Repos = Mapping[str, "str | os.PathLike[str]"] | str | os.PathLike[str]


class SWEBenchRowsError(DatasetError):
    """Rows in the SWE-bench instance schema given without the repositories they name."""


REPOS_HOW = ("give the git history of each repository its rows name (a clone, bare "
             "repository, bundle or tarball holding the base commits): repos={'owner/name': "
             "path} or repos=FOLDER (load_tasks, load_swebench, a task spec), or on the "
             "command line --repo OWNER/NAME=PATH (repeatable) or --repos FOLDER "
             "(config key 'repos')")


def _files(row: Mapping[str, Any], name: str) -> dict[str, str]:
    value = row.get(name) or {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise DatasetError(f"field {name!r} must map file paths to text")
    for path in value:
        parts = PurePosixPath(path).parts
        if not parts or path.startswith(("/", "\\")) or ".." in parts or ":" in parts[0]:
            raise DatasetError(f"field {name!r}: path {path!r} must stay inside the workspace")
    return dict(value)


def task_from_dict(row: Mapping[str, Any]) -> Task:
    """One row of our own task format -> Task, with a clear error naming the bad field."""
    for key in _REQUIRED:
        if key not in row or row[key] in (None, "", {}):
            raise DatasetError(f"field {key!r} is missing")
    unknown = sorted(set(row) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise DatasetError(f"unknown field(s) {unknown}; allowed: {[*_REQUIRED, *_OPTIONAL]}")
    for key in ("id", "prompt", "difficulty"):
        if key in row and not isinstance(row[key], str):
            raise DatasetError(f"field {key!r} must be a string")
    timeout = row.get("timeout", 60.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise DatasetError("field 'timeout' must be a positive number of seconds")
    tags = row.get("tags") or []
    if not isinstance(tags, list | tuple) or not all(isinstance(t, str) for t in tags):
        raise DatasetError("field 'tags' must be a list of strings")
    metadata = row.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise DatasetError("field 'metadata' must be a mapping")
    return Task(
        id=row["id"], prompt=row["prompt"], files=_files(row, "files"),
        tests=_files(row, "tests"), solution=_files(row, "solution"), timeout=float(timeout),
        difficulty=row.get("difficulty", "easy"), tags=tuple(tags), metadata=metadata,
    )


# The fields that tell each schema's rows apart (every one must be present).
SCHEMA_FIELDS: dict[str, tuple[str, ...]] = {
    "humaneval": ("task_id", "prompt", "canonical_solution", "test", "entry_point"),
    "mbpp": ("task_id", "code", "test_list"),
    "apps": ("problem_id", "question", "input_output"),
    "code_contests": ("name", "description"),
}
SCHEMAS = ("opd_gym", *SCHEMA_FIELDS)


def detect_schema(row: Any) -> str | None:
    """The schema one row is in: "opd_gym" (our own), a dataset adapter's name, or None."""
    if isinstance(row, Task):
        return "opd_gym"
    if not isinstance(row, Mapping):
        return None
    if "id" in row and "tests" in row:
        return "opd_gym"
    for name, fields in SCHEMA_FIELDS.items():
        if all(field in row for field in fields):
            if name != "code_contests" or any(k in row for k in ("public_tests", "private_tests")):
                return name
    return None


def _resolve_schema(rows: Iterable[tuple[str, Any]], schema: str | None, source: str
                    ) -> tuple[Iterable[tuple[str, Any]], str | None]:
    """The labelled rows (first one peeked) and the schema: as given, or detected from the
    first row."""
    if schema in ("opd_gym", "own"):
        return rows, None
    if schema not in (None, "auto"):
        if schema not in ADAPTERS:
            raise DatasetError(f"unknown schema {schema!r}; known: {list(SCHEMAS)}")
        return rows, schema
    iterator = iter(rows)
    peeked = next(iterator, None)
    if peeked is None:
        return [], None
    label, first = peeked
    rows = itertools.chain([peeked], iterator)
    found = detect_schema(first)
    if found is None and isinstance(first, Mapping) and "instance_id" in first \
            and "FAIL_TO_PASS" in first:
        where = f"{source}: " if source else ""
        repo = f" of {first['repo']!r}" if isinstance(first.get("repo"), str) else ""
        raise SWEBenchRowsError(
            f"{where}{label} is a SWE-bench-style instance{repo} (loaded by "
            f"opd_gym.tasks.swebench.load_swebench): {REPOS_HOW}")
    if found is None and isinstance(first, Mapping) and "id" not in first \
            and "tests" not in first:
        score = {name: sum(f in first for f in fields) for name, fields in SCHEMA_FIELDS.items()}
        best = max(score, key=lambda name: score[name])
        if score[best] >= 2:  # a dataset row missing a field: its adapter names the field
            return rows, best
        fields = ", ".join(sorted(map(str, first))[:12]) or "none"
        where = f"{source}: " if source else ""
        raise DatasetError(
            f"{where}{label} matches no known schema (its fields: {fields}); the schemas are "
            f"{', '.join(SCHEMAS)}: pass one with schema=/--schema"
        )
    return rows, None if found in (None, "opd_gym") else found


def convert_rows(rows: Iterable[Any], schema: str | None = None, *, skip_invalid: bool = False,
                 source: str = "") -> TaskList:
    """Turn rows (Tasks or mappings in `schema`) into a TaskList; bad rows raise or are skipped.

    `schema` None or "auto" detects it from the first row (see `detect_schema`). Errors name
    the row 1-based ("row 3"), or for a JSONL file the line an editor shows ("line 3").
    """
    rows, schema = _resolve_schema(_labelled(rows), schema, source)
    convert = ADAPTERS[schema] if schema else task_from_dict
    id_field = ID_FIELDS[schema] if schema else "id"
    out, seen = TaskList(), set()
    for where, row in rows:
        label = f"{source + ': ' if source else ''}{where}"
        try:
            if isinstance(row, Exception):
                raise row
            if isinstance(row, Task):
                task = row
            elif isinstance(row, Mapping):
                if row.get(id_field) not in (None, ""):
                    label += f" (id {row[id_field]!r})"
                task = convert(row)
            else:
                raise DatasetError(f"expected a mapping or Task, got {type(row).__name__}")
            if task.id in seen:
                raise DatasetError(f"duplicate task id {task.id!r}")
        except (ValueError, TypeError) as exc:
            message = f"{label}: {exc}"
            if not skip_invalid:
                raise DatasetError(message) from exc
            out.skipped.append(message)
            continue
        seen.add(task.id)
        out.append(task)
    return out


def load_tasks(
    source: Source, *, schema: str | None = None, skip_invalid: bool = False,
    repos: Repos | None = None,
) -> TaskList:
    """Load tasks from a task file, a suite folder, a built-in suite name, or a list of rows.

    `schema` ("humaneval", "mbpp", "apps", "code_contests", "swebench", or "opd_gym" for our
    own) maps dataset rows through an adapter; without it the schema is detected from the
    first row. A JSON file written by `opd-gym tasks synth` (a manifest: `version`,
    `projects`, `tasks` with their mutations) is detected as such and its tasks rebuilt.
    Rows in the SWE-bench instance schema (SWE-bench, SWE-Gym, SWE-smith) load with
    `load_swebench` and need `repos`: {"owner/name": history} or a folder holding them.
    Skipped rows are in `.skipped`.
    """
    if isinstance(source, str) and os.sep not in source and "." not in source:
        if source in available_suites():
            if repos is not None:
                raise DatasetError(f"repos applies to SWE-bench-style rows, not to the "
                                   f"built-in suite {source!r}")
            return TaskList(load_suite(source))
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if path.is_dir():
            if schema not in (None, "auto", "opd_gym"):
                raise DatasetError("schema applies to row files, not to suite folders")
            if repos is not None:
                raise DatasetError(f"repos applies to SWE-bench-style rows, not to the suite "
                                   f"folder {str(path)!r}")
            return convert_rows(load_suite_dir(path), source=str(path))
        if not path.is_file():
            raise FileNotFoundError(
                f"no task file, folder or built-in suite named {str(source)!r} "
                f"(built-in suites: {available_suites()})"
            )
        manifest = _manifest(path)
        if manifest is not None:
            if schema not in (None, "auto") or repos is not None or skip_invalid:
                raise DatasetError(f"{path.name} is a synthesis manifest (tasks synth): "
                                   "schema, repos and skip_invalid do not apply to it")
            from opd_gym.tasks.manifest import manifest_tasks

            return TaskList(manifest_tasks(manifest, path.name))
        rows: Any = _file_rows(path)
        label = path.name
    else:
        rows, label = source, ""
    if schema == "swebench":
        return _swebench(source, repos, skip_invalid, label)
    try:
        tasks = convert_rows(rows, schema, skip_invalid=skip_invalid, source=label)
    except SWEBenchRowsError:
        if repos is None:
            raise
        return _swebench(source, repos, skip_invalid, label)
    if repos is not None:
        raise DatasetError(f"{label or 'the rows'}: repos applies to SWE-bench-style rows "
                           "(instance_id, repo, base_commit, FAIL_TO_PASS...), not to these")
    return tasks



def _swebench(source: Any, repos: Repos | None, skip_invalid: bool, label: str) -> TaskList:
    if repos is None:
        raise SWEBenchRowsError(f"{label or 'the rows'}: SWE-bench-style rows: {REPOS_HOW}")
    from opd_gym.tasks.swebench import load_swebench

    return load_swebench(source, repos, skip_invalid=skip_invalid)


def _manifest(path: Path) -> Mapping[str, Any] | None:
    """The parsed JSON of `path` when it is a synthesis manifest, else None."""
    if path.suffix.lower() != ".json":
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # the row reader says what is wrong with it
    from opd_gym.tasks.manifest import is_manifest

    return data if is_manifest(data) else None


def load_hf_dataset(
    name_or_path: str, schema: str | None = None, *, split: str = "test",
    limit: int | None = None, skip_invalid: bool = False, **load_kwargs: Any,
) -> TaskList:
    """Load a Hugging Face dataset (hub name or local path) and map its rows through `schema`.

    Without `schema` it is detected from the first row.
    """
    if schema not in (None, "auto", "opd_gym") and schema not in ADAPTERS:
        raise DatasetError(f"unknown schema {schema!r}; known: {list(SCHEMAS)}")
    try:
        import datasets
    except ImportError as exc:
        raise ImportError(
            "load_hf_dataset needs the optional 'datasets' package: pip install 'opd_gym[datasets]'"
        ) from exc
    rows = datasets.load_dataset(name_or_path, split=split, **load_kwargs)
    if limit is not None:
        rows = itertools.islice(rows, limit)
    return convert_rows(rows, schema, skip_invalid=skip_invalid, source=name_or_path)
