"""opd_gym in-sandbox helper: one JSON request per stdin line, one JSON reply per stdout line.

It runs inside the sandbox (Docker container, bubblewrap root, or a local temp dir) and is
started once per sandbox, so a command costs one fork of a long-lived bash instead of a
`docker exec`. Standard library only; Python 3.8+ so any base image's python3 can run it.

Usage: agentd.py WORKSPACE STATE_DIR [AGENT_UID:AGENT_GID]

Privilege separation (Docker): started as root with AGENT_UID:GID, the helper runs every
agent command as that uid/gid with no supplementary groups, and does every file operation
with that effective uid/gid (so it can touch only what the agent could). Its own stdin/stdout
(the reply channel) belong to root and it is non-dumpable, so no agent process can open
them through /proc. Killing is done by a child that drops to the agent uid and calls
kill(-1, SIGKILL): it atomically kills every agent process (setsid escapees included) and
nothing else. Without AGENT (bubblewrap, local) everything runs as one uid: the helper is
only made non-dumpable and kills its descendants; see opd_gym.sandboxes.helper.

Process rule: background processes may outlive the command that started them (a server for
the next command), but a command timeout, a snapshot (submit) and the end of the session kill
every process of the agent before anything else happens.

Shell state (working directory and exported variables) persists between `run` requests: each
command runs in a fresh subshell that restores the state saved by the previous one, in its own
process group. Paths given to file operations are resolved one component at a time from the
workspace with O_NOFOLLOW (symlinks are followed only while they stay inside it), and only
regular files are read or written (opened non-blocking, so a FIFO never hangs a request).
"""

from __future__ import annotations

import base64
import errno
import json
import os
import re
import select
import signal
import stat
import subprocess
import sys
import time

WORKSPACE_ARG = sys.argv[1] if len(sys.argv) > 1 else os.getcwd()
WORKSPACE = os.path.realpath(WORKSPACE_ARG)
STATE = sys.argv[2] if len(sys.argv) > 2 else "/tmp/.opd_state"
AGENT = sys.argv[3] if len(sys.argv) > 3 else ""

PROTOCOL = 2
MAX_TIMEOUT = 86400.0
MAX_MESSAGE = 1000  # characters of an error message
MAX_LS_ENTRIES = 2000
MAX_DEPTH = 256  # directory levels a snapshot descends
MAX_PATH_BYTES = 4096  # longer snapshot paths are skipped
MAX_WALK_ENTRIES = 200000  # a snapshot looks at no more entries than this
MAX_SKIPPED = 100  # skipped-path notes returned (the count is always exact)
MAX_NOTE = 300
MAX_CONTROL = 4096  # bytes of one zygote control line
MAX_SYMLINKS = 40
O_PATH = getattr(os, "O_PATH", os.O_RDONLY)

# One long-lived bash per sandbox (the "zygote") forks a subshell per command: a fork costs a
# fraction of starting a new bash. `set -m` gives every subshell its own process group. Each
# subshell restores the cwd and exported variables the previous command saved, and saves them
# again on exit; output goes to a fresh FIFO the helper reads until every writer (the command
# and anything it left running) is gone. The zygote writes "pid N" and "rc N" control lines;
# agent processes can write to that pipe too, so the helper treats them as untrusted hints.
ZYGOTE_SCRIPT = r"""
__opd_st_=$OPD_STATE; unset OPD_STATE; __opd_ws_=$PWD
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
      cd "$__opd_d_" 2>/dev/null || cd "$__opd_ws_"  # HOME is outside the workspace
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
_PID_LINE = re.compile(rb"pid ([0-9]{1,9})")
_RC_LINE = re.compile(rb"rc ([0-9]{1,3})")


class Refused(Exception):
    """A request the helper will not carry out; `kind` tells the host which error to raise."""

    def __init__(self, kind, message):
        super().__init__(message[:MAX_MESSAGE])
        self.kind = kind


def _parse_agent(spec):
    """(uid, gid) from 'UID:GID', or None when the helper is not privileged."""
    if not spec:
        return None
    uid, _, gid = spec.partition(":")
    if not uid.isdigit() or not (gid or uid).isdigit() or int(uid) == 0:
        raise SystemExit(f"agentd: bad agent uid:gid {spec!r}")
    if os.geteuid() != 0:
        return None  # not root: nothing to separate from (bubblewrap, local)
    return int(uid), int(gid or uid)


AGENT_IDS = _parse_agent(AGENT)


class _AsAgent:
    """Context: file operations run with the agent's effective uid/gid (privileged mode only)."""

    depth = 0

    def __enter__(self):
        if AGENT_IDS is not None and self.depth == 0:
            os.setegid(AGENT_IDS[1])
            os.seteuid(AGENT_IDS[0])  # clears the effective capabilities too
        self.depth += 1
        return self

    def __exit__(self, *exc):
        self.depth -= 1
        if AGENT_IDS is not None and self.depth == 0:
            os.seteuid(0)  # the permitted capabilities come back into effect
            os.setegid(0)
        return False


