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


def test_kl_is_k3_never_negative_and_k1_keeps_an_honest_name():
    """Positions where the teacher likes the sampled token more than the student did give a
    negative k1 (mean student - teacher); the KL figure is k3 (mean e^r - 1 - r, r = teacher
    - student), which is never negative; an old run's `opd/kl_estimate` reads as k1."""
    from opd_gym.opd.metrics import OPDMetrics, current_names

    record = _record(student_logprobs=np.array([-1.0, -1.0, -2.5], np.float32))
    stored = json.loads(json.dumps(record.to_dict()))  # as a row holds it
    metrics = OPDMetrics().episode([OPDRecord.from_dict(stored)])
    on = np.array(stored["mask"], bool)
    teacher, student = (np.array([float(v) for v in stored[k]]) for k in (
        "teacher_token_logprobs", "student_logprobs"))  # "-Infinity" off the mask
    r = (teacher - student)[on]
    assert r == pytest.approx([-0.5 - -1.0, -2.0 - -2.5])  # teacher - student, masked
    assert metrics["opd/log_ratio_k1"] == pytest.approx(-r.mean()) and metrics[
        "opd/log_ratio_k1"] < 0
    assert metrics["opd/kl_k3"] == pytest.approx(np.mean(np.exp(r) - 1 - r))
    assert metrics["opd/kl_k3"] > 0 and "opd/kl_estimate" not in metrics
    old = current_names({"opd/kl_estimate": -3.7e-4, "opd/hint_rate": 0.5})
    assert old == {"opd/log_ratio_k1": -3.7e-4, "opd/hint_rate": 0.5}


def test_hinted_turn_figures_count_only_turns_with_a_hint():
    """`opd/hinted/*`: the count, gap and top-1 mismatch over the scored turns with a hint,
    leaving out the unhinted turns that dilute the run-wide figures."""
    from opd_gym.opd.metrics import OPDMetrics

    hinted = _record()  # gap (-0.5 + 0.25, -2.0 + 2.5) = (-0.25, +0.5); top-1 misses 1 of 2
    plain = _record(hint=None, votes=[], student_logprobs=np.array([-3.0, -1.0, -4.0],
                                                                   np.float32),
                    teacher_topk_ids=np.array([[5, 9, -1], [-1, -1, -1], [7, 3, 1]], np.int32))
    metrics = OPDMetrics().episode([hinted, plain, plain])
    assert metrics["opd/hinted/turns"] == 1.0 and metrics["opd/turns_scored"] == 3.0
    assert metrics["opd/hinted/mean_teacher_minus_student"] == pytest.approx(0.125)
    assert metrics["opd/hinted/top1_mismatch"] == pytest.approx(0.5)
    assert metrics["opd/top1_mismatch"] == pytest.approx(1 / 6)  # run-wide: diluted
    none = OPDMetrics().episode([plain])
    assert none["opd/hinted/turns"] == 0.0
    assert np.isnan(none["opd/hinted/mean_teacher_minus_student"])
