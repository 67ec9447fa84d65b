"""opd_gym grading harness (request version 3, verdict version 2): each variant of the hidden
tests runs with the solution in one plain pytest process, alone and under a uid of its own;
outcomes come back through a pipe.

Started by the host with `python3 -I -c` in the grading sandbox (Docker: as root, whose only
capabilities are SETUID, SETGID and KILL; bubblewrap/local: as the agent's own uid). It reads
one JSON request on stdin (see docs and `opd_gym/grading/launch.py`: workspace, agent_uid,
timeout, ini, args, select, doctests, variants) and writes one JSON verdict line on stdout.

How a variant runs. For each variant the harness builds a staging tree: a copy of the
workspace without the files that steer collection or start-up (conftest.py, sitecustomize.py,
usercustomize.py, *.pth, __pycache__/, and __init__.py in folders holding hidden Python files,
but not in the package folders of doctest sources), with the variant's files laid over it.
Just before the variant runs, it gets a writable tree of its own made from that staging tree
(Docker: its files are the variant uid's, the tree's root is root's, sticky, with the task's
ini read-only in it; see variant_tree); everything in it is removed after the variant. The
doctests of `doctests` (package modules) run against the live module of the tree with their
examples taken from the pristine text (see pristine_doctests).
Before it reads the request, the harness imports pytest (once, for all variants) and forks a
"zygote" whose memory never holds the request (so no variant can find the other variant's
tests in it); the zygote forks the variants ONE AT A TIME, in random order. Each drops to its
own uid (Docker: the agent's uid + 1 + its index; neither owns the workspace, which is closed
to them while grading), clears its environment for the request's `env` (the suite environment
of opd_gym/sandboxes/environment.py, the agent's terminal's too) with a HOME and TMPDIR of its
own, enters the tree and calls `pytest.main` with
the task's ini (`-c`), rootdir and confcutdir = the tree, `-p no:cacheprovider` and
`--continue-on-collection-errors` (and, given `select`, only those node ids; given the
variant's `skip`, none of those base ids: tests that run in one variant only). A small plugin
writes one JSON line per started and per finished test to an inherited pipe (fd 3); a held
expectation (`opd_grading.hold`, opd_gym/grading/held.py) writes the canonical form of the
solution's value there too, which the harness files under the test running. When a
variant has exited or passed its timeout (it is killed), every process of its uid is killed
and, as that uid, everything it left in the shared writable places (/tmp, /dev/shm,
/dev/mqueue) and its System V IPC objects are removed, before the next variant starts: two
variants never run side by side, so they share no live channel (sockets, signals, /proc) and
no file. At the end every process of the agent's and the variants' uids (and all the
harness's descendants) is killed. The harness trusts nothing the children say beyond those
lines: a missing line is a missing test; a killed variant reports the tests it was running.

Across the process boundary (the request's `boundary`: the solution modules of a HumanEval
or MBPP task): each variant's tree holds only its hidden files, and the zygote forks, before
the variant, a solution server (`run_server`) under a uid of its own (Docker: the next after
the variants'), in a fresh copy of the workspace that uid owns, joined to the variant by a
socketpair (the variant's end is fd 4, named by OPD_BOUNDARY_FD). The tests call the
solution through `opd_grading.entry`; calls and values cross as tagged JSON data, never code
(`opd_grading.encode`). The server is killed when its variant exits; its uid is then killed
and cleaned like a variant's, and covered by the final kill.
Standard library plus pytest (7.2 and 8.x); Python 3.10+.
"""

import json
import os
import sys

MAX_VARIANTS = 4
MAX_REQUEST = 256 << 20
MAX_RESULT_BYTES = 32 << 20  # outcome lines read per variant
MAX_OUTPUT_BYTES = 64 << 20  # pytest output read per variant (only the tail is kept)
OUTPUT_TAIL = 8000
MESSAGE_CHARS = 500
CASE_CHARS = 200  # the longest parametrize case an entry names (opd_gym's verdict.CASE_CHARS)
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
RESULT_FD = 3
CHANNEL_FD = 4  # a boundary variant's socket to its solution server (opd_grading.BOUNDARY_ENV)
HELD_CHARS = 1 << 16  # the longest held value read (opd_grading.canonical caps it too)
MAX_HELD = 64  # held values kept per test
MAX_HELD_CHARS = 2 << 20  # held value characters kept per variant (the verdict stays small)
DROPPED_NAMES = ("conftest.py", "sitecustomize.py", "usercustomize.py")
RESERVED_DIR = ".opd_grade"  # the host's own folder in the workspace (bwrap/local launches)
MAX_DEPTH = 256  # as deep as the workspace snapshot carries (sandbox/agentd.py)

