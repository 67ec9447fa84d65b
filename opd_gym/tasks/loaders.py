"""Load tasks from files (JSONL/JSON/YAML/TOML), suite folders, built-in suites, rows, datasets."""

from __future__ import annotations

import itertools
import json
import os
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from opd_gym.errors import DatasetError
from opd_gym.tasks.adapters import ADAPTERS, ID_FIELDS
from opd_gym.tasks.model import Task
from opd_gym.tasks.suite import available_suites, load_suite, load_suite_dir

_REQUIRED = ("id", "prompt", "tests")
_OPTIONAL = ("files", "solution", "timeout", "difficulty", "tags", "metadata")
Source = str | os.PathLike[str] | Iterable[Task | Mapping[str, Any]]


class TaskList(list[Task]):
    """A list of tasks that also records the rows skipped with `skip_invalid=True`."""

    def __init__(self, tasks: Iterable[Task] = (), skipped: Iterable[str] = ()) -> None:
        super().__init__(tasks)
        self.skipped: list[str] = list(skipped)


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


class _Numbered:
    """Rows read from a JSONL file, each with the 1-based line it is on (what an editor shows)."""

    def __init__(self, pairs: Iterable[tuple[int, Any]]) -> None:
        self.pairs = pairs


def _labelled(rows: Iterable[Any]) -> Iterator[tuple[str, Any]]:
    """(label, row): "line N" for JSONL rows, else "row N", both 1-based."""
    if isinstance(rows, _Numbered):
        for line, row in rows.pairs:
            yield f"line {line}", row
        return
    for index, row in enumerate(rows, 1):
        yield f"row {index}", row


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
        raise DatasetError(
            f"{where}{label} is a SWE-bench-style instance: it needs a local checkout or bundle "
            "per repository; load it with opd_gym.tasks.swebench.load_swebench(path, "
            "repos={'owner/name': checkout_or_bundle})"
        )
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


def _jsonl_rows(path: Path) -> _Numbered:
    """Parsed rows of a JSONL file with their line numbers; a line that is not JSON becomes a
    ValueError row."""
    def pairs() -> Iterator[tuple[int, Any]]:
        with path.open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        yield number, json.loads(line)
                    except json.JSONDecodeError as exc:
                        yield number, ValueError(
                            f"invalid JSON: {exc.msg} (column {exc.colno})")

    return _Numbered(pairs())


def _file_rows(path: Path) -> Iterable[Any]:
    """Rows of a task file, by suffix: a list, or a mapping whose 'tasks' key holds the list."""
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return _jsonl_rows(path)
    if suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
    elif suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as exc:
            raise ImportError("reading YAML task files needs PyYAML: pip install pyyaml") from exc
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    elif suffix == ".toml":
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    else:
        raise DatasetError(
            f"{path}: unsupported task file type {suffix!r} (jsonl, json, yaml, toml)")
    if isinstance(data, Mapping):
        data = data.get("tasks")
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a list of tasks (or a top-level 'tasks' list)")
    return data


def load_tasks(
    source: Source, *, schema: str | None = None, skip_invalid: bool = False
) -> TaskList:
    """Load tasks from a task file, a suite folder, a built-in suite name, or a list of rows.

    `schema` ("humaneval", "mbpp", "apps", "code_contests", or "opd_gym" for our own) maps
    dataset rows through an adapter; without it the schema is detected from the first row.
    Skipped rows are in `.skipped`.
    """
    if isinstance(source, str) and os.sep not in source and "." not in source:
        if source in available_suites():
            return TaskList(load_suite(source))
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if path.is_dir():
            if schema not in (None, "auto", "opd_gym"):
                raise DatasetError("schema applies to row files, not to suite folders")
            return convert_rows(load_suite_dir(path), source=str(path))
        if not path.is_file():
            raise FileNotFoundError(
                f"no task file, folder or built-in suite named {str(source)!r} "
                f"(built-in suites: {available_suites()})"
            )
        return convert_rows(_file_rows(path), schema, skip_invalid=skip_invalid, source=path.name)
    return convert_rows(source, schema, skip_invalid=skip_invalid)


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
