"""Map OPD records to trainer formats: Atropos ScoredDataGroup, TRL rows, per-token advantages.

Atropos was archived in July 2026 (its example trainer had already dropped the distillation
fields); it stays here as a legacy format. Today's trainers have their own exports in
`opd_gym.exports.trainers`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from opd_gym.records.opd_record import OPDRecord

ATROPOS_PAD_ID = -1
ATROPOS_PAD_LOGPROB = -1e9
ATROPOS_IGNORE = -100  # Atropos `masks`: -100 = not trained, otherwise the token id
# what a run export does with turns scored on a reconstructed context (no prompt ids
# recorded): `opd_gym.exports.run.export_run` and `opd_gym.exports.atif.export_atif`
RECONSTRUCTED = ("refuse", "drop", "allow")


def to_atropos(
    records: Sequence[OPDRecord],
    prompt_ids: Sequence[Sequence[int]],
    scores: Sequence[float] | None = None,
    *,
    topk: int | None = None,
    messages: Sequence[Sequence[Mapping[str, Any]]] | None = None,
    compact: bool = False,
) -> dict[str, Any]:
    """A ScoredDataGroup-shaped dict, one group member per record (one turn each).

    Member i's sequence is ``prompt_ids[i] + records[i].token_ids`` (the prompt the student
    saw, then what it sampled). See `to_atropos_trajectories` for the field conventions.
    """
    if len(prompt_ids) != len(records):
        raise ValueError(f"to_atropos: {len(records)} records but {len(prompt_ids)} prompts")
    tokens, spans = [], []
    for record, prompt in zip(records, prompt_ids, strict=True):
        prompt = [int(i) for i in prompt]
        tokens.append(prompt + record.token_ids.tolist())
        spans.append([(len(prompt), len(prompt) + record.num_tokens)])
    return to_atropos_trajectories(tokens, spans, [[r] for r in records], scores, topk=topk,
                                   messages=messages, compact=compact)


def to_atropos_trajectories(
    tokens: Sequence[Sequence[int]],
    spans: Sequence[Sequence[tuple[int, int]]],
    records: Sequence[Sequence[OPDRecord]],
    scores: Sequence[float] | None = None,
    *,
    topk: int | None = None,
    messages: Sequence[Sequence[Mapping[str, Any]]] | None = None,
    compact: bool = False,
) -> dict[str, Any]:
    """A ScoredDataGroup-shaped dict, one member per whole trajectory with one record per span.

    ``tokens[i][s:e]`` must be the ids of ``records[i][j]`` for ``spans[i][j] == (s, e)``.
    ``distill_token_ids``/``distill_logprobs`` cover the FULL sequence as [pos][k], position
    pos holding the teacher's top-K for the token at pos; positions outside the spans,
    unscored positions and top-K padding are id -1 / logprob -1e9 (never NaN or -inf).
    ``masks`` follow Atropos: -100 outside the spans, the token id on every sampled token
    (a turn the teacher could not score is still the policy's action). ``scores`` are the
    members' rewards (0.0 each when omitted); `topk` narrows or pads K (default: widest K).
    With `compact=True` (response-only) positions outside the spans get an empty row ``[]``
    instead of K padding entries, which cuts the size by the prompt share of the sequence;
    a reader must then accept ragged rows.
    """
    n = len(tokens)
    for name, value in (("spans", spans), ("records", records), ("scores", scores),
                        ("messages", messages)):
        if value is not None and len(value) != n:
            raise ValueError(f"to_atropos: {n} sequences but {len(value)} {name}")
    k = max((r.topk for recs in records for r in recs), default=0) if topk is None else int(topk)
    group: dict[str, Any] = {
        "tokens": [],
        "masks": [],
        "scores": [float(x) for x in scores] if scores is not None else [0.0] * n,
        "distill_token_ids": [],
        "distill_logprobs": [],
    }
    for i, (seq, seq_spans, seq_records) in enumerate(zip(tokens, spans, records, strict=True)):
        seq = [int(t) for t in seq]
        if len(seq_spans) != len(seq_records):
            raise ValueError(f"to_atropos: sequence {i} has {len(seq_spans)} spans but "
                             f"{len(seq_records)} records")
        masks = [ATROPOS_IGNORE] * len(seq)
        ids = np.full((len(seq), k), ATROPOS_PAD_ID, np.int64)
        lps = np.full((len(seq), k), ATROPOS_PAD_LOGPROB, np.float64)
        for (s, e), record in zip(seq_spans, seq_records, strict=True):
            if seq[s:e] != record.token_ids.tolist():
                raise ValueError(f"to_atropos: sequence {i} span ({s}, {e}) does not hold the "
                                 f"record's {record.num_tokens} token ids")
            masks[s:e] = seq[s:e]
            ids[s:e], lps[s:e] = _padded_topk(record, k)
        group["tokens"].append(seq)
        group["masks"].append(masks)
        id_rows, lp_rows = ids.tolist(), lps.tolist()
        if compact:
            inside = np.zeros(len(seq), np.bool_)
            for s, e in seq_spans:
                inside[s:e] = True
            id_rows = [row if keep else [] for row, keep in zip(id_rows, inside, strict=True)]
            lp_rows = [row if keep else [] for row, keep in zip(lp_rows, inside, strict=True)]
        group["distill_token_ids"].append(id_rows)
        group["distill_logprobs"].append(lp_rows)
    if messages is not None:
        group["messages"] = [[dict(m) for m in msgs] for msgs in messages]
    return group


def _padded_topk(record: OPDRecord, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Record top-K as [T, k] with Atropos padding (-1 / -1e9), never NaN or -inf."""
    t = record.num_tokens
    ids = np.full((t, k), ATROPOS_PAD_ID, np.int64)
    lps = np.full((t, k), ATROPOS_PAD_LOGPROB, np.float64)
    width = min(k, record.topk)
    src_ids = record.teacher_topk_ids[:, :width]
    src_lps = record.teacher_topk_logprobs[:, :width].astype(np.float64)
    real = (src_ids != ATROPOS_PAD_ID) & np.isfinite(src_lps) & record.mask[:, None]
    ids[:, :width] = np.where(real, src_ids, ATROPOS_PAD_ID)
    lps[:, :width] = np.where(real, src_lps, ATROPOS_PAD_LOGPROB)
    return ids, lps


def to_trl_rows(
    records: Sequence[OPDRecord],
    prompts: Sequence[Sequence[Mapping[str, Any]] | str],
    completions: Sequence[str] | None = None,
    *,
    tokenizer: Any = None,
    include_ids: bool = False,
) -> list[dict[str, Any]]:
    """Rows {prompt, completion, hint} for TRL-style distillation trainers.

    `prompt` is the context the student saw (a message list, conversational format, or a
    string); `completion` is the student's turn (as an assistant message when the prompt is a
    message list); `hint` is the privileged context only the teacher sees. Completion text
    comes from `completions`, else from decoding the record's ids with `tokenizer`.
    """
    if len(prompts) != len(records):
        raise ValueError(f"to_trl_rows: {len(records)} records but {len(prompts)} prompts")
    if completions is None and tokenizer is None:
        raise ValueError("to_trl_rows needs `completions` or a `tokenizer` to decode them")
    if completions is not None and len(completions) != len(records):
        raise ValueError(f"to_trl_rows: {len(records)} records but {len(completions)} texts")
    rows = []
    for i, (record, prompt) in enumerate(zip(records, prompts, strict=True)):
        text = completions[i] if completions is not None else tokenizer.decode(
            record.token_ids.tolist(), skip_special_tokens=True)
        if isinstance(prompt, str):
            row: dict[str, Any] = {"prompt": prompt, "completion": text}
        else:
            row = {"prompt": [dict(m) for m in prompt],
                   "completion": [{"role": "assistant", "content": text}]}
        row["hint"] = record.hint
        if include_ids:
            row["completion_ids"] = record.token_ids.tolist()
        rows.append(row)
    return rows


def to_advantages(record: OPDRecord) -> np.ndarray:
    """Per-token teacher minus student logprob, float32 [T]; NaN where unscored or no student."""
    if record.student_logprobs is None:
        return np.full(record.num_tokens, np.nan, np.float32)
    adv = record.teacher_token_logprobs - record.student_logprobs
    return np.where(record.mask, adv, np.nan).astype(np.float32)
