"""A run's episodes as Harbor trajectories (ATIF-v1.8), the teacher's signal on each step.

Harbor (the `harbor` package) stores an agent run as an ATIF `Trajectory`
(`harbor.models.trajectories`): strict pydantic models where unknown keys are refused
outside the `extra` dicts, `step_id` runs 1, 2, 3..., `metrics` and `tool_calls` belong on
agent steps only and an observation's `source_call_id` names a tool call of its own step.
ATIF has fields for the student's exact tokens (`metrics.prompt_token_ids`,
`completion_token_ids`, `logprobs`) and none for a teacher, so each agent step carries its
turn's OPD record, whole, under the one key `extra["opd"]` (`OPDRecord.to_dict()`, schema
``opd_gym.opd_record/1``; `OPDRecord.from_dict` reads it back), and what the env reported of
the turn (tool results, format errors, grade, end reason: what the judge read) under
`extra["turn"]`, so `opd-gym score-trajectories` (`opd_gym.exports.atif_in`) can judge it again.

Exact or refused, like every run export (`opd_gym.exports.run`): token ids and logprobs are
the ones the policy recorded, never re-tokenized or filled in. A run whose turns have no
sampled token ids (scripted policies, text-only agents: their records were scored on the
teacher's tokenization of the text, `retokenized`) is refused, naming the field and the
policies that record it; turns scored on a rebuilt context (`reconstructed`) are refused,
dropped or marked as in the other exports; infra-error episodes are left out. The mapping,
field by field, is in docs/harbor.md.

Layout (Harbor's own: a trial folder holds `agent/trajectory.json`): ``OUT/<trial>/agent/
trajectory.json`` per episode, `<trial>` = ``<task_id>__ep<episode>``, plus ``OUT/
index.jsonl``, one line per trajectory (path, episode, task_id, reward, passed).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from opd_gym.errors import ConfigError, DatasetError
from opd_gym.exports.formats import RECONSTRUCTED
from opd_gym.records.opd_record import SCHEMA as OPD_SCHEMA
from opd_gym.records.opd_record import OPDRecord
from opd_gym.records.rows import EpisodeRow, as_dict, strict
from opd_gym.runs import RunDirectory

ATIF_SCHEMA = "ATIF-v1.8"
AGENT_NAME = "opd_gym"
OPD_KEY = "opd"  # the one `extra` key of an agent step that holds the OPD record
# the `extra` key of an agent step holding what the env reported of the turn, as the judge
# read it (the transcript Turn's fields): what `score-trajectories` judges again
TURN_KEY = "turn"
TURN_FIELDS = ("tool_results", "format_errors", "grade", "end_reason")
INDEX = "index.jsonl"
TRAJECTORY = Path("agent") / "trajectory.json"  # inside a trial folder, as Harbor writes it

TOKEN_IDS_HOW = (
    "roll out with a policy that returns the token ids it sampled (--policy tiny, smollm2, "
    "hf:PATH or vllm:URL; an agent of your own passes TokenText(text, token_ids=..., "
    "logprobs=..., prompt_ids=...), see docs/opd.md); the scripted policies (demo, reference, "
    "the embedded default run) and text-only agents give none, and their records were scored "
    "on the teacher's tokenization of the text (retokenized)")

_GRADE_KEYS = ("passed", "failed", "errors", "skipped", "total", "score", "reason",
               "timed_out", "infra_error")


def _version() -> str:
    """The installed opd_gym's version (the package metadata; the package's `__version__`
    is the face above this layer)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("opd_gym")
    except PackageNotFoundError:
        return "unknown"


def _trial_name(row: EpisodeRow, number: int) -> str:
    """A folder name for the episode: task id (filesystem-safe) and episode number."""
    task = re.sub(r"[^A-Za-z0-9._-]+", "_", row.task_id or "task").strip("._") or "task"
    return f"{task}__ep{row.episode if row.episode is not None else number}"


def _ints(values: Any) -> list[int] | None:
    return None if values is None else [int(v) for v in values]


def _floats(values: Any, where: str) -> list[float] | None:
    """The recorded logprobs as floats; a non-finite one (no sampled token has one) is an
    error in the run, not something to write as null or drop silently."""
    if values is None:
        return None
    out = [float(v) for v in values]
    if not all(math.isfinite(v) for v in out):
        raise DatasetError(f"{where}: the recorded logprobs hold a non-finite value")
    return out


def _grade(grade: Mapping[str, Any] | None) -> dict[str, Any] | None:
    grade = as_dict(grade)
    return {k: grade[k] for k in _GRADE_KEYS if k in grade} or None


