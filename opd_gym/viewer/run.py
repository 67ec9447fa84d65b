"""Read a run directory for the viewer: episodes, the run summary, and what could not be read.

Tolerant by design: a bad JSONL line is skipped and counted, missing fields read as absent,
and OPD records are parsed per episode only when rendered (a broken one becomes a note).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from opd_gym.opd.record import OPDRecord

TRAJECTORIES = "trajectories.jsonl"
SUMMARY = "summary.json"


def as_float(value: Any) -> float | None:
    """A finite float from a JSON value (numbers or "NaN"-style strings), else None."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def as_list(value: Any) -> list[Any]:
    """`value` if it is a list, else an empty list (fields may be missing or null)."""
    return value if isinstance(value, list) else []


def as_dict(value: Any) -> dict[str, Any]:
    """`value` if it is a dict, else an empty dict."""
    return value if isinstance(value, dict) else {}


@dataclass
class Episode:
    """One JSONL line with the derived facts the report shows (all robust to missing fields)."""

    data: dict[str, Any]
    number: int  # 1-based position in the file, among the good lines

    @property
    def task_id(self) -> str:
        return str(self.data.get("task_id") or "?")

    @property
    def finished(self) -> bool:
        return bool(self.data.get("finished", False))

    @property
    def reward(self) -> float | None:
        """The episode return: `return` if recorded, else the sum of `rewards`."""
        value = as_float(self.data.get("return"))
        if value is not None:
            return value
        rewards = [as_float(r) for r in as_list(self.data.get("rewards"))]
        return sum(r for r in rewards if r is not None) if rewards else None

    @property
    def grade(self) -> dict[str, Any]:
        return as_dict(self.data.get("grade"))

    @property
    def passed(self) -> bool | None:
        """True when every hidden test passed, False when graded otherwise, None if ungraded."""
        grade = self.grade
        if not grade:
            return None
        passed = int(as_float(grade.get("passed")) or 0)
        total = as_float(grade.get("total"))
        if total is None:
            keys = ("passed", "failed", "errors", "skipped")
            total = sum(as_float(grade.get(k)) or 0 for k in keys)
        return not grade.get("reason") and total > 0 and passed == int(total)

    @property
    def turns(self) -> list[dict[str, Any]]:
        return [t for t in as_list(self.data.get("turns")) if isinstance(t, dict)]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [m for m in as_list(self.data.get("messages")) if isinstance(m, dict)]

    @property
    def num_turns(self) -> int:
        """Assistant turns: recorded turns, else assistant messages, else steps."""
        if self.turns:
            return len(self.turns)
        assistants = sum(m.get("role") == "assistant" for m in self.messages)
        return assistants or len(as_list(self.data.get("rewards")))

    @property
    def raw_opd(self) -> list[dict[str, Any]]:
        return [r for r in as_list(self.data.get("opd")) if isinstance(r, dict)]

    @property
    def hints(self) -> int:
        return sum(bool(r.get("hint")) for r in self.raw_opd)

    @property
    def tokens_scored(self) -> int:
        return sum(sum(bool(m) for m in as_list(r.get("mask"))) for r in self.raw_opd)

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


@dataclass
class Run:
    """A run directory's episodes, its `summary.json` (if any) and the lines skipped."""

    path: Path
    episodes: list[Episode] = field(default_factory=list)
    summary_file: dict[str, Any] | None = None
    bad_lines: int = 0
    problems: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The run summary shown on top: `summary.json` if present, completed from the episodes."""
        out = dict(self.summary_file or {})
        for key, value in summarize(self.episodes).items():
            out.setdefault(key, value)
        out["bad_lines"] = self.bad_lines
        return out


def summarize(episodes: list[Episode]) -> dict[str, Any]:
    """Summary statistics computed from the episodes (for runs without `summary.json`)."""
    graded = [e.passed for e in episodes if e.passed is not None]
    rewards = [e.reward for e in episodes if e.reward is not None]
    records = [r for e in episodes for r in e.raw_opd]
    turns = sum(e.num_turns for e in episodes)
    return {
        "episodes": len(episodes),
        "finished": sum(e.finished for e in episodes),
        "unfinished": sum(not e.finished for e in episodes),
        "pass_rate": sum(graded) / len(graded) if graded else None,
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "mean_turns": turns / len(episodes) if episodes else None,
        "hint_rate": sum(bool(r.get("hint")) for r in records) / len(records) if records else None,
        "tokens_scored": sum(e.tokens_scored for e in episodes),
    }


def trajectories_path(run_dir: str | Path) -> Path:
    """The JSONL file of a run: `RUN_DIR/trajectories.jsonl`, or the path itself if a file."""
    path = Path(run_dir)
    return path if path.is_file() else path / TRAJECTORIES


def load_run(run_dir: str | Path) -> Run:
    """Read `trajectories.jsonl` (skipping and counting bad lines) and `summary.json`."""
    source = trajectories_path(run_dir)
    if not source.is_file():
        raise FileNotFoundError(f"no {TRAJECTORIES} in {run_dir} (is it a run directory?)")
    run = Run(path=source.parent)
    with source.open(encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                data, reason = None, f"not JSON ({exc.msg})"
            else:
                reason = "not a JSON object"
            if not isinstance(data, dict):
                run.bad_lines += 1
                run.problems.append(f"line {number}: {reason}")
                continue
            run.episodes.append(Episode(data, len(run.episodes) + 1))
    summary = run.path / SUMMARY
    if summary.is_file():
        try:
            loaded = json.loads(summary.read_text(encoding="utf-8", errors="replace"))
        except json.JSONDecodeError as exc:
            run.problems.append(f"{SUMMARY}: not JSON ({exc.msg})")
        else:
            if isinstance(loaded, dict):
                run.summary_file = loaded
            else:
                run.problems.append(f"{SUMMARY}: not a JSON object")
    return run
