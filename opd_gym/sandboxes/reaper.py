"""Container ownership labels and the reaper that removes containers whose owner is gone."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Any

LABEL = "opd_gym.sandbox"  # every container of ours carries it (the reaper's filter)

HOST = "opd_gym.owner.host"
PID = "opd_gym.owner.pid"
PID_START = "opd_gym.owner.start"
CREATED = "opd_gym.created"
LIFETIME = "opd_gym.lifetime"


def process_start_time(pid: int) -> str | None:
    """Kernel start time of `pid` (tells a live owner from a reused pid), None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def owner_labels(lifetime: float) -> dict[str, str]:
    """Labels naming this process as the owner, plus creation time and lifetime cap."""
    pid = os.getpid()
    return {
        HOST: socket.gethostname(),
        PID: str(pid),
        PID_START: process_start_time(pid) or "",
        CREATED: f"{time.time():.0f}",
        LIFETIME: f"{lifetime:.0f}",
    }


def orphan_reason(labels: dict[str, str], now: float | None = None) -> str | None:
    """Why a labelled container should be removed, or None if its owner still holds it."""
    now = time.time() if now is None else now
    try:
        if now > float(labels[CREATED]) + float(labels[LIFETIME]):
            return "past its lifetime"
    except (KeyError, ValueError):
        return "missing ownership labels"
    if labels.get(HOST) != socket.gethostname():
        return None  # another machine's container sharing this engine: not ours to judge
    try:
        pid = int(labels[PID])
    except (KeyError, ValueError):
        return "missing ownership labels"
    if process_start_time(pid) != labels.get(PID_START):
        return f"owner process {pid} is gone"
    return None


@dataclass(frozen=True)
class PruneReport:
    """`removed`: the orphans gone when the prune returned (short ids), whoever removed them;
    `kept`: the containers left (owned, or whose removal failed)."""

    removed: list[str]
    kept: int


def prune(engine: Any, *, everything: bool = False) -> PruneReport:
    """Remove opd_gym containers whose owner process died (or all of them with `everything`)."""
    from docker.errors import APIError, DockerException, NotFound

    # The low-level list carries the labels, so no per-container inspect can race a removal.
    with engine.call() as client:
        containers = client.api.containers(all=True, filters={"label": LABEL})
    removed, kept = [], 0
    for container in containers:
        labels = container.get("Labels") or {}
        if not everything and orphan_reason(labels) is None:
            kept += 1
            continue
        try:
            with engine.call() as client:
                client.api.remove_container(container["Id"], force=True)
        except NotFound:
            pass  # removed meanwhile (its lifetime ended, or another reaper was faster)
        except APIError as exc:  # another reaper's removal in progress (409): wait for it
            if exc.status_code != 409 or not _gone(engine, container["Id"]):
                kept += 1
                continue
        except DockerException:
            kept += 1
            continue
        removed.append(container["Id"][:12])
    return PruneReport(removed=removed, kept=kept)


def _gone(engine: Any, container_id: str, timeout: float = 20.0) -> bool:
    """Whether the container disappears within `timeout` seconds (a removal under way)."""
    from docker.errors import DockerException, NotFound

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with engine.call() as client:
                client.api.inspect_container(container_id)
        except NotFound:
            return True
        except DockerException:
            return False
        time.sleep(0.1)
    return False