def _observation(messages: Sequence[Mapping[str, Any]], call_ids: set[str]
                 ) -> dict[str, Any] | None:
    """The state that followed a turn: each tool message answers its call (source_call_id),
    other messages (format errors, the end-of-episode note) are results of no call."""
    results = []
    for message in messages:
        content = message.get("content")
        result: dict[str, Any] = {"content": "" if content is None else str(content)}
        call = message.get("tool_call_id")
        if message.get("role") == "tool" and call in call_ids:
            result["source_call_id"] = call
        else:
            result["extra"] = {"role": message.get("role")}
        results.append(result)
    return {"results": results} if results else None


def _tool_calls(turn: Mapping[str, Any], message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The turn's parsed calls (ids as in the transcript; `extra.error` when it could not
    run), else the assistant message's OpenAI-form calls."""
    calls = []
    for call in turn.get("tool_calls") or ():
        item: dict[str, Any] = {"tool_call_id": str(call["id"]),
                                "function_name": str(call["name"]),
                                "arguments": dict(call.get("arguments") or {})}
        if call.get("error"):
            item["extra"] = {"error": call["error"]}
        calls.append(item)
    if calls or turn:
        return calls
    for call in message.get("tool_calls") or ():
        arguments = call["function"].get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                arguments = {"_raw": arguments}
        if not isinstance(arguments, dict):
            arguments = {"_raw": arguments}
        calls.append({"tool_call_id": str(call["id"]),
                      "function_name": str(call["function"]["name"]), "arguments": arguments})
    return calls


def _agent_step(message: Mapping[str, Any], turn: Mapping[str, Any],
                record: OPDRecord | None, reward: Any, observation: dict[str, Any] | None,
                where: str) -> dict[str, Any]:
    """One assistant turn as an ATIF agent step (see docs/harbor.md for each field)."""
    step: dict[str, Any] = {"source": "agent", "message": str(message.get("content") or "")}
    calls = _tool_calls(turn, message)
    if calls:
        step["tool_calls"] = calls
    if observation is not None:
        step["observation"] = observation
    completion = _ints(turn.get("token_ids"))
    prompt = _ints(turn.get("prompt_ids"))
    logprobs = _floats(turn.get("logprobs"), where)
    if completion is not None and record is not None \
            and record.token_ids.tolist() != completion:
        raise DatasetError(f"{where}: the OPD record's token ids are not the ids the policy "
                           "recorded for the turn (the run is inconsistent)")
    if logprobs is not None and (completion is None or len(logprobs) != len(completion)):
        raise DatasetError(f"{where}: {len(logprobs)} logprobs for "
                           f"{0 if completion is None else len(completion)} token ids")
    metrics: dict[str, Any] = {}
    if prompt is not None:
        metrics["prompt_tokens"] = len(prompt)
        metrics["prompt_token_ids"] = prompt
    if completion is not None:
        metrics["completion_tokens"] = len(completion)
        metrics["completion_token_ids"] = completion
    if logprobs is not None:
        metrics["logprobs"] = logprobs
    if reward is not None:
        metrics["extra"] = {"reward": reward}
    if metrics:
        step["metrics"] = metrics
    extra: dict[str, Any] = {}
    if record is not None:
        extra[OPD_KEY] = record.to_dict()
    if message.get("raw_content") is not None:
        extra["raw_content"] = message["raw_content"]
    view = {k: turn[k] for k in TURN_FIELDS if k in turn}
    if view:
        extra[TURN_KEY] = view
    if extra:
        step["extra"] = extra
    return step


