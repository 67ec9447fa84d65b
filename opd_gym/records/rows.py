"""One episode row of `trajectories.jsonl`, typed and versioned, with the facts derived from it.

Every writer and reader of a run directory goes through `EpisodeRow`: "passed", the hint rate,
the return and the scored-token count are computed here once, not re-derived per reader.
Version history (stored under the key `schema`):

- 1: the first format (rows written before the key existed read as version 1 too).
  Optional keys added since, read as absent from older rows: `interrupted` (true: the run was
  interrupted while this episode played; it counts as not played), `error` (why an
  unfinished row ended) and `diff` (a repository task's change: `text` the git diff against
  the base commit, "" for none, null when unknown with the `reason`; `truncated`, `lossy`).

Files are strict JSON: a non-finite float (NaN, Infinity) is written as null (OPD record
arrays spell theirs as the strings "NaN"/"Infinity"/"-Infinity"); readers still accept the
bare NaN of older files.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opd_gym.errors import DatasetError

SCHEMA_VERSION = 1  # the version this code writes
SUPPORTED_VERSIONS = frozenset({1})  # the versions this code reads
VERSION_KEY = "schema"

# on-disk key -> attribute name (the key `return` is a Python keyword)
_FIELDS = {
    "task_id": "task_id",
    "seed": "seed",
    "episode": "episode",
    "finished": "finished",
    "terminated": "terminated",
    "truncated": "truncated",
    "end_reason": "end_reason",
    "length": "length",
    "return": "episode_return",
    "rewards": "rewards",
    "reward_breakdown": "reward_breakdown",
    "grade": "grade",
    "messages": "messages",
    "turns": "turns",
    "duration": "duration",
    "opd": "opd",
    "opd_metrics": "opd_metrics",
    "tools": "tools",
    "diff": "diff",
}


def as_float(value: Any) -> float | None:
    """A finite float from a JSON value (numbers or "NaN"-style strings), else None."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def strict(value: Any) -> Any:
    """`value` with every non-finite float replaced by None (JSON has no NaN or Infinity)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict(v) for v in value]
    if hasattr(value, "item") and hasattr(value, "dtype"):  # a numpy scalar
        return strict(value.item())
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """Strict JSON text of `value` (non-finite floats as null; never a bare NaN)."""
    return json.dumps(strict(value), allow_nan=False, default=str, **kwargs)


def as_list(value: Any) -> list[Any]:
    """`value` if it is a list, else an empty list (fields may be missing or null)."""
    return value if isinstance(value, list) else []


def as_dict(value: Any) -> dict[str, Any]:
    """`value` if it is a dict, else an empty dict."""
    return value if isinstance(value, dict) else {}


def schema_version(data: Mapping[str, Any]) -> int:
    """The schema version a stored row declares (absent: 1); unreadable ones raise DatasetError."""
    version = data.get(VERSION_KEY, 1)
    if isinstance(version, bool) or not isinstance(version, int):
        raise DatasetError(f"episode row has schema version {version!r}, not an integer")
    if version not in SUPPORTED_VERSIONS:
        known = ", ".join(str(v) for v in sorted(SUPPORTED_VERSIONS))
        newer = " (written by a newer opd_gym: upgrade it)" if version > SCHEMA_VERSION else ""
        raise DatasetError(
            f"episode row has schema version {version}; this opd_gym reads version(s) "
            f"{known}{newer}"
        )
    return version


def grade_passed(grade: Mapping[str, Any] | None) -> bool | None:
    """True when every hidden test passed, False when graded otherwise, None when ungraded."""
    grade = as_dict(grade)
    if not grade:
        return None
    passed = int(as_float(grade.get("passed")) or 0)
    total = as_float(grade.get("total"))
    if total is None:
        total = sum(as_float(grade.get(k)) or 0 for k in ("passed", "failed", "errors", "skipped"))
    return not grade.get("reason") and total > 0 and passed == int(total)


def record_scored(record: Mapping[str, Any]) -> bool:
    """Whether a stored OPD record carries teacher signal (any masked-in position)."""
    return any(bool(m) for m in as_list(record.get("mask")))


def hint_rate(rows: Iterable[EpisodeRow]) -> float | None:
    """Share of scored turns that got a judge hint over `rows`; None when nothing was scored."""
    scored = hinted = 0
    for row in rows:
        scored += row.scored_turns
        hinted += row.scored_hints
    return hinted / scored if scored else None


@dataclass
class EpisodeRow:
    """One recorded episode (a line of `trajectories.jsonl`); unknown keys survive in `extra`."""

    task_id: str = ""
    seed: int | None = None
    episode: int | None = None  # the rollout's episode number (its idempotent id)
    finished: bool = False  # False: cut short by reset/close (a crash or an unfinished run)
    terminated: bool = False
    truncated: bool = False
    end_reason: str = ""
    length: int = 0
    episode_return: float | None = None  # stored as `return`
    rewards: list[float] = field(default_factory=list)
    reward_breakdown: dict[str, Any] | None = None
    grade: dict[str, Any] | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    duration: float | None = None
    opd: list[dict[str, Any]] | None = None  # OPDRecord.to_dict() each; None when OPD was off
    opd_metrics: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    diff: dict[str, Any] | None = None  # a repository task's change (see the module doc)
    extra: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EpisodeRow:
        """A row from its stored JSON (any supported version; wrong-typed fields read as absent)."""
        if not isinstance(data, Mapping):
            raise DatasetError(f"episode row is a {type(data).__name__}, not a JSON object")
        version = schema_version(data)
        episode = data.get("episode")
        opd = data.get("opd")
        tools = data.get("tools")
        return cls(
            task_id=str(data.get("task_id") or ""),
            seed=data.get("seed") if isinstance(data.get("seed"), int) else None,
            episode=episode if isinstance(episode, int) and not isinstance(episode, bool) else None,
            finished=bool(data.get("finished", False)),
            terminated=bool(data.get("terminated", False)),
            truncated=bool(data.get("truncated", False)),
            end_reason=str(data.get("end_reason") or ""),
            length=int(as_float(data.get("length")) or 0),
            episode_return=as_float(data.get("return")),
            rewards=[r for r in as_list(data.get("rewards"))],
            reward_breakdown=data.get("reward_breakdown")
            if isinstance(data.get("reward_breakdown"), dict) else None,
            grade=data.get("grade") if isinstance(data.get("grade"), dict) else None,
            messages=[m for m in as_list(data.get("messages")) if isinstance(m, dict)],
            turns=[t for t in as_list(data.get("turns")) if isinstance(t, dict)],
            duration=as_float(data.get("duration")),
            opd=[r for r in opd if isinstance(r, dict)] if isinstance(opd, list) else None,
            opd_metrics=data.get("opd_metrics") if isinstance(data.get("opd_metrics"), dict)
            else None,
            tools=[t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else None,
            diff=data.get("diff") if isinstance(data.get("diff"), dict) else None,
            extra={k: v for k, v in data.items() if k not in _FIELDS and k != VERSION_KEY},
            schema_version=version,
        )

    def to_dict(self) -> dict[str, Any]:
        """The row as stored: the current schema's keys, in the recorder's order, plus `extra`."""
        out: dict[str, Any] = {VERSION_KEY: SCHEMA_VERSION}
        for key, name in _FIELDS.items():
            value = getattr(self, name)
            if key == "episode" and value is None:
                continue
            if key in ("opd", "opd_metrics") and self.opd is None and self.opd_metrics is None:
                continue
            if key in ("tools", "diff") and value is None:
                continue
            out[key] = value
        out.update(self.extra)
        return out

    @property
    def interrupted(self) -> bool:
        """Whether the run was interrupted while this episode played (it counts as unplayed)."""
        return bool(self.extra.get("interrupted"))

    @property
    def infra_error(self) -> bool:
        """Whether grading failed for a reason of ours (no sandbox, a crash), not the code's."""
        return bool(as_dict(self.grade).get("infra_error"))

    @property
    def played(self) -> bool:
        """A finished, uninterrupted episode graded without an infra error (what counts)."""
        return self.finished and not self.interrupted and not self.infra_error

    @property
    def reward(self) -> float:
        """The episode return: `return` if recorded, else the sum of the finite `rewards`."""
        if self.episode_return is not None:
            return self.episode_return
        return sum(r for r in (as_float(x) for x in self.rewards) if r is not None)

    @property
    def passed(self) -> bool | None:
        """True when every hidden test passed, False when graded otherwise, None if ungraded."""
        return grade_passed(self.grade)

    @property
    def num_turns(self) -> int:
        """Assistant turns: recorded turns, else assistant messages, else steps."""
        if self.turns:
            return len(self.turns)
        assistants = sum(m.get("role") == "assistant" for m in self.messages)
        return assistants or len(self.rewards)

    @property
    def opd_dicts(self) -> list[dict[str, Any]]:
        """The stored OPD records (empty when OPD was off)."""
        return self.opd or []

    @property
    def hints(self) -> int:
        """Turns whose OPD record carries a judge hint."""
        return sum(bool(r.get("hint")) for r in self.opd_dicts)

    @property
    def scored_turns(self) -> int:
        """Turns with teacher signal (the hint rate's denominator)."""
        return sum(record_scored(r) for r in self.opd_dicts)

    @property
    def scored_hints(self) -> int:
        """Scored turns that carry a hint (the hint rate's numerator)."""
        return sum(bool(r.get("hint")) for r in self.opd_dicts if record_scored(r))

    @property
    def tokens_scored(self) -> int:
        """Positions with teacher signal over all turns."""
        return sum(sum(bool(m) for m in as_list(r.get("mask"))) for r in self.opd_dicts)

    def records(self) -> list[Any]:
        """The OPD records parsed (`OPDRecord`); a malformed one raises."""
        from opd_gym.records.opd_record import OPDRecord

        return [OPDRecord.from_dict(r) for r in self.opd_dicts]


__all__ = [
    "SCHEMA_VERSION",
    "SUPPORTED_VERSIONS",
    "EpisodeRow",
    "as_dict",
    "as_float",
    "as_list",
    "dumps",
    "grade_passed",
    "hint_rate",
    "record_scored",
    "schema_version",
    "strict",
]
