"""Grading a Harbor task as Harbor's shared verifier does: tests/test.sh on the agent's result.

At submit the agent's processes are killed, then its whole final filesystem is taken: the
sandbox's root is read-only, so that is the task's image plus what the agent wrote to its two
writable mounts (the workdir and /tmp). It goes into a fresh container of the image (the
image's own workdir replaced by the agent's), the task's `tests/` are copied to `/tests` only
then, and `bash /tests/test.sh` runs as root with the verifier's timeout and no network. Its
reward file, `/logs/verifier/reward.txt` (a float) or `reward.json` (`{"reward": x}`), is the
score; a missing or garbled one is an infra error naming what was found, never a silent 0.
"""

from __future__ import annotations

import io
import json
import math
import tarfile
import threading
import time
from typing import Any

from opd_gym.grading.report import GradeReport
from opd_gym.records.task import Task
from opd_gym.sandboxes.reaper import LABEL, owner_labels

TESTS_DIR, LOGS_DIR = "/tests", "/logs/verifier"
HELPER_STATE = "tmp/.opd_state"  # the helper's own files in /tmp: not the agent's
# The verifier is root in its container, as in Harbor; it needs to own and write files the
# agent made (DAC_OVERRIDE, FOWNER, CHOWN) and to run processes as others (SETUID/SETGID).
VERIFIER_CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL")
OUTPUT_CHARS = 4000
_SEEDS: dict[tuple[str, str], dict[str, bytes]] = {}
_SEEDS_LOCK = threading.Lock()


def _untar(data: bytes, strip: str = "") -> dict[str, bytes]:
    """The regular files of a tar archive, path -> bytes (`strip/` removed from each path)."""
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive:
            name = member.name
            if strip:
                if not name.startswith(strip + "/"):
                    continue
                name = name[len(strip) + 1:]
            handle = archive.extractfile(member) if member.isfile() else None
            if handle is not None and name:
                files[name] = handle.read()
    return files


def _tar(files: dict[str, bytes], dirs: tuple[str, ...] = ()) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name in dirs:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o777
            archive.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def workdir_files(engine: Any, image: str, workdir: str) -> dict[str, bytes]:
    """The regular files the image holds under `workdir` (the agent's starting workspace,
    which the sandbox's writable mount there hides), path -> bytes; read once per image."""
    from docker.errors import NotFound

    key = (image, workdir)
    with _SEEDS_LOCK:
        if key in _SEEDS:
            return dict(_SEEDS[key])
    with engine.call() as client:
        container = client.containers.create(image, ["true"], network_mode="none",
                                              labels={LABEL: "1", **owner_labels(60.0)})
    try:
        with engine.call():
            stream, _ = container.get_archive(workdir)
            data = b"".join(stream)
    except NotFound:
        data = b""
    finally:
        with engine.call():
            container.remove(force=True)
    base = workdir.rstrip("/").rpartition("/")[2]
    files = _untar(data, base) if data else {}
    with _SEEDS_LOCK:
        _SEEDS[key] = files
    return dict(files)


def read_reward(files: dict[str, bytes]) -> float:
    """The reward in the verifier's log folder's files; ValueError saying what is wrong."""
    if "reward.txt" in files:
        text = files["reward.txt"].decode("utf-8", "replace").strip()
        try:
            reward = float(text)
        except ValueError:
            raise ValueError(f"{LOGS_DIR}/reward.txt holds {text[:80]!r}, not a number") from None
    elif "reward.json" in files:
        try:
            data = json.loads(files["reward.json"])
        except ValueError:
            raise ValueError(f"{LOGS_DIR}/reward.json is not JSON") from None
        if not isinstance(data, dict) or "reward" not in data:
            keys = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"{LOGS_DIR}/reward.json has no 'reward' key (found {keys}); "
                             "opd_gym reads one reward")
        reward = data["reward"]
        if isinstance(reward, bool) or not isinstance(reward, int | float):
            raise ValueError(f"{LOGS_DIR}/reward.json's reward {reward!r} is not a number")
    else:
        found = ", ".join(sorted(files)) or "nothing"
        raise ValueError(f"the verifier wrote neither {LOGS_DIR}/reward.txt nor reward.json "
                         f"(found: {found})")
    reward = float(reward)
    if not math.isfinite(reward) or not 0.0 <= reward <= 1.0:
        raise ValueError(f"the verifier's reward {reward!r} is outside [0, 1], the range of "
                         "opd_gym's correctness")
    return reward


