"""Export a rollout's trajectories to trainer formats: Atropos groups, TRL rows, per-token
advantages (JSONL each), Parquet (one row per scored turn; needs pyarrow) and Harbor's ATIF
trajectories (a folder, one per episode: `opd_gym.exports.atif`)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from opd_gym.errors import ConfigError
from opd_gym.exports.formats import RECONSTRUCTED, to_advantages, to_atropos, to_trl_rows
from opd_gym.exports.trainers import STUDENT_LOGPROBS_HOW, TRAINER_FORMATS, trainer_lines
from opd_gym.records.opd_record import OPDRecord
from opd_gym.runs import RunDirectory
from opd_gym.transcript import messages_for_template

FORMATS = ("atropos", "trl", "advantage", "parquet", *TRAINER_FORMATS,
           "swebench-predictions", "atif")


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
    """Per finished episode, its turns that carry an OPD record (episodes without are skipped,
    and so are those graded with an infra error, an unverifiable task's among them: their
    reward says nothing of the answer)."""
    for row in RunDirectory(run_dir).require().rows():
        if row.infra_error:
            continue
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
    run_dir: str | Path, fmt: str, out: str | Path | None = None, *, tokenizer: Any = None,
    model_name: str | None = None, reconstructed: str = "refuse",
    note: Callable[[str], None] | None = None,
) -> Path:
    """Write `run_dir`'s episodes in format `fmt`; returns the file written (`atif`: the
    folder of trajectories, `opd_gym.exports.atif.export_atif`).

    `swebench-predictions` writes the repository-task episodes' diffs for SWE-bench's harness
    (`opd_gym.exports.predictions`; `model_name` defaults to the run's policy).

    Turns whose record was scored on a context rebuilt from the transcript (the policy gave
    no prompt token ids: `OPDRecord.reconstructed`) are not what the student saw, so by
    default the export refuses them (ConfigError saying how many). `reconstructed="drop"`
    leaves them out, `"allow"` writes them with `"reconstructed": true` on each row (Parquet:
    its column); `note` hears how many were dropped or marked."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")
    if reconstructed not in RECONSTRUCTED:
        raise ConfigError(f"reconstructed={reconstructed!r}: use one of "
                          f"{', '.join(RECONSTRUCTED)}")
    if fmt == "swebench-predictions":
        from opd_gym.exports.predictions import export_predictions

        return export_predictions(run_dir, out, model_name=model_name).path
    if fmt == "atif":
        from opd_gym.exports.atif import export_atif

        return export_atif(run_dir, out, reconstructed=reconstructed, note=note)
    run = Path(run_dir)
    base = run if run.is_dir() else run.parent
    target = (
        Path(out) if out else base / f"export-{fmt}.{'parquet' if fmt == 'parquet' else 'jsonl'}"
    )
    masked = sum(row.infra_error for row in RunDirectory(run).require().rows())
    if masked and note is not None:
        note(f"{masked} episode(s) graded with an infra error (an unverifiable task, or our "
             "machinery failing) left out: their reward is no verdict on the answer")
    groups = _inexact(list(examples(run)), fmt, run, reconstructed, note)
    _check_required(fmt, groups, run)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:  # atomic: a failed export leaves no partial or empty file behind
        if fmt == "parquet":
            _write_parquet(groups, tmp)
        else:
            written = 0
            mark = any(e.record.reconstructed for g in groups for e in g)
            breaks = any(e.record.extends_previous is False for g in groups for e in g)
            with open(tmp, "w", encoding="utf-8") as fh:
                for group in groups:
                    for line in _lines(fmt, group, tokenizer, mark, breaks):
                        fh.write(json.dumps(line, ensure_ascii=False) + "\n")
                        written += 1
            if not written:
                raise ConfigError(f"export --to {fmt}: no rows to write from {run} (no turn "
                                  "gives this format a row, e.g. trl-privileged needs hints)")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _inexact(groups: list[list[TurnExample]], fmt: str, run: Path, mode: str,
             note: Callable[[str], None] | None) -> list[list[TurnExample]]:
    """The groups to write under `mode` (see export_run): refused, filtered or kept."""
    total = sum(len(g) for g in groups)
    rebuilt = sum(e.record.reconstructed for g in groups for e in g)
    if not rebuilt:
        return groups
    what = (f"{rebuilt} of {total} turns of {run} were scored on a context rebuilt from the "
            "transcript (the policy recorded no prompt token ids), not on the ids the student "
            "saw")
    if mode == "refuse":
        raise ConfigError(f"export --to {fmt}: {what}; a trainer would learn from inexact "
                          "targets. Pass --drop-reconstructed to leave them out, or "
                          "--allow-reconstructed to write them marked (\"reconstructed\": "
                          "true); a policy that returns TokenText with its prompt ids (see "
                          "docs/opd.md) records exact ones")
    if mode == "drop":
        kept = [[e for e in g if not e.record.reconstructed] for g in groups]
        kept = [g for g in kept if g]
        if not kept:
            raise ConfigError(f"export --to {fmt}: every turn of {run} was scored on a "
                              "reconstructed context; nothing is left to write without "
                              "--allow-reconstructed")
        if note is not None:
            note(f"left out {rebuilt} of {total} turns (reconstructed context)")
        return kept
    if note is not None:
        note(f"{rebuilt} of {total} turns are reconstructed; marked \"reconstructed\": true")
    return groups