OPD_GRADING_SOURCE = r'''"""What hidden tests use beyond importing the solution: programs and files,
and, for a task graded across the process boundary, the solution's entry points (`entry`).

Installed by the opd_gym grading harness ahead of the test tree; everything runs in the test's
own process and uid, relative to the tree (a copy of the agent's workspace). The boundary's
codec and server loop (`encode`, `decode`, `serve`) run in the solution server too.
"""

import json
import os
import pathlib
import select
import signal
import stat
import subprocess
import sys
import tempfile
import time

MAX_PROGRAM_OUTPUT = 16 << 20
WORKSPACE = os.getcwd()  # set to the tree by the harness


class GradingAbort(BaseException):
    """A program of the solution hung or flooded its output: the test fails.

    A BaseException, so no `pytest.raises(Exception)` mistakes it for the expected error.
    """


class ProgramResult:
    """What a program of the solution did: return code, stdout and stderr (text or bytes)."""

    def __init__(self, args, returncode, stdout, stderr):
        self.args, self.returncode, self.stdout, self.stderr = args, returncode, stdout, stderr

    def __repr__(self):
        return (f"ProgramResult(returncode={self.returncode!r}, "
                f"stdout={self.stdout[:200]!r}, stderr={self.stderr[:200]!r})")


def _drain(proc, stdin, timeout):
    """Feed stdin and read both pipes with a size cap; None on timeout."""
    deadline = time.monotonic() + timeout
    out = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    pending = memoryview(stdin or b"")
    writer = proc.stdin.fileno()
    if not pending:
        proc.stdin.close()
        writer = None
    else:
        os.set_blocking(writer, False)
    readers = list(out)
    while readers or writer is not None:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        r, w, _ = select.select(readers, [writer] if writer is not None else [], [],
                                min(left, 1.0))
        for fd in r:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                readers.remove(fd)
            else:
                out[fd] += chunk
                if len(out[fd]) > MAX_PROGRAM_OUTPUT:
                    raise GradingAbort(f"the program wrote more than {MAX_PROGRAM_OUTPUT} bytes")
        if w:
            try:
                sent = os.write(writer, pending[:65536])
                pending = pending[sent:]
            except BrokenPipeError:
                pending = pending[:0]
            if not pending:
                proc.stdin.close()
                writer = None
    try:
        proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
    except subprocess.TimeoutExpired:
        return None
    return bytes(out[proc.stdout.fileno()]), bytes(out[proc.stderr.fileno()])


def run(argv, stdin=None, timeout=10.0, text=True):
    """Run a program in the workspace (cwd = the tree); returns a ProgramResult.

    `python`/`python3` is the interpreter running the tests. Output is capped at
    MAX_PROGRAM_OUTPUT bytes per stream; past `timeout` seconds the program's process group
    is killed and GradingAbort raised.
    """
    if isinstance(argv, str):
        argv = [argv]
    argv = [str(a) for a in argv]
    if argv and argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
    proc = subprocess.Popen(argv, cwd=WORKSPACE, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
    try:
        result = _drain(proc, data, float(timeout))
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            try:
                stream.close()
            except OSError:
                pass
    if result is None:
        raise GradingAbort(f"the program {argv} did not finish within {float(timeout):.3g} s")
    stdout, stderr = result
    if text:
        stdout = stdout.decode("utf-8", "replace")
        stderr = stderr.decode("utf-8", "replace")
    return ProgramResult(argv, proc.returncode, stdout, stderr)


def _open(path):
    parts = pathlib.PurePosixPath(path).parts
    if not parts or parts[0] == "/" or ".." in parts:
        raise PermissionError(f"path {path!r} is not a relative path inside the workspace")
    fd = os.open(WORKSPACE, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)


def read_bytes(path, max_bytes=MAX_PROGRAM_OUTPUT):
    """A regular file of the workspace (no symlinks, FIFOs or devices), at most max_bytes."""
    fd = _open(path)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IsADirectoryError(f"{path!r} is not a regular file")
        data = os.read(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise ValueError(f"{path!r} is larger than {max_bytes} bytes")
    return data


def read_text(path):
    """A regular file of the workspace as UTF-8 text."""
    return read_bytes(path).decode("utf-8")


def is_file(path):
    """Whether `path` is a regular file of the workspace (symlinks are not)."""
    try:
        fd = _open(path)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode)
    finally:
        os.close(fd)


def exists(path):
    """Whether `path` exists in the workspace (without following a final symlink)."""
    try:
        os.close(_open(path))
        return True
    except OSError:
        return False


def scratch_dir():
    """A fresh, empty, writable directory outside the workspace (for input files)."""
    return pathlib.Path(tempfile.mkdtemp(prefix="scratch-"))


HELD_CHARS = 1 << 16  # the longest canonical form emitted (longer: not comparable)
_SCALARS = (bool, int, float, complex, str, bytes)
_BASES = (int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset)
# what Python's own comparisons, truth, hashing and the held tolerance checks call on a value
_SEMANTIC = ("__eq__", "__ne__", "__hash__", "__bool__", "__len__", "__lt__", "__le__",
             "__gt__", "__ge__", "__iter__", "__contains__", "__getitem__", "__abs__",
             "__sub__", "__rsub__", "__neg__", "__round__", "__float__", "__int__",
             "__index__", "__complex__")


def _as_base(kind):
    """Whether instances of `kind`, a subclass of one builtin type, compare, hash and test
    true exactly as its base's do: no class before the base in its MRO defines any of
    `_SEMANTIC` (a namedtuple, an int Enum, a dict subclass adding attribute access), so the
    base's value is what Python's `==` would have compared."""
    bases = [b for b in _BASES if issubclass(kind, b)]
    if len(bases) != 1:
        return False
    mro = kind.__mro__
    before = mro[:mro.index(bases[0])]
    return not any(name in vars(c) for c in before for name in _SEMANTIC)


class _TooBig(Exception):
    pass


def canonical(value):
    """(repr of the value as builtin data, whether Python's own comparisons see that data:
    builtin data, or subclasses that change none of their base's semantics, `_as_base`).

    Bools, ints, floats, complex, str, bytes and None as they are; lists, tuples, dicts, sets
    and frozensets (a set repr: equal to its frozenset) recursively; a subclass of one of
    those reduced through its BASE type's own methods (an int or str Enum, a namedtuple);
    other numbers through `numbers` (int, float, complex). Anything else is no value: the
    held comparison fails. The host reads the repr with `ast.literal_eval`.
    """
    plain = [True]
    size = [0]

    def number(x):  # a float as a literal: inf as 1e999; nan equals nothing
        if x != x:
            raise _TooBig
        return repr(x) if x not in (float("inf"), float("-inf")) else repr(x)[:-3] + "1e999"

    def text(part):
        size[0] += len(part)
        if size[0] > HELD_CHARS:
            raise _TooBig
        return part

    def walk(v, depth):
        if depth > 100:
            raise _TooBig
        kind = type(v)
        if kind is float:
            return text(number(v))
        if v is None or kind in _SCALARS:
            return text(repr(v))
        if kind not in (list, tuple, dict, set, frozenset) and not _as_base(kind):
            plain[0] = False  # a subclass of its own semantics, or another type: reduced below
        if isinstance(v, bool):
            return text(repr(bool.__bool__(v)))
        if isinstance(v, int):
            return text(repr(int.__int__(v)))
        if isinstance(v, float):
            return text(number(float.__float__(v)))
        if isinstance(v, complex):
            return text(repr(complex(complex.real.__get__(v), complex.imag.__get__(v))))
        if isinstance(v, str):
            return text(repr(str.__str__(v)))
        if isinstance(v, bytes | bytearray):
            return text(repr(bytes(memoryview(v))))
        if isinstance(v, list | tuple):
            items = [walk(x, depth + 1) for x in (list.__iter__(v) if isinstance(v, list)
                                                  else tuple.__iter__(v))]
            if isinstance(v, list):
                return text("[") + ", ".join(items) + text("]")
            return text("(") + ", ".join(items) + ("," if len(items) == 1 else "") + text(")")
        if isinstance(v, dict):
            pairs = [walk(k, depth + 1) + ": " + walk(x, depth + 1)
                     for k, x in dict.items(v)]
            return text("{") + ", ".join(pairs) + text("}")
        if isinstance(v, set | frozenset):
            items = [walk(x, depth + 1) for x in (set.__iter__(v) if isinstance(v, set)
                                                  else frozenset.__iter__(v))]
            return text("{" + ", ".join(items) + "}" if items else "set()")
        import numbers

        if isinstance(v, numbers.Integral):
            return text(repr(int(v)))
        if isinstance(v, numbers.Real):
            return text(number(float(v)))
        if isinstance(v, numbers.Complex):
            return text(repr(complex(v)))
        raise _TooBig

    try:
        return walk(value, 0), plain[0]
    except (_TooBig, RecursionError, ValueError, TypeError, OverflowError):
        return "", False


def hold(site, value):
    """A held expectation: say the canonical form of `value` on the outcome pipe (the host
    holds the expected value and compares); returns `value` (calibration keeps the assert)."""
    emitted, plain = canonical(value)
    line = json.dumps({"held": site, "value": emitted, "plain": plain}) + "\n"
    view = memoryview(line.encode("utf-8", "surrogatepass"))
    try:
        while view:
            view = view[os.write(3, view):]
    except OSError:
        pass
    return value


# -- the process boundary: the tests in one process, the solution in another ---------------
# A task graded across the boundary lays its hidden tests alone in the variant's tree; the
# solution runs in a server process of its own uid (the harness's `run_server`), and each call
# of an entry point crosses a socket as tagged JSON (`encode`/`decode`), a codec that carries
# plain data and never code: nothing the solution defines runs in the test's process.
BOUNDARY_ENV = "OPD_BOUNDARY_FD"  # the variant's end of the channel, by fd number
MAX_FRAME = 64 << 20  # the longest message either side reads
MAX_CODEC_DEPTH = 100  # nesting of lists, tuples, dicts and sets
MAX_CODEC_ITEMS = 1 << 20  # values in one message


class BoundaryError(Exception):
    """A value that cannot cross the boundary (code, a custom object, too deep or too big) or
    a broken channel: the test fails, as no plain data could have passed it."""


class SolutionError(Exception):
    """The solution raised an exception that is no builtin `Exception` class: its class name
    (`name`) and message cross the boundary, never the object."""

    def __init__(self, name, message):
        super().__init__(f"{name}: {message}")
        self.name, self.message = name, message


def encode(value, _limits=None):
    """`value` as tagged JSON data: None, bool, int (hex text: no digit limit), float (hex:
    nan, inf and -0.0 exact), complex, str, bytes, bytearray, list, tuple, dict (any
    encodable keys), set, frozenset. A subclass of one of those crosses as its base type's
    data, read through the base's own methods (an IntEnum as its int, a Counter as its
    dict); anything else raises BoundaryError."""
    count = [0]

    def walk(v, depth):
        count[0] += 1
        if count[0] > MAX_CODEC_ITEMS:
            raise BoundaryError(f"more than {MAX_CODEC_ITEMS} values in one message")
        if depth > MAX_CODEC_DEPTH:
            raise BoundaryError(f"nested deeper than {MAX_CODEC_DEPTH} levels")
        if v is None:
            return ["n"]
        if isinstance(v, bool):
            return ["b", bool.__bool__(v)]
        if isinstance(v, int):
            return ["i", format(int.__index__(v), "x")]
        if isinstance(v, float):
            return ["f", float.hex(float.__float__(v))]
        if isinstance(v, complex):
            return ["c", float.hex(complex.real.__get__(v)), float.hex(complex.imag.__get__(v))]
        if isinstance(v, str):
            return ["s", str.__str__(v)]
        if isinstance(v, bytes):
            return ["y", bytes.hex(bytes(memoryview(v)))]
        if isinstance(v, bytearray):
            return ["Y", bytes.hex(bytes(memoryview(v)))]
        if isinstance(v, list):
            return ["l", [walk(x, depth + 1) for x in list.__iter__(v)]]
        if isinstance(v, tuple):
            return ["t", [walk(x, depth + 1) for x in tuple.__iter__(v)]]
        if isinstance(v, dict):
            return ["d", [[walk(k, depth + 1), walk(x, depth + 1)] for k, x in dict.items(v)]]
        if isinstance(v, set):
            return ["S", [walk(x, depth + 1) for x in set.__iter__(v)]]
        if isinstance(v, frozenset):
            return ["F", [walk(x, depth + 1) for x in frozenset.__iter__(v)]]
        raise BoundaryError(f"a {type(v).__module__}.{type(v).__qualname__} cannot cross the "
                            "process boundary (only plain data: None, bool, int, float, "
                            "complex, str, bytes, list, tuple, dict, set, frozenset)")

    try:
        return walk(value, 0)
    except RecursionError:
        raise BoundaryError("nested too deep to cross the process boundary") from None


def decode(data):
    """The value `encode` made `data` from (fresh builtin objects); BoundaryError on anything
    that is not such data."""
    count = [0]

    def walk(d, depth):
        count[0] += 1
        if count[0] > MAX_CODEC_ITEMS or depth > MAX_CODEC_DEPTH:
            raise BoundaryError("a message past the codec's limits")
        if type(d) is not list or not d or type(d[0]) is not str:
            raise BoundaryError("malformed data across the process boundary")
        tag, rest = d[0], d[1:]
        if tag == "n" and not rest:
            return None
        if len(rest) == 1 and tag == "b" and type(rest[0]) is bool:
            return rest[0]
        if tag == "c" and len(rest) == 2 and all(type(x) is str for x in rest):
            return complex(float.fromhex(rest[0]), float.fromhex(rest[1]))
        if len(rest) != 1:
            raise BoundaryError("malformed data across the process boundary")
        body = rest[0]
        if type(body) is str:
            if tag == "i":
                return int(body, 16)
            if tag == "f":
                return float.fromhex(body)
            if tag == "s":
                return body
            if tag == "y":
                return bytes.fromhex(body)
            if tag == "Y":
                return bytearray.fromhex(body)
        elif type(body) is list:
            if tag == "l":
                return [walk(x, depth + 1) for x in body]
            if tag == "t":
                return tuple(walk(x, depth + 1) for x in body)
            if tag == "S":
                return {walk(x, depth + 1) for x in body}
            if tag == "F":
                return frozenset(walk(x, depth + 1) for x in body)
            if tag == "d":
                out = {}
                for pair in body:
                    if type(pair) is not list or len(pair) != 2:
                        raise BoundaryError("malformed data across the process boundary")
                    out[walk(pair[0], depth + 1)] = walk(pair[1], depth + 1)
                return out
        raise BoundaryError("malformed data across the process boundary")

    try:
        return walk(data, 0)
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise BoundaryError(f"malformed data across the process boundary ({exc})") from None


def send_frame(sock, message):
    """One message: 4-byte big-endian length, then its JSON text."""
    body = json.dumps(message, ensure_ascii=True, allow_nan=False).encode("ascii")
    if len(body) > MAX_FRAME:
        raise BoundaryError(f"a message of more than {MAX_FRAME} bytes")
    sock.sendall(len(body).to_bytes(4, "big") + body)


def _exactly(sock, size):
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(size - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def recv_frame(sock):
    """The next message; None at EOF (the other side is gone)."""
    head = _exactly(sock, 4)
    if head is None:
        return None
    size = int.from_bytes(head, "big")
    if size > MAX_FRAME:
        raise BoundaryError(f"a message of more than {MAX_FRAME} bytes")
    body = _exactly(sock, size)
    if body is None:
        return None
    try:
        return json.loads(body.decode("ascii"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise BoundaryError("a malformed message across the process boundary") from None


CHANNEL = None  # the variant's socket to the solution server, opened on the first call


def _channel():
    global CHANNEL
    if CHANNEL is None:
        import socket

        fd = os.environ.get(BOUNDARY_ENV, "")
        if not fd.isdigit():
            raise BoundaryError("this test runs across the process boundary, and no solution "
                                "server was started for it")
        CHANNEL = socket.socket(fileno=int(fd))
    return CHANNEL


def _restored(old, new):
    """`old` with the contents of `new` put back in place where both are the same mutable
    kind (a list, dict, set or bytearray the solution changed), so the test's own object
    shows the change as under plain pytest; otherwise `new`."""
    if type(old) is list and type(new) is list:
        merged = [_restored(o, n) for o, n in zip(old, new)] if len(old) == len(new) else new
        old[:] = merged
        return old
    if type(old) is dict and type(new) is dict:
        merged = {k: _restored(old[k], v) if k in old else v for k, v in new.items()}
        old.clear()
        old.update(merged)
        return old
    if type(old) is set and type(new) is set or type(old) is bytearray \
            and type(new) is bytearray:
        old.clear()
        old.update(new) if type(old) is set else old.extend(new)
        return old
    if type(old) is tuple and type(new) is tuple and len(old) == len(new):
        items = tuple(_restored(o, n) for o, n in zip(old, new))
        return old if all(a is b for a, b in zip(items, old)) else items
    return new


def _raised(name, args):
    """The exception a test sees for one the solution raised: the builtin class of that name
    (an `Exception` subclass of `builtins`) with its str args, else SolutionError."""
    import builtins

    kind = getattr(builtins, name, None) if isinstance(name, str) else None
    text = [str(a) for a in args] if isinstance(args, list) else []
    if isinstance(kind, type) and issubclass(kind, Exception):
        try:
            return kind(*text)
        except Exception:
            pass
    return SolutionError(str(name), ", ".join(text))


class _Lock:
    def __init__(self):
        import threading

        self.lock = threading.Lock()


_CALLS = _Lock()


def call(name, args=(), kwargs=None, module="solution"):
    """Call `module.name(*args, **kwargs)` in the solution server; its value, decoded, or the
    exception it raised (`_raised`). Arguments it changed in place are changed here too."""
    kwargs = dict(kwargs or {})
    sent_args, sent_kwargs = encode(list(args)), encode(kwargs)
    with _CALLS.lock:
        sock = _channel()
        try:
            send_frame(sock, {"module": module, "name": name, "args": sent_args,
                              "kwargs": sent_kwargs})
            reply = recv_frame(sock)
        except OSError as exc:
            raise BoundaryError(f"the solution's process is gone ({exc})") from None
    if not isinstance(reply, dict):
        raise BoundaryError("the solution's process ended without answering the call "
                            f"{name}()" if reply is None else "a malformed reply")
    if reply.get("args") is not None and reply.get("args") != sent_args:
        new = decode(reply["args"])
        if type(new) is list and len(new) == len(args):
            for old, value in zip(args, new):
                _restored(old, value)
    if reply.get("kwargs") is not None and reply.get("kwargs") != sent_kwargs:
        new = decode(reply["kwargs"])
        if type(new) is dict:
            for key, old in kwargs.items():
                if key in new:
                    _restored(old, new[key])
    if "value" in reply:
        return decode(reply["value"])
    if "raised" in reply:
        raised = reply["raised"]
        if type(raised) is list and len(raised) == 2:
            raise _raised(raised[0], raised[1]) from None
    raise BoundaryError(str(reply.get("refused") or "a malformed reply")[:2000])


def entry(name, module="solution"):
    """A callable standing for the solution's `module.name`: each call crosses the process
    boundary (`call`). What the hidden tests of a boundary task call instead of importing it."""
    def candidate(*args, **kwargs):
        return call(name, args, kwargs, module)

    candidate.__name__ = candidate.__qualname__ = name
    return candidate


def _builtin_name(exc):
    """The name of the nearest builtin class of `exc` (a ValueError subclass: ValueError)."""
    import builtins

    for kind in type(exc).__mro__:
        if getattr(builtins, kind.__name__, None) is kind:
            return kind.__name__
    return "Exception"


def serve(sock, modules):
    """The solution server's loop: import the solution's module on its first call (only
    `modules`), answer each call until EOF. Runs in the server process, never in a test's."""
    import importlib

    loaded = {}
    while True:
        try:
            request = recv_frame(sock)
        except (BoundaryError, OSError):
            return
        if request is None:
            return
        reply = {}
        try:
            if not isinstance(request, dict) or request.get("module") not in modules \
                    or not isinstance(request.get("name"), str):
                raise BoundaryError("a malformed call")
            name = request["module"]
            if name not in loaded:
                loaded[name] = importlib.import_module(name)
            args, kwargs = decode(request["args"]), decode(request["kwargs"])
            if type(args) is not list or type(kwargs) is not dict \
                    or not all(type(k) is str for k in kwargs):
                raise BoundaryError("a malformed call")
            function = getattr(loaded[name], request["name"])
            try:
                value = function(*args, **kwargs)
            finally:
                try:
                    reply["args"], reply["kwargs"] = encode(args), encode(kwargs)
                except BoundaryError:
                    reply["args"] = reply["kwargs"] = None
            reply["value"] = encode(value)
        except BoundaryError as exc:
            reply = {"refused": f"{request.get('name') if isinstance(request, dict) else ''}"
                                f"(): {exc}"}
        except BaseException as exc:  # the solution's own exception: its builtin name and text
            reply.pop("value", None)
            try:
                args = [str(a) for a in exc.args] if isinstance(exc.args, tuple) else [str(exc)]
            except BaseException:
                args = []
            original = type(exc).__name__ if isinstance(type(exc).__name__, str) else ""
            builtin = _builtin_name(exc)
            if original != builtin:
                args = [f"({original}) " + (", ".join(args))]
            reply["raised"] = [builtin, args]
        try:
            send_frame(sock, reply)
        except BoundaryError as exc:
            send_frame(sock, {"refused": str(exc)})
        except OSError:
            return
'''


