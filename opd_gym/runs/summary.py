"""What a rollout did: counts, rates and OPD metrics over its episode rows (summary.json)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opd_gym.opd.metrics import OPDMetrics
from opd_gym.runs.schema import EpisodeRow


@dataclass
class RunSummary:
    """What a rollout did, printed as a table and saved as summary.json."""

    episodes: int = 0
    skipped: int = 0
    passed: int = 0
    reward_sum: float = 0.0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    metrics: OPDMetrics = field(default_factory=OPDMetrics)  # hints and tokens live here

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
    def hint_rate(self) -> float:
        return self.metrics.hints / self.metrics.scored if self.metrics.scored else 0.0

    def count(self, row: EpisodeRow) -> dict[str, float]:
        """Add a finished episode; returns its per-episode metrics (see `episode_metrics`)."""
        self.episodes += 1
        self.passed += bool(row.passed)
        self.reward_sum += row.reward
        self.metrics.episode(row.records())
        return episode_metrics(row, self)

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in vars(self).items() if k != "metrics"}
        data.update(
            pass_rate=self.pass_rate, mean_reward=self.mean_reward, hint_rate=self.hint_rate,
            turns_scored=self.turns_scored, tokens_scored=self.tokens_scored,
            opd=self.metrics.summary(),
        )
        return data

    def table(self) -> str:
        rows = [
            ("episodes", f"{self.episodes} (+{self.skipped} resumed)"),
            ("pass rate", f"{self.pass_rate:.0%}"),
            ("mean reward", f"{self.mean_reward:.3f}"),
            ("hint rate", f"{self.hint_rate:.0%} of {self.turns_scored} scored turns"),
            ("tokens scored", str(self.tokens_scored)),
            ("time", f"{self.seconds:.1f} s"),
        ]
        if self.failures:
            rows.append(("episode errors", str(len(self.failures))))
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def episode_metrics(row: EpisodeRow, summary: RunSummary) -> dict[str, float]:
    """Per-episode metrics under hermes-compatible and our names, plus running rates."""
    out = {k: float(v) for k, v in (row.opd_metrics or {}).items()}
    out["train/reward"] = float(sum(row.rewards))
    out["train/passed"] = float(bool(row.passed))
    out["train/pass_rate"] = summary.pass_rate
    out["train/episodes"] = float(summary.episodes)
    return out


__all__ = ["RunSummary", "episode_metrics"]
