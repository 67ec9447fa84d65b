"""RunSummary for readers (the report): a row whose OPD records cannot be parsed still counts
as an episode when `tolerant`, and says so; the writer (tolerant off) refuses it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opd_gym.runs import EpisodeRow, RunDirectory, RunSummary

V1_RUN = Path(__file__).parent / "fixtures" / "v1-run"


def test_tolerant_summary_counts_rows_with_broken_records():
    rows = RunDirectory(V1_RUN).episodes()
    good = RunSummary.of_rows(rows)
    assert good.episodes == 2 and good.turns_scored > 0 and good.unreadable_records == 0
    assert "unreadable_records" not in good.to_dict()  # summary.json keeps its keys

    broken = EpisodeRow.from_dict({**rows[1].to_dict(), "opd": [{"token_ids": [1], "x": 1}]})
    with pytest.raises(KeyError):
        RunSummary.of_rows([rows[0], broken])
    summary = RunSummary.of_rows([rows[0], broken], tolerant=True)
    assert summary.episodes == 2 and summary.passed == good.passed
    assert summary.reward_sum == pytest.approx(good.reward_sum)
    assert summary.unreadable_records == 1
    assert summary.turns_scored == RunSummary.of_rows([rows[0]]).turns_scored
    assert json.loads(json.dumps(summary.to_dict()))["unreadable_records"] == 1