# -- the variant process (a grandchild of the harness, forked by the zygote) ---------------
def _message(report):
    """A short line that says why a report is not a plain pass."""
    try:
        if getattr(report, "wasxfail", ""):
            if report.skipped:
                return str(report.wasxfail)[:MESSAGE_CHARS]
        longrepr = report.longrepr
        if isinstance(longrepr, tuple) and len(longrepr) == 3:
            return str(longrepr[2])[:MESSAGE_CHARS]
        crash = getattr(longrepr, "reprcrash", None)
        if crash is not None:
            return str(crash.message)[:MESSAGE_CHARS]
        text = str(report.longreprtext).strip()
        return text.splitlines()[-1][:MESSAGE_CHARS] if text else ""
    except Exception:
        return ""


# Several items under one node id (a custom collector yielding them) get the verdict of the
# worst: plain pytest reports the id FAILED when any of them failed, and an id passes only
# when all of them did (opd_gym.grading.plain.WORST_FIRST). A line the solution forges on the
# pipe can then only make its test's outcome worse, never better.
SEVERITY = ("failed", "error", "skipped", "xfailed", "xpassed", "passed")


def outcome_of(reports):
    """pytest's own verdict for one test from its setup/call/teardown reports."""
    setup, call, teardown = (reports.get(w) for w in ("setup", "call", "teardown"))
    if setup is not None and setup.failed:
        return "error", _message(setup)
    if setup is not None and setup.skipped:
        return ("xfailed" if hasattr(setup, "wasxfail") else "skipped"), _message(setup)
    if call is not None:
        if call.failed:
            return "failed", _message(call)
        if call.skipped:
            return ("xfailed" if hasattr(call, "wasxfail") else "skipped"), _message(call)
        if teardown is not None and teardown.failed:
            return "error", _message(teardown)
        if hasattr(call, "wasxfail"):
            return "xpassed", str(call.wasxfail)[:MESSAGE_CHARS]
        return "passed", ""
    if teardown is not None and teardown.failed:
        return "error", _message(teardown)
    return "error", "the test reported no call phase"


def base_id(nodeid):
    """A node id without its parametrization suffix (opd_gym.nodeids.base_id)."""
    import re

    return re.sub(r"\[.*\]$", "", nodeid, flags=re.S)


