"""Read a run directory for the viewer: episodes, the run summary, and what could not be read.

Tolerant by design: a bad JSONL line is skipped and counted, missing fields read as absent,
and OPD records are parsed per episode only when rendered (a broken one becomes a note).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from opd_gym.errors import DatasetError
from opd_gym.records.opd_record import OPDRecord
from opd_gym.records.rows import as_dict, as_float, as_list
from opd_gym.runs import SUMMARY, TRAJECTORIES, EpisodeRow, RunDirectory, RunSummary, hint_rate

__all__ = [
    "SUMMARY", "TRAJECTORIES", "Episode", "Run", "as_dict", "as_float", "as_list", "load_run",
    "summarize", "trajectories_path",
]


@dataclass
class Episode:
    """One JSONL line with the derived facts the report shows (all robust to missing fields)."""

    data: dict[str, Any]
    number: int  # 1-based position in the file, among the good lines

    @cached_property
    def row(self) -> EpisodeRow:
        """The line as a typed row (the schema computes what follows, once for every reader)."""
        return EpisodeRow.from_dict(self.data)

    @property
    def task_id(self) -> str:
        return self.row.task_id or "?"

    @property
    def finished(self) -> bool:
        return self.row.finished

    @property
    def reward(self) -> float | None:
        """The episode return: `return` if recorded, else the sum of `rewards` (None: neither)."""
        row = self.row
        return None if row.episode_return is None and not row.rewards else row.reward

    @property
    def grade(self) -> dict[str, Any]:
        return self.row.grade or {}

    @property
    def passed(self) -> bool | None:
        """True when every hidden test passed, False when graded otherwise, None if ungraded."""
        return self.row.passed

    @property
    def turns(self) -> list[dict[str, Any]]:
        return self.row.turns

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.row.messages

    @property
    def num_turns(self) -> int:
        """Assistant turns: recorded turns, else assistant messages, else steps."""
        return self.row.num_turns

    @property
    def raw_opd(self) -> list[dict[str, Any]]:
        return self.row.opd_dicts

    @property
    def hints(self) -> int:
        return self.row.hints

    @property
    def tokens_scored(self) -> int:
        return self.row.tokens_scored

    @cached_property
    def opd(self) -> tuple[dict[int, OPDRecord], list[str]]:
        """Parsed OPD records by turn index, and a note for each record that failed to parse."""
        records: dict[int, OPDRecord] = {}
        problems: list[str] = []
        for position, raw in enumerate(as_list(self.data.get("opd"))):
            try:
                record = OPDRecord.from_dict(raw)
            except Exception as exc:  # a broken record must not break the report
                problems.append(f"OPD record {position}: {type(exc).__name__}: {exc}")
                continue
            records[record.turn_index] = record
        return records, problems


# Numbers the report recomputes from the rows and compares with summary.json's.
CHECKED = ("episodes", "passed", "pass_rate", "mean_reward", "interrupted_episodes",
           "infra_errors", "unfinished", "tokens_scored")


@dataclass
class Run:
    """A run directory's episodes, its `summary.json` and `config.json` (if any) and the
    lines skipped."""

    path: Path
    episodes: list[Episode] = field(default_factory=list)
    summary_file: dict[str, Any] | None = None
    config_file: dict[str, Any] | None = None
    bad_lines: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.name or str(self.path)

    def rows(self) -> list[Episode]:
        """One episode per episode id (the last line of an id, lines without one all), in the
        order ids first appear: what the numbers count (as `RunDirectory.episodes`)."""
        by_id: dict[int, Episode] = {}
        order: list[Episode | int] = []
        for ep in self.episodes:
            ident = ep.row.episode
            if ident is None:
                order.append(ep)
                continue
            if ident not in by_id:
                order.append(ident)
            by_id[ident] = ep
        return [by_id[item] if isinstance(item, int) else item for item in order]

    @property
    def repeat(self) -> int:
        """Rollouts per task (`--repeat`), from config.json, else summary.json; 1 if neither."""
        summary = as_dict(self.summary_file)
        for value in (as_dict(self.config_file).get("repeat"),
                      as_dict(summary.get("config")).get("repeat"),
                      as_dict(summary.get("groups")).get("repeat")):
            if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
                return value
        return 1

    @cached_property
    def stats(self) -> RunSummary:
        """The run's numbers recomputed from its rows, by the same code as summary.json."""
        return RunSummary.of_rows([ep.row for ep in self.rows()], repeat=self.repeat,
                                  tolerant=True)

    def summary(self) -> dict[str, Any]:
        """The run summary shown on top, recomputed from the rows (`stats`) with what rows
        cannot tell taken from summary.json (wall time), plus the viewer's own counts."""
        rows = self.rows()
        out = self.stats.to_dict()
        out.pop("seconds", None)
        out.pop("skipped", None)
        out.pop("interrupted", None)
        seconds = as_float(as_dict(self.summary_file).get("seconds"))
        if seconds is not None:
            out["seconds"] = seconds
        out["rows"] = len(rows)
        out["mean_turns"] = (sum(ep.num_turns for ep in rows) / len(rows)) if rows else None
        out["bad_lines"] = self.bad_lines
        return out

    def disagreements(self) -> list[tuple[str, Any, Any]]:
        """(key, summary.json's value, the rows' value) wherever summary.json says otherwise
        than its rows (an old or hand-edited file): the report shows the rows' numbers."""
        if not self.summary_file:
            return []
        mine = self.stats.to_dict()
        out = []
        for key in CHECKED:
            if key not in self.summary_file:
                continue
            theirs, ours = self.summary_file[key], mine.get(key)
            a, b = as_float(theirs), as_float(ours)
            same = (a is None and b is None) or (
                a is not None and b is not None and abs(a - b) <= 1e-9 * max(1.0, abs(b)))
            if not same:
                out.append((key, theirs, ours))
        return out


