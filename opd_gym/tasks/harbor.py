"""Harbor tasks in: a Harbor task folder (task.toml, instruction.md, environment/, tests/).

Harbor's own model (`harbor.models.task.config.TaskConfig`, 0.26) is the reference for the
task.toml fields; this module reads the file with tomllib into `HarborInfo`, validated once.
Every field is honoured, or the task is refused naming the field, or (network only) changed
and said so in the task's `notes`: opd_gym's sandboxes have no network, so a task asking for
one gets none. See docs/harbor.md ("Harbor tasks in") for the field-by-field mapping.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from opd_gym.errors import DatasetError
from opd_gym.records.task import HarborInfo, Task
from opd_gym.tasks.rows import TaskList

CONFIG = "task.toml"
INSTRUCTION = "instruction.md"
TEST_SCRIPT = "test.sh"
# where the verifier's files go in its container, and where it writes the reward
TESTS_DIR, LOGS_DIR = "/tests", "/logs/verifier"
DEFAULT_WORKDIR = "/app"
# The sections and fields read; anything else in task.toml is refused by name (a field we
# would silently ignore could change what the task means).
_TOP = {"schema_version", "version", "task", "metadata", "verifier", "agent", "environment",
        "solution", "source", "artifacts", "steps", "multi_step_reward_strategy"}
_VERIFIER = {"timeout_sec", "env", "user", "environment_mode", "environment", "network_mode",
             "allowed_hosts", "collect"}
_AGENT = {"timeout_sec", "user", "network_mode", "allowed_hosts"}
_ENVIRONMENT = {"build_timeout_sec", "docker_image", "os", "cpus", "memory_mb", "memory",
                "storage_mb", "storage", "gpus", "gpu_types", "tpu", "mcp_servers", "env",
                "skills_dir", "healthcheck", "workdir", "allow_internet", "network_mode",
                "allowed_hosts"}
_SAFE_DIR = re.compile(r"^(/[A-Za-z0-9._-]+)+$")
_WORKDIR = re.compile(r"^\s*WORKDIR\s+(\S+)\s*$", re.IGNORECASE | re.MULTILINE)


class HarborNote(UserWarning):
    """A Harbor task runs otherwise than its task.toml asks (e.g. without the network)."""


class HarborTaskError(DatasetError):
    """A Harbor task folder opd_gym cannot load as it is (the message names what and why)."""


def _size_mb(value: Any, where: str) -> int:
    """MB from Harbor's legacy size strings ('2G', '512M') or an integer of MB."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    text = str(value).strip().upper()
    scale = {"G": 1024, "M": 1, "K": 1 / 1024}.get(text[-1:]) if text else None
    try:
        if scale is None:
            raise ValueError
        mb = int(float(text[:-1]) * scale)
    except ValueError:
        raise HarborTaskError(f"{where} must be a size like '2G' or '512M', got "
                              f"{value!r}") from None
    if mb <= 0:
        raise HarborTaskError(f"{where} must be positive, got {value!r}")
    return mb


def _seconds(table: Mapping[str, Any], key: str, default: float | None, where: str
             ) -> float | None:
    value = table.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 \
            or not math.isfinite(value):
        raise HarborTaskError(f"{where}.{key} must be a positive number of seconds, got "
                              f"{value!r}")
    return float(value)


def _table(data: Mapping[str, Any], name: str, known: set[str], where: str) -> dict[str, Any]:
    table = data.get(name, {})
    if not isinstance(table, Mapping):
        raise HarborTaskError(f"{where}: [{name}] must be a table")
    unknown = sorted(set(table) - known)
    if unknown:
        raise HarborTaskError(f"{where}: unknown field(s) {unknown} in [{name}] (Harbor 0.26's "
                              f"task.toml has: {sorted(known)})")
    return dict(table)


def _refuse_set(table: Mapping[str, Any], names: Mapping[str, str], section: str,
                where: str) -> None:
    for name, why in names.items():
        if table.get(name) not in (None, [], {}, ""):
            raise HarborTaskError(f"{where}: [{section}] {name} is not supported: {why}")


def _network(table: Mapping[str, Any], section: str) -> str | None:
    """A note when [section] asks for network (opd_gym gives none), else None."""
    mode = table.get("network_mode")
    if mode is None and table.get("allow_internet") is not None:
        mode = "public" if table.get("allow_internet") else "no-network"
    if mode in (None, "no-network"):
        return None
    if mode not in ("public", "allowlist"):
        raise HarborTaskError(f"[{section}] network_mode must be no-network, public or "
                              f"allowlist, got {mode!r}")
    hosts = table.get("allowed_hosts") or []
    asked = f"network_mode = {mode!r}" + (f" ({', '.join(map(str, hosts))})" if hosts else "")
    return (f"[{section}] asks for {asked}; opd_gym's sandboxes have no network, so it runs "
            "with none (steps that download will fail)")