class Reporter:
    """pytest plugin: one JSON line per finished test (and per collection error) to a fd."""

    def __init__(self, fd, select=None, skip=()):
        self.fd = fd
        self.reports = {}
        self.select = None if select is None else set(select)
        self.skip = set(skip)
        self.cases = {}  # node id -> its parametrize case ("argname=row,..."), where it has one

    def wanted(self, nodeid):
        if self.select is not None and nodeid not in self.select:
            return False
        return not self.skip or base_id(nodeid) not in self.skip

    def pytest_collection_modifyitems(self, config, items):
        """With a selection (a task's exact test ids), every other test is deselected; so is
        every test whose base id this variant skips (it runs in the other variant only).
        Each parametrized item's case (the row of each parametrize call) is noted: the host
        pairs a canary's item with the real one by it where ids follow the values."""
        for item in items:
            indices = getattr(getattr(item, "callspec", None), "indices", None)
            if isinstance(indices, dict) and indices:
                self.cases[item.nodeid] = ",".join(
                    f"{name}={row}" for name, row in sorted(indices.items()))[:CASE_CHARS]
        if self.select is None and not self.skip:
            return
        keep = [item for item in items if self.wanted(item.nodeid)]
        dropped = [item for item in items if not self.wanted(item.nodeid)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep

    def emit(self, entry):
        data = json.dumps(entry).encode("utf-8", "surrogatepass") + b"\n"
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view):]
        except OSError:
            pass

    def pytest_collectreport(self, report):
        if report.failed:
            self.emit({"collect_error": [str(report.nodeid), _message(report)]})

    def pytest_runtest_logstart(self, nodeid, location):
        self.emit({"start": nodeid})  # a variant killed at its deadline names what it ran

    def pytest_runtest_logreport(self, report):
        self.reports.setdefault(report.nodeid, {})[report.when] = report

    def pytest_runtest_logfinish(self, nodeid, location):
        outcome, message = outcome_of(self.reports.pop(nodeid, {}))
        entry = {"id": nodeid, "outcome": outcome, "message": message}
        if nodeid in self.cases:
            entry["case"] = self.cases[nodeid]
        self.emit(entry)


def interrupt_fails():
    """pytest plugin: a KeyboardInterrupt raised while a test runs (setup, call or teardown)
    fails that test like any other exception instead of ending the session. Under plain pytest
    an honest suite never lets one escape (`pytest.raises(KeyboardInterrupt)`), but its canary
    may: the variant would stop and every later test go missing (click's pager tests)."""
    import pytest

    def guard():
        try:
            return (yield)
        except KeyboardInterrupt as exc:
            raise RuntimeError(f"KeyboardInterrupt raised in the test: {exc!r}") from None

    class InterruptFails:
        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_setup(self, item):
            return (yield from guard())

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_call(self, item):
            return (yield from guard())

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_teardown(self, item):
            return (yield from guard())

    return InterruptFails()


FAILURE_SECTION_MAX = 50  # failures the terminal still shows with their tracebacks


def no_failure_summary():
    """pytest plugin: past FAILURE_SECTION_MAX failures the terminal skips its end-of-run
    section of failure tracebacks (the short summary's one line per failure stays). Outcomes
    and messages come from `Reporter`; a canary variant fails thousands of tests, and that
    section scans every report once per failure (half a variant's time on idna's 6,000-test
    suite). A few failures keep it: the agent's own `opd-grade` shows their sources.

    Past that many, no failure's traceback is shown again, so none is built: later failures
    get --tb=no's report, which keeps the crash line `Reporter` reads (`_message`); errors in
    setup or teardown keep theirs (the terminal's errors section shows them). A canary
    variant's hundreds of native tracebacks were a fifth of its time (rfc3986: 700 failures,
    0.5 s of 2.3 s as plain pytest)."""
    import pytest

    class NoFailureSummary:
        failed = 0

        @pytest.hookimpl(trylast=True)
        def pytest_configure(self, config):
            terminal = config.pluginmanager.get_plugin("terminalreporter")
            if terminal is None or not hasattr(terminal, "summary_failures"):
                return
            original = terminal.summary_failures

            def summary_failures():
                if len(terminal.stats.get("failed", ())) <= FAILURE_SECTION_MAX:
                    original()

            terminal.summary_failures = summary_failures

        def pytest_runtest_logreport(self, report):
            if report.failed and report.when == "call":
                self.failed += 1

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_makereport(self, item, call):
            option = item.config.option
            style = getattr(option, "tbstyle", None)
            cheap = call.when == "call" and self.failed > FAILURE_SECTION_MAX
            if cheap:
                option.tbstyle = "no"
            try:
                return (yield)
            finally:
                if cheap:
                    option.tbstyle = style

    return NoFailureSummary()


def failures_restore_state():
    """pytest plugin: when a test raises, the process state a context manager typically
    restores after its `yield` (os.name, sys.platform, the working directory, os.environ,
    sys.path) is put back as it was before the test's setup, before pytest reports it. A real
    test passes and its context manager restores that state; its canary fails inside the block,
    and without try/finally the state leaks: later tests of the variant would fail where plain
    pytest passes them, or pytest's own report would break (colorama's osname('nt') leaves
    os.name 'nt', and pytest then cannot build a path: INTERNALERROR ends the session). A
    report pytest still cannot build is a plain failure of that test, never the session's."""
    import pytest

    class RestoresState:
        saved = None

        @pytest.hookimpl(tryfirst=True)
        def pytest_runtest_setup(self, item):
            try:
                self.saved = (os.name, sys.platform, os.getcwd(), dict(os.environ),
                              list(sys.path))
            except Exception:  # a working directory a test removed: nothing to restore
                self.saved = None

        @pytest.hookimpl(wrapper=True, tryfirst=True)
        def pytest_runtest_makereport(self, item, call):
            # a unittest case's failure waits in item._excinfo until pytest's own hook takes it
            if self.saved is not None and (call.excinfo is not None
                                           or getattr(item, "_excinfo", None)):
                self.restore()
            try:
                return (yield)
            except Exception as exc:  # pytest could not describe the failure: still a failure
                from _pytest.reports import TestReport

                return TestReport(item.nodeid, item.location, {k: 1 for k in item.keywords},
                                  "failed", f"the test's report could not be built: "
                                  f"{type(exc).__name__}: {exc}", call.when,
                                  duration=call.duration, start=call.start, stop=call.stop)

        def restore(self):
            name, platform, cwd, environ, path = self.saved
            try:
                os.name, sys.platform = name, platform
                if os.getcwd() != cwd:
                    os.chdir(cwd)
                if dict(os.environ) != environ:
                    os.environ.clear()
                    os.environ.update(environ)
                sys.path[:] = path
            except Exception:
                pass

    return RestoresState()


def state_changes():
    """pytest plugin (a calibration's leak probe): after each test, a digest of the
    module-level state it left changed: every attribute of a loaded module rebound or
    deleted, and, outside the stdlib, the new size of a list, dict or set one holds. The host
    compares a canary's digest with its real test's: a canary that fails before its test's
    cleanup (freezegun's `stop()`) leaves a different state, which later tests would see.
    pytest's own modules and sys.last_* (set on every failure) are left out; so are stdlib
    containers, which reporting a failure fills (linecache, re's cache)."""
    import hashlib

    import pytest

    stdlib = getattr(sys, "stdlib_module_names", frozenset())
    own = {"_pytest", "pytest", "pluggy", "__main__", "py"}

    def snapshot():
        state = {}
        for name, module in list(sys.modules.items()):
            top = name.partition(".")[0]
            if top in own:
                continue
            try:
                namespace = vars(module)
            except TypeError:
                continue
            sized = top not in stdlib
            for key, value in list(namespace.items()):
                if name == "sys" and key.startswith("last_"):
                    continue
                size = len(value) if sized and type(value) in (list, dict, set) else -1
                state[(name, key)] = (id(value), size)
        return state

    class StateChanges:
        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def pytest_runtest_protocol(self, item, nextitem):
            try:
                before = snapshot()
            except Exception:
                before = None
            yield
            if before is None:
                return
            try:
                after = snapshot()
                changed = sorted(f"{name}.{key}:{after[(name, key)][1]}"
                                 if (name, key) in after else f"{name}.{key}:gone"
                                 for (name, key), was in before.items()
                                 if after.get((name, key)) != was)
                digest = hashlib.sha256("\n".join(changed).encode()).hexdigest()[:16]
                Reporter(RESULT_FD).emit({"delta": [item.nodeid, digest]})
            except Exception:
                pass

    return StateChanges()


def pristine_docstrings(source):
    """{qualified name: (docstring or None, 0-based line)} of what doctest's finder visits in a
    module, read with ast from `source`: the module itself (""), its functions and classes, and
    their methods and nested classes (also under module- or class-level if/try/with)."""
    import ast

    tree = ast.parse(source)
    found = {"": (ast.get_docstring(tree, clean=False), 0)}
    blocks = tuple(getattr(ast, n) for n in ("If", "Try", "TryStar", "With", "AsyncWith")
                   if hasattr(ast, n))

    def walk(body, prefix):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + node.name
                if name in found and any(  # `@x.setter`: the property keeps its getter's doc
                        isinstance(d, ast.Attribute) and d.attr in ("setter", "getter", "deleter")
                        for d in node.decorator_list):
                    continue
                found[name] = (ast.get_docstring(node, clean=False), node.lineno - 1)
                if isinstance(node, ast.ClassDef):
                    walk(node.body, name + ".")
            elif isinstance(node, blocks):
                for field in ("body", "orelse", "finalbody"):
                    walk(getattr(node, field, None) or [], prefix)
                for handler in getattr(node, "handlers", None) or []:
                    walk(handler.body, prefix)

    walk(tree.body, "")
    return found


