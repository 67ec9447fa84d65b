"""The reward formulas: correctness, gated efficiency, tool use, and the weighted total."""

from __future__ import annotations

import pytest

from opd_gym.grading import GradeReport, TestOutcome
from opd_gym.rewards import RewardWeights, compute_reward, efficiency, tool_use
from opd_gym.tools.executor import ToolResult


def report(passed: int, total: int, reason: str = "") -> GradeReport:
    tests = tuple(TestOutcome(f"t{i}", "passed" if i < passed else "failed") for i in range(total))
    return GradeReport("t", passed=passed, failed=total - passed, tests=tests, exit_code=0,
                       reason=reason, earning=total, earned=passed)


def result(name: str, ok: bool = True, error: str = "") -> ToolResult:
    return ToolResult("c", name, "", ok=ok, error=error)


GOOD = [result("write_file"), result("terminal"), result("submit")]


def test_correctness_fraction_and_binary():
    r = compute_reward(report(3, 4), GOOD, turns=3, max_turns=15)
    assert r.correctness == 0.75
    binary = compute_reward(report(3, 4), GOOD, turns=3, max_turns=15, binary=True)
    assert binary.correctness == 0.0 and binary.efficiency == 0.0
    assert compute_reward(report(4, 4), GOOD, turns=3, max_turns=15, binary=True).correctness == 1
    assert compute_reward(report(4, 4, "timed out"), GOOD, turns=3, max_turns=15).correctness == 0
    assert compute_reward(None, GOOD, turns=3, max_turns=15).correctness == 0


def test_efficiency_rewards_fewer_turns_only_for_solved_work():
    assert efficiency(1.0, 1, 15) == 1.0
    assert efficiency(1.0, 15, 15) == pytest.approx(1 / 15)
    assert efficiency(1.0, 4, 10) == pytest.approx(0.7)
    assert efficiency(0.5, 4, 10) == 0.0  # partial work earns no bonus
    assert efficiency(0.99, 1, 10) == 0.0
    assert efficiency(0.0, 1, 10) == 0.0  # giving up at once earns nothing


def test_tool_use_terms():
    assert tool_use([]) == 0.0
    assert tool_use([result("submit")]) == 0.0
    assert tool_use(GOOD) == pytest.approx(1.0)
    # wrote but never ran anything afterwards
    assert tool_use([result("terminal"), result("write_file")]) == pytest.approx(0.6)
    # ran but wrote nothing
    assert tool_use([result("terminal")]) == pytest.approx(0.6)
    # one failed call in four, plus one format error: 2 of 5 failed
    calls = [result("read_file", False, "not_found"), result("write_file"), result("terminal"),
             result("edit_file")]
    assert tool_use(calls, format_errors=1) == pytest.approx(0.4 + 0.0 + 0.2 * (1 - 2 / 5))
    # a timed-out command is a failed call and does not count as verification
    assert tool_use([result("write_file"), result("terminal", False, "timeout")]) == pytest.approx(
        0.4 + 0.2 * 0.5)
    # calls skipped after submit are ignored
    assert tool_use(GOOD + [result("terminal", False, "skipped")]) == pytest.approx(1.0)


def test_total_is_the_weighted_sum():
    r = compute_reward(report(4, 4), GOOD, turns=6, max_turns=11)
    expected = 0.7 * 1.0 + 0.15 * (1 - 5 / 11) + 0.15 * 1.0
    assert r.total == pytest.approx(expected)
    assert r.to_dict() == {"correctness": 1.0, "efficiency": r.efficiency, "tool_use": 1.0,
                           "total": r.total}
    w = RewardWeights.from_config({"correctness": 1.0, "efficiency": 0, "tool_use": 0})
    assert compute_reward(report(2, 4), GOOD, turns=6, max_turns=11, weights=w).total == 0.5


def test_bonuses_only_for_fully_solved_work():
    """Nothing for nothing: partial or no work earns correctness only, never a bonus."""
    partial = compute_reward(report(2, 4), GOOD, turns=1, max_turns=11)
    assert partial.to_dict() == {"correctness": 0.5, "efficiency": 0.0, "tool_use": 0.0,
                                 "total": pytest.approx(0.35)}
    nothing = compute_reward(report(0, 4), GOOD, turns=1, max_turns=11)
    assert nothing.total == 0.0 and nothing.tool_use == 0.0 and nothing.efficiency == 0.0
    assert compute_reward(None, GOOD, turns=1, max_turns=11).total == 0.0
    # tests the starter passes gate but earn nothing: the untouched starter scores 0
    gated = GradeReport("t", passed=2, failed=2, earning=2, earned=0, exit_code=0)
    assert compute_reward(gated, GOOD, turns=1, max_turns=11).total == 0.0
    failed = compute_reward(report(4, 4, "timed out"), GOOD, turns=1, max_turns=11)
    assert failed.total == 0.0
    solved = compute_reward(report(4, 4), GOOD, turns=1, max_turns=11)
    assert solved.efficiency == 1.0 and solved.tool_use == 1.0 and solved.total == 1.0


def test_weights_from_config():
    assert RewardWeights.from_config(None) == RewardWeights(0.7, 0.15, 0.15)
    assert RewardWeights.from_config({"tool_use": 0.3}).tool_use == 0.3
    with pytest.raises(ValueError, match="unknown reward weight"):
        RewardWeights.from_config({"speed": 1.0})
    with pytest.raises(ValueError, match=">= 0"):
        RewardWeights.from_config({"correctness": -1})
