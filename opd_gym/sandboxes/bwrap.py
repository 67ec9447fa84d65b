"""bubblewrap backend: rootless, daemonless isolation for machines where Docker is not allowed.

Each sandbox is one `bwrap` process: new user/pid/net/ipc/uts namespaces (no network but
loopback), all capabilities dropped, the offline rootfs (or the host, read-only) as `/`, and
size-limited tmpfs for the workspace and /tmp. Everything dies with the helper.

Weaker guarantee than Docker: without privileges the helper and the agent's commands share
one uid, so the helper cannot do file operations "as the agent" (the fd-by-fd path walk is
the only workspace boundary) and kills the agent's processes by walking its own descendants
(it is their subreaper) instead of kill(-1) as another uid. The helper makes itself
non-dumpable, which closes /proc/<helper>/fd to the agent's processes (they hold no
CAP_SYS_PTRACE), and the host still validates and size-caps every reply; but the grade is
only as trustworthy as that: use Docker for RL against an untrusted agent.
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
from pathlib import Path
from typing import Any

from opd_gym.sandboxes.base import SandboxUnavailable, size_bytes
from opd_gym.sandboxes.environment import AGENT_HOME, helper_environment
from opd_gym.sandboxes.helper import HelperSandbox, PipeTransport, Transport, helper_source
from opd_gym.sandboxes.image import rootfs_dir

HIDDEN_HOST_DIRS = ("/root", "/home", "/run", "/var/run", "/work")


def _size_bytes(size: str) -> int:
    return size_bytes(size)


class BwrapSandbox(HelperSandbox):
    """A sandbox in bubblewrap namespaces; `rootfs=None` uses the built rootfs or the host."""

    def __init__(
        self,
        *,
        rootfs: str | os.PathLike | None = None,
        uid: int = 1000,
        workspace_size: str = "256m",
        tmp_size: str = "128m",
        memory_bytes: int | None = 1 << 30,
        max_processes: int | None = 256,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.bwrap = shutil.which("bwrap")
        if self.bwrap is None:
            raise SandboxUnavailable("bubblewrap is missing: apt-get install bubblewrap")
        if rootfs is None and (rootfs_dir() / "usr" / "bin" / "python3").exists():
            rootfs = rootfs_dir()
        self.rootfs = Path(rootfs) if rootfs is not None else None
        self.uid = uid
        self.workspace = "/workspace" if self.rootfs else "/tmp/workspace"
        self.workspace_size = _size_bytes(workspace_size)
        self.tmp_size = _size_bytes(tmp_size)
        self.memory_bytes = memory_bytes
        self.max_processes = max_processes

    @property
    def workspace_bytes(self) -> int:
        """The workspace's tmpfs size (/tmp's when the workspace lives in /tmp)."""
        return self.workspace_size if self.rootfs is not None else self.tmp_size

    def argv(self) -> list[str]:
        """The bwrap command line (without the helper command)."""
        args = [self.bwrap, "--die-with-parent", "--unshare-all", "--new-session"]
        args += ["--uid", str(self.uid), "--gid", str(self.uid), "--cap-drop", "ALL"]
        if self.rootfs is not None:
            args += ["--ro-bind", str(self.rootfs), "/"]
        else:
            args += ["--ro-bind", "/", "/"]
            for hidden in HIDDEN_HOST_DIRS:
                if os.path.isdir(hidden):
                    args += ["--tmpfs", hidden]
        args += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--size",
            str(self.tmp_size),
            "--tmpfs",
            "/tmp",
        ]
        if self.rootfs is not None:
            args += ["--size", str(self.workspace_size), "--tmpfs", self.workspace]
        else:
            args += ["--dir", self.workspace]
        args += ["--chdir", self.workspace]
        args += ["--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin"]
        return args

    def _limits(self) -> None:
        for limit, value in (
            (resource.RLIMIT_AS, self.memory_bytes),
            (resource.RLIMIT_NPROC, self.max_processes),
        ):
            if value is not None:
                resource.setrlimit(limit, (value, value))

    def _open(self) -> Transport:
        python = "python3" if self.rootfs is not None else sys.executable
        argv = self.argv() + [
            python,
            "-u",
            "-I",  # isolated: never import a module the agent left in the workspace
            "-c",
            helper_source(),
            self.workspace,
            "/tmp/.opd_state",
        ]
        env = {"PATH": "/usr/bin:/bin", **helper_environment(AGENT_HOME)}
        return PipeTransport(argv, env=env, preexec_fn=self._limits)

    def _teardown(self) -> None:
        """Nothing to remove: the namespaces and tmpfs vanish with the bwrap process."""