def pristine_doctests(tree, sources, select=None):
    """pytest plugin: the doctests of the listed package modules (`sources`: {path: pristine
    text}) come from their pristine docstrings and run against the live module of the tree.

    pytest's own DoctestModule still imports the module as plain pytest does (rootdir, import
    mode) and walks the LIVE module with doctest's finder, so ids and order are pytest's; only
    the docstring parsed for each visited object is the pristine one with its qualified name
    (an edited or deleted docstring changes nothing; one the pristine module lacks is not a
    test). A pristine doctest whose object the live module lacks runs in the module's globals
    when its id is selected (or nothing is). Names the ast cannot tell (`__test__` entries,
    aliases) keep pytest's own behaviour when their ids are selected, else are no tests.
    """
    import doctest

    import pytest
    from _pytest.doctest import DoctestModule

    selected = None if select is None else set(select)

    class PristineDoctestModule(DoctestModule):
        pristine_source = ""

        def collect(self):
            pristine = pristine_docstrings(self.pristine_source)
            nodeid, filename = self.nodeid, str(self.path)
            original_find = doctest.DocTestFinder.find

            def find(finder, obj, name=None, module=None, globs=None, extraglobs=None):
                modname = name if name is not None else getattr(obj, "__name__", "")
                visited = set()
                live_get_test = finder._get_test

                def get_test(obj_, name_, module_, globs_, source_lines):
                    key = None
                    if name_ == modname:
                        key = ""
                    elif name_.startswith(modname + "."):
                        key = name_[len(modname) + 1:]
                    if key not in pristine:  # an alias, `__test__`: pytest's own, if listed
                        if selected is None or f"{nodeid}::{name_}" not in selected:
                            return None
                        return live_get_test(obj_, name_, module_, globs_, source_lines)
                    visited.add(key)
                    text, lineno = pristine[key]
                    if not text:
                        return None
                    return finder._parser.get_doctest(text, globs_, name_, filename, lineno)

                finder._get_test = get_test
                try:
                    tests = original_find(finder, obj, name, module, globs, extraglobs)
                finally:
                    del finder._get_test
                for key, (text, lineno) in pristine.items():
                    full = f"{modname}.{key}" if key else modname
                    if key in visited or not text or (
                            selected is not None and f"{nodeid}::{full}" not in selected):
                        continue
                    test = finder._parser.get_doctest(text, dict(vars(obj)), full, filename,
                                                      lineno)
                    if test.examples:
                        tests.append(test)
                tests.sort()
                return tests

            doctest.DocTestFinder.find = find
            try:
                return list(super().collect())
            finally:
                doctest.DocTestFinder.find = original_find

    class Plugin:
        @pytest.hookimpl(tryfirst=True)
        def pytest_sessionstart(self, session):
            """The doctest sources are named on the command line only to select them; plain
            pytest, run without arguments, collects them from their folder: their asserts
            are rewritten only as plain pytest would (its python_files, a conftest), never
            for being named (a doctest expecting an assert's own message would fail)."""
            hook = next((h for h in sys.meta_path
                         if type(h).__name__ == "AssertionRewritingHook"), None)
            should = getattr(hook, "_should_rewrite", None)
            if should is None:
                return

            def should_rewrite(name, fn, state):
                rel = os.path.relpath(str(fn), tree).replace(os.sep, "/")
                if rel not in sources:
                    return should(name, fn, state)
                named, hook.session = hook.session, None  # as if not on the command line
                try:
                    return should(name, fn, state)
                finally:
                    hook.session = named

            hook._should_rewrite = should_rewrite

        @pytest.hookimpl(hookwrapper=True)
        def pytest_collect_file(self, file_path, parent):
            outcome = yield
            rel = os.path.relpath(str(file_path), tree).replace(os.sep, "/")
            if rel not in sources:
                return
            collected = list(outcome.get_result() or ())
            for collector in collected:
                if type(collector) is DoctestModule:
                    collector.__class__ = PristineDoctestModule
                    collector.pristine_source = sources[rel]
            # named on the command line, the module is also collected as a test module; plain
            # pytest does so only where python_files matches it
            from _pytest.python import Module, path_matches_patterns

            if any(type(c) is PristineDoctestModule for c in collected) and not \
                    path_matches_patterns(file_path, parent.config.getini("python_files")):
                outcome.force_result([c for c in collected if type(c) is not Module])

    return Plugin()


def high_fd(fd):
    """`fd` moved above every fd a child sets up (so a dup2 onto 3 or 4 never clobbers it)."""
    import fcntl

    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 100)
    os.close(fd)
    return moved


def enter_child(spec, prefix):
    """In a forked child, after its fds are set: signals as in a fresh python3, `spec`'s uid,
    a scratch HOME and TMPDIR of its own, and the suite environment `spec` names (the agent's
    terminal has the same one: opd_gym/sandboxes/environment.py); returns the scratch dir."""
    import signal
    import tempfile
    import time

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    uid = spec["uid"]
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    scratch = tempfile.mkdtemp(prefix=prefix, dir=spec["tmp"])
    home, tmp = os.path.join(scratch, "home"), os.path.join(scratch, "tmp")
    os.mkdir(home, 0o700)
    os.mkdir(tmp, 0o700)
    os.environ.clear()
    os.environ.update(spec["env"])
    os.environ.update(PATH=spec["path"], HOME=home, TMPDIR=tmp)
    time.tzset()  # TZ as the table has it, should the launch environment have differed
    tempfile.tempdir = None
    sys.dont_write_bytecode = True
    return scratch


def leave_child(code, scratch):
    """End a forked child: its output flushed, its scratch dir removed, exit `code`; never
    returns, whatever fails on the way."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        if scratch is not None:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)
    except BaseException:
        pass
    os._exit(code & 0xFF)


def run_variant(command, out_fd, result_fd, channel=None):
    """In the forked child: become the agent, enter the tree and run pytest; never returns.
    `channel`: a boundary variant's socket to its solution server, kept as CHANNEL_FD."""
    code = 70
    scratch = None
    try:
        os.setsid()
        if channel is not None:
            channel = high_fd(channel)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.dup2(result_fd, RESULT_FD)
        if channel is not None:
            os.dup2(channel, CHANNEL_FD)
        os.closerange(RESULT_FD + 1 + (channel is not None), 1 << 16)
        scratch = enter_child(command, "opd-variant-")
        if channel is not None:
            os.environ["OPD_BOUNDARY_FD"] = str(CHANNEL_FD)
        tree = command["tree"]
        os.chdir(tree)
        sys.path[:0] = [command["opd_dir"], tree]
        sys.argv = ["pytest", *command["pytest_args"]]
        import opd_grading

        opd_grading.WORKSPACE = tree
        import pytest

        reporter = Reporter(RESULT_FD, command.get("select"), command.get("skip") or ())
        plugins = [reporter, interrupt_fails(), failures_restore_state(), no_failure_summary()]
        if command.get("doctests"):
            plugins.append(pristine_doctests(tree, command["doctests"], command.get("select")))
        if command.get("probe_state"):
            plugins.append(state_changes())
        code = int(pytest.main(list(command["pytest_args"]), plugins=plugins))
        Reporter(RESULT_FD).emit({"exit": code})
    except BaseException as exc:  # pytest itself broke: say so in the output, never hang
        try:
            os.write(2, f"\nopd grading harness: {type(exc).__name__}: {exc}\n".encode())
        except BaseException:
            pass
    finally:
        leave_child(code, scratch)


def run_server(server, out_fd, channel):
    """In the forked child (a boundary variant's solution server): become the server's uid,
    enter its copy of the workspace and answer the variant's calls on `channel`
    (`opd_grading.serve`: the solution's module imported on the first call); never returns.
    Its output goes where the variant's does; its outcome is only what it answers."""
    code = 70
    scratch = None
    try:
        os.setsid()
        channel = high_fd(channel)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.dup2(channel, 3)
        os.closerange(4, 1 << 16)
        scratch = enter_child(server, "opd-server-")
        os.chdir(server["tree"])
        sys.path[:0] = [server["tree"]]
        sys.argv = ["solution"]
        import socket
        import types

        module = types.ModuleType("opd_grading")
        exec(compile(OPD_GRADING_SOURCE, "opd_grading", "exec"), module.__dict__)
        module.serve(socket.socket(fileno=3), [str(m) for m in server["modules"]])
        code = 0
    except BaseException as exc:
        try:
            os.write(2, f"\nopd solution server: {type(exc).__name__}: {exc}\n".encode())
        except BaseException:
            pass
    finally:
        leave_child(code, scratch)


def zygote(commands_fd, replies_fd, pipes):
    """Fork one variant per command line, one at a time: say the child's pid, wait for it to
    exit and say its status before reading the next line (variants never run side by side).
    A boundary variant (its command names a `server`) gets its solution server forked first,
    joined to it by a fresh socketpair; the server is killed when the variant has exited."""
    import gc
    import signal
    import socket

    gc.collect()
    gc.freeze()  # shared with the variants as it is: their collections skip it
    replies = os.fdopen(replies_fd, "w", buffering=1)
    with os.fdopen(commands_fd, "r") as commands:
        for line in commands:
            command = json.loads(line)
            slot = command["slot"]
            out_w, result_w = pipes[slot]
            server_pid = channel = None
            if command.get("server") is not None:
                ours, theirs = socket.socketpair()
                server_pid = os.fork()
                if server_pid == 0:
                    replies.close()
                    ours.close()
                    run_server(command["server"], out_w, theirs.detach())
                theirs.close()
                channel = ours
            pid = os.fork()
            if pid == 0:
                replies.close()
                run_variant(command, out_w, result_w,
                            None if channel is None else channel.detach())
            if channel is not None:
                channel.close()
            os.close(out_w)
            os.close(result_w)
            pipes[slot] = None
            replies.write(json.dumps({"slot": slot, "pid": pid}) + "\n")
            while True:
                try:
                    done, status = os.waitpid(pid, 0)
                except ChildProcessError:
                    done, status = pid, -1
                except InterruptedError:
                    continue
                if done == pid:
                    break
            if server_pid is not None:  # it dies with its variant (the harness kills its uid)
                for kill in (os.killpg, os.kill):
                    try:
                        kill(server_pid, signal.SIGKILL)
                    except OSError:
                        pass
                try:
                    os.waitpid(server_pid, 0)
                except ChildProcessError:
                    pass
            replies.write(json.dumps({"slot": slot, "status": status}) + "\n")
    for fds in pipes:  # slots not used
        if fds is not None:
            os.close(fds[0])
            os.close(fds[1])
    replies.close()
    os._exit(0)


