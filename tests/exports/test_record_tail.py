"""The record's teacher tail mass (log of 1 minus the top-K mass): stable, never NaN, stored."""

from __future__ import annotations

import json

import numpy as np
import pytest

from opd_gym.records.opd_record import TAIL_FLOOR, OPDRecord, tail_logprobs


def _record(topk_lp: np.ndarray, mask: np.ndarray | None = None) -> OPDRecord:
    t, k = topk_lp.shape
    mask = np.ones(t, np.bool_) if mask is None else mask
    ids = np.tile(np.arange(k, dtype=np.int32), (t, 1))
    ids = np.where(np.isneginf(topk_lp), -1, ids)
    lp = topk_lp.astype(np.float32).copy()
    ids[~mask] = -1
    lp[~mask] = np.nan
    token = np.where(mask, -1.0, np.nan).astype(np.float32)
    return OPDRecord(token_ids=np.arange(t), teacher_token_logprobs=token,
                     teacher_topk_ids=ids, teacher_topk_logprobs=lp, mask=mask)


def test_tail_matches_the_direct_formula_on_ordinary_rows() -> None:
    """log(1 - sum p) for a row whose top-K holds part of the mass."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 50))
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    top = -np.sort(-logp, axis=1)[:, :8]
    want = np.log(1.0 - np.exp(top).sum(axis=1))
    np.testing.assert_allclose(tail_logprobs(top), want, rtol=1e-5)


def test_tail_is_finite_when_topk_holds_all_the_mass_or_more() -> None:
    """Full mass, rounding past 1, tiny remainders: finite values >= TAIL_FLOOR, never NaN."""
    rows = np.array([
        [np.log(0.5), np.log(0.5)],          # exactly 1
        [np.log(0.6), np.log(0.5)],          # > 1 (a teacher's rounding)
        [0.0, -np.inf],                      # one token with probability 1, one pad
        [np.log(1 - 1e-3), np.log(5e-4)],    # 5e-4 left
    ])
    tail = tail_logprobs(rows)
    assert np.isfinite(tail).all()
    assert tail[0] == pytest.approx(TAIL_FLOOR) and tail[1] == pytest.approx(TAIL_FLOOR)
    assert tail[2] == pytest.approx(TAIL_FLOOR)
    assert tail[3] == pytest.approx(np.log(5e-4), rel=1e-3)
    assert (tail >= TAIL_FLOOR).all() and (tail <= 0).all()


def test_tail_of_an_empty_topk_is_zero_and_unscored_rows_are_nan() -> None:
    """K = 0 or all padding: every bit of mass is in the tail (log 1 = 0); mask False: NaN."""
    assert tail_logprobs(np.zeros((3, 0))).tolist() == [0.0, 0.0, 0.0]
    pads = np.full((2, 4), -np.inf)
    assert tail_logprobs(pads).tolist() == [0.0, 0.0]
    got = tail_logprobs(np.log(np.full((2, 2), 0.25)), mask=np.array([True, False]))
    assert got[0] == pytest.approx(np.log(0.5)) and np.isnan(got[1])


def test_record_derives_stores_and_round_trips_the_tail() -> None:
    """Constructor derives it; to_dict stores it; from_dict reads it; old dicts derive it."""
    lp = np.log(np.array([[0.5, 0.25], [0.9, 0.1], [0.2, 0.1]]))
    rec = _record(lp, mask=np.array([True, True, False]))
    assert rec.teacher_tail_logprobs[0] == pytest.approx(np.log(0.25))
    assert rec.teacher_tail_logprobs[1] == pytest.approx(TAIL_FLOOR, abs=1e-3)
    assert np.isnan(rec.teacher_tail_logprobs[2])
    data = json.loads(json.dumps(rec.to_dict()))
    assert data["teacher_tail_logprobs"][2] == "NaN"
    back = OPDRecord.from_dict(data)
    np.testing.assert_array_equal(back.teacher_tail_logprobs, rec.teacher_tail_logprobs)
    del data["teacher_tail_logprobs"]  # a record written before the field existed
    old = OPDRecord.from_dict(data)
    np.testing.assert_array_equal(old.teacher_tail_logprobs, rec.teacher_tail_logprobs)


def test_record_rejects_a_tail_that_breaks_the_fill_rules() -> None:
    """A NaN tail on a scored position, or a positive one, is refused with a clear error."""
    lp = np.log(np.array([[0.5, 0.25]]))
    good = _record(lp)
    for bad in ([np.nan], [0.5]):
        with pytest.raises(ValueError, match="teacher_tail_logprobs"):
            OPDRecord(token_ids=good.token_ids, teacher_token_logprobs=good.teacher_token_logprobs,
                      teacher_topk_ids=good.teacher_topk_ids,
                      teacher_topk_logprobs=good.teacher_topk_logprobs, mask=good.mask,
                      teacher_tail_logprobs=np.array(bad, np.float32))


@pytest.mark.parametrize("mass", [1e-9, 1e-6, 3e-3, 0.5, 0.9, 1 - 1e-4, 1 - 1e-6])
def test_tail_is_within_a_thousandth_of_a_nat_of_fp64(mass: float) -> None:
    """A top-K holding a tiny mass or nearly all of it: the stored (float32) tail is within
    1e-3 nats of log(1 - mass) computed in fp64 from the same float32 top-K logprobs."""
    k = 8
    row = np.log(np.full((1, k), mass / k)).astype(np.float32)
    reference = np.log1p(-np.exp(row.astype(np.float64)).sum())
    got = _record(row).teacher_tail_logprobs[0]
    assert abs(float(got) - reference) < 1e-3