def parse_config(text: str, directory: Path) -> HarborInfo:
    """task.toml's text (of the task in `directory`) -> HarborInfo, or HarborTaskError."""
    where = str(directory / CONFIG)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise HarborTaskError(f"{where} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - _TOP)
    if unknown:
        raise HarborTaskError(f"{where}: unknown top-level field(s) {unknown} (Harbor 0.26's "
                              f"task.toml has: {sorted(_TOP)})")
    if data.get("steps"):
        raise HarborTaskError(f"{where}: multi-step tasks ([[steps]]) are not supported yet: "
                              "load a single-step task")
    if data.get("artifacts"):
        raise HarborTaskError(f"{where}: artifacts are not supported yet (opd_gym collects "
                              "none from the sandbox)")
    verifier = _table(data, "verifier", _VERIFIER, where)
    agent = _table(data, "agent", _AGENT, where)
    env = _table(data, "environment", _ENVIRONMENT, where)
    if verifier.get("environment_mode") == "separate" or verifier.get("environment"):
        raise HarborTaskError(f"{where}: a separate verifier environment ([verifier] "
                              "environment_mode = 'separate' or [verifier.environment]) is not "
                              "yet supported: opd_gym grades in the agent's environment "
                              "(environment_mode = 'shared')")
    if verifier.get("environment_mode") not in (None, "shared"):
        raise HarborTaskError(f"{where}: [verifier] environment_mode must be 'shared' or "
                              f"'separate', got {verifier['environment_mode']!r}")
    _refuse_set(verifier, {
        "user": "the verifier runs as the image's root, as Harbor's default does",
        "collect": "no collect commands run after the verifier"}, "verifier", where)
    _refuse_set(agent, {"user": "the agent always runs as opd_gym's unprivileged sandbox user "
                                "(uid 1000), never as the image's user"}, "agent", where)
    _refuse_set(env, {
        "gpus": "sandboxes have no GPU", "gpu_types": "sandboxes have no GPU",
        "tpu": "sandboxes have no TPU", "mcp_servers": "no MCP servers run beside the agent",
        "env": "no host variables are passed into the sandbox",
        "skills_dir": "agent skills are not copied", "healthcheck": "no healthcheck runs",
        "docker_image": "opd_gym builds environment/Dockerfile; a prebuilt image is not "
                        "used yet"}, "environment", where)
    if str(env.get("os", "linux")).lower() != "linux":
        raise HarborTaskError(f"{where}: [environment] os = {env['os']!r}: only linux runs")
    cpus = env.get("cpus")
    if cpus is not None:
        if isinstance(cpus, bool) or not isinstance(cpus, int | float) or not cpus > 0:
            raise HarborTaskError(f"{where}: [environment] cpus must be a positive number")
        have = os.cpu_count() or 1
        if cpus > have:
            raise HarborTaskError(f"{where}: [environment] cpus = {cpus} but this machine has "
                                  f"{have}")
    if "memory_mb" in env and "memory" in env and \
            _size_mb(env["memory"], "memory") != env["memory_mb"]:
        raise HarborTaskError(f"{where}: [environment] memory and memory_mb disagree")
    memory = env.get("memory_mb", env.get("memory"))
    storage = env.get("storage_mb", env.get("storage"))
    vars_ = verifier.get("env") or {}
    if not isinstance(vars_, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in vars_.items()):
        raise HarborTaskError(f"{where}: [verifier] env must map names to strings")
    if any("${" in v for v in vars_.values()):
        raise HarborTaskError(f"{where}: [verifier] env names a host variable (${{...}}); no "
                              "host variables are passed into the sandbox")
    notes = [n for n in (_network(env, "environment"), _network(agent, "agent"),
                         _network(verifier, "verifier")) if n]
    agent_timeout = _seconds(agent, "timeout_sec", None, "[agent]")
    if agent_timeout is not None:
        notes.append(f"[agent] timeout_sec = {agent_timeout:g} is not a wall clock here: an "
                     "episode is bounded by max_turns and each command by tool_timeout")
    environment = directory / "environment"
    workdir = str(env.get("workdir") or _dockerfile_workdir(environment / "Dockerfile"))
    workdir = workdir.rstrip("/") or "/"
    if not _SAFE_DIR.match(workdir) or workdir == "/" or \
            workdir.split("/")[1] in ("tmp", "proc", "sys", "dev", "etc", "usr", "bin", "lib"):
        raise HarborTaskError(f"{where}: the workdir {workdir!r} (the Dockerfile's WORKDIR or "
                              "[environment] workdir) cannot be the agent's workspace: it is "
                              "mounted writable over the read-only image, so it must be a "
                              "folder of its own such as /app")
    return HarborInfo(
        directory=str(directory), environment=str(environment), workdir=str(workdir),
        verifier_timeout=_seconds(verifier, "timeout_sec", 600.0, "[verifier]") or 600.0,
        agent_timeout=agent_timeout,
        build_timeout=_seconds(env, "build_timeout_sec", 600.0, "[environment]") or 600.0,
        cpus=None if cpus is None else float(cpus),
        memory_mb=None if memory is None else _size_mb(memory, "[environment] memory_mb"),
        storage_mb=None if storage is None else _size_mb(storage, "[environment] storage_mb"),
        verifier_env=dict(vars_), notes=tuple(notes))


def _dockerfile_workdir(dockerfile: Path) -> str:
    """The Dockerfile's last absolute WORKDIR (Harbor's agent works there), else /app."""
    if not dockerfile.is_file():
        return DEFAULT_WORKDIR
    found = [w for w in _WORKDIR.findall(dockerfile.read_text(encoding="utf-8",
                                                              errors="replace"))
             if w.startswith("/") and "$" not in w]
    return (found[-1].rstrip("/") or "/") if found else DEFAULT_WORKDIR


def _text_files(folder: Path, where: str) -> dict[str, str]:
    files: dict[str, str] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        try:
            files[rel] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise HarborTaskError(f"{where}/{rel} is not UTF-8 text; binary verifier or "
                                  "solution files are not supported yet") from None
    return files


def load_harbor_task(directory: str | os.PathLike[str]) -> Task:
    """One Harbor task folder -> Task (its `harbor` set), or HarborTaskError naming why."""
    folder = Path(directory).resolve()
    config = folder / CONFIG
    if not config.is_file():
        raise HarborTaskError(f"{folder}: no {CONFIG} (a Harbor task folder holds task.toml, "
                              "instruction.md, environment/Dockerfile and tests/test.sh)")
    info = parse_config(config.read_text(encoding="utf-8"), folder)
    instruction = folder / INSTRUCTION
    if not instruction.is_file() or not instruction.read_text(encoding="utf-8").strip():
        raise HarborTaskError(f"{folder}: {INSTRUCTION} is missing or empty (it is the prompt)")
    environment = folder / "environment"
    if (environment / "docker-compose.yaml").is_file() or \
            (environment / "docker-compose.yml").is_file():
        raise HarborTaskError(f"{environment}: docker-compose environments are not supported "
                              "yet: give environment/Dockerfile alone")
    if not (environment / "Dockerfile").is_file():
        raise HarborTaskError(f"{environment}: no Dockerfile (the task's environment image)")
    tests = folder / "tests"
    if not (tests / TEST_SCRIPT).is_file():
        raise HarborTaskError(f"{folder}: no tests/{TEST_SCRIPT} (the verifier)")
    data = tomllib.loads(config.read_text(encoding="utf-8"))
    package = data.get("task") or {}
    name = package.get("name") if isinstance(package, Mapping) else None
    metadata = dict(data.get("metadata") or {})
    metadata["harbor"] = {"directory": str(folder), "notes": list(info.notes)}
    for note in info.notes:  # the CLI prints them; Python callers see them warned
        warnings.warn(f"Harbor task {name or folder.name}: {note}", HarborNote, stacklevel=3)
    solution = folder / "solution"
    return Task(
        id=str(name or folder.name), prompt=instruction.read_text(encoding="utf-8"),
        tests=_text_files(tests, str(tests)),
        solution=_text_files(solution, str(solution)) if solution.is_dir() else {},
        timeout=info.verifier_timeout, tags=("harbor",), metadata=metadata, harbor=info)


def load_harbor(path: str | os.PathLike[str]) -> TaskList:
    """A Harbor task folder, or a folder of them (each subfolder with a task.toml), as Tasks."""
    folder = Path(path)
    if not folder.is_dir():
        raise HarborTaskError(f"harbor:{path}: no such folder")
    if (folder / CONFIG).is_file():
        return TaskList([load_harbor_task(folder)])
    found = sorted(p for p in folder.iterdir() if (p / CONFIG).is_file())
    if not found:
        raise HarborTaskError(f"harbor:{path}: neither a Harbor task folder nor a folder of "
                              f"them (no {CONFIG} in it or its subfolders)")
    tasks = TaskList(load_harbor_task(p) for p in found)
    ids = [t.id for t in tasks]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise HarborTaskError(f"harbor:{path}: task id(s) {twice} name more than one folder")
    return tasks


__all__ = ["HarborNote", "HarborTaskError", "load_harbor", "load_harbor_task", "parse_config"]
