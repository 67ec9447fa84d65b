"""Plain pytest in a container of the sandbox image: the reference the grader is compared with.

Independent of opd_gym's grading code on purpose: files go in with `tar` through `docker exec`,
pytest runs as `python3 -m pytest` in the project root with the project's own config (an ini
written as `pytest.ini`), and per-test outcomes come from pytest's own report log
(pytest-reportlog, pinned in the image), read back with `cat`. Only the docker CLI is used.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from opd_gym.sandboxes.environment import AGENT_HOME, suite_environment, unset_variables

AGENT_USER = "1000:1000"
REPORT = "/tmp/opd-plain-report.jsonl"


@dataclass(frozen=True)
class PlainRun:
    """What plain pytest said: outcome per node id, collection errors, exit code, wall time."""

    outcomes: dict[str, str]
    collect_errors: dict[str, str] = field(default_factory=dict)
    exit_code: int = -1
    wall: float = 0.0
    output: str = ""


def _docker(*args: str, stdin: bytes | None = None, timeout: float = 600) -> bytes:
    done = subprocess.run(["docker", *args], input=stdin, capture_output=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"docker {args[0]} failed: {done.stderr.decode(errors='replace')}")
    return done.stdout


def _tar(files: Mapping[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@contextmanager
def container(image: str) -> Iterator[str]:
    """A fresh, networkless container of `image`, removed on exit; yields its name."""
    name = f"opd-plain-{uuid.uuid4().hex[:12]}"
    _docker("run", "-d", "--rm", "--name", name, "--network", "none", "--user", AGENT_USER,
            "--workdir", "/workspace", "--entrypoint", "sleep", image, "infinity")
    try:
        _docker("exec", "-u", AGENT_USER, name, "mkdir", "-p", "-m", "700", AGENT_HOME)
        yield name
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def put_files(name: str, files: Mapping[str, bytes], root: str = "/workspace") -> None:
    """Unpack `files` under `root` in container `name`, owned by the agent uid."""
    _docker("exec", "-i", "-u", AGENT_USER, name, "mkdir", "-p", root)
    _docker("exec", "-i", "-u", AGENT_USER, name, "tar", "-x", "-C", root, stdin=_tar(files))


def imported_by_pytest(name: str) -> frozenset[str]:
    """The top-level modules `import pytest` loads in container `name` (pytest's own
    dependencies among them: pluggy, iniconfig, packaging)."""
    out = _docker("exec", "-u", AGENT_USER, name, "python3", "-c",
                  "import sys, pytest; print(' '.join(sorted({m.partition('.')[0] "
                  "for m in sys.modules})))")
    return frozenset(out.decode(errors="replace").split())


def exec_pytest(name: str, args: Sequence[str] = (), root: str = "/workspace",
                timeout: float = 600, env: Mapping[str, str] | None = None,
                ) -> tuple[int, float, str]:
    """`python3 -m pytest ARGS` in `root`, the whole process timed: (exit code, wall s, output).

    It runs with the suite environment the agent's terminal and the grade have
    (`sandboxes.environment`) and HOME an empty directory, `env` laid over them."""
    merged = {**suite_environment(), "HOME": AGENT_HOME, **(env or {})}
    env_args = [f"--env={key}={value}" for key, value in merged.items()]
    unset = [word for key in unset_variables() if key not in merged for word in ("-u", key)]
    started = time.perf_counter()
    done = subprocess.run(
        ["docker", "exec", "-u", AGENT_USER, "-w", root, *env_args, name,
         "env", *unset, "python3", "-m", "pytest", *args],
        capture_output=True, timeout=timeout,
    )
    wall = time.perf_counter() - started
    return done.returncode, wall, (done.stdout + done.stderr).decode(errors="replace")


def _longrepr_text(longrepr: object) -> str:
    """A report's failure as text: a string as it is; a serialised traceback (a dict, as the
    report log writes an exception chain) as its crash lines, innermost last."""
    if not isinstance(longrepr, dict):
        return "" if longrepr is None else str(longrepr)
    crashes = [longrepr.get("reprcrash"), *(  # a chain entry: [traceback, crash, description]
        c[1] for c in longrepr.get("chain") or () if isinstance(c, list | tuple) and len(c) > 1)]
    lines = [f"{c.get('path')}:{c.get('lineno')}: {c.get('message')}"
             for c in crashes if isinstance(c, dict) and c.get("message")]
    return "\n".join(dict.fromkeys(lines)) or str(longrepr)


# the outcome of an id several items report under (a custom collector's): the worst of theirs;
# it passes only when every item passed
WORST_FIRST = ("failed", "error", "skipped", "xfailed", "xpassed", "passed")


def outcomes_from_reportlog(lines: Sequence[str]) -> tuple[dict[str, str], dict[str, str]]:
    """pytest's own per-test outcome from its report log, and the failed collections.

    A failed or errored setup is "error"; a failed call is "failed" whatever teardown did; a
    passed call with a failed teardown is "error"; xfail/xpass as pytest reports them. Several
    items reported under one node id give the id the worst of their outcomes (WORST_FIRST).
    """
    items: list[tuple[str, dict[str, dict]]] = []  # one entry per item run, in order
    open_item: dict[str, dict[str, dict]] = {}
    collect_errors: dict[str, str] = {}
    for line in lines:
        if not line.strip():
            continue
        entry = json.loads(line)
        kind = entry.get("$report_type")
        if kind == "CollectReport" and entry["outcome"] == "failed":
            text = _longrepr_text(entry.get("longrepr"))  # its head, and its tail: the error
            collect_errors[entry["nodeid"]] = text if len(text) <= 500 else \
                f"{text[:150]} ... {text[-350:]}"
        elif kind == "TestReport":  # setup .. teardown of one item; an id may have several
            nodeid = entry["nodeid"]
            seen = open_item.get(nodeid)
            if seen is None or entry["when"] in seen:
                seen = open_item[nodeid] = {}
                items.append((nodeid, seen))
            seen[entry["when"]] = entry
            if entry["when"] == "teardown":
                del open_item[nodeid]
    outcomes: dict[str, str] = {}
    for nodeid, seen in items:
        setup, call, teardown = seen.get("setup"), seen.get("call"), seen.get("teardown")
        if setup is not None and setup["outcome"] == "failed":
            outcome = "error"
        elif setup is not None and setup["outcome"] == "skipped":
            outcome = "xfailed" if "wasxfail" in setup else "skipped"
        elif call is None:
            outcome = "error"
        elif call["outcome"] == "failed":
            outcome = "failed"
        elif call["outcome"] == "skipped":
            outcome = "xfailed" if "wasxfail" in call else "skipped"
        else:
            outcome = "xpassed" if "wasxfail" in call else "passed"
        if outcome in {"passed", "xpassed"} and teardown is not None \
                and teardown["outcome"] == "failed":
            outcome = "error"
        # several items under one id: pytest reports the id FAILED when any of them failed
        if nodeid not in outcomes or WORST_FIRST.index(outcome) < WORST_FIRST.index(
                outcomes[nodeid]):
            outcomes[nodeid] = outcome
    return outcomes, collect_errors


def run_plain(image: str, files: Mapping[str, bytes], ini: str | None,
              args: Sequence[str] = (), timeout: float = 600) -> PlainRun:
    """Plain pytest on `files` (a project root) in a fresh container of `image`.

    `ini` (when given) becomes the project's `pytest.ini`, which pytest reads before any
    pyproject.toml, tox.ini or setup.cfg; no other option is added but `--report-log`.
    """
    files = dict(files)
    if ini is not None:
        files["pytest.ini"] = ini.encode()
    with container(image) as name:
        put_files(name, files)
        # the suite environment, as the grader's harness has (a fixed string-hash seed among
        # it: test ids that follow a set's iteration order are then the same in both)
        code, wall, output = exec_pytest(name, [f"--report-log={REPORT}", *args],
                                         timeout=timeout)
        try:
            log = _docker("exec", name, "cat", REPORT).decode().splitlines()
        except RuntimeError:  # pytest stopped before writing one (a usage error): no outcome
            log = []
    outcomes, collect_errors = outcomes_from_reportlog(log)
    return PlainRun(outcomes, collect_errors, code, wall, output[-4000:])