def to_atif(row: EpisodeRow, *, agent: Mapping[str, Any] | None = None,
            records: Mapping[int, OPDRecord | None] | None = None,
            session_id: str | None = None) -> dict[str, Any]:
    """One episode as an ATIF-v1.8 trajectory (a JSON-able dict for
    `harbor.models.trajectories.Trajectory.model_validate`).

    Steps follow the transcript: the system and user messages are `system`/`user` steps,
    each assistant turn an `agent` step holding its tool calls, the messages that followed
    it as its observation, the policy's exact token ids and logprobs in `metrics` (only
    where the turn recorded them) and the OPD record under `extra["opd"]`. `records` maps
    turn index to record (default: the row's own; None leaves a turn's out); `agent`
    updates the `agent` object (name, version, model_name...). Final metrics carry the
    reward, its breakdown and the grade. No refusals here: `export_atif` checks the run.
    """
    if records is None:
        records = {r.turn_index: r for r in row.records()}
    turns = {int(t["index"]): t for t in row.turns if "index" in t}
    by_start = {int(t["context_len"]): t for t in turns.values() if "context_len" in t}
    where = f"episode {row.episode} ({row.task_id})"
    steps: list[dict[str, Any]] = []
    messages = row.messages
    i = 0
    while i < len(messages):
        message = messages[i]
        role = message.get("role")
        if role == "assistant":
            turn = by_start.get(i, {})
            end = int(turn.get("end_len") or 0)
            end = end if end > i else i + 1
            index = turn.get("index")
            call_ids = {str(c["id"]) for c in turn.get("tool_calls") or ()} or {
                str(c["id"]) for c in message.get("tool_calls") or ()}
            reward = None
            if isinstance(index, int) and index < len(row.rewards):
                reward = strict(row.rewards[index])
            steps.append(_agent_step(message, turn,
                                     records.get(index) if isinstance(index, int) else None,
                                     reward, _observation(messages[i + 1:end], call_ids),
                                     f"{where}, turn {index}"))
            i = end
            continue
        content = message.get("content")
        text = "" if content is None else str(content)
        if role in ("system", "user"):
            steps.append({"source": role, "message": text})
        elif steps and steps[-1]["source"] == "agent":  # a stray tool message: its feedback
            obs = steps[-1].setdefault("observation", {"results": []})
            obs["results"].append({"content": text, "extra": {"role": role}})
        else:
            steps.append({"source": "user", "message": text, "extra": {"role": role}})
        i += 1
    if not steps:
        raise DatasetError(f"{where}: the row has no messages to make steps of")
    for n, step in enumerate(steps, 1):
        step["step_id"] = n
    agent_steps = [s for s in steps if s["source"] == "agent"]
    prompts = [s.get("metrics", {}).get("prompt_tokens") for s in agent_steps]
    completions = [s.get("metrics", {}).get("completion_tokens") for s in agent_steps]
    final_extra = strict({
        "reward": row.reward,
        "rewards": row.rewards,
        "reward_breakdown": row.reward_breakdown,
        "passed": row.passed,
        "grade": _grade(row.grade),
        "end_reason": row.end_reason,
        "terminated": row.terminated,
        "truncated": row.truncated,
        "opd_metrics": row.opd_metrics,
    })
    final: dict[str, Any] = {"total_steps": len(steps), "extra": final_extra}
    if prompts and None not in prompts:
        final["total_prompt_tokens"] = sum(prompts)
    if completions and None not in completions:
        final["total_completion_tokens"] = sum(completions)
    info: dict[str, Any] = {"name": AGENT_NAME, "version": _version()}
    if row.tools:
        info["tool_definitions"] = [dict(t) for t in row.tools]
    info.update(agent or {})
    trajectory: dict[str, Any] = {
        "schema_version": ATIF_SCHEMA,
        "agent": info,
        "steps": steps,
        "final_metrics": final,
        "notes": (f"Exported by opd_gym: agent steps carry their turn's OPD record under "
                  f"extra.{OPD_KEY} (schema {OPD_SCHEMA}; docs/harbor.md)."),
        "extra": strict({"task_id": row.task_id, "episode": row.episode, "seed": row.seed,
                         "opd_record_schema": OPD_SCHEMA}),
    }
    if session_id is not None:
        trajectory["session_id"] = session_id
        trajectory["trajectory_id"] = session_id
    return trajectory


def _agent_info(run: RunDirectory) -> dict[str, Any]:
    """The `agent` fields a run's config.json gives: the policy as model_name, teacher and
    judge in `extra`."""
    config = run.read_config() or {}
    out: dict[str, Any] = {}
    policy = config.get("policy")
    if isinstance(policy, str) and policy:
        out["model_name"] = policy
    extra = {k: config[k] for k in ("policy", "teacher", "judge", "hint_scope", "topk")
             if isinstance(config.get(k), str | int | float) and not isinstance(config[k], bool)}
    if extra:
        out["extra"] = extra
    return out