AS_AGENT = _AsAgent()


def _prctl(option, value):
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except Exception:
        pass


def _reap():
    """Collect exited children (orphans adopted as subreaper included)."""
    global ZYGOTE
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if ZYGOTE is not None and pid == ZYGOTE.pid and ZYGOTE.returncode is None:
            ZYGOTE.returncode = -1  # reaped here: Popen must not wait for (or signal) it again


# -- request fields --------------------------------------------------------------------------
def _int(req, key, default, low, high):
    value = req.get(key, default)
    if value is None:
        value = default
    if not isinstance(value, int) or isinstance(value, bool):
        raise Refused("protocol", f"bad request: {key} must be an integer")
    return min(max(value, low), high)


def _num(req, key, default, low, high):
    value = req.get(key, default)
    if value is None:
        value = default
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise Refused("protocol", f"bad request: {key} must be a number")
    try:
        value = float(value)
    except OverflowError:
        value = high
    if value != value:  # NaN
        value = default
    return min(max(value, low), high)


def _text(req, key):
    value = req.get(key)
    if not isinstance(value, str):
        raise Refused("protocol", f"bad request: {key} must be a string")
    return value


def _short(path):
    text = repr(path)
    return text if len(text) <= 200 else text[:200] + "...'"


# -- paths -----------------------------------------------------------------------------------
def _outside(path):
    return Refused(
        "path",
        f"path {_short(path)} is outside the workspace {WORKSPACE} (absolute paths elsewhere, "
        "'..' and symlinks leading out are refused)",
    )


def _components(path, original):
    """Relative components of `path` (absolute ones must lie in the workspace)."""
    if path.startswith("/"):
        for prefix in {WORKSPACE, WORKSPACE_ARG.rstrip("/")}:
            if path == prefix or path.startswith(prefix + "/"):
                path = path[len(prefix) :]
                break
        else:
            raise _outside(original)
    return [p for p in path.split("/") if p not in ("", ".")]


def _os_error(exc, path):
    """A Refused for an OSError met while resolving or opening `path`."""
    code = exc.errno
    if code in (errno.ENOENT, errno.ENOTDIR):
        return Refused("notfound", f"no such file or directory: {_short(path)}")
    if code in (errno.EACCES, errno.EPERM):
        return Refused("permission", f"permission denied: {_short(path)}")
    if code == errno.EISDIR:
        return Refused("isdir", f"{_short(path)} is a directory, not a file")
    if code == errno.ENXIO:
        return Refused("type", f"{_short(path)} is not a regular file (a FIFO or socket)")
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return Refused("size", f"no space left for {_short(path)} (the workspace is full)")
    if code == errno.ENAMETOOLONG:
        return Refused("path", f"path {_short(path)} is too long")
    return Refused("internal", f"{_short(path)}: {os.strerror(code or 0)}")


def _link_target(dirfd, name):
    try:
        return os.readlink(name, dir_fd=dirfd)
    except OSError:
        return None