def summarize(episodes: list[Episode]) -> dict[str, Any]:
    """Summary statistics computed from the episodes (for runs without `summary.json`)."""
    graded = [e.passed for e in episodes if e.passed is not None]
    rewards = [e.reward for e in episodes if e.reward is not None]
    turns = sum(e.num_turns for e in episodes)
    return {
        "episodes": len(episodes),
        "finished": sum(e.finished for e in episodes),
        "unfinished": sum(not e.finished for e in episodes),
        "pass_rate": sum(graded) / len(graded) if graded else None,
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "mean_turns": turns / len(episodes) if episodes else None,
        "hint_rate": hint_rate(e.row for e in episodes),
        "tokens_scored": sum(e.tokens_scored for e in episodes),
    }


def trajectories_path(run_dir: str | Path) -> Path:
    """The JSONL file of a run: `RUN_DIR/trajectories.jsonl`, or the path itself if a file."""
    return RunDirectory(run_dir).trajectories


def load_run(run_dir: str | Path) -> Run:
    """Read `trajectories.jsonl` (skipping and counting bad lines) and `summary.json`."""
    directory = RunDirectory(run_dir)
    if not directory.exists():
        raise FileNotFoundError(f"no {TRAJECTORIES} in {run_dir} (is it a run directory?)")
    run = Run(path=directory.root)
    for number, data, reason in directory.lines():
        if data is not None:
            episode = Episode(data, len(run.episodes) + 1)
            try:
                episode.row  # noqa: B018  (an unreadable schema version is a bad line)
            except DatasetError as exc:
                data, reason = None, str(exc)
        if data is None:
            run.bad_lines += 1
            run.problems.append(f"line {number}: {reason}")
            continue
        run.episodes.append(episode)
    try:
        run.summary_file = directory.read_summary()
    except DatasetError as exc:
        run.problems.append(f"{SUMMARY}: {str(exc).removeprefix(f'{directory.summary_path}: ')}")
    try:
        run.config_file = directory.read_config()
    except DatasetError as exc:
        run.problems.append(f"config.json: "
                            f"{str(exc).removeprefix(f'{directory.config_path}: ')}")
    return run