def grade_harbor(task: Task, sandbox: Any) -> GradeReport:
    """Grade the agent's final filesystem in `sandbox` (a started DockerSandbox) by the task's
    tests/test.sh; never raises (a failure of ours is an infra error)."""
    started = time.monotonic()
    try:
        return _grade(task, sandbox, started)
    except Exception as exc:  # a bug or a lost daemon: an infra error, not a score
        return GradeReport(task_id=task.id, infra_error=True, duration=time.monotonic() - started,
                           reason=f"grading failed: {type(exc).__name__}: {exc}")


def _grade(task: Task, sandbox: Any, started: float) -> GradeReport:
    import docker

    info = task.harbor
    container = getattr(sandbox, "container", None)
    if info is None or container is None:
        return GradeReport(task_id=task.id, infra_error=True, reason="a Harbor task is graded "
                           "only in a started docker sandbox")
    cfg, engine = sandbox.config, sandbox.engine
    workdir = info.workdir.rstrip("/")
    with engine.call():  # the agent's processes end before its files are read
        container.exec_run(["sh", "-c", "kill -KILL -1"], user=cfg.user)
        code, (out, err) = container.exec_run(
            ["tar", "-C", "/", f"--exclude={HELPER_STATE}", "-cf", "-", workdir.lstrip("/"),
             "tmp"], user=cfg.user, demux=True)
    if code != 0:  # e.g. the agent made a file of its own unreadable: its result is unknown
        return GradeReport(task_id=task.id, duration=time.monotonic() - started,
                           reason="the agent's files could not be read whole: "
                           f"{(err or b'').decode('utf-8', 'replace').strip()[-300:]}")
    agent_tar = out or b""
    timeout = info.verifier_timeout
    client = docker.from_env(timeout=int(timeout) + 120)
    verifier = client.containers.create(
        cfg.image, ["sleep", str(int(timeout) + 300)], user="0:0", network_mode="none",
        cap_drop=["ALL"], cap_add=list(VERIFIER_CAPS), security_opt=list(cfg.security_opt),
        pids_limit=cfg.pids_limit, mem_limit=cfg.mem_limit,
        memswap_limit=cfg.memswap_limit or cfg.mem_limit, nano_cpus=int(cfg.cpus * 1e9),
        init=True, working_dir=workdir or "/", labels={LABEL: "1", **owner_labels(timeout + 300)})
    try:
        verifier.start()
        code, output = verifier.exec_run(["sh", "-c", f"rm -rf -- '{workdir}' /tmp/* && mkdir "
                                          f"-p '{workdir}' {LOGS_DIR}"], user="0:0")
        if code != 0:
            raise RuntimeError(f"could not clear the verifier's workdir: {output[-300:]!r}")
        verifier.put_archive("/", agent_tar)
        tests = {f"{TESTS_DIR.strip('/')}/{name}": text.encode()
                 for name, text in task.tests.items()}
        verifier.put_archive("/", _tar(tests, dirs=(TESTS_DIR.strip("/"),)))
        run = client.api.exec_create(
            verifier.id, ["timeout", "-k", "5", str(int(math.ceil(timeout))), "bash",
                          f"{TESTS_DIR}/test.sh"], user="0:0", workdir=workdir or "/",
            environment=dict(info.verifier_env))
        tail = b""
        for chunk in client.api.exec_start(run["Id"], stream=True):  # only the tail is kept
            tail = (tail + chunk)[-4 * OUTPUT_CHARS:]
        exit_code = client.api.exec_inspect(run["Id"]).get("ExitCode")
        text = tail.decode("utf-8", "replace")[-OUTPUT_CHARS:]
        base = {"task_id": task.id, "exit_code": -1 if exit_code is None else int(exit_code),
                "output": text}
        if exit_code in (124, 137):
            return GradeReport(**base, timed_out=True, duration=time.monotonic() - started,
                               reason=f"the verifier (tests/test.sh) ran past its timeout "
                               f"({timeout:g} s)")
        try:
            stream, _ = verifier.get_archive(LOGS_DIR)
            logs = _untar(b"".join(stream), LOGS_DIR.rpartition("/")[2])
            reward = read_reward(logs)
        except ValueError as exc:
            return GradeReport(**base, infra_error=True, duration=time.monotonic() - started,
                               reason=f"{exc} (tests/test.sh exited {exit_code})")
        solved = reward >= 1.0
        return GradeReport(**base, passed=int(solved), failed=int(not solved), earning=1,
                           earned=int(solved), reward=reward,
                           duration=time.monotonic() - started)
    finally:
        try:
            verifier.remove(force=True)
        finally:
            client.close()


__all__ = ["grade_harbor", "read_reward", "workdir_files"]