def _mark(rows: list[dict[str, Any]], group: list[TurnExample], per_turn: bool,
          name: str = "reconstructed") -> list[dict[str, Any]]:
    """A record's marker `name` (`reconstructed`, or `extends_previous`) on every row (per
    turn, or a list for an episode's row)."""
    flags = [getattr(e.record, name) for e in group]
    if name == "reconstructed":
        flags = [bool(flag) for flag in flags]
    missing = False if name == "reconstructed" else None
    if per_turn:
        by_turn = {e.record.turn_index: flag for e, flag in zip(group, flags, strict=True)}
        return [{**row, name: by_turn.get(row.get("turn_index"), missing)} for row in rows]
    return [{**row, name: flags} for row in rows]


# Fields a format cannot be written without, and how a run gets them.
REQUIRED = {fmt: ("student_logprobs",) for fmt in ("tinker", "slime", "verl")}


def _check_required(fmt: str, groups: list[list[TurnExample]], run: Path) -> None:
    """Refuse (ConfigError naming the field and how to get it) unless every row has what
    `fmt` needs; an export never fills a missing value in."""
    if not groups:
        raise ConfigError(f"export --to {fmt}: {run} has no turns with OPD records (roll out "
                          "without --no-opd)")
    for name in REQUIRED.get(fmt, ()):
        missing = [e for g in groups for e in g if getattr(e.record, name) is None]
        if missing:
            total = sum(len(g) for g in groups)
            raise ConfigError(f"export --to {fmt} needs {name} for every turn; {len(missing)} "
                              f"of {total} turns have none: {STUDENT_LOGPROBS_HOW}")


def _lines(fmt: str, group: list[TurnExample], tokenizer: Any, mark: bool = False,
           breaks: bool = False) -> Iterator[dict[str, Any]]:
    """`fmt`'s rows of one episode; with `mark` (the export holds reconstructed turns) each
    carries the marker, with `breaks` (some turn's prompt does not extend the previous
    turn's: the agent rewrote its history) `extends_previous`, else the format's own fields
    exactly."""
    rows = list(_format_lines(fmt, group, tokenizer))
    per_group = fmt in ("atropos", "atropos-compact", "verl")  # one row holds the episode
    if mark:
        rows = _mark(rows, group, per_turn=not per_group)
    if breaks:
        rows = _mark(rows, group, per_turn=not per_group, name="extends_previous")
    yield from rows


def _format_lines(fmt: str, group: list[TurnExample], tokenizer: Any
                  ) -> Iterator[dict[str, Any]]:
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
                "student_temperature": e.record.student_temperature,
                "teacher_temperature": e.record.teacher_temperature,
            }


def _write_parquet(groups: list[list[TurnExample]], target: Path) -> None:
    """One row per turn: the episode's keys, the prompt ids when recorded, and every field
    of the record (floats as floats, NaN where the record has no value)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError("Parquet export needs pyarrow: pip install 'opd_gym[datasets]'") from exc
    rows = []
    for group in groups:
        for e in group:
            prompt = e.turn.get("prompt_ids")
            rows.append({
                "episode": e.episode,
                "task_id": e.task_id,
                "reward": e.reward,
                "prompt_ids": None if prompt is None else [int(i) for i in prompt],
                **parquet_fields(e.record),
            })
    pq.write_table(pa.Table.from_pylist(rows), target)


def parquet_fields(record: OPDRecord) -> dict[str, Any]:
    """Every field of `record` as parquet values: arrays as (nested) lists, floats kept."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if isinstance(value, np.ndarray):
            value = value.tolist()
        elif f.name == "skip_reason":
            value = None if value is None else str(value)
        elif f.name in ("votes", "timing"):
            value = json.dumps(value)
        out[f.name] = value
    return out
