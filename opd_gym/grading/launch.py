"""Start the grading harness in a sandbox and collect its verdict bytes.

The harness (`sandbox/grade_harness.py`, request version 3, verdict version 2) runs each
variant of the hidden tests with the agent's code in one plain pytest process per variant, one
after the other (so a run may take up to `timeout` per variant), each in a writable copy of
the tree of its own, and writes one JSON verdict line. Docker: the harness is a separate
`docker exec` as root (whose only capabilities are to start, and kill, processes of other
uids) and each variant drops to a uid of its own (the agent's + 1 + its index); its request
arrives on stdin and its verdict leaves on stdout, a stream no process of those uids can
open. bubblewrap and local sandboxes cannot separate uids without privileges: there the
harness runs as the agent's uid through the sandbox shell, and the grade is only as
trustworthy as the agent is (documented in docs/threat-model.md; use Docker for RL).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any

from opd_gym.resources import data_path
from opd_gym.sandboxes import Sandbox, SandboxError, SandboxTimeout
from opd_gym.sandboxes.environment import env_assignments, suite_environment

MAX_VERDICT_BYTES = 64 << 20
GENERIC_DIR = ".opd_grade"
# The harness starts in a cleared environment holding the suite environment (the agent's
# terminal's: opd_gym/sandboxes/environment.py), and `-P -s` (what `-I` means besides ignoring
# PYTHON* variables, which would drop its string-hash seed too): every variant forks from it,
# so what is fixed at interpreter start (the hash seed, the locale) is the table's, and a suite
# that parametrizes over a set (ids by iteration order) has the same test ids in every run, the
# calibration's, plain pytest's reference and the agent's own alike. Each variant's
# environment is the table again (the request's `env`), with a HOME and TMPDIR of its own.
HARNESS_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               *env_assignments())


@cache
def harness_source() -> str:
    """The in-sandbox harness (`sandbox/grade_harness.py`), passed with `python3 -I -c`."""
    return data_path("sandbox", "grade_harness.py").read_text()


def harness_request(
    workspace: str, uid: int | None, timeout: float, variants: Sequence[Mapping[str, str]],
    ini: str | None, args: Sequence[str], select: Sequence[str] | None = None,
    doctests: Mapping[str, str] | None = None, skip: Sequence[Iterable[str]] = (),
    probe_state: bool = False, boundary: Sequence[str] | None = None,
) -> dict[str, Any]:
    """What the harness reads on stdin (request version 3).

    `workspace`: the agent's files in the sandbox; `uid`: the agent's uid (None: run as the
    harness's own uid, bwrap/local); `timeout`: seconds each variant's pytest run may take;
    `variants`: per variant (1 to 4), the hidden test files ({relative path: text}) laid
    over a copy of the workspace; `ini`: the task's ini text for `-c` (None: an empty
    `[pytest]`); `args`: pytest arguments relative to the tree root (test paths, doctest
    sources, options). The harness itself adds `-c`, `--rootdir` and `--confcutdir` (the
    tree), `-p no:cacheprovider` and `--continue-on-collection-errors`. `select`: when given,
    the exact node ids to run (e.g. a repository task's FAIL_TO_PASS + PASS_TO_PASS); every
    other collected test is deselected, and an id that is not collected simply does not run.
    `doctests`: {path: pristine text} of package modules whose doctests are hidden tests
    (`--doctest-modules` in the ini; see `expected.doctest_sources`): never laid over the
    workspace, the agent's module stays and is what runs; the examples come from the pristine
    docstrings. Version 3 added `doctests` (and each variant's tree became writable).
    `skip[i]`: base ids variant `i` deselects (tests that run once, in another variant; an
    optional field of a variant, so older requests read alike). `probe_state`: each test's
    entry also gets a digest of the module-level state it left changed (calibration's leak
    probe; an optional field too). `env` (always sent, optional to the harness): the suite
    environment each variant runs with, the agent's terminal's (`sandboxes.environment`).
    `boundary` (optional): the solution modules of a task graded across the process
    boundary: each variant's tree then holds only its hidden files, and the solution runs
    in a server process of its own uid that the tests call through `opd_grading.entry`.
    """
    return {
        "version": 3, "workspace": workspace, "agent_uid": uid, "timeout": float(timeout),
        "ini": ini, "args": [str(a) for a in args],
        "select": None if select is None else [str(i) for i in select],
        "doctests": {str(p): str(t) for p, t in (doctests or {}).items()},
        "variants": [{"files": dict(files), **({"skip": sorted(skip[i])}
                                                if i < len(skip) and skip[i] else {})}
                     for i, files in enumerate(variants)],
        "env": suite_environment(),
        **({"probe_state": True} if probe_state else {}),
        **({"boundary": [str(m) for m in boundary]} if boundary else {}),
    }


def run_harness_here(
    workspace: str | os.PathLike[str], variants: Sequence[Mapping[str, str]], *,
    ini: str | None = None, args: Sequence[str] = (), timeout: float = 60.0,
    select: Sequence[str] | None = None, doctests: Mapping[str, str] | None = None,
    skip: Sequence[Iterable[str]] = (), boundary: Sequence[str] | None = None,
) -> bytes:
    """Run the harness as a plain local process on a workspace directory (no isolation).

    For task authors and the suite's own checks: the same harness and protocol as in a
    sandbox (request version 3, see `harness_request` for `select`, `doctests`, `skip`), with the
    agent's code under this process's uid. Never for untrusted code. Returns the harness's
    stdout (the verdict is its last line).
    """
    request = harness_request(os.fspath(workspace), None, timeout, variants, ini, args, select,
                              doctests, skip, boundary=boundary)
    env = dict(item.split("=", 1) for item in HARNESS_ENV)
    env["PATH"] = os.environ.get("PATH", env["PATH"])
    proc = subprocess.run(
        [sys.executable, "-P", "-s", "-c", harness_source()], input=json.dumps(request).encode(),
        capture_output=True, timeout=len(variants) * timeout + 60, check=False, env=env,
    )
    if not proc.stdout.strip():
        raise SandboxError(f"the grading harness failed: {proc.stderr[-1500:].decode()}")
    return proc.stdout


def agent_uid(sandbox: Sandbox) -> int | None:
    """The uid the agent's code runs under in `sandbox`, if the harness can run as another."""
    config = getattr(sandbox, "config", None)
    user = str(getattr(config, "user", ""))
    uid = user.partition(":")[0]
    if getattr(sandbox, "container", None) is not None and uid.isdigit() and uid != "0":
        return int(uid)
    return None


def run_harness(sandbox: Sandbox, request: dict[str, Any], timeout: float) -> bytes:
    """The harness's stdout for `request`; SandboxTimeout past `timeout` seconds."""
    with StartedHarness(sandbox) as harness:
        return harness.run(request, timeout)


class StartedHarness:
    """The harness started in `sandbox` before its request exists (Docker): its Python start
    and pytest's import (`prewarm`) overlap the host's work on the grade (the held rewrite,
    copying the files in) instead of following it. It reads nothing of the workspace before
    the request, so files copied in after the start are what it grades. Elsewhere the
    harness starts with its request (`run`). Close it when unused (a context manager)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self._exec: Any = None
        self._ran = False
        if agent_uid(sandbox) is not None:
            self._exec = sandbox.start_exec(  # type: ignore[attr-defined]
                ["env", "-i", *HARNESS_ENV, "python3", "-P", "-s", "-c", harness_source()],
                user="0:0", workdir="/", what="the test run")

    def run(self, request: dict[str, Any], timeout: float) -> bytes:
        """The harness's stdout for `request` (once); SandboxTimeout past `timeout` seconds."""
        if self._ran:
            raise SandboxError("this harness has had its request (start another)")
        self._ran = True
        if self._exec is None:
            return _through_shell(self.sandbox, request, timeout)
        started, self._exec = self._exec, None
        payload = json.dumps(request).encode("utf-8", "surrogatepass")
        out, diagnostics, _ = started.finish(payload, timeout=timeout,
                                             max_output=MAX_VERDICT_BYTES)
        if len(out) > MAX_VERDICT_BYTES:
            raise SandboxError("the grading harness's output is oversized")
        if not out.strip():
            raise SandboxError(f"the grading harness failed: {diagnostics[-1500:]}")
        return out

    def close(self) -> None:
        """Drop a harness that got no request (it reads EOF and exits); idempotent."""
        if self._exec is not None:
            self._exec.close()
            self._exec = None

    def __enter__(self) -> StartedHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _through_shell(sandbox: Sandbox, request: dict[str, Any], timeout: float) -> bytes:
    ws = sandbox.workspace.rstrip("/")
    folder = f"{ws}/{GENERIC_DIR}"
    sandbox.write_file(f"{GENERIC_DIR}/harness.py", harness_source())
    sandbox.write_file(f"{GENERIC_DIR}/request.json", json.dumps(request))
    q = shlex.quote
    command = (
        f"cd / && exec 3< {q(folder + '/request.json')} && rm -f {q(folder + '/request.json')}"
        f" && env -i PATH=\"$PATH\" {shlex.join(env_assignments())} python3 -P -s"
        f" {q(folder + '/harness.py')} <&3"
        f" > {q(folder + '/verdict.json')} 2> {q(folder + '/harness.log')}"
    )
    result = sandbox.run(command, timeout=timeout)
    if result.timed_out:
        raise SandboxTimeout(f"the test run did not finish within {timeout:.0f} s")
    try:
        return sandbox.read_file(f"{GENERIC_DIR}/verdict.json", max_bytes=MAX_VERDICT_BYTES)
    except SandboxError:
        log = sandbox.read_file(f"{GENERIC_DIR}/harness.log", max_bytes=1 << 20)
        raise SandboxError(
            f"the grading harness failed: {log[-1500:].decode('utf-8', 'replace')}"
        ) from None