def _open_beneath(path, flags=os.O_RDONLY, create=False, directory=False):
    """Open `path` inside the workspace in one walk from the workspace's own fd.

    Every component is opened relative to its parent's fd with O_NOFOLLOW; a symlink met on
    the way is read and its target spliced in, resolved again from the workspace root (an
    absolute target must lie in the workspace, and '..' may never climb above the root), so
    nothing swapped in between a check and the open can lead the open outside. `create`
    makes missing parent directories. Returns an fd (caller closes).
    """
    if not isinstance(path, str) or not path or "\x00" in path:
        raise Refused("path", "path must be a non-empty string without NUL bytes")
    if len(path) > 4096:
        raise Refused("path", "path is longer than 4096 characters")
    todo = _components(path, path)
    root = os.open(WORKSPACE, O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    stack = [root]
    links = 0
    try:
        while todo:
            name = todo.pop(0)
            if name == "..":
                if len(stack) == 1:
                    raise _outside(path)
                os.close(stack.pop())
                continue
            if name == ".":
                continue
            last = not todo
            try:
                if last and not directory:
                    mode = flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                    return os.open(name, mode, 0o644, dir_fd=stack[-1])
                opened = os.open(
                    name, O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                    dir_fd=stack[-1],
                )
            except OSError as exc:
                target = _link_target(stack[-1], name)
                if target is not None:
                    links += 1
                    if links > MAX_SYMLINKS:
                        raise Refused("path", f"too many symlinks in {_short(path)}") from None
                    if target.startswith("/"):
                        while len(stack) > 1:
                            os.close(stack.pop())
                    todo[:0] = _components(target, path)
                    continue
                if exc.errno == errno.ENOENT and create and not last:
                    try:
                        os.mkdir(name, 0o755, dir_fd=stack[-1])
                    except FileExistsError:
                        pass
                    except OSError as exc2:
                        raise _os_error(exc2, path) from None
                    todo.insert(0, name)
                    continue
                raise _os_error(exc, path) from None
            stack.append(opened)
        if not directory:
            raise Refused("isdir", f"{_short(path)} is a directory, not a file")
        return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=stack[-1])
    finally:
        for fd in stack:
            os.close(fd)


