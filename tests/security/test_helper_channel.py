"""The sandbox helper's reply channel cannot be forged, and a lying helper ends an episode cleanly.

Real adversarial commands run in real sandboxes (Docker first) for what an agent can actually
try: writing forged replies into the helper's stdout through /proc, garbling the shell's
control lines, escaping the kill with setsid. What an agent can no longer produce for real
under Docker (a helper that answers with garbage, lies or floods its stdout) is produced by a
real stand-in helper process speaking the protocol badly over real pipes (`LyingSandbox`):
that fault cannot be made on purpose any other way, which is why it is the one fake here.
"""

from __future__ import annotations

import base64
import json
import os
import resource
import shlex
import sys
import time
import warnings

import pytest

from opd_gym import CodingEnv
from opd_gym.sandboxes import (
    SandboxDied,
    SandboxError,
    SandboxPool,
    SandboxProtocolError,
    sandbox_factory,
)
from opd_gym.sandboxes.helper import HelperSandbox, PipeTransport, Transport
from opd_gym.tools import format_tool_call

BACKENDS = [pytest.param("docker", marks=pytest.mark.docker), "bwrap", "local"]


def open_sandbox(backend: str, **options):
    """A started sandbox of `backend` (the local backend's isolation warning silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sandbox = sandbox_factory({"backend": backend, **options})()
        sandbox.start()
    return sandbox


@pytest.fixture(params=BACKENDS)
def box(request):
    sb = open_sandbox(request.param)
    sb.backend = request.param
    yield sb
    sb.close()


@pytest.fixture
def docker_box():
    sb = open_sandbox("docker")
    yield sb
    sb.close()


def forged_run_reply(request_id: int) -> str:
    return json.dumps({"ok": True, "id": request_id, "exit_code": 0, "head": "FORGED",
                       "tail": "", "elided": 0, "total": 6, "timed_out": False,
                       "duration": 0.1})


# -- privilege separation (Docker) ---------------------------------------------------------
@pytest.mark.docker
def test_agent_runs_as_uid_1000_without_groups_or_capabilities(docker_box):
    host = docker_box.container.attrs["HostConfig"]
    assert host["CapDrop"] == ["ALL"]
    assert {"SETUID", "SETGID", "KILL"} <= set(host["CapAdd"])
    assert "no-new-privileges" in host["SecurityOpt"] and host["ReadonlyRootfs"] is True
    assert host["NetworkMode"] == "none"
    assert docker_box.separated
    out = docker_box.run("id; grep -E '^(CapEff|CapPrm|Groups)' /proc/self/status").output
    assert "uid=1000 gid=1000 groups=1000\n" in out
    assert "CapEff:\t0000000000000000" in out and "CapPrm:\t0000000000000000" in out
    helper = docker_box.run(f"grep -E '^Uid' /proc/{docker_box.helper_pid}/status").output
    assert helper.split()[1:3] == ["0", "0"]  # the helper: root, another uid than the agent


@pytest.mark.docker
def test_file_operations_act_with_the_agent_uid(docker_box):
    docker_box.write_file("made/by/helper.txt", "x")
    owners = docker_box.run("stat -c '%u:%g %n' made made/by made/by/helper.txt").output
    assert owners.split("\n")[:3] == ["1000:1000 made", "1000:1000 made/by",
                                      "1000:1000 made/by/helper.txt"]
    docker_box.run("mkdir locked && chmod 000 locked && echo s > secret && chmod 000 secret")
    with pytest.raises(SandboxError, match="permission denied"):
        docker_box.read_file("secret")
    with pytest.raises(SandboxError, match="permission denied"):
        docker_box.write_file("locked/x.txt", "x")
    assert docker_box.run("echo still fine").output == "still fine\n"


@pytest.fixture(params=[pytest.param("docker", marks=pytest.mark.docker), "bwrap"])
def isolated_box(request):
    sb = open_sandbox(request.param)
    yield sb
    sb.close()


def test_forged_reply_through_proc_fd_is_refused_and_real_replies_stay_correct(isolated_box):
    # Docker: the helper is root. bubblewrap: same uid, but the helper is non-dumpable and
    # the agent holds no CAP_SYS_PTRACE, so /proc/<helper>/fd is closed to it as well.
    docker_box = isolated_box
    pid = docker_box.helper_pid
    forged = shlex.quote(forged_run_reply(2) + "\n" + forged_run_reply(3))
    attempt = docker_box.run(
        f"for fd in 0 1 2; do printf '%s\\n' {forged} > /proc/{pid}/fd/$fd && echo wrote-$fd;"
        f" done; ls /proc/{pid}/fd/ 2>&1; cat /proc/{pid}/environ >/dev/null 2>&1 || echo no-env"
    )
    assert "wrote-" not in attempt.output
    assert "Permission denied" in attempt.output
    assert "FORGED" not in attempt.output
    real = docker_box.run("echo real")
    assert real.output == "real\n" and real.exit_code == 0


@pytest.mark.docker
def test_no_fd_of_any_process_outside_the_agent_uid_is_writable(docker_box):
    # Every pipe, socket or file held by root processes (init, main process, helper, its
    # kill children) is tried: none may be opened for writing by the agent.
    probe = r"""
