"""opd_gym in-sandbox helper: one JSON request per stdin line, one JSON reply per stdout line.

It runs inside the sandbox (Docker container, bubblewrap root, or a local temp dir) and is
started once per sandbox, so a command costs one bash spawn instead of a `docker exec`.
Standard library only; Python 3.8+ so any base image's python3 can run it.

Shell state (working directory and exported variables) persists between `run` requests: each
command runs in a fresh `bash` that restores the state saved by the previous one, in its own
process group, so a timeout can kill the command's whole group and leave this helper usable.
Paths given to file operations are confined to the workspace (symlinks resolved).
"""

import base64
import json
import os
import select
import signal
import subprocess
import sys
import time

WORKSPACE = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else os.getcwd())
STATE = sys.argv[2] if len(sys.argv) > 2 else "/tmp/.opd_state"

# Each command runs in a bash started ahead of time (its startup overlaps the previous
# command), which waits for one "go" byte, reads the command from a file, restores the saved
# cwd and exported variables, and saves them again on exit. Helper variables are unset first
# so they never leak into the agent's environment.
BASH_SCRIPT = r"""
__opd_st_=$OPD_STATE; unset OPD_STATE
read -r -n 1 __opd_go_ || exit 0
read -r -d '' __opd_cmd_ < "$__opd_st_/cmd"
unset __opd_go_
__opd_save_() {
  __opd_rc_=$?
  pwd > "$__opd_st_/cwd" 2>/dev/null
  export -p > "$__opd_st_/env" 2>/dev/null
  return $__opd_rc_
}
trap __opd_save_ EXIT
if [ -f "$__opd_st_/env" ]; then . "$__opd_st_/env" 2>/dev/null; fi
if [ -f "$__opd_st_/cwd" ]; then
  read -r __opd_d_ < "$__opd_st_/cwd"
  cd "$__opd_d_" 2>/dev/null || cd "$HOME"
  unset __opd_d_
fi
exec </dev/null
eval "$__opd_cmd_"
"""

SKIP_DIRS = {"__pycache__", ".pytest_cache", ".git", ".mypy_cache", ".ruff_cache"}


class Refused(Exception):
    """A request the helper will not carry out; `kind` tells the host which error to raise."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


def _set_subreaper():
    """Adopt orphaned grandchildren so they are reaped here even without an init process."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:
        pass


def _reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _resolve(path):
    """Absolute real path of `path` inside the workspace, or Refused('path', ...)."""
    if not isinstance(path, str) or not path or "\x00" in path:
        raise Refused("path", "path must be a non-empty string without NUL bytes")
    joined = os.path.join(WORKSPACE, path)  # an absolute `path` replaces WORKSPACE here
    real = os.path.realpath(joined)
    if real != WORKSPACE and not real.startswith(WORKSPACE + os.sep):
        raise Refused(
            "path",
            f"path {path!r} is outside the workspace {WORKSPACE} (absolute paths elsewhere, "
            "'..' and symlinks leading out are refused)",
        )
    return real


def _kill_group(pgid):
    for _ in range(20):  # repeat: a fork bomb can add members while we signal
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        except PermissionError:
            return
        time.sleep(0.005)


def _spawn_shell():
    """Start the bash that will run the next command, in its own session (process group)."""
    proc = subprocess.Popen(
        ["bash", "--noprofile", "--norc", "-c", BASH_SCRIPT, "bash"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=WORKSPACE,
        env=dict(BASE_ENV, OPD_STATE=STATE),
        start_new_session=True,
    )
    GROUPS.add(proc.pid)
    return proc


def _take_shell():
    """The pre-started shell if it is still waiting, else a new one."""
    global SPARE
    proc, SPARE = SPARE, None
    if proc is not None and proc.poll() is None:
        return proc
    try:
        return _spawn_shell()
    except OSError as exc:
        raise Refused("spawn", f"could not start the command: {exc}") from None


def _prepare_spare():
    """Start the shell for the next command now, while the current one runs."""
    global SPARE
    if SPARE is None:
        try:
            SPARE = _spawn_shell()
        except OSError:
            SPARE = None  # e.g. the pids limit is reached: retried at the next command


def op_run(req):
    cap = max(int(req.get("cap", 16384)), 64)
    timeout = float(req.get("timeout") or 60.0)
    started = time.monotonic()
    with open(os.path.join(STATE, "cmd"), "w", encoding="utf-8", errors="surrogateescape") as fh:
        fh.write(req["cmd"].replace("\x00", ""))
    proc = _take_shell()
    try:
        proc.stdin.write(b"g")
        proc.stdin.close()
    except OSError:
        pass  # the shell died while waiting; its exit status is reported below
    _prepare_spare()
    fd = proc.stdout.fileno()
    half = cap // 2
    head = bytearray()
    tail = bytearray()
    total = 0
    timed_out = False
    deadline = started + timeout
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    # Read until every writer has closed the pipe: background jobs that keep it open keep the
    # command running until the timeout, which then kills the whole process group.
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        if not poller.poll(min(left, 1.0) * 1000):
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        total += len(chunk)
        if len(head) < half:
            take = half - len(head)
            head += chunk[:take]
            chunk = chunk[take:]
        if chunk:
            tail += chunk
            if len(tail) > 2 * half:
                del tail[: len(tail) - half]
    if timed_out:
        _kill_group(proc.pid)
    try:
        code = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        code = proc.wait()
    proc.stdout.close()
    _reap()
    for pgid in list(GROUPS):  # forget groups with no live member left
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            GROUPS.discard(pgid)
    if len(tail) > half:
        del tail[: len(tail) - half]
    elided = total - len(head) - len(tail)
    return {
        "exit_code": code,
        "head": head.decode("utf-8", "replace"),
        "tail": tail.decode("utf-8", "replace"),
        "elided": elided,
        "total": total,
        "timed_out": timed_out,
        "duration": time.monotonic() - started,
    }


def op_write(req):
    path = _resolve(req["path"])
    data = base64.b64decode(req["data"])
    limit = int(req.get("max_bytes", 10 << 20))
    if len(data) > limit:
        raise Refused("size", f"content is {len(data)} bytes, over the {limit}-byte file limit")
    if os.path.isdir(path):
        raise Refused("isdir", "{!r} is a directory".format(req["path"]))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)
    if req.get("mode") is not None:
        os.chmod(path, int(req["mode"]))
    return {"size": len(data)}


