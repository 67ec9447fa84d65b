"""What a rollout did: counts, rates and OPD metrics over its episode rows (summary.json).

The summary a run writes is computed from every row of its directory (`RunSummary.of_rows`),
not from one invocation's episodes, so a resumed or interrupted run reports the whole run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opd_gym.opd.metrics import OPDMetrics, current_names
from opd_gym.records.rows import EpisodeRow, as_float


@dataclass
class RunSummary:
    """What a rollout did, printed as a table and saved as summary.json."""

    episodes: int = 0  # played: finished, not interrupted, graded without an infra error
    skipped: int = 0  # of those, played by an earlier invocation (resumed)
    passed: int = 0
    reward_sum: float = 0.0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    metrics: OPDMetrics = field(default_factory=OPDMetrics)  # hints and tokens live here
    interrupted: bool = False  # this invocation was stopped by Ctrl-C
    interrupted_episodes: int = 0  # rows cut short by an interrupt (resume plays them again)
    infra_errors: int = 0  # rows whose grading failed on our side (resume plays them again)
    unfinished: int = 0  # other rows that did not finish (an episode error, a killed run)
    groups: dict[str, Any] | None = None  # with repeat > 1: per-task group statistics
    unreadable_records: int = 0  # played rows whose OPD records could not be parsed (viewer)

    @classmethod
    def of_rows(cls, rows: Iterable[EpisodeRow], *, repeat: int = 1, tolerant: bool = False,
                **fields: Any) -> RunSummary:
        """The summary of a whole run: every row (one per episode id) counted once; with
        `repeat` > 1 also the group statistics of each task's rollouts (`group_stats`).
        `tolerant` (readers of old or damaged runs): a row whose OPD records do not parse
        still counts, without them, in `unreadable_records`."""
        summary = cls(**fields)
        rows = list(rows)
        if repeat > 1:
            summary.groups = group_stats([r for r in rows if r.played], repeat)
        for row in rows:
            if row.interrupted:
                summary.interrupted_episodes += 1
            elif not row.finished:
                summary.unfinished += 1
            elif row.infra_error:
                summary.infra_errors += 1
            else:
                summary.count(row, tolerant=tolerant)
        return summary

    @property
    def replayable(self) -> int:
        """Rows that `--resume` plays again."""
        return self.interrupted_episodes + self.infra_errors + self.unfinished

    @property
    def pass_rate(self) -> float:
        return self.passed / self.episodes if self.episodes else 0.0

    @property
    def mean_reward(self) -> float:
        return self.reward_sum / self.episodes if self.episodes else 0.0

    @property
    def turns_scored(self) -> int:
        return self.metrics.scored

    @property
    def tokens_scored(self) -> int:
        return self.metrics.positions

    @property
    def turns_recorded(self) -> int:
        """Turns that carry an OPD record, scored or not (turns_scored + unscored)."""
        return self.metrics.turns

    @property
    def unscored(self) -> dict[str, int]:
        """Turns left without teacher signal, by reason (a SkipReason value), most first."""
        return dict(sorted(self.metrics.unscored.items(), key=lambda kv: (-kv[1], kv[0])))

    @property
    def hint_rate(self) -> float:
        return self.metrics.hints / self.metrics.scored if self.metrics.scored else 0.0

    def count(self, row: EpisodeRow, *, tolerant: bool = False) -> dict[str, float]:
        """Add a finished episode; returns its per-episode metrics (see `episode_metrics`)."""
        try:
            records = row.records()
        except Exception:  # a malformed record (a damaged file); only readers tolerate it
            if not tolerant:
                raise
            records = []
            self.unreadable_records += 1
        self.episodes += 1
        self.passed += bool(row.passed)
        self.reward_sum += row.reward
        self.metrics.episode(records)
        return episode_metrics(row, self)

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in vars(self).items() if k != "metrics"
                and not (k == "unreadable_records" and not v)}
        data.update(
            pass_rate=self.pass_rate if self.episodes else None,
            mean_reward=self.mean_reward if self.episodes else None,
            hint_rate=self.hint_rate if self.turns_scored else None,
            turns_scored=self.turns_scored, tokens_scored=self.tokens_scored,
            opd=self.metrics.summary(),
        )
        return data

    def table(self) -> str:
        rows = [
            ("episodes", f"{self.episodes} ({self.skipped} from before this invocation)"
             if self.skipped else str(self.episodes)),
            ("pass rate", f"{self.pass_rate:.0%}" if self.episodes else "n/a (no episode)"),
            ("mean reward", f"{self.mean_reward:.3f}" if self.episodes else "n/a"),
            ("hint rate", f"{self.hint_rate:.0%} of {self.turns_scored} scored turns"
             if self.turns_scored else "n/a (no scored turn)"),
            *([("turns scored", scoring_text(self.metrics))] if self.turns_recorded else []),
            *([("hinted turns", hinted_text(self.metrics))] if self.turns_scored else []),
            ("tokens scored", str(self.tokens_scored)),
            ("time", f"{self.seconds:.1f} s"),
        ]
        rows += opd_footing_rows(self.metrics)
        if self.failures:
            rows.append(("episode errors", str(len(self.failures))))
        if self.groups:
            at = self.groups["pass_at_k"]
            rows.append(("groups", f"{self.groups['tasks']} tasks x {self.groups['repeat']}, "
                         f"reward std {_num(self.groups['mean_reward_std'])}"))
            rows.append(("pass@k", ", ".join(f"@{k} {_num(v, '.0%')}" for k, v in at.items())))
        for label, count in (("interrupted", self.interrupted_episodes),
                             ("infra errors", self.infra_errors),
                             ("unfinished", self.unfinished)):
            if count:
                rows.append((label, f"{count} (--resume plays them again)"))
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def scoring_text(metrics: OPDMetrics) -> str:
    """Scored turns beside the unscored ones and why, from records (e.g. "1 of 6; unscored 5
    (context too long: 5)")."""
    text = f"{metrics.scored} of {metrics.turns}"
    unscored = sum(metrics.unscored.values())
    if unscored:
        reasons = sorted(metrics.unscored.items(), key=lambda kv: (-kv[1], kv[0]))
        text += f"; unscored {unscored} (" + ", ".join(
            f"{reason.replace('_', ' ')}: {count}" for reason, count in reasons) + ")"
    return text


def hinted_text(metrics: OPDMetrics) -> str:
    """The scored turns that got a hint, where the teaching signal is: their count, mean
    teacher - student gap and top-1 mismatch (e.g. "2, gap +0.4130 nats, top-1 mismatch
    61.0%"); a figure that cannot exist says why."""
    numbers = metrics.summary()
    gap = numbers["opd/hinted/mean_teacher_minus_student"]
    miss = numbers["opd/hinted/top1_mismatch"]
    if not metrics.hints:
        return "0 (no scored turn got a hint)"
    gap_text = f"gap {gap:+.4f} nats" if math.isfinite(gap) else "gap n/a (no student logprobs)"
    miss_text = (f"top-1 mismatch {miss:.1%}" if math.isfinite(miss)
                 else "top-1 mismatch n/a (topk 0)")
    return f"{metrics.hints}, {gap_text}, {miss_text}"


def opd_footing_rows(metrics: OPDMetrics) -> list[tuple[str, str]]:
    """Summary lines on how far the OPD numbers can be trusted: turns whose teacher context
    was rebuilt from messages (warned), ids never checked, the no-hint control's gap."""
    rows = []
    if metrics.reconstructed:
        rows.append(("reconstructed", f"{metrics.reconstructed / metrics.turns:.0%} of "
                     f"{metrics.turns} turns - WARNING: the agent passed no prompt_ids, the "
                     "teacher's context was rebuilt from the messages; their teacher-student "
                     "gaps may come from the rendering (pass prompt_ids)"))
    if metrics.unchecked:
        rows.append(("ids unchecked", f"{metrics.unchecked} turns (student_tokenizer="
                     "'unchecked')"))
    if metrics.control_turns:
        gap = metrics.control_sum / metrics.control_n if metrics.control_n else float("nan")
        rows.append(("no-hint control", f"mean teacher - student {gap:+.4f} nats over "
                     f"{metrics.control_turns} turns"))
    return rows


def _num(value: float | None, spec: str = ".3f") -> str:
    return "n/a" if value is None else format(value, spec)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task (Chen et al. 2021): 1 - C(n-c, k) / C(n, k), from n
    rollouts of which c passed; k <= n."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _std(values: Sequence[float]) -> float:
    """Population standard deviation (the spread GRPO normalises by)."""
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def group_stats(rows: Sequence[EpisodeRow], repeat: int) -> dict[str, Any]:
    """Per-task groups of played rollouts: each task's n, passes, mean and std of reward; over
    tasks the mean reward std and pass@k for k = 1..repeat (the unbiased estimator, averaged
    over the tasks with at least k graded rollouts; a k no task reaches is left out)."""
    by_task: dict[str, list[EpisodeRow]] = {}
    for row in rows:
        by_task.setdefault(row.task_id, []).append(row)
    tasks: dict[str, dict[str, Any]] = {}
    for task, group in by_task.items():
        rewards = [r.reward for r in group]
        graded = [r.passed for r in group if r.passed is not None]
        tasks[task] = {"n": len(group), "passed": sum(graded), "graded": len(graded),
                       "mean_reward": sum(rewards) / len(rewards), "reward_std": _std(rewards)}
    at: dict[str, float] = {}
    for k in range(1, repeat + 1):
        values = [pass_at_k(t["graded"], t["passed"], k) for t in tasks.values()
                  if t["graded"] >= k]
        if values:
            at[str(k)] = sum(values) / len(values)
    stds = [t["reward_std"] for t in tasks.values()]
    return {"repeat": repeat, "tasks": len(tasks), "per_task": tasks, "pass_at_k": at,
            "mean_reward_std": sum(stds) / len(stds) if stds else None}


def episode_metrics(row: EpisodeRow, summary: RunSummary) -> dict[str, float]:
    """Per-episode metrics under hermes-compatible and our names, plus running rates."""
    out = {k: float(v) for k, v in current_names(row.opd_metrics or {}).items()
           if as_float(v) is not None}  # a metric with no value (stored as null) is left out
    out["train/reward"] = float(sum(r for r in map(as_float, row.rewards) if r is not None))
    out["train/passed"] = float(bool(row.passed))
    out["train/pass_rate"] = summary.pass_rate
    out["train/episodes"] = float(summary.episodes)
    return out


__all__ = ["RunSummary", "episode_metrics", "group_stats", "hinted_text", "pass_at_k",
           "scoring_text"]
