"""The run directory: where a rollout's rows, summary and report live, and how they are written.

`RunDirectory` is the one owner of `trajectories.jsonl` (append one row per finished episode
with a single `O_APPEND` write and fsync; read rows back; resume = the episode ids already
done) and of `summary.json` (written atomically). Rollout, the Ray driver, exports, the viewer
and the replay policy all go through it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from opd_gym.errors import DatasetError
from opd_gym.runs.schema import EpisodeRow

TRAJECTORIES = "trajectories.jsonl"
SUMMARY = "summary.json"
REPORT = "report.html"


def read_trajectories(path: str | Path) -> Iterator[dict[str, Any]]:
    """Raw rows of a trajectories file; a torn line (a killed writer) is skipped."""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


class RunDirectory:
    """A rollout's output directory (or a bare `.jsonl` file, whose folder holds the rest)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        given = Path(path)
        if not given.is_dir() and (given.suffix == ".jsonl" or given.is_file()):
            self.root, self.trajectories = given.parent, given
        else:
            self.root, self.trajectories = given, given / TRAJECTORIES

    def __repr__(self) -> str:
        return f"RunDirectory({str(self.root)!r})"

    @property
    def summary_path(self) -> Path:
        return self.root / SUMMARY

    @property
    def report_path(self) -> Path:
        return self.root / REPORT

    def exists(self) -> bool:
        """Whether a trajectories file is there."""
        return self.trajectories.is_file()

    def has_rows(self) -> bool:
        """Whether the trajectories file holds anything (a new run must not append to it)."""
        return self.exists() and self.trajectories.stat().st_size > 0

    def require(self) -> RunDirectory:
        """Self, or FileNotFoundError naming the missing file (for readers)."""
        if not self.exists():
            raise FileNotFoundError(
                f"no {self.trajectories.name} at {self.trajectories}: is this a rollout directory?"
            )
        return self

    # -- reading ---------------------------------------------------------------------------

    def lines(self) -> Iterator[tuple[int, dict[str, Any] | None, str]]:
        """(line number, JSON object or None, why not) for every non-blank line."""
        with self.require().trajectories.open(encoding="utf-8", errors="replace") as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                except json.JSONDecodeError as exc:
                    yield number, None, f"not JSON ({exc.msg})"
                    continue
                if not isinstance(data, dict):
                    yield number, None, "not a JSON object"
                    continue
                yield number, data, ""

    def rows(
        self, *, on_problem: Callable[[int, str], None] | None = None
    ) -> Iterator[EpisodeRow]:
        """Every readable row as an `EpisodeRow`.

        Lines that are not JSON objects (a torn last line) are skipped and passed to
        `on_problem(line, why)`; a row of an unsupported schema version raises DatasetError
        naming the file and line, unless `on_problem` is given (then it is skipped too).
        """
        for number, data, why in self.lines():
            if data is None:
                if on_problem is not None:
                    on_problem(number, why)
                continue
            try:
                yield EpisodeRow.from_dict(data)
            except DatasetError as exc:
                if on_problem is None:
                    raise DatasetError(f"{self.trajectories}, line {number}: {exc}") from exc
                on_problem(number, str(exc))

    def done(self) -> set[int]:
        """Episode ids already written completely (what a resumed run skips)."""
        if not self.exists():
            return set()
        return {row.episode for row in self.rows() if row.finished and row.episode is not None}

    # -- writing ---------------------------------------------------------------------------

    def open_for_run(self, *, resume: bool) -> set[int]:
        """Prepare for writing: refuse to mix two runs, heal a torn tail; returns `done()`."""
        if not resume and self.has_rows():
            raise FileExistsError(
                f"{self.trajectories} already has episodes: pass resume to continue that run "
                "or choose another output directory"
            )
        self.root.mkdir(parents=True, exist_ok=True)
        self.heal()
        return self.done()

    def heal(self) -> None:
        """End the file with a newline so a torn last line cannot swallow the next row."""
        if self.has_rows():
            with open(self.trajectories, "rb+") as fh:
                fh.seek(-1, 2)
                if fh.read(1) != b"\n":
                    fh.write(b"\n")

    def append(self, row: EpisodeRow | Mapping[str, Any], *, fsync: bool = True) -> None:
        """Append one row with a single O_APPEND write (then fsync): never a partial mixed line."""
        data = row.to_dict() if isinstance(row, EpisodeRow) else dict(row)
        line = (json.dumps(data, ensure_ascii=False, default=str) + "\n").encode("utf-8")
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.trajectories, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def recorder(self, env: Any, **kwargs: Any) -> Any:
        """A `TrajectoryRecorder` appending rows here, fsync'd: a kill loses no finished one."""
        from opd_gym.wrappers.recorder import TrajectoryRecorder

        kwargs.setdefault("fsync", True)
        return TrajectoryRecorder(env, self.trajectories, **kwargs)

    # -- summary ---------------------------------------------------------------------------

    def write_summary(self, data: Mapping[str, Any]) -> Path:
        """Write `summary.json` atomically (a temp file renamed over it)."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.summary_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(dict(data), indent=2, default=str), encoding="utf-8")
        os.replace(tmp, self.summary_path)
        return self.summary_path

    def read_summary(self) -> dict[str, Any] | None:
        """`summary.json` as a dict, None when absent; DatasetError when it is not a JSON object."""
        if not self.summary_path.is_file():
            return None
        try:
            loaded = json.loads(self.summary_path.read_text(encoding="utf-8", errors="replace"))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{self.summary_path}: not JSON ({exc.msg})") from exc
        if not isinstance(loaded, dict):
            raise DatasetError(f"{self.summary_path}: not a JSON object")
        return loaded


__all__ = ["REPORT", "SUMMARY", "TRAJECTORIES", "RunDirectory", "read_trajectories"]