def export_atif(
    run_dir: str | Path, out: str | Path | None = None, *, reconstructed: str = "refuse",
    note: Callable[[str], None] | None = None,
) -> Path:
    """Write one ATIF-v1.8 trajectory per episode of `run_dir` under the folder `out`
    (default ``RUN/export-atif``); returns the folder.

    Refuses (ConfigError, nothing written) a run with no OPD records, or with turns that
    have no token ids of the policy's own (`TOKEN_IDS_HOW`); `reconstructed` is "refuse"
    (default), "drop" (the turn's step stays, without its OPD record) or "allow" (the
    record says `"reconstructed": true`), as in `export_run`. Infra-error episodes are left
    out and `note` hears how many. The folder is written beside and renamed into place: a
    failed export leaves nothing behind; a folder that is not an earlier ATIF export (no
    index.jsonl) is never replaced."""
    if reconstructed not in RECONSTRUCTED:
        raise ConfigError(f"reconstructed={reconstructed!r}: use one of "
                          f"{', '.join(RECONSTRUCTED)}")
    run = RunDirectory(run_dir).require()
    target = Path(out) if out else run.root / "export-atif"
    if target.exists() and (not target.is_dir() or (any(target.iterdir())
                                                     and not (target / INDEX).is_file())):
        raise ConfigError(f"export --to atif: {target} exists and is not an earlier ATIF "
                          "export (no index.jsonl): give another --out")
    rows = run.episodes()
    masked = sum(row.infra_error for row in rows)
    if masked and note is not None:
        note(f"{masked} episode(s) graded with an infra error (an unverifiable task, or our "
             "machinery failing) left out: their reward is no verdict on the answer")
    episodes = []
    for row in rows:
        if row.infra_error:
            continue
        records = {r.turn_index: r for r in row.records()}
        if records:
            episodes.append((row, records))
    if not episodes and masked:
        raise ConfigError(f"export --to atif: every episode of {run.root} with OPD records was "
                          "graded with an infra error: nothing is left to write")
    if not episodes:
        raise ConfigError(f"export --to atif: {run.root} has no turns with OPD records (roll "
                          "out without --no-opd)")
    total = sum(len(row.turns) for row, _ in episodes)
    missing = sum(
        turn.get("token_ids") is None or bool(getattr(recs.get(turn.get("index")),
                                                      "retokenized", False))
        for row, recs in episodes for turn in row.turns)
    if missing:
        raise ConfigError(f"export --to atif needs the policy's sampled token ids "
                          f"(completion_token_ids) for every turn; {missing} of {total} turns "
                          f"of {run.root} have none: {TOKEN_IDS_HOW}")
    _reconstructed(episodes, run.root, reconstructed, note)
    agent = _agent_info(run)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        index, names = [], set()
        for number, (row, records) in enumerate(episodes):
            trial = _trial_name(row, number)
            while trial in names:  # rows without an episode id may meet a numbered one
                trial += "_"
            names.add(trial)
            trajectory = to_atif(row, agent=agent, records=records,
                                 session_id=f"{run.root.name}/{trial}")
            path = tmp / trial / TRAJECTORY
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                text = json.dumps(trajectory, ensure_ascii=False, allow_nan=False)
            except ValueError as exc:
                raise DatasetError(f"episode {row.episode} ({row.task_id}): {exc}") from exc
            path.write_text(text + "\n", encoding="utf-8")
            index.append({"path": str(Path(trial) / TRAJECTORY), "episode": row.episode,
                          "task_id": row.task_id, "reward": strict(row.reward),
                          "passed": row.passed, "steps": len(trajectory["steps"])})
        (tmp / INDEX).write_text("".join(json.dumps(line) + "\n" for line in index),
                                 encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _reconstructed(episodes: list[tuple[EpisodeRow, dict[int, OPDRecord | None]]], root: Path,
                   mode: str, note: Callable[[str], None] | None) -> None:
    """Apply `mode` to turns scored on a rebuilt context: refuse, drop their records (in
    place: the step stays, without extra.opd) or keep them marked."""
    total = sum(len(recs) for _, recs in episodes)
    rebuilt = sum(bool(r and r.reconstructed) for _, recs in episodes for r in recs.values())
    if not rebuilt:
        return
    what = (f"{rebuilt} of {total} turns of {root} were scored on a context rebuilt from the "
            "transcript (the policy recorded no prompt token ids), not on the ids the student "
            "saw")
    if mode == "refuse":
        raise ConfigError(f"export --to atif: {what}; a trainer would learn from inexact "
                          "targets. Pass --drop-reconstructed to leave their OPD records out "
                          "(the steps stay), or --allow-reconstructed to write them marked "
                          "(\"reconstructed\": true); a policy that returns TokenText with its "
                          "prompt ids (see docs/opd.md) records exact ones")
    if mode == "drop":
        for _, recs in episodes:
            for i, r in list(recs.items()):
                if r is not None and r.reconstructed:
                    recs[i] = None
        if note is not None:
            note(f"left out the OPD records of {rebuilt} of {total} turns (reconstructed "
                 "context); their steps stay, without extra.opd")
    elif note is not None:
        note(f"{rebuilt} of {total} turns are reconstructed; their records say "
             "\"reconstructed\": true")


__all__ = ["ATIF_SCHEMA", "INDEX", "OPD_KEY", "TOKEN_IDS_HOW", "TRAJECTORY", "TURN_FIELDS",
           "TURN_KEY", "export_atif", "to_atif"]
