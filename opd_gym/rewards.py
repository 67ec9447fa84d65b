"""The terminal reward of a coding episode: correctness, efficiency and tool use, weighted.

With `T` the assistant turns used, `M` the turn limit, and the calls of the episode in order:

- correctness `c` = the grade's score (the share of the earning hidden tests passed, 0 when
  grading failed: no tests, timeout, a broken gate...); with `binary=True`, `c` = 1 if every
  hidden test passed, else 0. The untouched starter scores 0.
- Nothing for nothing: the bonuses below are paid only for fully solved work (`c == 1`);
  below that, efficiency and tool_use are 0, so partial or no work never earns a bonus.
- efficiency `e` = 1 - (T - 1) / M when solved, else 0: fewer turns is better.
- tool_use `u` = 0 unless solved or if no tool other than `submit` was called, else
  0.4 * [a write_file/edit_file call succeeded]
  + 0.4 * [a terminal command ran to completion after the last successful file change]
  + 0.2 * (1 - failed / attempted), where attempted counts every non-submit call plus every
  format error, and failed counts calls that returned an error (invalid call, missing file,
  no match, timeout...) plus format errors. A non-zero exit code is not a failed call.
- reward = w_c * c + w_e * e + w_u * u, default weights 0.7 / 0.15 / 0.15 (the weights of
  hermes-agent's AgenticOPDEnv); in [0, 1] when the weights sum to 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields

from opd_gym.errors import ConfigError
from opd_gym.grading import GradeReport
from opd_gym.tools.executor import ToolResult
from opd_gym.tools.schemas import FILE_WRITING_TOOLS, SUBMIT, TERMINAL

SKIPPED = "skipped"


@dataclass(frozen=True)
class RewardWeights:
    """Weights of the three reward terms."""

    correctness: float = 0.7
    efficiency: float = 0.15
    tool_use: float = 0.15

    @classmethod
    def from_config(cls, value: RewardWeights | Mapping[str, float] | None) -> RewardWeights:
        """Build from a plain mapping (unknown keys or negative weights raise ValueError)."""
        if value is None:
            return cls()
        if isinstance(value, RewardWeights):
            return value
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ConfigError(f"unknown reward weight(s) {unknown}; known: {sorted(known)}")
        weights = cls(**{k: float(v) for k, v in value.items()})
        if min(asdict(weights).values()) < 0:
            raise ConfigError(f"reward weights must be >= 0, got {asdict(weights)}")
        return weights


@dataclass(frozen=True)
class RewardBreakdown:
    """The three terms (each in [0, 1]) and the weighted total."""

    correctness: float
    efficiency: float
    tool_use: float
    total: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def correctness(report: GradeReport | None, *, binary: bool = False) -> float:
    """The grade's score in [0, 1] (all-or-nothing with `binary`); 0 without a grade."""
    if report is None:
        return 0.0
    return (1.0 if report.all_passed else 0.0) if binary else report.score


def solved(correct: float) -> bool:
    """Whether the work is fully solved, the only state that earns the bonus terms."""
    return correct >= 1.0


def efficiency(correct: float, turns: int, max_turns: int) -> float:
    """1 - (T - 1) / M for solved work (fewer turns is better), else 0."""
    if max_turns <= 0 or not solved(correct):
        return 0.0
    spent = min(max(turns, 1), max_turns)
    return 1.0 - (spent - 1) / max_turns


def tool_use(results: Sequence[ToolResult], format_errors: int = 0) -> float:
    """Score how the episode used the tools (see the module docstring for the formula).

    This is the raw term; `compute_reward` pays it only when the work is solved.
    """
    calls = [r for r in results if r.name != SUBMIT and r.error != SKIPPED]
    if not calls:
        return 0.0
    wrote = [i for i, r in enumerate(calls) if r.name in FILE_WRITING_TOOLS and r.ok]
    last_write = wrote[-1] if wrote else -1
    verified = any(
        r.name == TERMINAL and r.ok and i > last_write for i, r in enumerate(calls)
    )
    attempted = len(calls) + format_errors
    failed = sum(not r.ok for r in calls) + format_errors
    return 0.4 * bool(wrote) + 0.4 * verified + 0.2 * (1.0 - failed / attempted)


def compute_reward(
    report: GradeReport | None,
    results: Sequence[ToolResult],
    *,
    turns: int,
    max_turns: int,
    format_errors: int = 0,
    weights: RewardWeights | None = None,
    binary: bool = False,
) -> RewardBreakdown:
    """The terminal reward of an episode and its terms (bonuses only for solved work)."""
    w = weights or RewardWeights()
    c = correctness(report, binary=binary)
    e = efficiency(c, turns, max_turns)
    u = tool_use(results, format_errors) if solved(c) else 0.0
    total = w.correctness * c + w.efficiency * e + w.tool_use * u
    return RewardBreakdown(correctness=c, efficiency=e, tool_use=u, total=total)
