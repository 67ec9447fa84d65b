"""Turning vLLM prompt-logprob rows into scores (pure numpy: no server, no vLLM needed)."""

from __future__ import annotations

import numpy as np
import pytest

from opd_gym.errors import ModelError
from opd_gym.opd.teachers import ScoreRequest
from opd_gym.opd.teachers.vllm_common import (
    feed_length,
    rows_from_dicts,
    scored_positions,
    select_rows,
    split_spans,
)


def _entry(lp, rank):
    return {"logprob": lp, "rank": rank, "decoded_token": "x"}


def test_top_k_plus_actual_token_in_any_order():
    # position 1 scores token 9, which is outside the top 3 (4 entries, shuffled);
    # position 2 scores token 4, inside the top 3 (3 entries); -9999.0 means -inf.
    ids = [0, 9, 4]
    rows = [None,
            {"7": _entry(-1.5, 2), "9": _entry(-6.0, 40), "3": _entry(-1.0, 1),
             "5": _entry(-2.0, 3)},
            {"4": _entry(-2.5, 3), "8": _entry(-0.5, 1), "6": _entry(-9999.0, 2)}]
    token_lp, top_ids, top_lp = rows_from_dicts(ids, np.array([1, 2]), rows, 3)
    np.testing.assert_allclose(token_lp, [-6.0, -2.5])
    assert top_ids.tolist() == [[3, 7, 5], [8, 4, 6]]
    assert top_lp[0].tolist() == [-1.0, -1.5, -2.0]
    assert top_lp[1, 2] == -np.inf and top_lp.dtype == np.float32


def test_engine_flat_layout_with_the_actual_token_listed_twice():
    # engine rows put the actual token first; when it is also in the top K it may repeat
    actual = np.array([5, 6])
    counts = np.array([4, 3])
    flat_ids = [5, 1, 5, 2, 6, 1, 2]
    flat_lp = [-1.2, -1.0, -1.2, -1.4, -3.0, -1.0, -1.1]
    flat_rank = [2, 1, 2, 3, 3, 1, 2]
    token_lp, top_ids, top_lp = select_rows(actual, counts, np.array(flat_ids),
                                            np.array(flat_lp), np.array(flat_rank), 3)
    np.testing.assert_allclose(token_lp, [-1.2, -3.0])
    assert top_ids.tolist() == [[1, 5, 2], [1, 2, 6]]  # row 2: the actual token is 3rd
    assert top_lp[1].tolist() == [-1.0, -1.100000023841858, -3.0]


def test_k0_and_missing_token_error():
    token_lp, top_ids, top_lp = rows_from_dicts([0, 3], np.array([1]), [None, {"3": _entry(-2.0,
                                                                                        7)}], 0)
    assert token_lp.tolist() == [-2.0] and top_ids.shape == (1, 0) and top_lp.shape == (1, 0)
    with pytest.raises(ModelError, match="scored token"):
        rows_from_dicts([0, 3], np.array([1]), [None, {"4": _entry(-2.0, 1)}], 1)


def test_spans_positions_and_trimming():
    req = ScoreRequest(list(range(20)), [(3, 6), (10, 12), (8, 8)])
    assert feed_length(req) == 12  # ids after the last span are never sent
    positions = scored_positions(req)
    assert positions.tolist() == [3, 4, 5, 10, 11]
    n = len(positions)
    spans = split_spans(req, positions, np.arange(n, dtype=np.float32),
                        np.zeros((n, 2), np.int32), np.zeros((n, 2), np.float32), 2)
    assert [s.token_logprobs.tolist() for s in spans] == [[0, 1, 2], [3, 4], []]
