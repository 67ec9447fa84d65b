"""Precomputed-signal exports that match today's OPD trainers field for field.

Each function maps OPD records (one assistant turn each, position j = the j-th sampled token)
plus the prompt ids the student saw to what one trainer reads, following that trainer's own
source: field names, dtypes, shapes, the shift convention and the neutral value where the
teacher gave no signal. No tensor a trainer reads ever holds NaN.

- TRL ``experimental.async_distillation`` (`to_trl_async_distillation`): one ``RolloutSample``
  worth of arrays over the whole sequence (prompt + completion), row i scoring ``input_ids[i]``
  given ``input_ids[:i]``; [L, K+1] teacher candidates sorted by rank, the extra column holding
  the sampled token when it falls outside the top-K; padding id -1 / logprob -inf; prompt and
  unscored rows are all padding (the trainer masks rows without a candidate).
- slime / OpenClaw-RL (`to_slime_sample`): ``tokens``, ``response_length``, ``loss_mask``,
  ``rollout_log_probs`` and ``teacher_log_probs`` per response token; where the teacher gave
  no signal ``teacher_log_probs`` is the student's own logprob (OpenClaw's neutral: zero
  distillation advantage).
- verl (`to_verl_batch`): response-aligned ``responses``, ``response_mask``,
  ``attention_mask``, ``ref_log_prob`` and the top-K stage keys ``ref_topk_log_probs`` /
  ``ref_topk_indices`` (the teacher is verl's "ref" stage), prompts left-padded.
- tinker-cookbook (`to_tinker_datum`): a ``Datum``'s ``model_input`` (tokens[:-1]) and
  ``loss_fn_inputs`` ``target_tokens`` (tokens[1:]), ``logprobs`` (sampler logprobs) and
  ``advantages`` (teacher minus student), shifted by one, 0.0 on prompt positions and where
  the teacher gave no signal.
- TRL SDFT / SDPO (`to_trl_privileged_rows`): ``prompt``, ``completion`` and
  ``privileged_context`` (the hint the teacher sees).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from opd_gym.errors import ConfigError
from opd_gym.exports.formats import to_trl_rows
from opd_gym.records.opd_record import PAD_ID, OPDRecord

TRL_PAD_ID = -1
TRL_PAD_LOGPROB = float("-inf")
VERL_PAD_INDEX = 0  # verl gathers with the indices: a padding index must be a valid id
VERL_PAD_LOGPROB = -1e9  # finite: exp() underflows to 0, no -inf arithmetic in a loss


def _ids(prompt_ids: Sequence[int]) -> list[int]:
    return [int(i) for i in prompt_ids]


def to_trl_async_distillation(
    record: OPDRecord, prompt_ids: Sequence[int], *, topk: int | None = None
) -> dict[str, np.ndarray]:
    """Arrays of TRL's async-distillation ``RolloutSample`` for one turn (see module doc).

    ``input_ids`` int64 [L], ``completion_mask`` int64 [L], ``teacher_topk_ids`` int64 [L, K+1],
    ``teacher_topk_logprobs`` float32 [L, K+1]. `topk` narrows K (default: the record's K).
    """
    prompt = _ids(prompt_ids)
    k = record.topk if topk is None else int(topk)
    if k < 0 or k > record.topk:
        raise ValueError(f"to_trl_async_distillation: topk {k} outside 0..{record.topk}")
    n_prompt, t = len(prompt), record.num_tokens
    length = n_prompt + t
    ids = np.full((length, k + 1), TRL_PAD_ID, np.int64)
    lps = np.full((length, k + 1), TRL_PAD_LOGPROB, np.float32)
    for j in np.flatnonzero(record.mask):
        row_ids = record.teacher_topk_ids[j, :k]
        row_lps = record.teacher_topk_logprobs[j, :k]
        keep = (row_ids != PAD_ID) & np.isfinite(row_lps)
        order = np.argsort(-row_lps[keep], kind="stable")  # rank order: top-1 first
        cand_ids = row_ids[keep][order].tolist()
        cand_lps = row_lps[keep][order].tolist()
        sampled = int(record.token_ids[j])
        if sampled not in cand_ids:
            cand_ids.append(sampled)
            cand_lps.append(float(record.teacher_token_logprobs[j]))
        ids[n_prompt + j, : len(cand_ids)] = cand_ids
        lps[n_prompt + j, : len(cand_lps)] = cand_lps
    return {
        "input_ids": np.asarray(prompt + record.token_ids.tolist(), np.int64),
        "completion_mask": np.asarray([0] * n_prompt + [1] * t, np.int64),
        "teacher_topk_ids": ids,
        "teacher_topk_logprobs": lps,
    }


def to_slime_sample(
    record: OPDRecord,
    prompt_ids: Sequence[int],
    reward: float = 0.0,
    *,
    neutral: str = "student",
) -> dict[str, Any]:
    """A slime ``Sample``'s training fields for one turn (OpenClaw-RL reads the same).

    ``teacher_log_probs`` float32 [R] is the teacher's logprob of each response token; where
    the teacher gave no signal it is the student's own logprob (`neutral="student"`, OpenClaw's
    convention: zero advantage) and ``loss_mask`` stays 1, or, with `neutral="mask"` or when the
    ``loss_mask`` is 0 there and the value is the student's logprob (never NaN). A record
    without student logprobs is refused (``rollout_log_probs`` has no honest value).
    """
    if neutral not in ("student", "mask"):
        raise ConfigError(f"to_slime_sample: neutral must be 'student' or 'mask', got {neutral!r}")
    prompt = _ids(prompt_ids)
    student = record.student_logprobs
    if student is None:
        raise ValueError("to_slime_sample: the record has no student_logprobs (slime's "
                         "rollout_log_probs); " + STUDENT_LOGPROBS_HOW)
    rollout = student.copy()
    teacher = np.where(record.mask, record.teacher_token_logprobs, rollout).astype(np.float32)
    loss_mask = np.ones(record.num_tokens, np.int64)
    if neutral == "mask" or student is None:
        loss_mask[~record.mask] = 0
    return {
        "tokens": prompt + record.token_ids.tolist(),
        "response_length": record.num_tokens,
        "loss_mask": loss_mask,
        "rollout_log_probs": rollout,
        "teacher_log_probs": teacher,
        "reward": float(reward),
        "hint": record.hint,
    }


STUDENT_LOGPROBS_HOW = (
    "roll out with a policy that returns its sampling logprobs (--policy tiny, smollm2 or "
    "hf:PATH always do; vllm:URL only at temperature 1 without top-p/top-k/min-p, or with "
    "VLLMPolicy(processed_logprobs=True) against a server started with --logprobs-mode "
    "processed_logprobs); scripted policies (demo, reference) and text-only agents give none")


def to_verl_batch(
    records: Sequence[OPDRecord],
    prompt_ids: Sequence[Sequence[int]],
    *,
    pad_token_id: int,
    topk: int | None = None,
) -> dict[str, np.ndarray]:
    """verl batch fields for a list of turns (one row each), as numpy arrays for a DataProto.

    Prompts are left-padded to P, responses right-padded to R: ``prompts`` [B, P],
    ``responses`` [B, R], ``input_ids`` / ``attention_mask`` / ``position_ids`` [B, P+R],
    ``response_mask`` [B, R] (1 where the teacher gave a signal: the distillation loss mask),
    ``old_log_probs`` [B, R] (the student's sampling logprobs; records without are refused),
    ``ref_log_prob`` [B, R] (teacher logprob of the sampled token; the student's own where
    unscored, so the KL there is 0), ``ref_topk_log_probs`` float32 and ``ref_topk_indices``
    int64 [B, R, K] (padding index 0 with logprob -1e9).
    """
    if len(records) != len(prompt_ids):
        raise ValueError(f"to_verl_batch: {len(records)} records but {len(prompt_ids)} prompts")
    if not records:
        raise ValueError("to_verl_batch: no records")
    b = len(records)
    p = max(len(x) for x in prompt_ids)
    r = max(rec.num_tokens for rec in records)
    k = max(rec.topk for rec in records) if topk is None else int(topk)
    out = {
        "prompts": np.full((b, p), pad_token_id, np.int64),
        "responses": np.full((b, r), pad_token_id, np.int64),
        "attention_mask": np.zeros((b, p + r), np.int64),
        "response_mask": np.zeros((b, r), np.int64),
        "old_log_probs": np.zeros((b, r), np.float32),
        "ref_log_prob": np.zeros((b, r), np.float32),
        "ref_topk_log_probs": np.full((b, r, k), VERL_PAD_LOGPROB, np.float32),
        "ref_topk_indices": np.full((b, r, k), VERL_PAD_INDEX, np.int64),
    }
    for i, (rec, prompt) in enumerate(zip(records, prompt_ids, strict=True)):
        prompt = _ids(prompt)
        t = rec.num_tokens
        out["prompts"][i, p - len(prompt):] = prompt
        out["responses"][i, :t] = rec.token_ids
        out["attention_mask"][i, p - len(prompt): p + t] = 1
        out["response_mask"][i, :t] = rec.mask
        if rec.student_logprobs is None:
            raise ValueError("to_verl_batch: a record has no student_logprobs (verl's "
                             "old_log_probs); " + STUDENT_LOGPROBS_HOW)
        student = rec.student_logprobs
        out["old_log_probs"][i, :t] = student
        out["ref_log_prob"][i, :t] = np.where(rec.mask, rec.teacher_token_logprobs, student)
        width = min(k, rec.topk)
        src_ids = rec.teacher_topk_ids[:, :width]
        src_lps = rec.teacher_topk_logprobs[:, :width]
        real = (src_ids != PAD_ID) & np.isfinite(src_lps) & rec.mask[:, None]
        out["ref_topk_indices"][i, :t, :width] = np.where(real, src_ids, VERL_PAD_INDEX)
        out["ref_topk_log_probs"][i, :t, :width] = np.where(real, src_lps, VERL_PAD_LOGPROB)
    out["input_ids"] = np.concatenate([out["prompts"], out["responses"]], axis=1)
    out["position_ids"] = np.clip(np.cumsum(out["attention_mask"], axis=1) - 1, 0, None)
    return out


def to_tinker_datum(record: OPDRecord, prompt_ids: Sequence[int]) -> dict[str, Any]:
    """A tinker ``Datum`` for the ``importance_sampling`` loss, as plain lists.

    ``model_input`` = tokens[:-1]; ``loss_fn_inputs``: ``target_tokens`` int64 = tokens[1:],
    ``logprobs`` float32 (the sampler's logprob of each target), ``advantages`` float32
    (teacher minus student logprob), all of length N-1, 0.0 on prompt targets and where the
    teacher gave no signal. Build the real object with
    ``tinker.Datum(model_input=tinker.ModelInput.from_ints(d["model_input"]),
    loss_fn_inputs=d["loss_fn_inputs"])``. Needs the record's student logprobs.
    """
    if record.student_logprobs is None:
        raise ValueError("to_tinker_datum: the record has no student logprobs (the sampler's "
                         "logprobs the importance_sampling loss needs); record them in the rollout")
    prompt = _ids(prompt_ids)
    if not prompt:
        raise ValueError("to_tinker_datum: empty prompt (the first sampled token needs a context)")
    tokens = prompt + record.token_ids.tolist()
    n_prompt = len(prompt)
    targets = len(tokens) - 1
    logprobs = np.zeros(targets, np.float32)
    advantages = np.zeros(targets, np.float32)
    span = slice(n_prompt - 1, n_prompt - 1 + record.num_tokens)  # target i = tokens[i + 1]
    logprobs[span] = record.student_logprobs
    advantages[span] = np.where(record.mask,
                                record.teacher_token_logprobs - record.student_logprobs, 0.0)
    return {
        "model_input": tokens[:-1],
        "loss_fn_inputs": {
            "target_tokens": tokens[1:],
            "logprobs": logprobs.tolist(),
            "advantages": advantages.tolist(),
        },
    }


def to_trl_privileged_rows(
    records: Sequence[OPDRecord],
    prompts: Sequence[Sequence[Mapping[str, Any]] | str],
    completions: Sequence[str] | None = None,
    *,
    tokenizer: Any = None,
) -> list[dict[str, Any]]:
    """Rows {prompt, completion, privileged_context} for TRL's SDFT/SDPO trainers.

    ``privileged_context`` is the hint only the teacher sees; records without a hint are
    left out (those trainers refuse a None context).
    """
    rows = to_trl_rows(records, prompts, completions, tokenizer=tokenizer)
    out = []
    for row in rows:
        hint = row.pop("hint")
        if hint:
            out.append({**row, "privileged_context": hint})
    return out


# Run-file formats (``opd-gym export --to NAME``) this module writes, one JSON line each per:
TRAINER_FORMATS: dict[str, str] = {
    "atropos-compact": "episode: Atropos group, response-only rows (legacy, archived)",
    "trl-async-distillation": "turn: TRL async distillation RolloutSample arrays",
    "trl-privileged": "turn with a hint: TRL SDFT/SDPO row with privileged_context",
    "slime": "turn: slime / OpenClaw-RL sample with teacher_log_probs",
    "verl": "episode: verl batch (one row per turn)",
    "tinker": "turn: tinker Datum for the importance_sampling loss",
}


def _json_array(arr: np.ndarray) -> list[Any]:
    """Nested lists with -inf/inf/NaN spelled as strings, like the OPD record's JSON form."""
    if arr.dtype.kind != "f" or np.isfinite(arr).all():
        return arr.tolist()
    obj = arr.astype(object)
    obj[np.isneginf(arr)] = "-Infinity"
    obj[np.isposinf(arr)] = "Infinity"
    obj[np.isnan(arr)] = "NaN"
    return obj.tolist()


def trainer_lines(
    fmt: str,
    group: Sequence[Any],
    prompt_ids: Any,
    *,
    pad_token_id: int = 0,
) -> list[dict[str, Any]]:
    """JSON lines of format `fmt` for one episode's turn examples (`opd_gym.exports.run`).

    `prompt_ids(example)` returns the ids of the context the student saw for that turn.
    """
    from opd_gym.exports.formats import to_atropos

    if fmt not in TRAINER_FORMATS:
        known = ", ".join(TRAINER_FORMATS)
        raise ConfigError(f"unknown trainer format {fmt!r}: use one of {known}")
    head = {"episode": group[0].episode, "task_id": group[0].task_id}
    records = [e.record for e in group]
    if fmt == "atropos-compact":
        data = to_atropos(records, [prompt_ids(e) for e in group], [e.reward for e in group],
                          compact=True)
        return [{**head, **data}]
    if fmt == "verl":
        batch = to_verl_batch(records, [prompt_ids(e) for e in group], pad_token_id=pad_token_id)
        return [{**head, "turn_index": [r.turn_index for r in records],
                 "reward": [e.reward for e in group],
                 **{key: _json_array(value) for key, value in batch.items()}}]
    if fmt == "trl-privileged":
        rows = to_trl_privileged_rows(records, [e.context for e in group],
                                      [e.turn["text"] for e in group])
        hinted = [e for e in group if e.record.hint]
        return [{**head, "turn_index": e.record.turn_index, **row}
                for e, row in zip(hinted, rows, strict=True)]
    lines = []
    for e in group:
        base = {**head, "turn_index": e.record.turn_index}
        if fmt == "trl-async-distillation":
            arrays = to_trl_async_distillation(e.record, prompt_ids(e))
            lines.append({**base, **{key: _json_array(v) for key, v in arrays.items()}})
        elif fmt == "slime":
            sample = to_slime_sample(e.record, prompt_ids(e), e.reward)
            lines.append({**base, **{key: _json_array(v) if isinstance(v, np.ndarray) else v
                                     for key, v in sample.items()}})
        else:  # tinker: every record has the sampler's logprobs (checked by the caller)
            lines.append({**base, **to_tinker_datum(e.record, prompt_ids(e))})
    return lines
