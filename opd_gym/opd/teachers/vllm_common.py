"""What both vLLM teachers share: request trimming and turning prompt-logprob rows into scores.

vLLM's `prompt_logprobs=K` gives, per prompt position p, the logprobs of the K most likely
tokens for position p and of the actual token ids[p]: K entries when ids[p] is among the
top K, K + 1 otherwise, in no order a client may rely on (the server sends a JSON object,
the engine puts the actual token first). The server writes -inf as -9999.0. Position 0 has
no entry. Here every scored row is reduced to the actual token's logprob plus the top K,
sorted by descending logprob (rank breaks ties), as `SpanScores` promise.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from opd_gym.errors import ModelError
from opd_gym.opd.teachers.base import ContextTooLong, ScoreRequest, SpanScores

SERVER_NEG_INF = -9999.0  # the server's JSON spelling of -inf


def feed_length(request: ScoreRequest) -> int:
    """How many leading ids must be sent: tokens after the last span are never scored."""
    live = [end for start, end in request.spans if end > start]
    return max(live) if live else 0


def scored_positions(request: ScoreRequest) -> np.ndarray:
    """Sorted, de-duplicated prompt positions whose logprobs the spans ask for."""
    parts = [np.arange(s, e) for s, e in request.spans if e > s]
    return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)


def select_rows(
    actual: np.ndarray,
    counts: np.ndarray,
    flat_ids: np.ndarray,
    flat_logprobs: np.ndarray,
    flat_ranks: np.ndarray,
    topk: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of concatenated prompt-logprob entries -> (token_lp [R], top_ids [R,K], top_lp [R,K]).

    Row r owns `counts[r]` consecutive entries of the flat arrays; `actual[r]` is the token
    the row scores. A row with more than `topk` entries carries the actual token as an extra
    beside the top K, so one entry of it is dropped from the top K.
    """
    rows = int(actual.shape[0])
    counts = np.asarray(counts, np.int64)
    width = max(int(counts.max()) if rows else 0, topk, 1)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if rows else np.zeros(0, np.int64)
    col = np.arange(width)
    valid = col[None, :] < counts[:, None]
    at = np.where(valid, starts[:, None] + col[None, :], 0)
    ids = np.asarray(flat_ids, np.int64)[at] if len(flat_ids) else np.zeros(at.shape, np.int64)
    lps = np.asarray(flat_logprobs, np.float64)[at] if len(flat_logprobs) else \
        np.zeros(at.shape, np.float64)
    ranks = np.asarray(flat_ranks, np.float64)[at] if len(flat_ranks) else \
        np.zeros(at.shape, np.float64)
    lps = np.where(lps <= SERVER_NEG_INF, -np.inf, lps)
    lps = np.where(valid, lps, -np.inf)

    is_actual = valid & (ids == np.asarray(actual, np.int64)[:, None])
    found = is_actual.any(axis=1)
    if not found.all():
        bad = int(np.flatnonzero(~found)[0])
        raise ModelError(f"vLLM returned no logprob for the scored token {int(actual[bad])} "
                         f"of row {bad}: the response does not match the request")
    token_lp = lps[np.arange(rows), is_actual.argmax(axis=1)].astype(np.float32)

    # Drop one entry of the actual token from rows that carry it as an extra (the server
    # sends it once; the engine's flat layout may list it twice, first and at its rank).
    first = is_actual & (np.cumsum(is_actual, axis=1) == 1)
    keep = valid & ~(first & (counts > topk)[:, None])
    order = np.lexsort((np.where(keep, ranks, np.inf), np.where(keep, -lps, np.inf), ~keep),
                       axis=-1)[:, :topk]
    top_ids = np.take_along_axis(np.where(keep, ids, -1), order, axis=1).astype(np.int32)
    top_lp = np.take_along_axis(np.where(keep, lps, -np.inf), order, axis=1).astype(np.float32)
    return token_lp, top_ids, top_lp


def split_spans(
    request: ScoreRequest,
    positions: np.ndarray,
    token_lp: np.ndarray,
    top_ids: np.ndarray,
    top_lp: np.ndarray,
    topk: int,
) -> list[SpanScores]:
    """Cut per-position scores (rows aligned with `positions`) into one SpanScores per span."""
    out = []
    for start, end in request.spans:
        if end <= start:
            out.append(SpanScores.empty(topk))
            continue
        a, b = np.searchsorted(positions, [start, end])
        out.append(SpanScores(token_lp[a:b].copy(), top_ids[a:b].copy(), top_lp[a:b].copy()))
    return out


def served_limit(max_model_len: int | None) -> int | None:
    """The longest input a vLLM model scores: max_model_len - 1 (one generated token), or
    None when the server did not say."""
    return int(max_model_len) - 1 if isinstance(max_model_len, int) and max_model_len > 1 \
        else None


def check_length(request_index: int, length: int, max_model_len: int | None) -> None:
    """Refuse a prompt vLLM cannot take (it also needs room for the one generated token)."""
    if max_model_len is not None and length > max_model_len - 1:
        raise ContextTooLong(f"request {request_index}: {length} tokens to score exceed the vLLM "
                         f"model's max_model_len - 1 = {max_model_len - 1}; raise "
                         "--max-model-len or score shorter sequences (hint_scope='turn')")


def rows_from_dicts(
    ids: Sequence[int], positions: np.ndarray, rows: Sequence[dict | None], topk: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Select the scored positions from per-position `{token_id: entry}` prompt logprobs.

    An entry is the server's JSON `{"logprob": ..., "rank": ...}` or an engine `Logprob`.
    """
    flat_ids: list[int] = []
    flat_lps: list[float] = []
    flat_ranks: list[float] = []
    counts = np.zeros(len(positions), np.int64)
    for r, p in enumerate(positions.tolist()):
        row = rows[p] if p < len(rows) else None
        if not row:
            raise ModelError(f"vLLM returned no prompt logprobs for position {p}")
        counts[r] = len(row)
        for key, entry in row.items():
            flat_ids.append(int(key))
            if isinstance(entry, dict):
                flat_lps.append(float(entry["logprob"]))
                rank = entry.get("rank")
            else:
                flat_lps.append(float(entry.logprob))
                rank = getattr(entry, "rank", None)
            flat_ranks.append(np.inf if rank is None else float(rank))
    actual = np.asarray([ids[p] for p in positions.tolist()], np.int64)
    return select_rows(actual, counts, np.asarray(flat_ids), np.asarray(flat_lps),
                       np.asarray(flat_ranks), topk)
