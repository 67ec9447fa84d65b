"""Docker backend: one hardened, single-use container per sandbox, reached by one exec session."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opd_gym.sandboxes.base import SandboxError, SandboxUnavailable
from opd_gym.sandboxes.helper import DockerExecTransport, HelperSandbox, Transport, helper_source
from opd_gym.sandboxes.image import DEFAULT_IMAGE
from opd_gym.sandboxes.reaper import LABEL, owner_labels


@dataclass(frozen=True)
class DockerConfig:
    """Container settings; the defaults are the hardened set (no network, read-only, 3 caps).

    `user` is the agent's uid:gid: every command and file operation of the agent runs as it,
    with no supplementary groups and no capabilities. The in-container helper (the channel
    the host trusts) runs as `helper_user` (root), whose only capabilities are `cap_add`: no
    agent process can signal, trace or write to it, while it can start the agent's processes
    under `user` and kill them. `cap_add` must keep SETUID, SETGID and KILL (the grading
    harness, also root, needs them for the same reasons).
    """

    image: str = DEFAULT_IMAGE
    user: str = "1000:1000"  # the agent's uid:gid (its commands and the workspace owner)
    helper_user: str = "0:0"  # the in-container helper; equal to `user`: no separation
    # The container's own user. Root (with no capabilities beyond cap_add) so that processes
    # exec'd as root get cap_add: Docker gives execs no capabilities in a non-root container.
    container_user: str = "0:0"
    workspace: str = "/workspace"
    network_mode: str = "none"
    cap_drop: tuple[str, ...] = ("ALL",)
    # What the trusted in-container processes (grading harness, helper) need to start the
    # agent's code under its uid and to kill it; the agent's uid gets none of them.
    cap_add: tuple[str, ...] = ("SETUID", "SETGID", "KILL")
    security_opt: tuple[str, ...] = ("no-new-privileges",)
    pids_limit: int = 256
    mem_limit: str = "1g"
    memswap_limit: str | None = None  # None: same as mem_limit, i.e. no swap
    cpus: float = 1.0
    read_only: bool = True
    workspace_size: str = "256m"
    tmp_size: str = "128m"
    init: bool = True
    lifetime: float = 4 * 3600.0  # the container's main process exits after this many seconds
    api_timeout: float = 30.0
    environment: dict[str, str] = field(default_factory=dict)

    def run_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `containers.run` (the Docker socket is never mounted)."""
        uid, _, gid = self.user.partition(":")
        owner = f"uid={uid},gid={gid or uid}," if uid.isdigit() else ""
        return {
            "user": self.container_user,
            "network_mode": self.network_mode,
            "cap_drop": list(self.cap_drop),
            "cap_add": list(self.cap_add),
            "security_opt": list(self.security_opt),
            "pids_limit": self.pids_limit,
            "mem_limit": self.mem_limit,
            "memswap_limit": self.memswap_limit or self.mem_limit,
            "nano_cpus": int(self.cpus * 1e9),
            "read_only": self.read_only,
            "tmpfs": {
                self.workspace: f"rw,exec,nosuid,nodev,size={self.workspace_size},{owner}mode=0755",
                "/tmp": f"rw,exec,nosuid,nodev,size={self.tmp_size},mode=1777",
            },
            "init": self.init,
            "working_dir": self.workspace,
            "environment": {"HOME": self.workspace, **self.environment},
        }


class DockerEngine:
    """A Docker client with bounded concurrency and a time bound on every API call."""

    def __init__(self, *, max_concurrent_calls: int = 4, timeout: float = 30.0) -> None:
        try:
            import docker
            from docker.errors import DockerException
        except ImportError as exc:  # pragma: no cover - core dependency
            raise SandboxUnavailable("the 'docker' Python package is missing") from exc
        try:
            self.client = docker.from_env(timeout=int(timeout))
            self.client.ping()
        except DockerException as exc:
            raise SandboxUnavailable(
                "no Docker engine answers (is dockerd running and DOCKER_HOST right?): "
                f"{exc}. Start it, or use sandbox='bwrap' or 'local'."
            ) from None
        self._calls = threading.BoundedSemaphore(max_concurrent_calls)

    @contextmanager
    def call(self) -> Iterator[Any]:
        """Hold one of the bounded API-call slots while talking to the engine."""
        with self._calls:
            yield self.client

    def has_image(self, image: str) -> bool:
        from docker.errors import ImageNotFound

        try:
            with self.call() as client:
                client.images.get(image)
            return True
        except ImageNotFound:
            return False


class DockerSandbox(HelperSandbox):
    """A sandbox in a fresh hardened container; closing it removes the container."""

    def __init__(
        self,
        config: DockerConfig | None = None,
        *,
        engine: DockerEngine | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.config = config or DockerConfig()
        self.workspace = self.config.workspace
        self._engine = engine
        self.container: Any = None

    @property
    def engine(self) -> DockerEngine:
        if self._engine is None:
            self._engine = DockerEngine(timeout=self.config.api_timeout)
        return self._engine

    def _open(self) -> Transport:
        from docker.errors import DockerException, ImageNotFound

        cfg = self.config
        labels = {LABEL: "1", **owner_labels(cfg.lifetime)}
        try:
            with self.engine.call() as client:
                # create + start rather than run: run would try to pull a missing image
                self.container = client.containers.create(
                    cfg.image,
                    ["sleep", str(int(cfg.lifetime))],
                    auto_remove=True,
                    labels=labels,
                    **cfg.run_kwargs(),
                )
                self.container.start()
                argv = ["python3", "-u", "-I", "-c", helper_source(), cfg.workspace,
                        "/tmp/.opd_state"]
                if cfg.helper_user != cfg.user:  # privilege-separated: the agent runs as user
                    argv.append(cfg.user)
                exec_id = client.api.exec_create(
                    self.container.id,
                    argv,
                    stdin=True,
                    stdout=True,
                    stderr=True,
                    user=cfg.helper_user,
                    workdir=cfg.workspace,
                )["Id"]
                raw = client.api.exec_start(exec_id, socket=True)
        except ImageNotFound:
            raise SandboxUnavailable(
                f"the sandbox image {cfg.image!r} is missing: run `opd-gym sandbox build`"
            ) from None
        except DockerException as exc:
            self._teardown()
            raise SandboxError(f"could not start the sandbox container: {exc}") from None
        sock: socket.socket = getattr(raw, "_sock", raw)
        return DockerExecTransport(sock)

    def _death_reason(self) -> str:
        from docker.errors import DockerException

        container = self.container
        if container is None:
            return ""
        try:
            with self.engine.call():
                container.reload()
            state = container.attrs.get("State", {})
        except DockerException:
            return "The container no longer exists (removed or killed)."
        if state.get("OOMKilled"):
            return "The container was killed for exceeding its memory limit."
        return f"Container status: {state.get('Status')}."

    def _teardown(self) -> None:
        from docker.errors import DockerException, NotFound

        container, self.container = self.container, None
        if container is None:
            return
        for attempt in range(3):
            try:
                with self.engine.call():
                    container.remove(force=True)
                return
            except NotFound:
                return
            except DockerException:
                time.sleep(0.2 * (attempt + 1))
