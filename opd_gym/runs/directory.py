"""The run directory: where a rollout's rows, summary and report live, and how they are written.

`RunDirectory` is the one owner of `trajectories.jsonl` (append one row per finished episode
with a single `O_APPEND` write and fsync; read rows back; resume = the episode ids already
played), of `summary.json` and of `config.json` (both written atomically). Rollout, the Ray
driver, exports, the viewer and the replay policy all go through it.

One row per episode id: a resumed run first rewrites the file atomically without the rows it
will play again (unfinished, interrupted, infra errors), so the replayed row takes their
place; `episodes()` also keeps only the last row of an id, for files written otherwise.
Everything is written as strict JSON (see `opd_gym.records.rows`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from opd_gym.errors import DatasetError
from opd_gym.records.rows import EpisodeRow, dumps

TRAJECTORIES = "trajectories.jsonl"
SUMMARY = "summary.json"
REPORT = "report.html"
CONFIG = "config.json"


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

    @property
    def config_path(self) -> Path:
        return self.root / CONFIG

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

    def episodes(self, *, on_problem: Callable[[int, str], None] | None = None
                 ) -> list[EpisodeRow]:
        """One row per episode id (the last one written; rows without an id all), in the order
        their ids first appear: what summaries and reports count."""
        by_id: dict[int, EpisodeRow] = {}
        out: list[EpisodeRow | int] = []
        for row in self.rows(on_problem=on_problem):
            if row.episode is None:
                out.append(row)
                continue
            if row.episode not in by_id:
                out.append(row.episode)
            by_id[row.episode] = row
        return [by_id[item] if isinstance(item, int) else item for item in out]

    def done(self) -> set[int]:
        """Episode ids already played (finished, not interrupted, no infra error): what a
        resumed run skips; every other id is played (again)."""
        if not self.exists():
            return set()
        return {row.episode for row in self.episodes()
                if row.played and row.episode is not None}

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
        if resume:
            self.compact()
        return self.done()

    def compact(self) -> int:
        """Rewrite the file atomically with one row per episode id, dropping the rows a resumed
        run plays again (not played: unfinished, interrupted, infra error); rows without an id
        and unreadable lines are kept. Returns how many rows were dropped."""
        if not self.has_rows():
            return 0
        done = self.done()
        last: dict[int, int] = {}
        lines = self.trajectories.read_bytes().splitlines(keepends=True)
        parsed: list[tuple[bytes, int | None]] = []
        for index, line in enumerate(lines):
            episode = None
            try:
                data = json.loads(line)
                ep = data.get("episode") if isinstance(data, dict) else None
                if isinstance(ep, int) and not isinstance(ep, bool):
                    episode = ep
                    last[ep] = index
            except (json.JSONDecodeError, UnicodeDecodeError):
                pass
            parsed.append((line, episode))
        kept = [line for index, (line, episode) in enumerate(parsed)
                if line.strip() and (episode is None or (episode in done
                                                         and last[episode] == index))]
        dropped = sum(1 for line, _ in parsed if line.strip()) - len(kept)
        if dropped:
            tmp = self.trajectories.with_suffix(".jsonl.tmp")
            with open(tmp, "wb") as fh:
                fh.writelines(kept)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.trajectories)
        return dropped

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
        line = (dumps(data, ensure_ascii=False) + "\n").encode("utf-8")
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
        return self._write_json(self.summary_path, data)

    def write_config(self, data: Mapping[str, Any]) -> Path:
        """Write `config.json` (the settings that produced the run) atomically."""
        return self._write_json(self.config_path, data)

    def read_config(self) -> dict[str, Any] | None:
        """`config.json` as a dict, None when absent; DatasetError when unreadable."""
        return self._read_json(self.config_path)

    def _write_json(self, path: Path, data: Mapping[str, Any]) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(dumps(dict(data), indent=2), encoding="utf-8")
        os.replace(tmp, path)
        return path

    def read_summary(self) -> dict[str, Any] | None:
        """`summary.json` as a dict, None when absent; DatasetError when it is not a JSON object."""
        return self._read_json(self.summary_path)

    @staticmethod
    def _read_json(path: Path) -> dict[str, Any] | None:
        if not path.is_file():
            return None
        try:
            loaded = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}: not JSON ({exc.msg})") from exc
        if not isinstance(loaded, dict):
            raise DatasetError(f"{path}: not a JSON object")
        return loaded


__all__ = ["CONFIG", "REPORT", "SUMMARY", "TRAJECTORIES", "RunDirectory", "read_trajectories"]
