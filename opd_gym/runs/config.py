"""The typed run config: everything that decides which episodes a rollout plays, and how.

Runners (local threads, Ray workers) receive this object whole, never a mutated gym registry,
so every process builds the same env stack from it (`opd_gym.rollout_core.build_env`).
"""

from __future__ import annotations

import argparse
import json
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opd_gym.errors import ConfigError
from opd_gym.opd.config import OPDConfig


@dataclass
class RolloutConfig:
    """Everything a rollout needs; plain data so it can be saved beside the results."""

    out_dir: str
    episodes: int = 8
    tasks: Any = "coding"
    task_ids: list[str] | None = None
    sandbox: Any = "docker"
    parallel: int = 1
    seed: int = 0
    max_turns: int = 15
    resume: bool = False
    opd: bool = True
    opd_options: Mapping[str, Any] | OPDConfig = field(default_factory=dict)
    tool_format: str = "hermes"  # how the policy writes tool calls (tools/formats)
    repeat: int = 1  # rollouts per task in a row (a group: GRPO, pass@k), each its own seed
    max_tool_output_chars: int | None = 10_000  # of one tool result the agent sees (0/None: all)
    setup_cache: str | None = None  # what environment images' setup steps install from
    verify_tasks: bool = True  # calibrate the planned tasks first, refusing unverifiable ones
    skip_unverifiable: bool = False  # ... or playing without them (how many is said)
    calibrations: str | None = None  # a calibration store (grading/store.py) the Grader uses

    def plan(self, episode: int, task_ids: list[str]) -> tuple[str, int]:
        """(task id, seed) of episode `episode`: task (i // repeat) mod n, seed `seed + i`
        (with repeat 1: task i mod n)."""
        return task_ids[(episode // max(self.repeat, 1)) % len(task_ids)], self.seed + episode


def plain_config(config: RolloutConfig) -> dict[str, Any]:
    """The rollout's settings as JSON-able data for summary.json (tasks by id, objects by a
    short repr), so the report can show what produced the run."""
    def plain(value: Any) -> Any:
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if isinstance(value, OPDConfig):
            value = value.to_kwargs()
        if isinstance(value, Mapping):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        ident = getattr(value, "id", None)  # a Task by its id, never its files
        return ident if isinstance(ident, str) else repr(value)[:200]

    return {name: plain(getattr(config, name)) for name in config.__dataclass_fields__}


# Keys `opd-gym rollout` writes into config.json that are not flags: the subcommand, the
# parser's callback (null) and the teacher's name before it was resolved to a model path.
WRITTEN_NOT_FLAGS = frozenset({"command", "func", "teacher_name"})


def read_config_file(path: str | Path, actions: Iterable[argparse.Action]) -> dict[str, Any]:
    """The values of a rollout config file (a run's config.json, or JSON/TOML with the same
    keys, `-` or `_` alike), checked against the flags (`actions`) they stand for: each key a
    flag, each value of the flag's type and choices. Returns {flag dest: value}; raises
    ConfigError naming the file and the key for anything else, so nothing runs on a guess."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--config {str(path)!r}: cannot read it ({exc.strerror or exc})"
                          ) from None
    try:
        if path.suffix.lower() == ".toml":
            data: Any = tomllib.loads(text)
        else:
            data = json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        kind = "TOML" if path.suffix.lower() == ".toml" else "JSON"
        raise ConfigError(f"--config {str(path)!r}: not {kind} ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {str(path)!r}: not a table of flag = value")
    by_dest = {a.dest: a for a in actions if a.dest not in ("help", "config")}
    values: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = str(raw_key).replace("-", "_")
        where = f"--config {str(path)!r}: key {raw_key!r}"
        if key == "config":
            if value is not None:
                raise ConfigError(f"{where}: a config file cannot name another")
            continue
        if key in WRITTEN_NOT_FLAGS:
            if key == "command" and value not in (None, "rollout"):
                raise ConfigError(f"{where}: a {value!r} config, not a rollout's")
            continue
        if key not in by_dest:
            raise ConfigError(f"{where}: not a rollout flag (see opd-gym rollout --help)")
        if key == "tasks" and isinstance(value, Mapping):
            for dest, flag in _task_spec_flags(value, where).items():
                values[dest] = _flag_value(by_dest[dest], flag, where)
            continue
        if value is None and key in values:  # set by the task spec (config.json has both)
            continue
        if key == "repo" and value is not None:
            value = _repo_pairs(value, where)
        values[key] = _flag_value(by_dest[key], value, where)
    return values


def _repo_pairs(value: Any, where: str) -> list[str]:
    """`repo` as `--repo` flags: a table {"owner/name": path} or a list of "owner/name=path"."""
    if isinstance(value, Mapping):
        value = [f"{name}={path}" for name, path in value.items()]
    if not isinstance(value, list) or not value or not all(
            isinstance(v, str) and "=" in v for v in value):
        raise ConfigError(f"{where}: give a table {{\"owner/name\" = path}} or a list of "
                          "\"owner/name=path\" strings")
    return list(value)


def _flag_value(action: argparse.Action, value: Any, where: str) -> Any:
    """`value` as flag `action` would have parsed it, or ConfigError saying why not."""
    if value is None:
        if action.default is not None:
            raise ConfigError(f"{where}: null, but the flag needs a value "
                              f"(default {action.default!r})")
        return None
    if action.nargs == 0:  # store_true/store_false: a switch
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: {value!r} is not true or false")
        return value
    if isinstance(value, list) and action.dest == "repo":
        return list(value)  # checked by _repo_pairs
    if isinstance(value, list) and action.dest == "task_ids":
        if not value or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"{where}: {value!r} is not a list of task ids")
        return list(value)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f"{where}: {value!r} is not a {_kind(action)}")
    if action.type is None and not isinstance(value, str):
        raise ConfigError(f"{where}: {value!r} is not a string")
    text = str(value)
    try:
        parsed = action.type(text) if action.type is not None else text
    except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if action.choices is not None and parsed not in action.choices:
        raise ConfigError(f"{where}: {value!r} is not one of "
                          f"{', '.join(map(str, action.choices))}")
    return parsed


def _kind(action: argparse.Action) -> str:
    if action.type in (int, float):
        return "number"
    return getattr(action.type, "kind", "string")  # what the CLI's own types say they read


def _task_spec_flags(spec: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A task spec as config.json holds it ({source|dataset, schema, split, skip_invalid,
    repos}; or the Python form {swebench, repos}) as the flags that made it: tasks, schema,
    skip_invalid, repo or repos."""
    unknown = sorted(set(spec) - {"source", "dataset", "schema", "split", "skip_invalid",
                                  "repos", "swebench"})
    if unknown:
        raise ConfigError(f"{where}: unknown task spec key(s) {', '.join(unknown)}")
    if "swebench" in spec:
        if "source" in spec or "dataset" in spec:
            raise ConfigError(f"{where}: 'swebench' names the rows file; no 'source' beside it")
        spec = {**spec, "source": spec["swebench"], "schema": "swebench"}
        del spec["swebench"]
    source, dataset, split = spec.get("source"), spec.get("dataset"), spec.get("split")
    if (source is None) == (dataset is None):
        raise ConfigError(f"{where}: a task spec needs one of 'source' or 'dataset'")
    if split is not None and (dataset is None or not isinstance(split, str)):
        raise ConfigError(f"{where}: 'split' {split!r} goes with a 'dataset' name")
    if dataset is not None:
        if not isinstance(dataset, str) or not dataset:
            raise ConfigError(f"{where}: dataset {dataset!r} is not a dataset name")
        flags: dict[str, Any] = {"tasks": f"hf:{dataset}@{split}" if split else f"hf:{dataset}"}
    else:
        flags = {"tasks": source}
    if spec.get("schema") is not None:
        flags["schema"] = spec["schema"]
    if spec.get("skip_invalid") is not None:
        flags["skip_invalid"] = spec["skip_invalid"]
    repos = spec.get("repos")
    if isinstance(repos, str):
        flags["repos"] = repos
    elif repos is not None:
        flags["repo"] = _repo_pairs(repos, f"{where}, 'repos'")
    return flags


__all__ = ["WRITTEN_NOT_FLAGS", "RolloutConfig", "plain_config", "read_config_file"]