def op_read(req):
    path = _resolve(req["path"])
    if not os.path.exists(path):
        raise Refused("notfound", "no such file: {!r}".format(req["path"]))
    if os.path.isdir(path):
        raise Refused("isdir", "{!r} is a directory, not a file".format(req["path"]))
    size = os.path.getsize(path)
    limit = int(req.get("max_bytes", 10 << 20))
    if size > limit:
        raise Refused("size", f"{req['path']!r} is {size} bytes, over the {limit}-byte read limit")
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    return {"data": base64.b64encode(data).decode("ascii"), "size": size}


def op_ls(req):
    path = _resolve(req.get("path") or ".")
    if not os.path.isdir(path):
        raise Refused("notfound", "no such directory: {!r}".format(req.get("path")))
    entries = []
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        kind = "symlink" if entry.is_symlink() else "dir" if entry.is_dir() else "file"
        size = entry.stat(follow_symlinks=False).st_size if kind == "file" else 0
        entries.append({"name": entry.name, "type": kind, "size": size})
    return {"entries": entries}


def op_snapshot(req):
    """Every regular file of the workspace (no symlinks), within byte and count limits."""
    max_bytes = int(req.get("max_bytes", 32 << 20))
    max_files = int(req.get("max_files", 2000))
    files, skipped, used = {}, [], 0
    for root, dirs, names in os.walk(WORKSPACE):
        dirs[:] = sorted(
            d for d in dirs if d not in SKIP_DIRS and not os.path.islink(os.path.join(root, d))
        )
        for name in sorted(names):
            full = os.path.join(root, name)
            rel = os.path.relpath(full, WORKSPACE)
            if os.path.islink(full) or not os.path.isfile(full):
                skipped.append(rel)
                continue
            size = os.path.getsize(full)
            if len(files) >= max_files or used + size > max_bytes:
                skipped.append(rel)
                continue
            with open(full, "rb") as fh:
                files[rel] = base64.b64encode(fh.read()).decode("ascii")
            used += size
    return {"files": files, "skipped": skipped}


def kill_all_groups():
    """Kill every process group this helper started (background jobs included)."""
    for pgid in list(GROUPS):
        _kill_group(pgid)
        GROUPS.discard(pgid)
    _reap()


def op_ping(req):
    return {"pid": os.getpid(), "workspace": WORKSPACE}


OPS = {
    "run": op_run,
    "write": op_write,
    "read": op_read,
    "ls": op_ls,
    "snapshot": op_snapshot,
    "ping": op_ping,
}


def main():
    global BASE_ENV
    _set_subreaper()
    signal.signal(signal.SIGTERM, lambda *_: (kill_all_groups(), os._exit(0)))
    os.makedirs(STATE, exist_ok=True)
    home = os.environ.get("HOME") or WORKSPACE
    BASE_ENV = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": home if os.path.isdir(home) else WORKSPACE,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "PAGER": "cat",
        "GIT_PAGER": "cat",
    }
    for key, value in os.environ.items():
        if key.startswith("OPD_ENV_"):
            BASE_ENV[key[len("OPD_ENV_") :]] = value
    _prepare_spare()
    out = sys.stdout
    out.write(json.dumps({"ok": True, "ready": True, "pid": os.getpid()}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            reply = OPS[req["op"]](req)
            reply["ok"] = True
        except Refused as exc:
            reply = {"ok": False, "kind": exc.kind, "error": str(exc)}
        except KeyError as exc:
            reply = {"ok": False, "kind": "protocol", "error": f"bad request: missing {exc}"}
        except Exception as exc:  # the helper must survive anything a request does
            reply = {"ok": False, "kind": "internal", "error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    kill_all_groups()  # stdin closed: the host is done with this sandbox


BASE_ENV = {}
GROUPS = set()
SPARE = None

if __name__ == "__main__":
    main()
