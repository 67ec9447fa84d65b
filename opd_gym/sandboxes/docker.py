"""Docker backend: one hardened, single-use container per sandbox, reached by one exec session."""

from __future__ import annotations

import io
import socket
import tarfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opd_gym.sandboxes.base import (
    SandboxDied,
    SandboxError,
    SandboxTimeout,
    SandboxUnavailable,
    size_bytes,
)
from opd_gym.sandboxes.environment import AGENT_HOME, helper_environment
from opd_gym.sandboxes.helper import (
    DockerExecTransport,
    HelperSandbox,
    Transport,
    _plain_files,
    helper_source,
)
from opd_gym.sandboxes.image import DEFAULT_IMAGE
from opd_gym.sandboxes.reaper import LABEL, owner_labels

# write_files sends up to this much over the helper channel, one request per file; more goes
# as one tar archive through `docker exec` (its start costs ~50 ms, then it streams faster).
SMALL_WRITE_FILES = 256
SMALL_WRITE_BYTES = 4 << 20


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


def exec_transport(stream: Any) -> DockerExecTransport:
    """The transport over what `exec_start(socket=True)` returned (a socket, or a SocketIO
    around one), which it keeps referenced while open (see `DockerExecTransport`)."""
    return DockerExecTransport(getattr(stream, "_sock", stream), stream)


class StartedExec:
    """A process started in a container whose stdin waits for its input (`start_exec`)."""

    def __init__(self, stream: Any, exec_id: str, what: str) -> None:
        self.exec_id = exec_id
        self.what = what
        self._transport = exec_transport(stream)
        self._sock = self._transport.sock

    def finish(self, data: bytes, *, timeout: float, max_output: int) -> tuple[bytes, str, str]:
        """Send `data` (then EOF) and read stdout until the process exits: (stdout, stderr
        text, exec id); output past `max_output` is dropped. SandboxTimeout past `timeout`
        seconds, SandboxDied when the stream breaks. The stream is closed either way."""
        out = bytearray()
        try:
            view = memoryview(data)
            for start in range(0, len(view), 1 << 20):
                self._transport.send(bytes(view[start:start + (1 << 20)]))
            self._sock.shutdown(socket.SHUT_WR)  # EOF on its stdin
            deadline = time.monotonic() + timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SandboxTimeout(f"{self.what} did not finish within {timeout:.0f} s")
                chunk = self._transport._read_some(min(left, 5.0))
                if chunk == b"":
                    break
                if chunk and len(out) <= max_output:
                    out += chunk[:max_output + 1 - len(out)]
            return bytes(out), self._transport.diagnostics(), self.exec_id
        except OSError as exc:
            raise SandboxDied(f"the sandbox stopped during {self.what}: {exc}") from None
        finally:
            self.close()

    def close(self) -> None:
        """Drop the stream unused (its process reads EOF); idempotent."""
        self._transport.close()


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
                    environment=helper_environment(AGENT_HOME),
                )["Id"]
                raw = client.api.exec_start(exec_id, socket=True)
        except ImageNotFound:
            raise SandboxUnavailable(
                f"the sandbox image {cfg.image!r} is missing: run `opd-gym sandbox build`"
            ) from None
        except DockerException as exc:
            self._teardown()
            raise SandboxError(f"could not start the sandbox container: {exc}") from None
        return exec_transport(raw)

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

    @property
    def workspace_bytes(self) -> int:
        """The size of the workspace tmpfs (`DockerConfig.workspace_size`)."""
        return size_bytes(self.config.workspace_size)

    def write_files(self, files: Mapping[str, str | bytes]) -> None:
        """Create or replace many workspace files (parents are created): a few small ones
        over the helper channel, more in one archive.

        The archive streams into `tar -x` run in the container as the agent's uid (no
        capabilities, so it can write only where the agent could, and the files belong to
        the agent); the container's root filesystem is read-only, which rules out Docker's
        own archive upload. Paths are checked first (PathRefused, nothing written); a
        failed extraction (e.g. the workspace is full) raises SandboxError with tar's words.
        """
        plain = _plain_files(files)
        if not plain:
            return
        if self.container is None:
            self.start()
        if len(plain) <= SMALL_WRITE_FILES and sum(map(len, plain.values())) <= SMALL_WRITE_BYTES:
            # A few files cross the helper's open channel faster than a `docker exec` of tar
            # starts (a repository task's reset: ~10 ms against ~60 ms).
            super().write_files(plain)
            return
        archive = _tar_archive(plain, self.config.user)
        self._extract(archive, timeout=60.0 + len(archive) / (16 << 20))

    def exec_with_input(self, argv: list[str], data: bytes, *, user: str, workdir: str,
                        timeout: float, max_output: int, what: str) -> tuple[bytes, str, str]:
        """Run `argv` in the container with `data` on its stdin (then EOF) and read its stdout
        until it exits: (stdout, stderr text, exec id). Output past `max_output` is dropped.

        Raises SandboxDied when it cannot start or the stream breaks, SandboxTimeout past
        `timeout` seconds; `what` names the job in those messages.
        """
        return self.start_exec(argv, user=user, workdir=workdir, what=what).finish(
            data, timeout=timeout, max_output=max_output)

    def start_exec(self, argv: list[str], *, user: str, workdir: str, what: str) -> StartedExec:
        """Start `argv` in the container now, its stdin open: the process can get ready (a
        Python start, its imports) while the caller prepares the input it will `finish` with.
        SandboxDied when it cannot start."""
        from docker.errors import DockerException

        try:
            with self.engine.call() as client:
                exec_id = client.api.exec_create(self.container.id, argv, stdin=True,
                                                 stdout=True, stderr=True, user=user,
                                                 workdir=workdir)["Id"]
                raw = client.api.exec_start(exec_id, socket=True)
        except DockerException as exc:
            raise SandboxDied(f"could not start {what}: {exc}") from None
        return StartedExec(raw, exec_id, what)

    def _extract(self, archive: bytes, timeout: float) -> None:
        from docker.errors import DockerException

        cfg = self.config
        argv = ["tar", "-x", "-f", "-", "-C", cfg.workspace, "--no-same-owner"]
        out, diagnostics, exec_id = self.exec_with_input(
            argv, archive, user=cfg.user, workdir=cfg.workspace, timeout=timeout,
            max_output=1 << 16, what="writing files into the sandbox")
        try:
            with self.engine.call() as client:
                code = client.api.exec_inspect(exec_id).get("ExitCode")
        except DockerException as exc:
            raise SandboxDied(f"could not check the file writing: {exc}") from None
        if code != 0:
            words = (out + diagnostics.encode()).decode("utf-8", "replace").strip()[-1500:]
            raise SandboxError(f"writing files into the sandbox failed (tar exit {code}): "
                               f"{words or 'no message'}")


def _tar_archive(files: Mapping[str, bytes], user: str) -> bytes:
    """An uncompressed tar of `files` (regular files, mode 0644, owned by `user`'s uid)."""
    uid_text, _, gid_text = user.partition(":")
    uid = int(uid_text) if uid_text.isdigit() else 0
    gid = int(gid_text) if gid_text.isdigit() else uid
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.uid, info.gid = len(data), 0o644, uid, gid
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