# -- the harness --------------------------------------------------------------------------
class AgentProcesses:
    """Kills what the variants left: every process of the agent's and the variants' uids, and
    all descendants of the harness.

    Processes of the agent's uid that lived before the harness started (its shell in a sandbox
    that also served an episode) are spared; nothing of a variant uid is.
    """

    def __init__(self, agent_uid, variant_uids=()):
        self.uids = {u for u in (agent_uid, *variant_uids) if u is not None}
        self.me = os.getpid()
        self.spared = set()
        if agent_uid is not None:
            self.spared = {p for p, (uid, _, _) in self._table().items() if uid == agent_uid}

    @staticmethod
    def _stat(pid):
        """(real uid, ppid, state) of a live process, None if gone. The uid comes from
        /proc/<pid>/status: /proc/<pid> of a non-dumpable process belongs to root."""
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rpartition(b")")[2].split()
            with open(f"/proc/{pid}/status", "rb") as fh:
                for line in fh:
                    if line.startswith(b"Uid:"):
                        return int(line.split()[1]), int(fields[1]), fields[0]
        except (OSError, IndexError, ValueError):
            pass
        return None

    def _table(self):
        table = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                info = self._stat(int(name))
                if info is not None:
                    table[int(name)] = info
        return table

    def targets(self, uids, spare=()):
        """Live processes of `uids` and descendants of the harness, but not `spare`."""
        table = self._table()
        children = {}
        for pid, (_, ppid, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        found, stack = set(), [self.me]
        while stack:
            for child in children.get(stack.pop(), []):
                if child not in found and child not in spare:
                    found.add(child)
                    stack.append(child)
        found.update(p for p, (uid, _, _) in table.items() if uid in uids)
        return [p for p in found if p not in self.spared and p not in spare
                and p not in (1, self.me) and table.get(p, (0, 0, b"Z"))[2] != b"Z"]

    def kill(self, uids, spare=()):
        """SIGKILL until none is left (a fork loop can add processes while we kill)."""
        import signal
        import time

        for _ in range(200):
            reap()
            pids = self.targets(set(uids), set(spare))
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.005)
        reap()

    def kill_all(self):
        self.kill(self.uids)


SHARED_PLACES = ("/dev/shm", "/dev/mqueue", "/var/tmp", "/run/lock")  # and tempfile's /tmp


def as_user(uid, action, *args, limit=60.0):
    """Run `action(*args)` in a child that dropped to `uid` (root harness only); wait for it."""
    import signal
    import time

    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            import ctypes

            ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: it holds the request
            action(*args)
            code = 0
        except BaseException:
            pass
        finally:
            os._exit(code)
    deadline = time.monotonic() + limit
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return status == 0
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return False
        time.sleep(0.002)


def remove_owned(uid, places):
    """As `uid`: delete what it owns in the shared writable places and its SysV IPC objects.

    Runs between variants, so nothing one variant leaves (files in /tmp or /dev/shm, POSIX
    queues, shared memory segments) is there for the next one to read.
    """
    import shutil

    def unlock(_func, path, _exc):
        try:
            os.chmod(os.path.dirname(path), 0o700)
            os.chmod(path, 0o700)
        except OSError:
            pass

    for place in places:
        try:
            entries = list(os.scandir(place))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    os.chmod(entry.path, 0o700)
                    for _ in range(3):
                        shutil.rmtree(entry.path, onerror=unlock)
                        if not os.path.lexists(entry.path):
                            break
                else:
                    os.unlink(entry.path)
            except OSError:
                pass
    remove_ipc(uid)


def remove_ipc(uid):
    """Remove the System V shared memory, semaphores and queues that `uid` owns or created."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return
    ipc_rmid = 0
    calls = {"shm": lambda i: libc.shmctl(i, ipc_rmid, None),
             "sem": lambda i: libc.semctl(i, 0, ipc_rmid),
             "msg": lambda i: libc.msgctl(i, ipc_rmid, None)}
    for kind, remove in calls.items():
        try:
            with open(f"/proc/sysvipc/{kind}") as fh:
                header, *rows = fh.read().splitlines()
        except (OSError, ValueError):
            continue
        names = header.split()
        try:
            at_id, at_uid, at_cuid = names.index(f"{kind}id" if kind != "msg" else "msqid"), \
                names.index("uid"), names.index("cuid")
        except ValueError:
            continue
        for row in rows:
            cells = row.split()
            try:
                if uid in (int(cells[at_uid]), int(cells[at_cuid])):
                    remove(int(cells[at_id]))
            except (IndexError, ValueError):
                pass


def reap():
    """Collect every exited child (orphans come to us: we are a child subreaper)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def become_subreaper():
    """Orphaned descendants re-parent to this process, so none escapes the final kill."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:
        pass


def copy_file(src, dst, mode):
    with open(src, "rb") as fin, open(dst, "xb") as fout:
        while True:
            chunk = fin.read(1 << 20)
            if not chunk:
                break
            fout.write(chunk)
    os.chmod(dst, mode)


def copy_workspace(src, dst, test_dirs, skipped, depth=0, rel=""):
    """Copy regular files of src to dst, leaving out what steers collection or start-up."""
    try:
        entries = list(os.scandir(src))
    except OSError as exc:
        skipped.append(f"{rel or '.'}: {exc.strerror}")
        return
    for entry in entries:
        name = entry.name
        path = f"{rel}{name}"
        try:
            if entry.is_symlink():
                continue
            if entry.is_dir():
                if name == "__pycache__" or (depth == 0 and name == RESERVED_DIR):
                    continue
                if depth >= MAX_DEPTH:
                    skipped.append(f"{path}: deeper than {MAX_DEPTH} levels")
                    continue
                os.mkdir(os.path.join(dst, name), 0o755)
                copy_workspace(entry.path, os.path.join(dst, name), test_dirs, skipped,
                               depth + 1, path + "/")
            elif entry.is_file():
                if name in DROPPED_NAMES or name.endswith(".pth"):
                    continue
                if name == "__init__.py" and rel.rstrip("/") in test_dirs:
                    continue
                executable = entry.stat().st_mode & 0o111
                copy_file(entry.path, os.path.join(dst, name), 0o755 if executable else 0o644)
        except OSError as exc:
            skipped.append(f"{path}: {exc.strerror}")


def tests_folders(hidden, doctests, select=None):
    """Folders whose planted __init__.py is left out of the tree: those holding hidden Python
    files (test modules, their conftest and helpers), so no file of the agent changes how the
    hidden tests import. The package folders of doctest sources keep the agent's __init__.py:
    their modules import as in the project (relative imports, names like `pkg.time`). Which
    folders are packages is read from the doctest ids (`src/pkg/core.py::pkg.core.f`: src/pkg
    is); without ids, the source's own folder."""
    folders = {rel.rpartition("/")[0] for rel in hidden if rel.endswith(".py")}
    for path in doctests:
        stem = path[:-3] if path.endswith(".py") else path
        parts = stem.split("/")
        init = parts[-1] == "__init__"
        if init:
            parts = parts[:-1]
        names = [i.partition("::")[2] for i in select or () if i.startswith(path + "::")]
        packages = 1
        for k in range(len(parts), 0, -1):
            module = ".".join(parts[-k:])
            if any(n == module or n.startswith(module + ".") for n in names):
                packages = k if init else k - 1
                break
        prefix = path.split("/")[:-1]
        for n in range(packages):
            folders.discard("/".join(prefix[:len(prefix) - n]))
    return folders


def copy_tree(src, dst, skip=()):
    """dst = a fresh copy of src's directories and regular files, owned by the caller."""
    for entry in os.scandir(src):
        if entry.name in skip:
            continue
        target = os.path.join(dst, entry.name)
        if entry.is_dir(follow_symlinks=False):
            os.mkdir(target, 0o755)
            copy_tree(entry.path, target)
        elif entry.is_file(follow_symlinks=False):
            mode = 0o755 if entry.stat(follow_symlinks=False).st_mode & 0o111 else 0o644
            copy_file(entry.path, target, mode)


TREE_NAME = "workspace"  # a variant's tree, named as plain pytest's project folder is


def own_folder(base, name):
    """The path of a variant's tree, `base/<name>/workspace`: inside a folder of its own that
    the variant may list (root's, 0755, holding nothing else) while `base` stays unlistable.
    pytest's rootdir-based import of a project with a root `__init__.py` walks up to the
    first folder without one and imports from there (`workspace.tests.test_x`, as in plain
    pytest's /workspace): an unlistable parent made every such import fail."""
    parent = os.path.join(base, name)
    os.mkdir(parent, 0o755)
    return os.path.join(parent, TREE_NAME)


def variant_tree(staging, tree, uid, ini_name=None, ini_text=None):
    """The tree one variant runs in, writable by it as a project folder is by plain pytest
    (a solution may write `./cache.json` in its cwd), with the task's ini read-only in it.

    Docker: the harness (root without CAP_CHOWN/CAP_DAC_OVERRIDE) makes the tree's root,
    owned by root with the variant's group, mode 1770, and the ini in it (root's, 0444); a
    child dropped to the variant's uid then copies the staging tree into it, so every other
    file and folder is the variant's own. The sticky bit keeps the ini: the variant may add
    and remove its own entries but never replace root's. No other uid may enter the tree.
    bwrap/local (one uid): the staging tree itself, a copy of its own per variant.

    A writable tree does not weaken the canaries: what a variant may rewrite is its own copy
    of the workspace and of ITS hidden files, in the process that runs them; rewriting a test
    to pass is a same-process forgery like any other (it passes the canary too, and is
    caught), and nothing it writes outlives it (remove_variant_tree) or reaches the other
    variant, which runs later in a tree of its own.

    Without `ini_name`: a boundary variant's solution server's tree (its copy of the
    workspace, the server uid's own files), made afresh the same way (bwrap/local: a copy).
    """
    if uid is None:
        if ini_name is None:  # a solution server's tree: a copy of its own, no ini
            os.mkdir(tree, 0o755)
            copy_tree(staging, tree)
            return
        path = os.path.join(tree, ini_name)
        with open(path, "x", encoding="utf-8") as fh:
            fh.write(ini_text)
        os.chmod(path, 0o444)
        return
    egid = os.getegid()
    os.setegid(uid)  # what the harness creates now has the variant's group
    try:
        os.mkdir(tree, 0o700)
        if ini_name is not None:
            path = os.path.join(tree, ini_name)
            with open(path, "x", encoding="utf-8") as fh:
                fh.write(ini_text)
            os.chmod(path, 0o444)
    finally:
        os.setegid(egid)
    os.chmod(tree, 0o1770)
    if not as_user(uid, copy_tree, staging, tree, (ini_name,), limit=600.0):
        raise RuntimeError("could not copy the tree for a variant")


