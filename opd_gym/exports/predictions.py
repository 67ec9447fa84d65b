"""A run's repository-task episodes as SWE-bench predictions, for SWE-bench's own harness.

One JSON line per exported episode: `{"instance_id", "model_name_or_path", "model_patch"}`,
the patch being the agent's diff the episode recorded (`EpisodeRow.diff`, taken at the end
of the episode against the base commit). It is exact or refused: an episode is left out, and
counted by its reason, when it is not a finished repository-task episode, when its diff is
unknown, empty or truncated (a cut patch does not apply), or when an earlier episode of the
same instance was exported (the harness takes one prediction per instance). Nothing
exportable raises ConfigError; an empty file is never written.

    opd-gym export RUN --to swebench-predictions [--model-name NAME]
    python -m swebench.harness.run_evaluation \
        --predictions_path RUN/export-swebench-predictions.jsonl ...
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from opd_gym.errors import ConfigError
from opd_gym.records.rows import EpisodeRow
from opd_gym.runs import RunDirectory

FORMAT = "swebench-predictions"
# Why an episode is left out (the counts `export` prints), in the order they are checked.
UNFINISHED = "unfinished or interrupted"
NOT_REPOSITORY = "not a repository task (no diff recorded)"
UNKNOWN = "diff unknown"
EMPTY = "no change"
TRUNCATED = "diff truncated"
REPEATED = "another episode of the same instance exported first"


@dataclass(frozen=True)
class PredictionsExport:
    """What was written: the file, the predictions it holds and the episodes left out."""

    path: Path
    written: int
    model_name: str
    left_out: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        """One line: `wrote N prediction(s) ... ; left out M episode(s): 2 no change, ...`."""
        line = f"wrote {self.written} prediction(s) of {self.model_name!r} to {self.path}"
        total = sum(self.left_out.values())
        if total:
            reasons = ", ".join(f"{n} {why}" for why, n in self.left_out.items())
            line += f"; left out {total} episode(s): {reasons}"
        return line


def prediction(row: EpisodeRow, model_name: str) -> dict[str, str] | str:
    """The prediction of one episode row, or the reason it has none."""
    if not row.finished or row.interrupted:
        return UNFINISHED
    diff = row.diff
    if not isinstance(diff, dict):
        return NOT_REPOSITORY
    text = diff.get("text")
    if not isinstance(text, str):
        return UNKNOWN
    if not text:
        return EMPTY
    if diff.get("truncated"):
        return TRUNCATED
    return {"instance_id": row.task_id, "model_name_or_path": model_name, "model_patch": text}


def run_model_name(run: RunDirectory) -> str | None:
    """The policy that played the run, as its config.json records it (None when unknown)."""
    config = run.read_config() or {}
    policy = config.get("policy")
    return policy if isinstance(policy, str) and policy else None


def export_predictions(run_dir: str | Path, out: str | Path | None = None, *,
                       model_name: str | None = None) -> PredictionsExport:
    """Write the run's predictions (one per repository-task instance) to `out` (default
    RUN/export-swebench-predictions.jsonl), atomically; ConfigError when none can be."""
    run = RunDirectory(run_dir).require()
    name = model_name or run_model_name(run)
    if not name:
        raise ConfigError(f"export --to {FORMAT}: {run.root} records no policy in config.json: "
                          "name the model with --model-name (model_name=)")
    lines: list[dict[str, str]] = []
    left_out: Counter[str] = Counter()
    seen: set[str] = set()
    for row in run.episodes():
        got = prediction(row, name)
        if isinstance(got, dict) and got["instance_id"] in seen:
            got = REPEATED
        if isinstance(got, str):
            left_out[got] += 1
            continue
        seen.add(got["instance_id"])
        lines.append(got)
    order = [UNFINISHED, NOT_REPOSITORY, UNKNOWN, EMPTY, TRUNCATED, REPEATED]
    counts = {why: left_out[why] for why in order if left_out[why]}
    if not lines:
        why = ", ".join(f"{n} {reason}" for reason, n in counts.items()) or "no episodes"
        raise ConfigError(f"export --to {FORMAT}: no episode of {run.root} has a patch to "
                          f"predict ({why})")
    target = Path(out) if out else run.root / f"export-{FORMAT}.jsonl"
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            for line in lines:
                fh.write(json.dumps(line, ensure_ascii=False) + "\n")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return PredictionsExport(target, len(lines), name, counts)


__all__ = ["FORMAT", "PredictionsExport", "export_predictions", "prediction", "run_model_name"]