def _regular(fd, path):
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
        raise Refused("isdir", f"{_short(path)} is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise Refused("type", f"{_short(path)} is not a regular file (a FIFO, socket or device)")
    return info


def _read_fd(fd, limit):
    """Up to limit + 1 bytes of fd (one more than allowed tells 'too large')."""
    chunks, got = [], 0
    while got <= limit:
        try:
            chunk = os.read(fd, min(1 << 20, limit + 1 - got))
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


# -- killing ---------------------------------------------------------------------------------
def _proc_entries():
    try:
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []


def _status_uid(pid):
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _kill_agent_uid():
    """Privileged mode: kill every process of the agent uid, nothing else."""
    uid, gid = AGENT_IDS
    for _ in range(20):
        try:
            child = os.fork()
        except OSError:  # a fork bomb holds every pid: kill by scan, then try again
            for pid in _proc_entries():
                if _status_uid(pid) == uid:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            _reap()
            continue
        if child == 0:  # pragma: no cover - runs in the forked child
            try:
                os.closerange(0, 1 << 16)  # never hold the reply channel as the agent uid
                os.setgroups([])
                os.setresgid(gid, gid, gid)
                os.setresuid(uid, uid, uid)
                os.kill(-1, signal.SIGKILL)  # atomic: every process this uid may signal
                os._exit(0)
            finally:
                os._exit(1)
        deadline = time.monotonic() + 2.0
        while True:
            done, _ = os.waitpid(child, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:  # stopped by the agent before it could kill
                os.kill(child, signal.SIGKILL)
                os.waitpid(child, 0)
                break
            time.sleep(0.002)
        _reap()
        if not any(_status_uid(pid) == uid for pid in _proc_entries()):
            return


def _descendants():
    """Pids of every process below this helper (orphans are ours too: we are subreaper)."""
    children = {}
    for pid in _proc_entries():
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                data = fh.read()
            ppid = int(data[data.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def kill_agent():
    """Kill every process the agent started (setsid escapees too); the zygote restarts later."""
    if AGENT_IDS is not None:
        _kill_agent_uid()
        return
    for _ in range(50):
        pids = _descendants()
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        _reap()
        time.sleep(0.005)
    _reap()


# -- the zygote ------------------------------------------------------------------------------
def _zygote():
    """The sandbox's long-lived bash, (re)started if it is gone (e.g. the agent killed it)."""
    global ZYGOTE
    if ZYGOTE is None or ZYGOTE.poll() is not None:
        if ZYGOTE is not None:
            _drop_zygote(ZYGOTE)
        CONTROL.clear()
        extra = {}
        if AGENT_IDS is not None:
            extra = {"user": AGENT_IDS[0], "group": AGENT_IDS[1], "extra_groups": []}
        try:
            ZYGOTE = subprocess.Popen(
                ["bash", "--noprofile", "--norc", "-c", ZYGOTE_SCRIPT, "bash"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd=WORKSPACE,
                env=dict(BASE_ENV, OPD_STATE=STATE),
                start_new_session=True,
                **extra,
            )
        except OSError as exc:
            raise Refused("spawn", f"could not start the shell: {exc}") from None
        os.set_blocking(ZYGOTE.stdin.fileno(), False)
    return ZYGOTE


def _drop_zygote(zygote):
    """Kill a zygote that died, hung or garbled its control lines (our child: safe as root)."""
    if zygote.returncode is None:
        try:
            zygote.kill()
        except OSError:
            pass
        try:
            zygote.wait(timeout=5)
        except (subprocess.TimeoutExpired, ChildProcessError):
            pass
    for stream in (zygote.stdin, zygote.stdout):
        try:
            stream.close()
        except OSError:
            pass


def _control_line(zygote, deadline):
    """The zygote's next line (bytes), or None if it died, hung or flooded the pipe."""
    fd = zygote.stdout.fileno()
    while b"\n" not in CONTROL:
        if len(CONTROL) > MAX_CONTROL:
            return None
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            return None
        if not chunk:
            return None
        CONTROL.extend(chunk)
    line, _, rest = bytes(CONTROL).partition(b"\n")
    CONTROL[:] = rest
    return line


def _expect(zygote, pattern, timeout):
    """The number in the next control line matching `pattern`; garbage lines are skipped."""
    deadline = time.monotonic() + timeout
    for _ in range(256):
        line = _control_line(zygote, deadline)
        if line is None:
            return None
        match = pattern.fullmatch(line.strip())
        if match:
            return int(match.group(1))
    return None


def _start_command():
    """Ask the zygote to fork the command; returns the zygote."""
    for _ in range(2):  # a dead or garbled zygote is restarted once
        zygote = _zygote()
        try:
            os.write(zygote.stdin.fileno(), b"go\n")
        except OSError:  # gone, or its stdin pipe was filled by someone else
            _drop_zygote(zygote)
            continue
        if _expect(zygote, _PID_LINE, 10.0) is not None:
            return zygote
        _drop_zygote(zygote)
    raise Refused("spawn", "could not start the command (the shell died at once)")


def _write_command(cmd):
    path = os.path.join(STATE, "cmd")
    with AS_AGENT:  # the agent may have removed its state dir: the shell needs it back
        os.makedirs(STATE, mode=0o700, exist_ok=True)
    errors = "surrogateescape" if _escapable(cmd) else "replace"
    data = cmd.replace("\x00", "").encode("utf-8", errors)
    with AS_AGENT:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(path, flags, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)


def _escapable(text):
    try:
        text.encode("utf-8", "surrogateescape")
        return True
    except UnicodeEncodeError:
        return False


def _fresh_fifo():
    """A new output FIFO opened for reading (jobs of earlier commands hold only the old one)."""
    fifo = os.path.join(STATE, "out")
    with AS_AGENT:
        try:
            os.unlink(fifo)
        except FileNotFoundError:
            pass
        os.mkfifo(fifo, 0o600)
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):
        os.close(fd)
        raise Refused("spawn", "the command's output pipe was replaced")
    return fd


def op_run(req):
    cmd = _text(req, "cmd")
    cap = _int(req, "cap", 16384, 64, 1 << 24)
    timeout = _num(req, "timeout", 60.0, 0.001, MAX_TIMEOUT)
    started = time.monotonic()
    _write_command(cmd)
    fd = _fresh_fifo()
    try:
        zygote = _start_command()
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
    # command running until the timeout, which then kills every agent process.
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        if not poller.poll(min(left, 1.0) * 1000):
            continue
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            continue
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
        kill_agent()
    os.close(fd)
    code = _expect(zygote, _RC_LINE, 2.0 if timed_out else 10.0)
    if code is None:  # the command took its shell down (or garbled it); a new one starts next
        _drop_zygote(zygote)
        code = 137 if timed_out else -1
    _reap()
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


# -- file operations -------------------------------------------------------------------------
def op_write(req):
    path = _text(req, "path")
    try:
        data = base64.b64decode(_text(req, "data"), validate=True)
    except ValueError:
        raise Refused("protocol", "bad request: data is not base64") from None
    limit = _int(req, "max_bytes", 10 << 20, 0, 1 << 31)
    mode = req.get("mode")
    if mode is not None and (not isinstance(mode, int) or isinstance(mode, bool)):
        raise Refused("protocol", "bad request: mode must be an integer")
    if len(data) > limit:
        raise Refused("size", f"content is {len(data)} bytes, over the {limit}-byte file limit")
    with AS_AGENT:
        try:
            fd = _open_beneath(path, os.O_WRONLY | os.O_CREAT, create=True)
        except OSError as exc:
            raise _os_error(exc, path) from None
        try:
            _regular(fd, path)
            os.ftruncate(fd, 0)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if mode is not None:
                os.fchmod(fd, mode & 0o777)
        except OSError as exc:
            raise _os_error(exc, path) from None
        finally:
            os.close(fd)
    return {"size": len(data)}


def op_read(req):
    path = _text(req, "path")
    limit = _int(req, "max_bytes", 10 << 20, 0, 1 << 31)
    with AS_AGENT:
        try:
            fd = _open_beneath(path, os.O_RDONLY)
        except OSError as exc:
            raise _os_error(exc, path) from None
        try:
            size = _regular(fd, path).st_size
            if size > limit:
                message = f"{_short(path)} is {size} bytes, over the {limit}-byte read limit"
                raise Refused("size", message)
            data = _read_fd(fd, limit)
        except OSError as exc:
            raise _os_error(exc, path) from None
        finally:
            os.close(fd)
    if len(data) > limit:
        raise Refused("size", f"{_short(path)} is over the {limit}-byte read limit")
    return {"data": base64.b64encode(data).decode("ascii"), "size": len(data)}


def _kind(mode):
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else "other"


def op_ls(req):
    path = req.get("path") or "."
    if not isinstance(path, str):
        raise Refused("protocol", "bad request: path must be a string")
    with AS_AGENT:
        try:
            fd = _open_beneath(path, directory=True)
        except Refused as exc:
            if exc.kind == "notfound":
                raise Refused("notfound", f"no such directory: {_short(path)}") from None
            raise
        except OSError as exc:
            raise _os_error(exc, path) from None
        try:
            names = sorted(os.listdir(fd))
            entries = []
            for name in names[:MAX_LS_ENTRIES]:
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue
                kind = _kind(info.st_mode)
                size = info.st_size if kind == "file" else 0
                entries.append({"name": name, "type": kind, "size": size})
        except OSError as exc:
            raise _os_error(exc, path) from None
        finally:
            os.close(fd)
    return {"entries": entries, "truncated": len(names) > MAX_LS_ENTRIES, "count": len(names)}


def _open_dir_nofollow(parts):
    """The directory at workspace-relative `parts`, no symlink followed (or OSError)."""
    fd = os.open(WORKSPACE, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    for name in parts:
        try:
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            nxt = os.open(name, flags, dir_fd=fd)
        finally:
            os.close(fd)
        fd = nxt
    return fd


class _Skips:
    """Bounded notes on what a snapshot left out (the count stays exact)."""

    def __init__(self):
        self.notes = []
        self.count = 0

    def add(self, rel, reason):
        self.count += 1
        if len(self.notes) < MAX_SKIPPED:
            note = f"{rel}: {reason}"
            if len(note) > MAX_NOTE:  # shorten the path, never the reason
                reason = reason[: MAX_NOTE // 2]
                note = f"{rel[: MAX_NOTE - len(reason) - 5]}...: {reason}"
            self.notes.append(note)


def _walk(skips):
    """(parts, size) of every regular file under the workspace, bounded in depth and entries."""
    found = []
    stack = [[]]
    seen = 0
    while stack:
        parts = stack.pop()
        rel_dir = "/".join(parts)
        try:
            fd = _open_dir_nofollow(parts)
        except OSError as exc:
            skips.add(rel_dir or ".", f"directory not readable ({os.strerror(exc.errno or 0)})")
            continue
        try:
            names = sorted(os.listdir(fd))
            subdirs = []
            for name in names:
                seen += 1
                if seen > MAX_WALK_ENTRIES:
                    stop = f"the snapshot stopped after {MAX_WALK_ENTRIES} entries"
                    skips.add(rel_dir or ".", stop)
                    return found
                rel = f"{rel_dir}/{name}" if rel_dir else name
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    if name in SKIP_DIRS:
                        continue
                    if len(parts) + 1 >= MAX_DEPTH:
                        skips.add(rel, f"directory deeper than {MAX_DEPTH} levels")
                        continue
                    subdirs.append(parts + [name])
                elif not stat.S_ISREG(info.st_mode):
                    link = stat.S_ISLNK(info.st_mode)
                    skips.add(rel, "symlink" if link else "not a regular file")
                else:
                    found.append((parts + [name], info.st_size))
            stack.extend(reversed(subdirs))
        except OSError as exc:
            skips.add(rel_dir or ".", f"directory not readable ({os.strerror(exc.errno or 0)})")
        finally:
            os.close(fd)
    return found


def _open_snapshot_file(parts):
    """A read-only fd of the regular file at workspace-relative `parts`, or None."""
    fd = _open_dir_nofollow(parts[:-1])
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd2 = os.open(parts[-1], flags, dir_fd=fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(fd2).st_mode):
        os.close(fd2)
        return None
    return fd2


def _snapshot_plan(max_bytes, max_files, max_file, skips):
    """The files a snapshot carries, [(rel, parts, size)] sorted by path, noting the rest.

    Files over the per-file limit and unreadable files are left out; then the smallest files
    go first until the count or byte budget is used up, so one huge file never costs the
    many small ones (the solution) their place.
    """
    candidates = []
    for parts, size in _walk(skips):
        rel = "/".join(parts)
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:
            skips.add(rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace"),
                      "the name is not valid UTF-8")
            continue
        if len(rel.encode("utf-8")) > MAX_PATH_BYTES:
            skips.add(rel[:100] + "...", f"path longer than {MAX_PATH_BYTES} bytes")
        elif size > max_file:
            skips.add(rel, f"{size} bytes, over the {max_file}-byte per-file limit")
        else:
            candidates.append((size, rel, parts))
    candidates.sort(key=lambda c: (c[0], c[1]))
    plan, used = [], 0
    for size, rel, parts in candidates:
        if len(plan) >= max_files or used + size > max_bytes:
            skips.add(rel, f"over the snapshot limit ({max_files} files, {max_bytes} bytes)")
            continue
        try:
            fd = _open_snapshot_file(parts)
        except OSError as exc:
            skips.add(rel, f"not readable ({os.strerror(exc.errno or 0)})")
            continue
        if fd is None:
            skips.add(rel, "not a regular file")
            continue
        os.close(fd)
        plan.append((rel, parts, size))
        used += size
    plan.sort(key=lambda c: c[0])  # by path text: the order the host checks pages in
    return plan


def _read_at(parts, offset, want):
    """`want` bytes of the file at `parts` from `offset` (fewer if it shrank), or None."""
    try:
        fd = _open_snapshot_file(parts)
    except OSError:
        return None
    if fd is None:
        return None
    try:
        chunks, got = [], 0
        while got < want:
            chunk = os.pread(fd, min(1 << 20, want - got), offset + got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def op_snapshot(req):
    """One page of a snapshot of every regular file of the workspace (no symlinks).

    The files carried are fixed by `_snapshot_plan` (count, byte and per-file limits); a page
    holds `chunks` [path, offset, size, base64 data] in path order, at most `page_bytes` of
    data and path text, starting at `cursor` [index, path, offset] and naming the `next`
    cursor (null after the last), so a workspace as large as the sandbox's disk crosses in
    bounded replies and a file larger than a page crosses in pieces. A file that cannot be
    read when its turn comes is sent short; the host drops it with a note. With `stop` (sent
    with the first page) every agent process is killed first, so nothing changes the
    workspace during or after the snapshot.
    """
    max_bytes = _int(req, "max_bytes", 256 << 20, 0, 1 << 40)
    max_files = _int(req, "max_files", 100000, 0, 1 << 22)
    max_file = _int(req, "max_file_bytes", max_bytes, 0, 1 << 40)
    page = _int(req, "page_bytes", 8 << 20, 1 << 16, 1 << 30)
    cursor = req.get("cursor") or [0, "", 0]
    if (not isinstance(cursor, list) or len(cursor) != 3 or not isinstance(cursor[1], str)
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                       for v in (cursor[0], cursor[2]))):
        raise Refused("protocol", "bad request: cursor must be [index, path, offset]")
    index, path, offset = cursor
    if req.get("stop", True):
        kill_agent()
    skips = _Skips()
    chunks = []
    with AS_AGENT:
        plan = _snapshot_plan(max_bytes, max_files, max_file, skips)
        if index > len(plan) or (index < len(plan) and offset and plan[index][0] != path):
            raise Refused("protocol", "the workspace changed while the snapshot was taken")
        budget = page
        while index < len(plan) and budget > 0:
            rel, parts, size = plan[index]
            cost = len(json.dumps(rel)) + 32
            if chunks and cost >= budget:
                break
            budget -= cost
            want = max(0, min(size - offset, budget))
            data = _read_at(parts, offset, want) if want else b""
            if data is None:  # unreadable now: sent short, the host notes it
                data, want = b"", size - offset
            chunks.append([rel, offset, size, base64.b64encode(data).decode("ascii")])
            budget -= len(data)
            if len(data) < want or offset + len(data) >= size:
                index, offset = index + 1, 0
            else:
                offset += len(data)
    following = [index, plan[index][0], offset] if index < len(plan) else None
    return {"chunks": chunks, "next": following, "skipped": skips.notes,
            "skipped_count": skips.count, "files": len(plan),
            "bytes": sum(size for _, _, size in plan)}


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


def _handle(line):
    try:
        req = json.loads(line)
    except (ValueError, RecursionError):
        return {"ok": False, "kind": "protocol", "error": "bad request: not JSON"}
    if not isinstance(req, dict):
        return {"ok": False, "kind": "protocol", "error": "bad request: not an object"}
    rid = req.get("id")
    try:
        op = OPS.get(req.get("op"))
        if op is None:
            raise Refused("protocol", f"bad request: unknown op {str(req.get('op'))[:50]!r}")
        reply = op(req)
        reply["ok"] = True
    except Refused as exc:
        reply = {"ok": False, "kind": exc.kind, "error": str(exc)}
    except Exception as exc:  # the helper must survive anything a request does
        message = f"{type(exc).__name__}: {exc}"[:MAX_MESSAGE]
        reply = {"ok": False, "kind": "internal", "error": message}
    if AGENT_IDS is not None and os.geteuid() != 0:  # never answer with dropped privileges
        os.seteuid(0)
        os.setegid(0)
        AS_AGENT.depth = 0
    reply["id"] = rid if isinstance(rid, int) and not isinstance(rid, bool) else None
    return reply


def _terminate(*_):
    """SIGTERM: kill the agent's processes (with full privileges back) and exit."""
    if AGENT_IDS is not None and os.geteuid() != 0:
        os.seteuid(0)
        os.setegid(0)
        AS_AGENT.depth = 0
    kill_agent()
    os._exit(0)


def main():
    global BASE_ENV
    _prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: adopt orphans, so they are reaped (and killed) here
    _prctl(4, 0)  # PR_SET_DUMPABLE 0: /proc/<helper>/fd is closed to same-uid processes
    os.umask(0o022)
    if AGENT_IDS is not None:
        os.setgroups([])
    signal.signal(signal.SIGTERM, _terminate)
    home = os.environ.get("HOME") or WORKSPACE
    with AS_AGENT:
        os.makedirs(STATE, mode=0o700, exist_ok=True)
        try:  # the agent's own HOME, outside the workspace (the host names it)
            os.makedirs(home, mode=0o700, exist_ok=True)
        except OSError:
            pass
    # Only PATH and HOME come from here; every other variable of the agent's shell is the
    # suite environment the host passes as OPD_ENV_* (opd_gym/sandboxes/environment.py), the
    # one validation and grading run with too.
    BASE_ENV = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": home if os.path.isdir(home) else WORKSPACE,
    }
    for key, value in os.environ.items():
        if key.startswith("OPD_ENV_"):
            BASE_ENV[key[len("OPD_ENV_") :]] = value
    _zygote()
    out = sys.stdout
    ready = {"ok": True, "ready": True, "pid": os.getpid(), "protocol": PROTOCOL,
             "separated": AGENT_IDS is not None}
    out.write(json.dumps(ready) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        out.write(json.dumps(_handle(line)) + "\n")
        out.flush()
    kill_agent()  # stdin closed: the host is done with this sandbox


BASE_ENV = {}
ZYGOTE = None
CONTROL = bytearray()

if __name__ == "__main__":
    main()