def empty_tree(tree):
    """Remove every entry of `tree` the caller may remove (its own), whatever their modes."""
    for entry in os.scandir(tree):
        try:
            if entry.is_dir(follow_symlinks=False):
                thaw_and_remove(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            pass


def remove_variant_tree(tree, uid):
    """After a variant: everything in its tree goes, as its uid (folders it closed with mode
    0700 included), then the tree itself and the ini, as the harness."""
    if not os.path.lexists(tree):
        return
    if uid is not None:
        as_user(uid, empty_tree, tree)
    thaw_and_remove(tree)


def overlay(tree, files):
    """Write the variant's files into the tree; they win over workspace files."""
    for rel, text in files.items():
        parts = [p for p in rel.split("/") if p not in ("", ".")]
        if not parts or ".." in parts:
            raise ValueError(f"a variant file path is not relative: {rel!r}")
        here = tree
        for part in parts[:-1]:
            here = os.path.join(here, part)
            if os.path.lexists(here) and not os.path.isdir(here):
                os.unlink(here)
            if not os.path.isdir(here):
                os.mkdir(here, 0o755)
        target = os.path.join(here, parts[-1])
        if os.path.isdir(target):
            import shutil

            shutil.rmtree(target)
        elif os.path.lexists(target):
            os.unlink(target)
        with open(target, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(target, 0o644)


def freeze(tree):
    """Make a tree read-only (dirs 0555, files keep only read/exec bits)."""
    for root, _dirs, files in os.walk(tree, topdown=False):
        for name in files:
            path = os.path.join(root, name)
            os.chmod(path, os.stat(path).st_mode & 0o555)
        os.chmod(root, 0o555)


def thaw_and_remove(path):
    import shutil

    for root, dirs, _ in os.walk(path):
        for name in dirs:
            try:
                if not os.path.islink(os.path.join(root, name)):  # never chmod through a link
                    os.chmod(os.path.join(root, name), 0o700)
            except OSError:
                pass
    try:
        os.chmod(path, 0o700)
    except OSError:
        pass
    shutil.rmtree(path, ignore_errors=True)


class Variant:
    """The harness's view of one running variant: its pipes, pid, deadline and findings."""

    def __init__(self, index, slot, out_r, result_r):
        self.index, self.slot = index, slot
        self.out_r, self.result_r = out_r, result_r
        self.pid = None
        self.deadline = None
        self.status = None
        self.timed_out = False
        self.output = bytearray()
        self.output_bytes = 0
        self.result = bytearray()
        self.result_bytes = 0
        self.tests = {}
        self.order = []
        self.collect_errors = []
        self.running = {}  # started, not finished: what a killed variant was running
        self.current = None  # the test started last and not finished: held values are its
        self.held = {}  # node id -> [[site, canonical value, plain]] (host-held expectations)
        self.held_chars = 0
        self.deltas = {}  # node id -> digest of the state it left changed (probe_state)
        self.cases = {}  # node id -> its parametrize case, as the Reporter named it
        self.exit = None

    def feed_output(self, chunk):
        self.output_bytes += len(chunk)
        self.output += chunk
        if len(self.output) > 4 * OUTPUT_TAIL:
            del self.output[:-OUTPUT_TAIL]

    def feed_result(self, chunk):
        self.result_bytes += len(chunk)
        self.result += chunk
        if b"\n" not in chunk:
            return
        *lines, rest = bytes(self.result).split(b"\n")
        self.result = bytearray(rest)
        for line in lines:
            self.take(line)

    def take(self, line):
        """One outcome line; anything malformed is ignored (a missing line = a missing test)."""
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            return
        if not isinstance(entry, dict):
            return
        if "id" in entry:
            nodeid, outcome, message = entry.get("id"), entry.get("outcome"), entry.get("message")
            if not (isinstance(nodeid, str) and outcome in OUTCOMES and isinstance(message, str)):
                return
            message = message[:MESSAGE_CHARS]
            self.running.pop(nodeid, None)
            if nodeid in self.tests:  # several items under one id (a custom collector's)
                if SEVERITY.index(outcome) < SEVERITY.index(self.tests[nodeid][0]):
                    self.tests[nodeid] = (outcome, message)  # plain pytest's verdict: the worst
                self.cases.pop(nodeid, None)  # no one case: never paired by it
                return
            self.tests[nodeid] = (outcome, message)
            case = entry.get("case")
            if isinstance(case, str) and len(case) <= CASE_CHARS:
                self.cases[nodeid] = case
            self.order.append(nodeid)
            if self.current == nodeid:
                self.current = None
        elif "start" in entry:
            if isinstance(entry["start"], str) and entry["start"] not in self.tests:
                self.current = entry["start"]
                if len(self.running) < 100:
                    self.running[entry["start"]] = True
        elif "held" in entry:
            site, value, plain = entry.get("held"), entry.get("value"), entry.get("plain")
            if self.current is None or type(site) is not int or not isinstance(value, str) \
                    or type(plain) is not bool or len(value) > HELD_CHARS:
                return
            held = self.held.setdefault(self.current, [])
            if len(held) < MAX_HELD and self.held_chars + len(value) <= MAX_HELD_CHARS:
                self.held_chars += len(value)
                held.append([site, value, plain])
        elif "delta" in entry:
            pair = entry["delta"]
            if isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair) \
                    and pair[0] in self.tests and len(pair[1]) <= 64:
                self.deltas[pair[0]] = pair[1]
        elif "collect_error" in entry:
            pair = entry["collect_error"]
            if isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair):
                self.collect_errors.append([pair[0], pair[1][:MESSAGE_CHARS]])
        elif "exit" in entry and type(entry["exit"]) is int and self.exit is None:
            self.exit = entry["exit"]

    def verdict(self):
        output = bytes(self.output[-OUTPUT_TAIL:]).decode("utf-8", "replace")
        return {
            "tests": [{"id": i, "outcome": self.tests[i][0], "message": self.tests[i][1],
                       **({"held": self.held[i]} if i in self.held else {}),
                       **({"delta": self.deltas[i]} if i in self.deltas else {}),
                       **({"case": self.cases[i]} if i in self.cases else {})}
                      for i in self.order],
            "collect_errors": self.collect_errors,
            "exit": self.exit if self.exit is not None else -1,
            "timed_out": self.timed_out,
            "running": list(self.running)[-10:],
            "output": output,
        }


def read_available(fd, limit):
    """Whatever `fd` (non-blocking) has now, at most `limit` bytes; None at EOF."""
    data = bytearray()
    while len(data) < limit:
        try:
            chunk = os.read(fd, min(1 << 16, limit - len(data)))
        except BlockingIOError:
            break
        if not chunk:
            return bytes(data) if data else None
        data += chunk
    return bytes(data)


class Supervisor:
    """Reads the zygote's replies and one variant's pipes at a time; kills it at its deadline."""

    def __init__(self, replies_fd, timeout):
        self.fd = replies_fd
        self.timeout = timeout
        self.buffer = bytearray()
        self.zygote_done = False
        os.set_blocking(replies_fd, False)

    def _replies(self, v):
        import time

        chunk = read_available(self.fd, 1 << 16)
        if chunk is None:
            self.zygote_done = True
            return
        self.buffer += chunk
        *lines, rest = bytes(self.buffer).split(b"\n")
        self.buffer = bytearray(rest)
        for line in lines:
            reply = json.loads(line)
            if reply.get("slot") != v.slot:
                continue
            if "pid" in reply:
                v.pid = reply["pid"]
                v.deadline = time.monotonic() + self.timeout
            else:
                v.status = reply["status"]

    @staticmethod
    def _feed(v, fd, kind):
        """Read what `fd` has; False at EOF or past the byte cap."""
        limit = MAX_OUTPUT_BYTES - v.output_bytes if kind == "out" \
            else MAX_RESULT_BYTES - v.result_bytes
        chunk = read_available(fd, max(limit, 0))
        if chunk is None or limit <= 0:
            return False
        (v.feed_output if kind == "out" else v.feed_result)(chunk)
        return True

    def run(self, v):
        """Until variant `v` (already requested from the zygote) has exited."""
        import select
        import signal
        import time

        open_fds = {v.out_r: "out", v.result_r: "result"}
        for fd in open_fds:
            os.set_blocking(fd, False)
        while True:
            now = time.monotonic()
            if v.deadline is not None and v.status is None and not v.timed_out \
                    and now >= v.deadline:
                v.timed_out = True
                for kill in (os.killpg, os.kill):
                    try:
                        kill(v.pid, signal.SIGKILL)
                    except OSError:
                        pass
            if v.status is None and self.zygote_done:
                v.status = -1  # the zygote is gone: nothing more will start or end
            if v.status is not None:
                break
            wait = 1.0
            if v.deadline is not None and not v.timed_out:
                wait = min(max(v.deadline - now, 0.0), 1.0)
            ready, _, _ = select.select([self.fd, *open_fds], [], [], wait)
            for fd in ready:
                if fd == self.fd:
                    self._replies(v)
                elif not self._feed(v, fd, open_fds[fd]):
                    del open_fds[fd]
                    os.close(fd)
        for fd, kind in open_fds.items():  # what was written before the exit
            self._feed(v, fd, kind)
            os.close(fd)


