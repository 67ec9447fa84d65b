"""Rows of task files: JSONL (each row with its line), JSON, YAML or TOML lists; the TaskList.

Shared by the loaders of every row schema (ours, the dataset adapters', SWE-bench's), so that
each names a bad row by the line or index it is on.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from opd_gym.errors import DatasetError
from opd_gym.records.task import Task


class TaskList(list[Task]):
    """A list of tasks that also records the rows skipped with `skip_invalid=True`."""

    def __init__(self, tasks: Iterable[Task] = (), skipped: Iterable[str] = ()) -> None:
        super().__init__(tasks)
        self.skipped: list[str] = list(skipped)


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


__all__ = ["TaskList", "_file_rows", "_jsonl_rows", "_labelled"]
