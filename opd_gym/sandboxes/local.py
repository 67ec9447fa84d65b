"""Local backend: a temp-dir workspace on the host with rlimits and process-group timeouts.

No isolation at all: the agent's commands run as this user with this network. Opt-in only,
for debugging or machines where neither Docker nor bubblewrap is available. The helper
protocol behaves as elsewhere (path walk, reply checks and size caps on the host, killing
every descendant of the helper), but nothing separates the agent from the helper: run as
root (or with CAP_SYS_PTRACE), the agent can write forged, well-formed replies into the
helper's stdout, and it can always touch anything this user can.
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
import tempfile
import warnings

from opd_gym.sandboxes.environment import helper_environment
from opd_gym.sandboxes.helper import HelperSandbox, PipeTransport, Transport, helper_source


class LocalSandbox(HelperSandbox):
    """Runs commands directly on the host in a temporary directory (NOT isolated)."""

    def __init__(
        self,
        *,
        memory_bytes: int | None = 2 << 30,
        max_processes: int | None = None,
        file_size_bytes: int | None = 1 << 30,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.memory_bytes = memory_bytes
        self.max_processes = max_processes
        self.file_size_bytes = file_size_bytes
        self._root: str | None = None

    def _limits(self) -> None:
        for limit, value in (
            (resource.RLIMIT_AS, self.memory_bytes),
            (resource.RLIMIT_NPROC, self.max_processes),
            (resource.RLIMIT_FSIZE, self.file_size_bytes),
        ):
            if value is not None:
                resource.setrlimit(limit, (value, value))

    def _open(self) -> Transport:
        warnings.warn(
            "opd_gym local sandbox: commands run on this host without isolation "
            "(no network or filesystem protection); use the docker or bwrap backend for "
            "untrusted agents",
            RuntimeWarning,
            stacklevel=4,
        )
        self._root = tempfile.mkdtemp(prefix="opd-gym-")
        self.workspace = os.path.join(self._root, "workspace")
        state = os.path.join(self._root, "state")
        os.makedirs(self.workspace)
        env = {
            "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
            **helper_environment(os.path.join(self._root, "home")),
        }
        argv = [sys.executable, "-I", "-c", helper_source(), self.workspace, state]
        return PipeTransport(argv, env=env, cwd=self.workspace, preexec_fn=self._limits)

    def _teardown(self) -> None:
        if self._root:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