def prewarm():
    """Load once what every variant's pytest.main would load again: pytest's own plugins and
    the installed distributions' metadata. The variants fork from here and start with both."""
    import importlib

    import pytest  # noqa: F401

    try:
        from _pytest.config import default_plugins
    except ImportError:
        default_plugins = ()
    for name in default_plugins:
        try:
            importlib.import_module(f"_pytest.{name}")
        except Exception:
            pass
    try:
        import importlib.metadata as metadata

        for dist in metadata.distributions():
            dist.entry_points  # noqa: B018
    except Exception:
        pass
    # pluggy's own functions are left alone: a suite may test them (pluggy's does), and
    # pytest calls its signature reader once per hook function anyway.


def pytest_args(tree, ini_path, args):
    # --tb=native: a canary variant fails hundreds of tests, and pytest's long style re-parses
    # the whole test module to show each failure's source (minutes on more-itertools); the
    # native traceback reads no source and changes no outcome. A task's own args come last.
    return ["-c", ini_path, "--rootdir", tree, "--confcutdir", tree, "-p", "no:cacheprovider",
            "--continue-on-collection-errors", "--tb=native", *args]


def main():
    prewarm()  # imported once here; every variant forks with pytest loaded

    pipes = [(os.pipe(), os.pipe()) for _ in range(MAX_VARIANTS)]
    commands_r, commands_w = os.pipe()
    replies_r, replies_w = os.pipe()
    zygote_pid = os.fork()
    if zygote_pid == 0:  # before the request is read: no secret is ever in its memory
        try:
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 0)
            os.dup2(null, 1)
            os.close(commands_w)
            os.close(replies_r)
            for out, result in pipes:
                os.close(out[0])
                os.close(result[0])
            zygote(commands_r, replies_w, [[out[1], result[1]] for out, result in pipes])
        finally:
            os._exit(70)
    os.close(commands_r)
    os.close(replies_w)
    for out, result in pipes:
        os.close(out[1])
        os.close(result[1])
    become_subreaper()

    import random
    import tempfile

    verdict_fd = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # nothing but the verdict reaches the host's stream
    request = json.loads(sys.stdin.buffer.read(MAX_REQUEST))
    if request.get("version") != 3:
        raise SystemExit(f"unsupported request version {request.get('version')!r}")
    variants_in = request["variants"]
    if not 1 <= len(variants_in) <= MAX_VARIANTS:
        raise SystemExit(f"between 1 and {MAX_VARIANTS} variants, got {len(variants_in)}")
    doctests = {str(k): str(v) for k, v in (request.get("doctests") or {}).items()}
    uid = request.get("agent_uid")
    timeout = float(request["timeout"])
    workspace = os.path.realpath(request["workspace"])
    # Each variant has a uid of its own (Docker): neither can signal, trace or read the
    # other's /proc, and neither is the workspace's owner.
    uids = [uid + 1 + i if uid is not None else None for i in range(len(variants_in))]
    # A task graded across the process boundary (`boundary`: the solution modules its tests
    # call into): each variant's tests run alone in its tree, the solution in a server
    # process under a uid of its own (Docker: the next after the variants'), in a copy of
    # the workspace that uid owns; its calls and values cross a socket (opd_grading.serve).
    boundary = request.get("boundary")
    if boundary is not None:
        boundary = [str(m) for m in boundary]
        if not boundary or not all(m.isidentifier() for m in boundary):
            raise SystemExit(f"boundary modules must be module names, got {boundary!r}")
    server_uid = uid + 1 + len(variants_in) if uid is not None and boundary else None
    processes = AgentProcesses(uid, [*uids, server_uid])
    if uid is not None:  # nothing of a variant's (or the server's) uid waits
        processes.kill({*uids, server_uid} - {None}, spare={zygote_pid})
    verdict = None
    tmp = tempfile.gettempdir()
    places = [tmp, *SHARED_PLACES]
    workspace_mode = None
    base = tempfile.mkdtemp(prefix="opd-grade-", dir=tmp)
    trees = []
    server_trees = []
    try:
        os.chmod(base, 0o711)  # the agent may enter what it is told of, never list it
        token = lambda: os.urandom(12).hex()  # noqa: E731
        # The ini goes into each tree's root under a name of ours: pytest resolves ini paths
        # (`pythonpath = src`, `testpaths`) relative to the ini file's folder, as in the project.
        ini_name = f".opd-pytest-{token()}.ini"
        ini_text = request.get("ini") or "[pytest]\n"
        skipped = []
        test_dirs = tests_folders([rel for variant in variants_in for rel in variant["files"]],
                                  doctests, request.get("select"))
        # Per variant: a staging tree (the workspace copy with that variant's files laid over
        # it; Docker: the harness's, read-only) from which its own writable tree is made just
        # before it runs (see variant_tree). Separate uids get separate copies of everything
        # they read: no shared inode whose access time one could set and the other read.
        staging, opd_dirs = [], []
        for index, variant in enumerate(variants_in):
            opd_dir = os.path.join(base, token())
            os.mkdir(opd_dir, 0o755)
            with open(os.path.join(opd_dir, "opd_grading.py"), "w", encoding="utf-8") as fh:
                fh.write(OPD_GRADING_SOURCE)
            freeze(opd_dir)
            opd_dirs.append(opd_dir)
            # one uid (bwrap/local): the variant runs in its staging tree
            tree = os.path.join(base, token()) if uid is not None else own_folder(base, token())
            os.mkdir(tree, 0o755)
            if boundary is None:  # across the boundary, the hidden tests are alone in it
                copy_workspace(workspace, tree, test_dirs, skipped if index == 0 else [])
            overlay(tree, variant["files"])
            if uid is not None:
                freeze(tree)
            staging.append(tree)
        server_staging = None
        if boundary is not None:  # what each variant's solution server gets a copy of
            server_staging = os.path.join(base, token())
            os.mkdir(server_staging, 0o755)
            copy_workspace(workspace, server_staging, set(), skipped)
            if uid is not None:
                freeze(server_staging)
        if uid is not None:  # the variants may not even read the agent's workspace
            workspace_mode = os.stat(workspace).st_mode & 0o7777
            as_user(uid, os.chmod, workspace, 0o700)
        args = [str(a) for a in request.get("args") or []]
        select = request.get("select")
        if select is not None:
            select = [str(i) for i in select]
        # base ids a variant leaves out: tests that run once, in the other variant
        skips = [[str(i) for i in variant.get("skip") or ()] for variant in variants_in]
        probe_state = request.get("probe_state") is True
        path = os.environ.get("PATH") or "/usr/local/bin:/usr/bin:/bin"
        env = request.get("env")  # optional: older requests get what they always had
        env = ({str(k): str(v) for k, v in env.items()} if isinstance(env, dict)
               else {"LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"})
        variants = [Variant(i, i, pipes[i][0][0], pipes[i][1][0]) for i in range(len(staging))]
        for i in range(len(staging), MAX_VARIANTS):
            os.close(pipes[i][0][0])
            os.close(pipes[i][1][0])
        order = list(range(len(staging)))
        random.SystemRandom().shuffle(order)
        trees = [staging[i] if uid is None else own_folder(base, token())
                 for i in range(len(staging))]
        if boundary is not None:
            server_trees = [own_folder(base, token()) for _ in staging]
        lines = {}
        for i in order:
            server = None if boundary is None else {
                "tree": server_trees[i], "uid": server_uid, "tmp": tmp, "path": path,
                "env": env, "modules": boundary}
            lines[i] = json.dumps({
                "server": server,
                "slot": i, "tree": trees[i], "uid": uids[i], "tmp": tmp, "path": path,
                "env": env, "opd_dir": opd_dirs[i], "select": select, "doctests": doctests,
                "skip": skips[i], "probe_state": probe_state,
                "pytest_args": pytest_args(trees[i], os.path.join(trees[i], ini_name), args),
            }) + "\n"
        del request, variants_in
        supervisor = Supervisor(replies_r, timeout)
        zygote_alive = {zygote_pid}
        for i in order:  # one variant at a time: none is alive while another runs
            variant_tree(staging[i], trees[i], uids[i], ini_name, ini_text)
            if boundary is not None:
                variant_tree(server_staging, server_trees[i], server_uid)
            os.write(commands_w, lines[i].encode("utf-8", "surrogatepass"))
            supervisor.run(variants[i])
            processes.kill({uids[i], server_uid} - {None}, spare=zygote_alive)
            for owner in {uids[i], server_uid} - {None}:
                as_user(owner, remove_owned, owner, places)
            remove_variant_tree(trees[i], uids[i])
            if boundary is not None:
                remove_variant_tree(server_trees[i], server_uid)
        os.close(commands_w)
        commands_w = None
        processes.kill_all()
        verdict = {"version": 2, "variants": [v.verdict() for v in variants]}
        if skipped:
            note = "opd grading harness: left out of the tree: " + "; ".join(skipped[:20]) + "\n"
            for entry in verdict["variants"]:
                entry["output"] = (note + entry["output"])[-OUTPUT_TAIL:]
    finally:
        try:
            processes.kill_all()
            for index, variant_uid in enumerate(uids):
                if variant_uid is not None:
                    as_user(variant_uid, remove_owned, variant_uid, places)
                    if index < len(trees):
                        remove_variant_tree(trees[index], variant_uid)
            if server_uid is not None:
                as_user(server_uid, remove_owned, server_uid, places)
            for server_tree in server_trees:
                remove_variant_tree(server_tree, server_uid)
            if workspace_mode is not None:
                as_user(uid, os.chmod, workspace, workspace_mode)
        except Exception:
            pass
        thaw_and_remove(base)
    if verdict is None:
        raise SystemExit("opd grading harness: no verdict")
    data = json.dumps(verdict).encode("utf-8", "surrogatepass") + b"\n"
    view = memoryview(data)
    while view:
        view = view[os.write(verdict_fd, view):]
    os.close(verdict_fd)
    os._exit(0)


if __name__ == "__main__":
    main()
