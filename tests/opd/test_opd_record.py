"""OPDRecord: schema validation, JSON round trip, and no 0.0 fillers for unscored positions."""

from __future__ import annotations

import json

import numpy as np
import pytest

from opd_gym.opd.teachers.base import SpanScores
from opd_gym.records.opd_record import OPDRecord


def _record(**overrides):
    fields = dict(
        token_ids=np.array([5, 6, 7], np.int32),
        teacher_token_logprobs=np.array([-0.5, np.nan, -2.0], np.float32),
        teacher_topk_ids=np.array([[5, 9, -1], [-1, -1, -1], [3, 7, 1]], np.int32),
        teacher_topk_logprobs=np.array(
            [[-0.5, -1.5, -np.inf], [np.nan] * 3, [-1.0, -2.0, -3.25]], np.float32),
        mask=np.array([True, False, True]),
        student_logprobs=np.array([-0.25, -1.0, -2.5], np.float32),
        hint="check the loop bound",
        votes=[{"score": 1, "hint": "check the loop bound"}, {"score": -1}],
        turn_index=2,
        timing={"teacher_s": 0.125},
    )
    fields.update(overrides)
    return OPDRecord(**fields)


def test_round_trip_through_strict_json():
    record = _record()
    data = record.to_dict()
    text = json.dumps(data, allow_nan=False)  # strict JSON: no bare NaN/Infinity
    back = OPDRecord.from_dict(json.loads(text))
    assert back.to_dict() == data
    assert back.token_ids.dtype == np.int32 and back.teacher_topk_ids.dtype == np.int32
    assert back.teacher_token_logprobs.dtype == np.float32 and back.mask.dtype == np.bool_
    np.testing.assert_array_equal(back.teacher_topk_logprobs, record.teacher_topk_logprobs)
    assert data["teacher_topk_logprobs"][0][2] == "-Infinity"
    assert data["teacher_token_logprobs"][1] == "NaN"
    assert back.votes == record.votes and back.timing == {"teacher_s": 0.125}


def test_unscored_record_has_no_zero_fillers():
    record = OPDRecord.unscored([1, 2, 3, 4], "judge timed out", topk=5, turn_index=1)
    assert not record.mask.any() and record.error == "judge timed out"
    assert np.isnan(record.teacher_token_logprobs).all()
    assert np.isnan(record.teacher_topk_logprobs).all()
    assert (record.teacher_topk_ids == -1).all()
    data = record.to_dict()
    for key in ("teacher_token_logprobs", "teacher_topk_logprobs"):
        flat = np.asarray(data[key], dtype=object).ravel().tolist()
        assert flat and all(v == "NaN" for v in flat), key
    back = OPDRecord.from_dict(json.loads(json.dumps(data, allow_nan=False)))
    assert back.to_dict() == data
    with pytest.raises(ValueError, match="error"):
        OPDRecord.unscored([1], "")


def test_validation_messages():
    with pytest.raises(ValueError, match="0.0 filler"):
        _record(teacher_token_logprobs=np.array([-0.5, 0.0, -2.0], np.float32))
    with pytest.raises(ValueError, match="shape"):
        _record(mask=np.array([True, False]))
    with pytest.raises(TypeError, match="token_ids"):
        _record(token_ids=np.array([5.0, 6.0, 7.0]))
    with pytest.raises(ValueError, match="padding"):
        _record(teacher_topk_ids=np.array([[5, 9, 4], [-1, -1, -1], [3, 7, 1]], np.int32))
    with pytest.raises(ValueError, match="NaN where mask is True"):
        _record(teacher_token_logprobs=np.array([np.nan, np.nan, -2.0], np.float32))
    with pytest.raises(ValueError, match="scope"):
        _record(scope="game")


def test_from_scores_masks_nan_rows():
    scores = SpanScores(
        np.array([-1.0, np.nan], np.float32),
        np.array([[4, 2], [0, 0]], np.int32),
        np.array([[-0.5, -1.0], [0.0, 0.0]], np.float32),
    )
    record = OPDRecord.from_scores([4, 8], scores, hint="h")
    assert record.mask.tolist() == [True, False]
    assert record.teacher_topk_ids[1].tolist() == [-1, -1]
    assert np.isnan(record.teacher_topk_logprobs[1]).all()
    assert record.num_tokens == 2 and record.topk == 2 and record.scored


def test_lists_are_accepted_and_cast():
    record = OPDRecord(token_ids=[1, 2], teacher_token_logprobs=[-1.0, -2.0],
                       teacher_topk_ids=[[1], [2]], teacher_topk_logprobs=[[-1.0], [-2.0]],
                       mask=[True, True])
    assert record.teacher_token_logprobs.dtype == np.float32
    empty = OPDRecord.unscored([], "empty turn", topk=3)
    assert empty.num_tokens == 0 and empty.to_dict()["teacher_topk_ids"] == []
    back = OPDRecord.from_dict(empty.to_dict())
    assert back.teacher_topk_ids.shape == (0, 3)


def test_skip_reason_is_a_field_beside_the_message():
    from opd_gym.records.opd_record import SkipReason

    record = OPDRecord.unscored([1, 2], "teacher error: boom", reason=SkipReason.TEACHER_ERROR)
    assert record.skip_reason is SkipReason.TEACHER_ERROR
    again = OPDRecord.from_dict(record.to_dict())
    assert again.skip_reason is SkipReason.TEACHER_ERROR and again.error == "teacher error: boom"
    old = record.to_dict()
    del old["skip_reason"]  # a record written before the field existed
    assert OPDRecord.from_dict(old).skip_reason is SkipReason.TEACHER_ERROR
    old["error"] = "something new: x"
    assert OPDRecord.from_dict(old).skip_reason is SkipReason.OTHER


@pytest.mark.parametrize("extends", [None, True, False])
def test_extends_previous_survives_the_json_round_trip(extends):
    data = _record(extends_previous=extends).to_dict()
    assert data["extends_previous"] is extends
    assert OPDRecord.from_dict(json.loads(json.dumps(data))).extends_previous is extends
    del data["extends_previous"]  # a record written before the field existed
    assert OPDRecord.from_dict(data).extends_previous is None


def test_metrics_of_records_scored_with_topk_0():
    """`--topk 0` (sampled-token logprobs only) has no top-1 or top-K mass to report: NaN,
    while the teacher-student gap is still counted (it crashed with IndexError before)."""
    from opd_gym.opd.metrics import OPDMetrics

    record = _record(teacher_topk_ids=np.zeros((3, 0), np.int32),
                     teacher_topk_logprobs=np.zeros((3, 0), np.float32))
    metrics = OPDMetrics().episode([record])
    assert metrics["opd/tokens_scored"] == 2.0
    assert np.isnan(metrics["opd/top1_mismatch"]) and np.isnan(metrics["opd/topk_mass"])
    assert metrics["opd/mean_teacher_minus_student"] == pytest.approx((-0.25 + 0.5) / 2)
