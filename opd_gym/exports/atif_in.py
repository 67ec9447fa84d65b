"""ATIF in: Harbor trajectories scored by the teacher, step by step, as OPD records.

The inverse of `opd_gym.exports.atif`: each agent step of an ATIF trajectory becomes the turn
sample the OPD wrapper would have taken (the transcript rebuilt from the steps, the student's
`metrics.prompt_token_ids` / `completion_token_ids` / `logprobs`, the observation as the next
state), is judged (the judge's hint from what followed) and its sampled tokens are scored by
the teacher with the same `Scorer` the wrapper builds (`opd.wrapper.make_scorer`). What the
judge reads comes from the step's `extra["turn"]` when the trajectory is our own export (the
env's tool results, format errors and grade, exactly), else from the observation results.

Exact or refused: a step without the student's token ids is refused unless `reconstruct`,
when the teacher's tokenizer retokenizes its text and the record says `retokenized` (no
completion ids) or `reconstructed` (no prompt ids: the context rebuilt from the messages), as
the run's own records and exports mark them; malformed ATIF (Harbor's model where installed,
else our structural checks: `opd_gym.exports.atif_check`) and ids of another tokenizer than
the teacher's (checked against the student's tokenizer where one is known, and against the
teacher's vocabulary always) are refused; nothing is written then. Mapping: docs/harbor.md.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from opd_gym.errors import ConfigError, DatasetError
from opd_gym.exports.atif import INDEX, TOKEN_IDS_HOW, TRAJECTORY, TURN_KEY
from opd_gym.exports.atif_check import check_files, text_of
from opd_gym.grading.report import GradeReport
from opd_gym.opd.config import OPDConfig
from opd_gym.opd.turns import TurnSample, sample_turn
from opd_gym.opd.wrapper import extends_previous, make_scorer
from opd_gym.records.opd_record import OPDRecord
from opd_gym.tools.executor import ToolResult
from opd_gym.tools.parsing import ToolCall
from opd_gym.transcript import Turn

RECONSTRUCT_HOW = (
    "pass --reconstruct (reconstruct=True) to score such steps on the teacher's tokenization "
    "of their text, marked \"retokenized\" (no completion ids) or \"reconstructed\" (no "
    "prompt ids)")
HARBOR_IDS_HOW = ("a Harbor agent that records them (terminus-2: collect_rollout_details); "
                  "for an opd_gym run, " + TOKEN_IDS_HOW)


@dataclass(frozen=True)
class AtifStep:
    """One agent step read back: its trajectory and step ids and the turn sample to score."""

    trajectory_id: str
    step_id: int
    sample: TurnSample


def trajectory_files(inputs: Iterable[str | Path]) -> list[Path]:
    """The trajectory files `inputs` name: a trajectory.json, an index.jsonl (as `export
    --to atif` writes: paths relative to it), or a folder (its index.jsonl, else Harbor's
    trial layout `*/agent/trajectory.json`, or a trial folder itself)."""
    found: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            if (path / INDEX).is_file():
                path = path / INDEX
            elif (path / TRAJECTORY).is_file():
                found.append(path / TRAJECTORY)
                continue
            else:
                trials = sorted(path.glob(f"*/{TRAJECTORY.as_posix()}"))
                if not trials:
                    raise ConfigError(f"{path} holds no ATIF trajectory (no index.jsonl, no "
                                      f"*/{TRAJECTORY.as_posix()})")
                found += trials
                continue
        if not path.is_file():
            raise ConfigError(f"no trajectory file or folder {str(item)!r}")
        if path.suffix == ".jsonl":
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                    found.append(path.parent / str(entry["path"]))
                except (ValueError, KeyError, TypeError):
                    raise DatasetError(f"{path}, line {n}: not an index line (a JSON object "
                                       "with the trajectory's 'path')") from None
        else:
            found.append(path)
    missing = [str(p) for p in found if not p.is_file()]
    if missing:
        raise ConfigError(f"the index names trajectory files that are not there: {missing[0]}"
                          + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
    return found


def read_trajectories(inputs: Iterable[str | Path]) -> tuple[list[tuple[Path, dict]], str]:
    """Each trajectory file `inputs` name with its parsed JSON, all checked (Harbor's model
    where installed, else structurally; DatasetError names the first bad one), and which
    checks ran."""
    paths = trajectory_files(inputs)
    if not paths:
        raise ConfigError("no trajectories given")
    loaded = []
    for path in paths:
        try:
            loaded.append(json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, UnicodeDecodeError) as exc:
            raise DatasetError(f"{path}: not JSON ({exc})") from None
    checks = check_files(paths, loaded)
    return list(zip(paths, loaded, strict=True)), checks


def _tool_result(data: Mapping[str, Any]) -> ToolResult:
    names = {f.name for f in fields(ToolResult)}
    return ToolResult(**{k: v for k, v in data.items() if k in names})


def _env_view(step: Mapping[str, Any], results: Sequence[Mapping[str, Any]],
              names: Mapping[str, str], where: str) -> dict[str, Any]:
    """What the env reported of the turn: our export's `extra["turn"]` exactly, else the
    observation results as tool results (no format errors, no grade: ATIF has no field
    for them)."""
    view = (step.get("extra") or {}).get(TURN_KEY)
    if isinstance(view, Mapping):
        try:
            grade = view.get("grade")
            return {"tool_results": tuple(_tool_result(r) for r in view.get("tool_results")
                                          or ()),
                    "format_errors": tuple(str(e) for e in view.get("format_errors") or ()),
                    "grade": GradeReport.from_dict(grade) if grade else None,
                    "end_reason": str(view.get("end_reason") or "")}
        except (TypeError, AttributeError) as exc:
            raise DatasetError(f"{where}: extra.{TURN_KEY} is not what export --to atif "
                               f"writes ({exc})") from None
    out = []
    for result in results:
        call = result.get("source_call_id")
        out.append(ToolResult(call_id=str(call or ""),
                              name=names.get(call, "observation") if call else "observation",
                              content=text_of(result.get("content"), where)))
    return {"tool_results": tuple(out)}


def agent_steps(trajectory: Mapping[str, Any], trajectory_id: str, *, tokenizer: Any = None,
                max_next_state_chars: int = 4000) -> list[AtifStep]:
    """Each agent step of a (checked) trajectory as the turn sample the OPD wrapper takes:
    the transcript rebuilt from the steps (system/user messages, the assistant message with
    its tool calls and raw output, each observation result as the tool message answering its
    call or as the user message it was), the student's ids as the step's metrics say, the
    next state from what followed. `tokenizer` (the teacher's) resolves assistant messages
    into the form its chat template renders, as the wrapper does."""
    agent = trajectory.get("agent") or {}
    tools = tuple(dict(t) for t in agent.get("tool_definitions") or ())
    messages: list[dict[str, Any]] = []
    task = ""
    steps: list[AtifStep] = []
    for step in trajectory["steps"]:
        where = f"{trajectory_id}, step {step['step_id']}"
        text = text_of(step.get("message"), where)
        extra = step.get("extra") or {}
        role = extra.get("role") if isinstance(extra.get("role"), str) else step["source"]
        if step["source"] != "agent":
            if step["source"] == "user" and not task:
                task = text
            messages.append({"role": role, "content": text})
            continue
        calls = step.get("tool_calls") or []
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = [
                {"id": c["tool_call_id"], "type": "function",
                 "function": {"name": c["function_name"],
                              "arguments": json.dumps(dict(c.get("arguments") or {}),
                                                      ensure_ascii=False)}} for c in calls]
        raw = extra.get("raw_content")
        if isinstance(raw, str):
            message["raw_content"] = raw
        context_len = len(messages)
        messages.append(message)
        names = {c["tool_call_id"]: c["function_name"] for c in calls}
        results = (step.get("observation") or {}).get("results") or []
        for result in results:
            content = text_of(result.get("content"), where)
            call = result.get("source_call_id")
            if call is not None:
                messages.append({"role": "tool", "tool_call_id": call, "name": names[call],
                                 "content": content})
            else:
                own = (result.get("extra") or {}).get("role")
                messages.append({"role": own if isinstance(own, str) else "user",
                                 "content": content})
        metrics = step.get("metrics") or {}
        turn = Turn(
            index=len(steps),
            text=raw if isinstance(raw, str) else text,
            context_len=context_len,
            end_len=len(messages),
            tool_calls=tuple(ToolCall(c["tool_call_id"], c["function_name"],
                                      dict(c.get("arguments") or {}),
                                      (c.get("extra") or {}).get("error") or None)
                             for c in calls),
            token_ids=metrics.get("completion_token_ids"),
            logprobs=metrics.get("logprobs"),
            prompt_ids=metrics.get("prompt_token_ids"),
            **_env_view(step, results, names, where),
        )
        sample = sample_turn(turn, messages, tools, task,
                             max_next_state_chars=max_next_state_chars, tokenizer=tokenizer)
        steps.append(AtifStep(trajectory_id, int(step["step_id"]), sample))
    return steps


def _trajectory_ids(read: Sequence[tuple[Path, dict]]) -> list[str]:
    """Each trajectory's id (trajectory_id, else session_id, else its file), made unique by
    its file where two share one."""
    names = [str(d.get("trajectory_id") or d.get("session_id") or p) for p, d in read]
    return [f"{n} ({p})" if names.count(n) > 1 else n
            for n, (p, _) in zip(names, read, strict=True)]


def _missing_ids(read: Sequence[tuple[Path, dict]], reconstruct: bool) -> None:
    """Refuse agent steps without the student's ids unless `reconstruct`."""
    total = missing = 0
    first = None
    for path, data in read:
        for step in data["steps"]:
            if step["source"] != "agent":
                continue
            total += 1
            metrics = step.get("metrics") or {}
            lacks = [k for k in ("completion_token_ids", "prompt_token_ids")
                     if metrics.get(k) is None]
            if lacks:
                missing += 1
                first = first or f"{path} step {step['step_id']} has no {' or '.join(lacks)}"
    if missing and not reconstruct:
        raise ConfigError(
            f"score-trajectories scores the tokens the student sampled, from each agent step's "
            f"metrics.completion_token_ids and prompt_token_ids; {missing} of {total} agent "
            f"steps have none ({first}): record them with {HARBOR_IDS_HOW}; or "
            f"{RECONSTRUCT_HOW}")


def _student_tokenizer(read: Sequence[tuple[Path, dict]], given: Any) -> Any:
    """The tokenizer the ids are checked against: the one given, else the trajectories'
    policy (`agent.model_name`) when it is a local model; None when neither says."""
    if given is not None:
        return given
    from opd_gym import specs

    found = set()
    for _, data in read:
        name = (data.get("agent") or {}).get("model_name")
        try:
            model = specs.local_model(name) if isinstance(name, str) else None
        except ConfigError:
            model = None
        found.add(f"hf:{model}" if model and Path(model).is_dir() else None)
    return found.pop() if len(found) == 1 else None


def _check_vocabulary(steps: Sequence[AtifStep], tokenizer: Any) -> None:
    """Ids past the teacher's vocabulary are another tokenizer's: refused, naming the step."""
    size = len(tokenizer)
    for step in steps:
        ids = [*(step.sample.prompt_ids or ()), *(step.sample.token_ids or ())]
        if ids and max(ids) >= size:
            raise ConfigError(f"{step.trajectory_id}, step {step.step_id}: token id {max(ids)} "
                              f"is outside the teacher's vocabulary ({size} tokens): the ids "
                              "are another tokenizer's; score with a teacher that shares the "
                              "student's tokenizer")


def score_steps(steps: Sequence[AtifStep], scorer: Any) -> list[tuple[AtifStep, OPDRecord]]:
    """Judge and score the steps as the wrapper does: one turn at a time for the turn hint
    scope, one teacher pass per trajectory for the episode scope."""
    out: list[tuple[AtifStep, OPDRecord]] = []
    by_trajectory: dict[str, list[AtifStep]] = {}
    for step in steps:
        by_trajectory.setdefault(step.trajectory_id, []).append(step)
    for group in by_trajectory.values():
        previous = None
        samples = []
        for step in group:  # extends_previous as the wrapper computes it, turn after turn
            sample = replace(step.sample,
                             extends_previous=extends_previous(previous, step.sample))
            previous = sample
            samples.append(sample)
        if scorer.scope == "episode":
            records = scorer.score(scorer.judge_all(samples))
        else:
            records = [scorer.score([scorer.judge_one(s)])[0] for s in samples]
        out += list(zip(group, records, strict=True))
    return out


def score_trajectories(
    inputs: Iterable[str | Path], out: str | Path, config: OPDConfig | None = None, *,
    reconstruct: bool = False, student_temperature: float | None = None, **options: Any,
) -> tuple[Path, int, str]:
    """Score every agent step of the ATIF trajectories `inputs` name (files, index.jsonl,
    trial folders) and write one OPD record per step as JSONL to `out` (`OPDRecord.to_dict()`
    plus `trajectory_id`, `step_id`, `file`); returns (out, records written, which checks the
    ATIF passed). `config` / `options` are the OPD wrapper's (teacher, judge, topk,
    hint_scope, student_tokenizer ("unchecked" to skip the check)...); `student_temperature`
    is what the trajectories' logprobs were sampled at, recorded in each record. Refusals are
    ConfigError/DatasetError and write nothing (see the module)."""
    config = OPDConfig.from_kwargs(config, **options)
    read, checks = read_trajectories(inputs)
    _missing_ids(read, reconstruct)
    needs_ids = any(step.get("metrics", {}).get("completion_token_ids") is not None
                    for _, data in read for step in data["steps"] if step["source"] == "agent")
    student = _student_tokenizer(read, config.student_tokenizer)
    if needs_ids and student is None:
        raise ConfigError("the trajectories' token ids cannot be checked against the teacher's "
                          "tokenizer: name the student's (--tokenizer tiny | smollm2 | hf:PATH, "
                          "student_tokenizer=...), or --tokenizer unchecked (every record then "
                          "says ids_unchecked)")
    config = config.replace(student_tokenizer=student)
    scorer, owned, _ = make_scorer(config, student_temperature=student_temperature)
    try:
        teacher_tok = scorer.teacher.tokenizer
        ids = _trajectory_ids(read)
        steps = [s for (path, data), name in zip(read, ids, strict=True)
                 for s in agent_steps(data, name, tokenizer=teacher_tok,
                                      max_next_state_chars=config.max_next_state_chars)]
        _check_vocabulary(steps, teacher_tok)
        scored = score_steps(steps, scorer)
    finally:
        scorer.close()
        from opd_gym.records.policy import close

        for thing in owned:
            close(thing)
    files = {name: str(path) for (path, _), name in zip(read, ids, strict=True)}
    target = Path(out)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            for step, record in scored:
                line = record.to_dict() | {"trajectory_id": step.trajectory_id,
                                           "step_id": step.step_id,
                                           "file": files[step.trajectory_id]}
                fh.write(json.dumps(line, allow_nan=False) + "\n")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target, len(scored), checks


def score_trajectory(trajectory: Mapping[str, Any], config: OPDConfig | None = None, *,
                     reconstruct: bool = False,
                     student_temperature: float | None = None, **options: Any
                     ) -> list[OPDRecord]:
    """One in-memory ATIF trajectory's agent steps as OPD records (what `score_trajectories`
    writes, without the file: same checks, same refusals)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="opd-atif-in-") as folder:
        path = Path(folder) / "trajectory.json"
        path.write_text(json.dumps(trajectory, allow_nan=False), encoding="utf-8")
        out, _, _ = score_trajectories([path], Path(folder) / "records.jsonl", config,
                                       reconstruct=reconstruct,
                                       student_temperature=student_temperature, **options)
        return [OPDRecord.from_dict(json.loads(line))
                for line in out.read_text(encoding="utf-8").splitlines()]


__all__ = ["AtifStep", "agent_steps", "read_trajectories", "score_steps",
           "score_trajectories", "score_trajectory", "trajectory_files"]
