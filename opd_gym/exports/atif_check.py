"""Is a file a well-formed ATIF trajectory? Harbor's own model where it is installed, else our
structural checks of what reading it back needs, each failure one line naming the field.

Harbor (`harbor.models.trajectories.Trajectory`, strict pydantic) needs Python >= 3.12, so it
may live in a venv of its own: `OPD_GYM_HARBOR_VENV` names one, else the repository's
`.venv-harbor` (what `scripts/setup.sh` makes) is used when it exists, else harbor importable
here; with none of them only the structural checks run (`harbor_python` says which).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from opd_gym.errors import ConfigError, DatasetError

HARBOR_ENV = "OPD_GYM_HARBOR_VENV"
SOURCES = ("system", "user", "agent")
VALIDATE = """\
import json, sys
from harbor.models.trajectories import Trajectory
out = {}
for path in sys.argv[1:]:
    try:
        Trajectory.model_validate_json(open(path, encoding="utf-8").read())
        out[path] = "ok"
    except Exception as exc:  # pydantic's ValidationError: its message, per file
        out[path] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def harbor_python() -> str | None:
    """The python that has Harbor's models: `OPD_GYM_HARBOR_VENV`'s (refused when it has
    none), the repository's `.venv-harbor`, or this one when harbor imports here; None when
    there is no Harbor to ask."""
    named = os.environ.get(HARBOR_ENV)
    if named:
        python = Path(named) / "bin" / "python"
        if not python.is_file():
            raise ConfigError(f"{HARBOR_ENV}={named} has no bin/python: point it at a venv "
                              "with harbor installed (scripts/setup.sh makes .venv-harbor)")
        return str(python)
    repo = Path(__file__).resolve().parents[2] / ".venv-harbor" / "bin" / "python"
    if repo.is_file():
        return str(repo)
    try:
        if importlib.util.find_spec("harbor") is not None:
            return sys.executable
    except (ImportError, ValueError):
        pass
    return None


def harbor_verdicts(paths: Sequence[Path], python: str) -> dict[str, str]:
    """Each file's verdict under Harbor's `Trajectory` ("ok" or the validation error)."""
    proc = subprocess.run([python, "-c", VALIDATE, *map(str, paths)], capture_output=True,
                          text=True, timeout=300)
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"Harbor's model could not be run with {python}: {last}")
    return json.loads(proc.stdout)


def text_of(content: Any, where: str) -> str:
    """A message or observation content as text: a string, or text content parts joined; an
    image part is refused (the teacher scores text)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, Mapping) for p in content):
        if any(p.get("type") != "text" for p in content):
            raise DatasetError(f"{where}: a non-text content part (ATIF image): the teacher "
                               "scores text only")
        return "".join(str(p.get("text") or "") for p in content)
    raise DatasetError(f"{where}: content must be a string or a list of content parts")


def _ints(value: Any, where: str) -> None:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool)
                                              and v >= 0 for v in value):
        raise DatasetError(f"{where} must be a list of non-negative integer token ids")


def check_structure(data: Any, where: str) -> None:
    """Our structural checks (DatasetError naming the field): steps numbered 1, 2, 3...,
    known sources, text messages, metrics and tool calls on agent steps only, token ids as
    integer lists with one logprob per sampled id, observations answering their step's calls."""
    if not isinstance(data, Mapping):
        raise DatasetError(f"{where}: an ATIF trajectory is a JSON object")
    if not str(data.get("schema_version") or "").startswith("ATIF-"):
        raise DatasetError(f"{where}: schema_version {data.get('schema_version')!r} is not an "
                           "ATIF version (ATIF-v1.x)")
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps:
        raise DatasetError(f"{where}: steps must be a non-empty list")
    for n, step in enumerate(steps, 1):
        at = f"{where}, step {n}"
        if not isinstance(step, Mapping):
            raise DatasetError(f"{at}: a step is a JSON object")
        if step.get("step_id") != n:
            raise DatasetError(f"{at}: step_id is {step.get('step_id')!r}, expected {n} (steps "
                               "are numbered 1, 2, 3...)")
        if step.get("source") not in SOURCES:
            raise DatasetError(f"{at}: source {step.get('source')!r} is not one of "
                               f"{', '.join(SOURCES)}")
        if "message" not in step:
            raise DatasetError(f"{at}: no message")
        text_of(step["message"], f"{at}, message")
        if step["source"] != "agent":
            bad = [k for k in ("metrics", "tool_calls", "observation") if step.get(k)]
            if bad:
                raise DatasetError(f"{at}: {', '.join(bad)} only belong on agent steps")
            continue
        metrics = step.get("metrics") or {}
        if not isinstance(metrics, Mapping):
            raise DatasetError(f"{at}: metrics must be an object")
        for key in ("prompt_token_ids", "completion_token_ids"):
            if metrics.get(key) is not None:
                _ints(metrics[key], f"{at}, metrics.{key}")
        logprobs = metrics.get("logprobs")
        if logprobs is not None:
            ids = metrics.get("completion_token_ids")
            if not isinstance(logprobs, list) or not all(
                    isinstance(v, int | float) and not isinstance(v, bool) for v in logprobs):
                raise DatasetError(f"{at}: metrics.logprobs must be a list of numbers")
            if ids is None or len(ids) != len(logprobs):
                raise DatasetError(f"{at}: {len(logprobs)} logprobs for "
                                   f"{0 if ids is None else len(ids)} completion token ids")
        calls = step.get("tool_calls") or []
        if not isinstance(calls, list) or not all(
                isinstance(c, Mapping) and isinstance(c.get("tool_call_id"), str)
                and isinstance(c.get("function_name"), str)
                and isinstance(c.get("arguments", {}), Mapping) for c in calls):
            raise DatasetError(f"{at}: each tool call needs tool_call_id, function_name and "
                               "arguments (an object)")
        ids = {c["tool_call_id"] for c in calls}
        observation = step.get("observation") or {}
        results = observation.get("results") if isinstance(observation, Mapping) else None
        if observation and not isinstance(results, list):
            raise DatasetError(f"{at}: observation.results must be a list")
        for r, result in enumerate(results or (), 1):
            if not isinstance(result, Mapping):
                raise DatasetError(f"{at}, observation result {r}: a result is a JSON object")
            text_of(result.get("content"), f"{at}, observation result {r}")
            call = result.get("source_call_id")
            if call is not None and call not in ids:
                raise DatasetError(f"{at}, observation result {r}: source_call_id {call!r} "
                                   "names no tool call of this step")


def check_files(paths: Sequence[Path], trajectories: Sequence[Any]) -> str:
    """Check every trajectory (structure always, Harbor's model where there is one); the
    first failure raises DatasetError naming its file. Returns which checks ran."""
    for path, data in zip(paths, trajectories, strict=True):
        check_structure(data, str(path))
    python = harbor_python()
    if python is None:
        return "structural checks (no Harbor installed: set OPD_GYM_HARBOR_VENV to validate " \
               "with Harbor's own model)"
    for path, verdict in harbor_verdicts(paths, python).items():
        if verdict != "ok":
            first = verdict.splitlines()
            raise DatasetError(f"{path}: not a valid ATIF trajectory under Harbor's model: "
                               f"{' '.join(line.strip() for line in first[:3])}")
    return "Harbor's Trajectory model"


__all__ = ["HARBOR_ENV", "check_files", "check_structure", "harbor_python", "harbor_verdicts",
           "text_of"]
