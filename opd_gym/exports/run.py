"""Export a rollout's trajectories to trainer formats: Atropos groups, TRL rows, per-token
advantages (JSONL each) and Parquet (one row per scored turn; needs pyarrow)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opd_gym.errors import ConfigError
from opd_gym.exports.formats import to_advantages, to_atropos, to_trl_rows
from opd_gym.exports.trainers import TRAINER_FORMATS, trainer_lines
from opd_gym.opd.record import OPDRecord
from opd_gym.runs import RunDirectory
from opd_gym.transcript import messages_for_template

FORMATS = ("atropos", "trl", "advantage", "parquet", *TRAINER_FORMATS)


@dataclass(frozen=True)
class TurnExample:
    """One assistant turn of a recorded episode with its OPD record and the context it saw."""

    episode: int | None
    task_id: str
    reward: float
    turn: Mapping[str, Any]
    record: OPDRecord
    context: list[dict[str, Any]]
    tools: list[dict[str, Any]]


def examples(run_dir: str | Path) -> Iterator[list[TurnExample]]:
    """Per finished episode, its turns that carry an OPD record (episodes without are skipped)."""
    for row in RunDirectory(run_dir).require().rows():
        turns = {t["index"]: t for t in row.turns if "index" in t}
        group = []
        for record in row.records():
            turn = turns.get(record.turn_index)
            if turn is None:
                continue
            group.append(
                TurnExample(
                    episode=row.episode,
                    task_id=row.task_id,
                    reward=float(sum(row.rewards)),
                    turn=turn,
                    record=record,
                    context=messages_for_template(row.messages[: turn["context_len"]]),
                    tools=row.tools or [],
                )
            )
        if group:
            yield group


def _prompt_ids(example: TurnExample, tokenizer: Any) -> list[int]:
    if example.turn.get("prompt_ids"):
        return [int(i) for i in example.turn["prompt_ids"]]
    if tokenizer is None:
        raise ConfigError(
            "this run has no prompt token ids: pass the student's tokenizer "
            "(--tokenizer hf:PATH, or 'tiny' for the demo model)"
        )
    from opd_gym.opd.chat import render_ids

    return render_ids(tokenizer, example.context, example.tools, add_generation_prompt=True)


def _json_floats(values: Any) -> list[float | None]:
    return [None if not math.isfinite(v) else float(v) for v in values]


def export_run(
    run_dir: str | Path, fmt: str, out: str | Path | None = None, *, tokenizer: Any = None
) -> Path:
    """Write `run_dir`'s episodes in format `fmt`; returns the file written."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")
    run = Path(run_dir)
    base = run if run.is_dir() else run.parent
    target = (
        Path(out) if out else base / f"export-{fmt}.{'parquet' if fmt == 'parquet' else 'jsonl'}"
    )
    if fmt == "parquet":
        _write_parquet(run, target)
        return target
    with open(target, "w", encoding="utf-8") as fh:
        for group in examples(run):
            for line in _lines(fmt, group, tokenizer):
                fh.write(json.dumps(line, ensure_ascii=False) + "\n")
    return target


def _lines(fmt: str, group: list[TurnExample], tokenizer: Any) -> Iterator[dict[str, Any]]:
    records = [e.record for e in group]
    if fmt in TRAINER_FORMATS:
        pad = getattr(tokenizer, "pad_token_id", None)
        yield from trainer_lines(fmt, group, lambda e: _prompt_ids(e, tokenizer),
                                 pad_token_id=0 if pad is None else int(pad))
    elif fmt == "atropos":  # one ScoredDataGroup per episode, one member per turn
        data = to_atropos(
            records, [_prompt_ids(e, tokenizer) for e in group], [e.reward for e in group]
        )
        yield {"episode": group[0].episode, "task_id": group[0].task_id, **data}
    elif fmt == "trl":
        rows = to_trl_rows(records, [e.context for e in group], [e.turn["text"] for e in group])
        for e, row in zip(group, rows, strict=True):
            yield {
                "episode": e.episode,
                "task_id": e.task_id,
                "turn_index": e.record.turn_index,
                **row,
            }
    else:
        for e in group:
            yield {
                "episode": e.episode,
                "task_id": e.task_id,
                "turn_index": e.record.turn_index,
                "token_ids": e.record.token_ids.tolist(),
                "mask": e.record.mask.tolist(),
                "advantage": _json_floats(to_advantages(e.record)),
            }


def _write_parquet(run: Path, target: Path) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError("Parquet export needs pyarrow: pip install 'opd_gym[datasets]'") from exc
    rows = []
    for group in examples(run):
        for e in group:
            r = e.record
            rows.append(
                {
                    "episode": e.episode,
                    "task_id": e.task_id,
                    "turn_index": r.turn_index,
                    "reward": e.reward,
                    "hint": r.hint,
                    "error": r.error,
                    "scope": r.scope,
                    "retokenized": r.retokenized,
                    "token_ids": r.token_ids.tolist(),
                    "mask": r.mask.tolist(),
                    "teacher_token_logprobs": r.teacher_token_logprobs.tolist(),
                    "student_logprobs": None
                    if r.student_logprobs is None
                    else r.student_logprobs.tolist(),
                    "teacher_topk_ids": r.teacher_topk_ids.tolist(),
                    "teacher_topk_logprobs": r.teacher_topk_logprobs.tolist(),
                }
            )
    pq.write_table(pa.Table.from_pylist(rows), target)