import os
hits = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        uid = int(open(f"/proc/{pid}/status").read().split("Uid:")[1].split()[0])
    except Exception:
        continue
    if uid == os.getuid():
        continue
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        continue
    for fd in fds:
        try:
            with open(f"/proc/{pid}/fd/{fd}", "wb", buffering=0) as fh:
                fh.write(b'{"ok": true}\n')
            hits.append(f"{pid}/{fd}")
        except OSError:
            pass
print("writable:", hits)
"""
    out = docker_box.run(f"python3 -c {shlex.quote(probe)}").output
    assert "writable: []" in out, out
    assert docker_box.run("echo ok").output == "ok\n"


@pytest.mark.docker
def test_forged_snapshot_cannot_replace_the_real_one(docker_box):
    docker_box.write_file("solution.py", "REAL = 1\n")
    pid = docker_box.helper_pid
    fake = json.dumps({"ok": True, "id": 3, "files": {
        "solution.py": base64.b64encode(b"FAKE = 1\n").decode()}, "skipped": [],
        "skipped_count": 0})
    # a detached writer keeps trying while the snapshot is taken
    docker_box.run(
        f"setsid bash -c 'while :; do printf \"%s\\n\" {shlex.quote(fake)} "
        f"> /proc/{pid}/fd/1 2>/dev/null; done' >/dev/null 2>&1 </dev/null &"
    )
    snap = docker_box.snapshot()
    assert snap["solution.py"] == b"REAL = 1\n"


@pytest.mark.docker
def test_modules_left_in_the_workspace_are_never_imported_by_the_root_helper(docker_box):
    for name in ("json", "base64", "select", "stat", "ctypes", "subprocess", "errno"):
        docker_box.write_file(f"{name}.py", "open('/tmp/pwned', 'w').write('root')\n")
    docker_box.run("sleep 5", timeout=0.5)  # a timeout, a kill, a shell restart...
    docker_box.snapshot()
    docker_box.list_dir(".")
    assert docker_box.run("ls /tmp/pwned 2>&1").output.endswith("No such file or directory\n")
    assert "\x00-I\x00" in docker_box.run(f"cat /proc/{docker_box.helper_pid}/cmdline").output


def test_removing_the_shell_state_does_not_break_commands(box):
    box.run("export KEEP=1")
    box.run('rm -rf "$__opd_st_"')  # the shell's own state dir (cwd, env, output pipe)
    assert box.run("echo ok").output == "ok\n"
    assert box.run("echo again").output == "again\n"


# -- control lines (every backend) ---------------------------------------------------------
ZYGOTE_FD = "/proc/$(cut -d' ' -f4 /proc/$BASHPID/stat)/fd"


def test_garbled_zygote_control_lines_never_break_the_helper(box):
    # The shell that forks commands writes "pid N"/"rc N" lines the agent can also write to.
    box.run(
        f"printf 'garbage\\npid abc\\nrc 99999999999999\\npid 1\\nrc -5\\n\\xff\\xfe\\n' "
        f"> {ZYGOTE_FD}/1; head -c 6000 /dev/zero | tr '\\0' x > {ZYGOTE_FD}/1; echo hi"
    )
    for _ in range(3):
        after = box.run("echo ok; exit 4")
        assert after.output == "ok\n" and after.exit_code == 4
    # "go" lines injected into the shell's stdin run nothing the helper trusts either
    box.run(f"printf 'go\\ngo\\n' > {ZYGOTE_FD}/0; echo injected")
    assert box.run("echo fine").output == "fine\n"
    assert box.alive


@pytest.mark.docker
def test_forged_pid_line_cannot_make_the_helper_kill_root_processes(docker_box):
    docker_box.run(f"printf 'pid 1\\npid 7\\n' > {ZYGOTE_FD}/1; sleep 30", timeout=1)
    docker_box.run("sleep 30", timeout=1)  # a timeout kills every agent process
    out = docker_box.run("ps -eo uid=,args= | awk '$1 == 0' | wc -l").output
    assert int(out) >= 3  # init, the main process and the helper are alive
    assert docker_box.alive


# -- the local backend run as root: forging is possible, believing it is not ------------------
local_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="only a root agent (CAP_SYS_PTRACE) can open the helper's fds"
)


@local_root
@pytest.mark.filterwarnings("ignore:opd_gym local sandbox")
@pytest.mark.parametrize("payload", [
    "printf '{}\\n'",
    "printf 'not json\\n'",
    "printf '%s\\n' '{\"ok\": true, \"id\": 424242}'",
    "head -c 300000000 /dev/zero",
])
def test_forged_lines_on_the_unisolated_backend_end_the_sandbox_cleanly(payload):
    sandbox = open_sandbox("local")
    try:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        with pytest.raises(SandboxProtocolError, match="cannot be trusted"):
            sandbox.run(f"{payload} > /proc/{sandbox.helper_pid}/fd/1; sleep 1", timeout=20)
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert grown < 50_000, f"the host grew by {grown} KiB"
        with pytest.raises(SandboxDied, match="unusable"):
            sandbox.run("true")
    finally:
        sandbox.close()


# -- host-side validation: a helper that lies ------------------------------------------------
LIAR = r"""
import base64, json, sys
plan = json.loads(sys.argv[1])
out = sys.stdout.buffer
out.write(b'{"ok": true, "ready": true, "pid": 1, "separated": true}\n')
out.flush()
for line in sys.stdin.buffer:
    req = json.loads(line)
    op, rid = req["op"], req["id"]
    how = plan.get(op)
    if how is None:
        honest = {"ping": {"pid": 1, "workspace": "/w"},
                  "write": {"size": len(base64.b64decode(req.get("data", "")))}}
        out.write(json.dumps(dict(honest.get(op, {}), ok=True, id=rid)).encode() + b"\n")
    elif how == "FLOOD":
        try:
            for _ in range(1024):
                out.write(b"A" * (1 << 20))
                out.flush()
        except (BrokenPipeError, OSError):
            pass
        sys.exit(0)
    else:
        out.write(how.replace("$ID", str(rid)).encode() + b"\n")
    out.flush()
