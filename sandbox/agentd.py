"""opd_gym in-sandbox helper: one JSON request per stdin line, one JSON reply per stdout line.

It runs inside the sandbox (Docker container, bubblewrap root, or a local temp dir) and is
started once per sandbox, so a command costs one fork of a long-lived bash instead of a
`docker exec`. Standard library only; Python 3.8+ so any base image's python3 can run it.

Shell state (working directory and exported variables) persists between `run` requests: each
command runs in a fresh subshell that restores the state saved by the previous one, in its own
process group, so a timeout can kill the command's whole group and leave the shell usable.
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

# One long-lived bash per sandbox (the "zygote") forks a subshell per command: a fork costs a
# fraction of starting a new bash. `set -m` gives every subshell its own process group, so a
# timeout can kill the command's whole group. Each subshell restores the cwd and exported
# variables the previous command saved, and saves them again on exit; output goes to a fresh
# FIFO the helper reads until every writer (the command and anything it left running) is gone.
ZYGOTE_SCRIPT = r"""
__opd_st_=$OPD_STATE; unset OPD_STATE
__opd_save_() {
  __opd_rc_=$?
  pwd > "$__opd_st_/cwd" 2>/dev/null
  export -p > "$__opd_st_/env" 2>/dev/null
  return $__opd_rc_
}
set -m
while read -r __opd_go_; do
  exec 3> "$__opd_st_/out"
  (
    exec 3>&-
    trap __opd_save_ EXIT
    if [ -f "$__opd_st_/env" ]; then . "$__opd_st_/env" 2>/dev/null; fi
    if [ -f "$__opd_st_/cwd" ]; then
      read -r __opd_d_ < "$__opd_st_/cwd"
      cd "$__opd_d_" 2>/dev/null || cd "$HOME"
      unset __opd_d_
    fi
    read -r -d '' __opd_cmd_ < "$__opd_st_/cmd"
    unset __opd_go_
    eval "$__opd_cmd_"
  ) >&3 2>&3 </dev/null &
  exec 3>&-
  echo "pid $!"
  wait $!
  echo "rc $?"
done
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


def _zygote():
    """The sandbox's long-lived bash, (re)started if it is gone (e.g. the agent killed it)."""
    global ZYGOTE
    if ZYGOTE is None or ZYGOTE.poll() is not None:
        CONTROL.clear()
        try:
            ZYGOTE = subprocess.Popen(
                ["bash", "--noprofile", "--norc", "-c", ZYGOTE_SCRIPT, "bash"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd=WORKSPACE,
                env=dict(BASE_ENV, OPD_STATE=STATE),
                start_new_session=True,
            )
        except OSError as exc:
            raise Refused("spawn", f"could not start the shell: {exc}") from None
        GROUPS.add(ZYGOTE.pid)
    return ZYGOTE


def _control_line(zygote, timeout):
    """The zygote's next status line ("pid N" / "rc N"), or None if it died or hung."""
    deadline = time.monotonic() + timeout
    fd = zygote.stdout.fileno()
    while b"\n" not in CONTROL:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        CONTROL.extend(chunk)
    line, _, rest = bytes(CONTROL).partition(b"\n")
    CONTROL[:] = rest
    return line.decode("ascii", "replace")


def _start_command():
    """Ask the zygote to fork the command; returns (zygote, pid of the command's group)."""
    for _ in range(2):  # a dead zygote is restarted once
        zygote = _zygote()
        try:
            zygote.stdin.write(b"go\n")
            zygote.stdin.flush()
        except OSError:
            _kill_group(zygote.pid)
            zygote.wait()
            continue
        line = _control_line(zygote, 30.0)
        if line and line.startswith("pid "):
            GROUPS.add(int(line[4:]))
            return zygote, int(line[4:])
        _kill_group(zygote.pid)
        zygote.wait()
    raise Refused("spawn", "could not start the command (the shell died at once)")


def op_run(req):
    cap = max(int(req.get("cap", 16384)), 64)
    timeout = float(req.get("timeout") or 60.0)
    started = time.monotonic()
    with open(os.path.join(STATE, "cmd"), "w", encoding="utf-8", errors="surrogateescape") as fh:
        fh.write(req["cmd"].replace("\x00", ""))
    fifo = os.path.join(STATE, "out")
    try:  # a fresh FIFO: jobs left over from earlier commands hold only the old one
        os.unlink(fifo)
    except FileNotFoundError:
        pass
    os.mkfifo(fifo, 0o600)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        zygote, pid = _start_command()
    except Refused:
        os.close(fd)
        raise
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
        _kill_group(pid)
    os.close(fd)
    line = _control_line(zygote, 10.0)
    if line and line.startswith("rc "):
        code = int(line[3:])
    else:  # the command took its shell down with it; a new one starts next time
        _kill_group(zygote.pid)
        code = -1
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
    _zygote()
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
ZYGOTE = None
CONTROL = bytearray()

if __name__ == "__main__":
    main()
