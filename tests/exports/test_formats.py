"""Exporters: Atropos padding rules, TRL rows, sampled-token advantages."""

from __future__ import annotations

import json

import numpy as np
import pytest

from opd_gym.exports.formats import (
    ATROPOS_PAD_ID,
    ATROPOS_PAD_LOGPROB,
    to_advantages,
    to_atropos,
    to_atropos_trajectories,
    to_trl_rows,
)
from opd_gym.records.opd_record import OPDRecord


def _scored():
    return OPDRecord(
        token_ids=[11, 12, 13],
        teacher_token_logprobs=[-0.5, np.nan, -1.5],
        teacher_topk_ids=[[11, 4, -1], [-1, -1, -1], [13, 2, 8]],
        teacher_topk_logprobs=[[-0.5, -1.0, -np.inf], [np.nan] * 3, [-1.5, -2.0, -2.5]],
        mask=[True, False, True],
        student_logprobs=[-1.0, -0.5, -1.0],
        hint="use a set",
    )


def test_atropos_full_sequence_padding():
    scored = _scored()
    unscored = OPDRecord.unscored([21, 22], "teacher failed", topk=3)
    group = to_atropos([scored, unscored], prompt_ids=[[1, 2], [1, 2, 3, 4]], scores=[1.0, 0.0])
    assert group["tokens"] == [[1, 2, 11, 12, 13], [1, 2, 3, 4, 21, 22]]
    assert group["masks"] == [[-100, -100, 11, 12, 13], [-100] * 4 + [21, 22]]
    assert group["scores"] == [1.0, 0.0]
    ids, lps = group["distill_token_ids"], group["distill_logprobs"]
    for seq, tokens in enumerate(group["tokens"]):
        assert len(ids[seq]) == len(lps[seq]) == len(tokens)
        assert all(len(row) == 3 for row in ids[seq] + lps[seq])
    pad_ids, pad_lps = [ATROPOS_PAD_ID] * 3, [ATROPOS_PAD_LOGPROB] * 3
    assert ids[0][:2] == [pad_ids, pad_ids] and lps[0][:2] == [pad_lps, pad_lps]
    assert ids[0][2] == [11, 4, -1] and lps[0][2] == [-0.5, -1.0, -1e9]  # -inf -> -1e9
    assert ids[0][3] == pad_ids and lps[0][3] == pad_lps  # unscored position
    assert ids[0][4] == [13, 2, 8]
    assert ids[1] == [pad_ids] * 6 and lps[1] == [pad_lps] * 6
    json.dumps(group, allow_nan=False)  # no NaN or Infinity anywhere


def test_atropos_topk_narrow_and_widen():
    narrow = to_atropos([_scored()], [[1]], topk=1)
    assert narrow["distill_token_ids"][0][1] == [11]
    assert narrow["scores"] == [0.0]
    wide = to_atropos([_scored()], [[1]], topk=5)
    assert wide["distill_token_ids"][0][1] == [11, 4, -1, -1, -1]
    assert wide["distill_logprobs"][0][3] == [-1.5, -2.0, -2.5, -1e9, -1e9]
    with pytest.raises(ValueError, match="prompts"):
        to_atropos([_scored()], [[1], [2]])


def test_atropos_trajectory_places_turns_at_their_spans():
    scored = _scored()
    second = OPDRecord.unscored([31], "judge said nothing", topk=3)
    tokens = [1, 2, 11, 12, 13, 5, 6, 31]
    group = to_atropos_trajectories([tokens], [[(2, 5), (7, 8)]], [[scored, second]], [0.5])
    assert group["masks"] == [[-100, -100, 11, 12, 13, -100, -100, 31]]
    ids = group["distill_token_ids"][0]
    assert ids[2] == [11, 4, -1] and ids[5] == ids[6] == ids[7] == [-1, -1, -1]
    assert group["distill_logprobs"][0][4] == [-1.5, -2.0, -2.5]
    with pytest.raises(ValueError, match="does not hold"):
        to_atropos_trajectories([tokens], [[(1, 4), (7, 8)]], [[scored, second]])
    with pytest.raises(ValueError, match="spans but"):
        to_atropos_trajectories([tokens], [[(2, 5)]], [[scored, second]])


def test_trl_rows():
    rows = to_trl_rows([_scored()], [[{"role": "user", "content": "fix"}]], ["the text"],
                       include_ids=True)
    assert rows == [{"prompt": [{"role": "user", "content": "fix"}],
                     "completion": [{"role": "assistant", "content": "the text"}],
                     "hint": "use a set", "completion_ids": [11, 12, 13]}]
    (row,) = to_trl_rows([_scored()], ["plain prompt"], ["out"])
    assert row == {"prompt": "plain prompt", "completion": "out", "hint": "use a set"}
    with pytest.raises(ValueError, match="tokenizer"):
        to_trl_rows([_scored()], ["p"])


def test_trl_rows_decode_with_tokenizer(tiny_tokenizer):
    ids = tiny_tokenizer.encode("<tool_call>\nls\n</tool_call><|im_end|>")
    record = OPDRecord.unscored(ids, "no hint")
    (row,) = to_trl_rows([record], ["p"], tokenizer=tiny_tokenizer)
    assert row["completion"] == "<tool_call>\nls\n</tool_call>" and row["hint"] is None


def test_advantages():
    adv = to_advantages(_scored())
    assert adv.dtype == np.float32
    np.testing.assert_array_equal(adv[[0, 2]], [0.5, -0.5])
    assert np.isnan(adv[1])
    no_student = OPDRecord.from_scores([1, 2], _scored_scores())
    assert np.isnan(to_advantages(no_student)).all()


def _scored_scores():
    from opd_gym.opd.teachers.base import SpanScores

    return SpanScores(np.array([-1.0, -2.0], np.float32), np.array([[1], [2]], np.int32),
                      np.array([[-1.0], [-2.0]], np.float32))


def test_the_old_import_path_still_works():
    from opd_gym.opd import exporters

    assert exporters.to_trl_rows is to_trl_rows and exporters.ATROPOS_PAD_ID == ATROPOS_PAD_ID