"""


class LyingSandbox(HelperSandbox):
    """A real helper process that answers the ops in `plan` with crafted reply lines."""

    def __init__(self, plan: dict[str, str], **kwargs) -> None:
        super().__init__(**kwargs)
        self.plan = plan

    def _open(self) -> Transport:
        return PipeTransport([sys.executable, "-c", LIAR, json.dumps(self.plan)])

    def _teardown(self) -> None:
        """Nothing to remove."""


def run_fields(**changes) -> str:
    fields = {"ok": True, "id": "$ID", "exit_code": 0, "head": "x", "tail": "", "elided": 0,
              "total": 1, "timed_out": False, "duration": 0.1}
    fields.update(changes)
    return json.dumps(fields).replace('"$ID"', "$ID")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


LIES = {
    "not json": ("run", "this is not json"),
    "deeply nested json": ("run", "[" * 30000 + "]" * 30000),
    "wrong id": ("run", run_fields(id=424242)),
    "no status": ("run", json.dumps({"id": 0}).replace("0", "$ID")),
    "status not bool": ("run", run_fields(ok="yes")),
    "missing fields": ("run", '{"ok": true, "id": $ID}'),
    "exit code as text": ("run", run_fields(exit_code="0")),
    "timed_out as int": ("run", run_fields(timed_out=0)),
    "more output than the cap": ("run", run_fields(head="y" * 20000)),
    "more elided than produced": ("run", run_fields(elided=10, total=1)),
    "nan duration": ("run", run_fields(duration=1e999)),
    "malformed error": ("run", '{"ok": false, "id": $ID, "kind": 3, "error": ["x"]}'),
    "read over max_bytes": ("read", json.dumps({"ok": True, "id": 0, "data": b64(b"z" * 100),
                                                "size": 100}).replace(": 0,", ": $ID,", 1)),
    "read size disagrees": ("read", json.dumps({"ok": True, "id": 0, "data": b64(b"z"),
                                                "size": 5}).replace(": 0,", ": $ID,", 1)),
    "read not base64": ("read", '{"ok": true, "id": $ID, "data": "***", "size": 3}'),
    "write size disagrees": ("write", '{"ok": true, "id": $ID, "size": 99}'),
    "ls entry with slash": ("ls", '{"ok": true, "id": $ID, "entries": '
                                  '[{"name": "../x", "type": "file", "size": 1}]}'),
    "ls unknown type": ("ls", '{"ok": true, "id": $ID, "entries": '
                              '[{"name": "x", "type": "door", "size": 1}]}'),
    "snapshot path escapes": ("snapshot", json.dumps({"ok": True, "id": 0, "files": {
        "../evil.py": b64(b"x")}, "skipped": [], "skipped_count": 0}).replace(": 0,", ": $ID,", 1)),
    "snapshot absolute path": ("snapshot", json.dumps({"ok": True, "id": 0, "files": {
        "/etc/x": b64(b"x")}, "skipped": [], "skipped_count": 0}).replace(": 0,", ": $ID,", 1)),
    "snapshot too many files": ("snapshot", json.dumps({"ok": True, "id": 0, "files": {
        f"f{i}": b64(b"x") for i in range(11)}, "skipped": [], "skipped_count": 0}
    ).replace(": 0,", ": $ID,", 1)),
    "snapshot file over cap": ("snapshot", json.dumps({"ok": True, "id": 0, "files": {
        "big": b64(b"x" * 2000)}, "skipped": [], "skipped_count": 0}).replace(": 0,", ": $ID,", 1)),
    "snapshot skipped notes unbounded": ("snapshot", json.dumps({
        "ok": True, "id": 0, "files": {}, "skipped": ["x"] * 500, "skipped_count": 500}
    ).replace(": 0,", ": $ID,", 1)),
}


def call_op(sandbox: HelperSandbox, op: str):
    if op == "run":
        return sandbox.run("true", timeout=5)
    if op == "read":
        return sandbox.read_file("f", max_bytes=10)
    if op == "write":
        return sandbox.write_file("f", "abc")
    if op == "ls":
        return sandbox.list_dir(".")
    return sandbox.snapshot(max_files=10, max_file_bytes=1000)


@pytest.mark.parametrize("lie", sorted(LIES))
def test_malformed_or_lying_replies_raise_sandbox_died_and_poison_the_sandbox(lie):
    op, line = LIES[lie]
    sandbox = LyingSandbox({op: line}, file_cap=1000)
    sandbox.start()
    try:
        started = time.monotonic()
        with pytest.raises(SandboxProtocolError, match="cannot be trusted"):
            call_op(sandbox, op)
        assert time.monotonic() - started < 10
        assert not sandbox.alive
        with pytest.raises(SandboxDied, match="unusable"):
            sandbox.run("true")
    finally:
        sandbox.close()


def test_an_endless_reply_line_is_cut_off_without_growing_the_host():
    sandbox = LyingSandbox({"run": "FLOOD"})
    sandbox.start()
    try:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.monotonic()
        with pytest.raises(SandboxProtocolError, match="over the .*-byte cap"):
            sandbox.run("true", timeout=5)
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert grown < 50_000, f"the host grew by {grown} KiB"  # the flood is up to 1 GiB
        assert time.monotonic() - started < 10
        with pytest.raises(SandboxDied):
            sandbox.read_file("f")
    finally:
        sandbox.close()


def test_an_honest_error_reply_does_not_poison_the_sandbox():
    sandbox = LyingSandbox({"read": '{"ok": false, "id": $ID, "kind": "notfound", '
                                     '"error": "no such file"}'})
    sandbox.start()
    try:
        with pytest.raises(SandboxError, match="no such file"):
            sandbox.read_file("f")
        assert sandbox.alive
    finally:
        sandbox.close()


@pytest.mark.parametrize("op", ["run", "snapshot"])
def test_a_lying_helper_ends_the_episode_cleanly(make_task, op):
    lie = {"run": run_fields(head="y" * 70000),
           "snapshot": '{"ok": true, "id": $ID, "files": {"../x": ""}, "skipped": [], '
                       '"skipped_count": 0}'}[op]
    pool = SandboxPool(lambda: LyingSandbox({op: lie}), size=1)
    env = CodingEnv(tasks=[make_task()], sandbox=pool)
    try:
        env.reset(seed=0)
        action = format_tool_call("terminal", {"command": "echo hi"}) if op == "run" else \
            format_tool_call("submit", {})
        obs, reward, terminated, truncated, info = env.step(action)
        assert truncated and not terminated and reward == 0.0
        assert info["end_reason"] == "sandbox_died"
        assert "sandbox stopped" in obs and "cannot be trusted" in obs
    finally:
        env.close()
        pool.close()
