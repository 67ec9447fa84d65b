"""opd_gym grading harness: runs the hidden tests in its own process, the agent's code elsewhere.

Started by the host in the grading sandbox under a uid the agent's code never has (root in the
Docker backend, with only the capabilities to start and kill processes of the agent's uid).
It reads one JSON request on stdin (the hidden test files, the runner's source, the agent's
uid, the time budget), writes the tests into a directory only it can read, and runs pytest
in-process on them. Modules of the agent's workspace that the tests import become proxies:
each attribute access, call or operator is a request to `grade_runner.py`, a child process
running under the agent's uid, and what comes back is plain data or an opaque handle.
Comparisons therefore happen here, on values the agent's code cannot give behaviour to.

The verdict (per-test outcomes and the collected ids) goes to this process's stdout, which
only the host reads: the agent's processes cannot write to it, cannot signal or trace this
process, and cannot read the tests. Standard library plus pytest; Python 3.8+.
"""

import base64
import builtins
import collections
import datetime
import decimal
import fractions
import importlib.abc
import importlib.machinery
import json
import os
import pathlib
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import types

MAX_MESSAGE = 16 << 20
MAX_PROGRAM_OUTPUT = 16 << 20
MESSAGE_CHARS = 500
NOT_MIRRORED = {"KeyboardInterrupt", "GeneratorExit"}
SAFE_BUILTINS = {
    "int", "float", "str", "bytes", "bool", "list", "tuple", "dict", "set", "frozenset",
    "complex", "bytearray", "object", "range", "len", "abs", "min", "max", "sum", "sorted",
    "repr", "round", "divmod", "all", "any", "ord", "chr", "hash", "bin", "hex", "oct",
}
IMPORT_SYSTEM_NAMES = {"__path__", "__spec__", "__loader__", "__package__", "__file__",
                       "__cached__", "__builtins__", "__all__", "__getattr__", "__dict__",
                       "__wrapped__", "__class__"}
PLAIN_KINDS = {"int", "float", "str", "bytes", "tuple", "list", "dict", "frozenset", "set"}


class GradingAbort(BaseException):
    """The solution's process broke the protocol (died, hung, sent garbage): the test fails.

    Derived from BaseException so that no `pytest.raises(Exception)` in a hidden test can
    mistake a crash of the agent's code for the exception the test expects.
    """


class Budget:
    """The one deadline of the whole test run; every wait on the agent's code respects it."""

    def __init__(self, seconds):
        self.deadline = time.monotonic() + seconds
        self.seconds = seconds
        self.exhausted = False

    def left(self):
        return self.deadline - time.monotonic()


class AgentProcesses:
    """Starts the agent's code under its uid and kills every process of that uid on demand."""

    def __init__(self, uid, workspace):
        self.uid = uid
        self.workspace = workspace
        self.spared = set(self._pids()) if uid is not None else set()

    def _pids(self):
        """Live (not zombie) processes of the agent's uid."""
        pids = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    if os.stat("/proc/" + name).st_uid != self.uid:
                        continue
                    with open(f"/proc/{name}/stat", "rb") as fh:
                        state = fh.read().rpartition(b")")[2].split()[0]
                except (OSError, IndexError):
                    continue
                if state != b"Z":
                    pids.append(int(name))
        return pids

    def popen(self, argv, **kwargs):
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": self.workspace,
               "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONHASHSEED": "0"}
        if self.uid is not None:
            kwargs.update(user=self.uid, group=self.uid, extra_groups=[])
        return subprocess.Popen(argv, cwd=self.workspace, env=env, start_new_session=True,
                                close_fds=True, **kwargs)

    def kill_all(self, proc=None):
        """Kill the agent's processes: all of its uid (setsid cannot escape), else `proc`'s."""
        if self.uid is None:
            if proc is not None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
        else:
            for _ in range(50):  # repeat: a fork loop can add processes while we kill
                pids = [p for p in self._pids() if p not in self.spared and p != 1]
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                if proc is not None:
                    try:
                        proc.wait(timeout=0.2)  # our child: reap it, it is no zombie then
                    except subprocess.TimeoutExpired:
                        pass
                time.sleep(0.002)
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def read_message(fd, buffer, budget):
    """One JSON line from `fd` within the budget; GradingAbort on EOF, overflow or garbage."""
    while b"\n" not in buffer:
        left = budget.left()
        if left <= 0:
            budget.exhausted = True
            raise GradingAbort("the solution's code did not answer within the time budget "
                               f"({budget.seconds:.0f} s for the whole test run)")
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            raise GradingAbort("the solution's process exited")
        buffer += chunk
        if len(buffer) > MAX_MESSAGE and b"\n" not in buffer:
            raise GradingAbort("the solution's process sent an oversized message")
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        raise GradingAbort("the solution's process sent a malformed message") from None
    if not isinstance(message, dict):
        raise GradingAbort("the solution's process sent a malformed message")
    return message


class Channel:
    """The harness end of the runner protocol: requests out, plain data and handles back."""

    def __init__(self, source, processes, budget):
        self.source = source
        self.processes = processes
        self.budget = budget
        self.proc = None
        self.ready = False
        self.buffer = bytearray()
        self.generation = 0
        self.proxies = {}
        self.classes = {}
        self.callbacks = []
        self.tests_root = ""  # objects defined in modules under it may be passed by callback

    # -- lifecycle ----------------------------------------------------------------------
    def spawn(self):
        """Start the solution's process without waiting for it (it boots while pytest loads)."""
        self.generation += 1
        self.proxies, self.classes, self.buffer = {}, {}, bytearray()
        argv = [sys.executable, "-I", "-c", self.source]
        self.proc = self.processes.popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL)
        self.ready = False

    def start(self):
        if self.proc is not None and self.ready and self.proc.poll() is None:
            return
        if self.budget.left() <= 0:
            self.budget.exhausted = True
            raise GradingAbort("the time budget of the test run is spent")
        if self.proc is None:
            self.spawn()
        try:
            ready = read_message(self.proc.stdout.fileno(), self.buffer, self.budget)
        except GradingAbort:
            self.stop()
            raise
        if "ready" not in ready:
            self.stop()
            raise GradingAbort("the solution's process did not start")
        self.ready = True

    def stop(self):
        """Kill the solution's process; every handle into it is void from now on."""
        self.generation += 1
        self.proxies, self.classes = {}, {}
        if self.proc is not None:
            self.processes.kill_all(self.proc)
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            self.proc = None
            self.ready = False

    # -- requests -----------------------------------------------------------------------
    def request(self, message):
        self.start()
        try:
            self.proc.stdin.write(json.dumps(message).encode("utf-8", "surrogatepass") + b"\n")
            self.proc.stdin.flush()
            while True:
                reply = read_message(self.proc.stdout.fileno(), self.buffer, self.budget)
                if "cb" in reply:
                    self._callback(reply)
                    continue
                break
        except GradingAbort:
            self.stop()
            raise
        except OSError:
            self.stop()
            raise GradingAbort("the solution's process is gone") from None
        out = reply.get("out")
        if isinstance(out, str):
            sys.stdout.write(out)
        if "ok" in reply:
            return self.decode(reply["ok"])
        error = reply.get("err")
        if not isinstance(error, dict):
            raise GradingAbort("the solution's process sent a reply of unknown shape")
        raise self.rebuild_error(error)

    def _callback(self, message):
        try:
            index = message["cb"]
            target = self.callbacks[index] if type(index) is int and index >= 0 else None
            if target is None:
                raise GradingAbort("unknown callback")
            args = [self.decode(a) for a in message.get("args", [])]
            kwargs = {str(k): self.decode(v) for k, v in dict(message.get("kwargs", {})).items()}
            op = message.get("op", "call")
            if op not in HARNESS_OPS:
                raise GradingAbort("a callback asked for an operation that is not allowed")
        except GradingAbort:
            raise
        except Exception:
            raise GradingAbort("the solution's process sent a malformed callback") from None
        try:
            if op == "getattr" and not (args and isinstance(args[0], str)
                                        and not args[0].startswith("_")):
                raise AttributeError("only public attributes of the tests' objects")
            if op == "call":
                result = target(*args, **kwargs)
            else:
                result = HARNESS_OPS[op](target, *args)
            reply = {"cbr": self.encode(result)}
        except Exception as exc:
            reply = {"cbe": {"type": type(exc).__name__, "message": str(exc)[:2000]}}
        self.proc.stdin.write(json.dumps(reply).encode("utf-8", "surrogatepass") + b"\n")
        self.proc.stdin.flush()

    def call(self, op, **fields):
        fields["op"] = op
        return self.request(fields)

    # -- harness values -> wire ---------------------------------------------------------
    def ref_of(self, obj):
        ref = object.__getattribute__(obj, "__dict__").get("_opd_ref")
        if ref is None or ref[0] != self.generation:
            raise GradingAbort("this object belonged to a process of the solution that was "
                               "restarted (after a crash or a timeout)")
        return {"$": "ref", "id": ref[1]}

    def encode(self, value, depth=0):
        kind = type(value)
        if value is None or kind in (bool, int, float, str):
            if kind is float and (value != value or value in (float("inf"), float("-inf"))):
                return {"$": "float", "v": repr(value)}
            return value
        if depth > 900:
            raise TypeError("the value is nested too deeply to pass to the solution's code")
        nested = depth + 1
        if isinstance(value, (RemoteObject, RemoteModule)) or isinstance(value, RemoteMeta):
            return self.ref_of(value)
        if isinstance(value, BaseException) and "_opd_ref" in getattr(value, "__dict__", {}):
            return self.ref_of(value)
        if kind is list:
            return [self.encode(v, nested) for v in value]
        if kind is tuple:
            return {"$": "tuple", "v": [self.encode(v, nested) for v in value]}
        if kind in (dict, collections.OrderedDict, collections.Counter, collections.defaultdict):
            tag = {collections.OrderedDict: "odict", collections.Counter: "counter"}.get(kind,
                                                                                       "dict")
            return {"$": tag, "v": [[self.encode(k, nested), self.encode(v, nested)]
                                    for k, v in value.items()]}
        if kind in (set, frozenset, collections.deque):
            return {"$": kind.__name__, "v": [self.encode(v, nested) for v in value]}
        if kind in (bytes, bytearray):
            return {"$": kind.__name__, "v": base64.b64encode(bytes(value)).decode("ascii")}
        if kind is complex:
            return {"$": "complex", "v": [repr(value.real), repr(value.imag)]}
        if kind is decimal.Decimal:
            return {"$": "decimal", "v": str(value)}
        if kind is fractions.Fraction:
            return {"$": "fraction", "v": [str(value.numerator), str(value.denominator)]}
        if kind is range:
            return {"$": "range", "v": [value.start, value.stop, value.step]}
        if kind in (datetime.date, datetime.datetime, datetime.time):
            return {"$": kind.__name__, "v": value.isoformat()}
        if kind is datetime.timedelta:
            return {"$": "timedelta", "v": [value.days, value.seconds, value.microseconds]}
        name = getattr(value, "__name__", None)
        if isinstance(name, str) and getattr(builtins, name, None) is value:
            return {"$": "builtin", "v": name}
        if isinstance(value, types.ModuleType):
            raise TypeError("a module cannot be passed to the solution's code")
        if self._of_the_tests(value):
            self.callbacks.append(value)
            tag = "cb" if callable(value) else "hobj"
            return {"$": tag, "id": len(self.callbacks) - 1}
        raise TypeError(f"a {kind.__name__} object cannot be passed to the solution's code "
                        "(only plain data, callables and the solution's own objects)")

    def _of_the_tests(self, value):
        """Whether the solution may reach `value` through callbacks: objects, functions and
        bound methods the hidden tests define, and methods of pure builtin types (str.lower).
        Nothing else of the harness (os.system, its own functions) is ever handed out."""
        owner = getattr(value, "__self__", None)
        if owner is not None and not isinstance(owner, types.ModuleType):
            return self._of_the_tests(owner) or type(owner).__name__ in SAFE_BUILTINS
        if getattr(getattr(value, "__objclass__", None), "__name__", None) in SAFE_BUILTINS:
            return True
        if isinstance(value, type):
            return self._test_module(value.__module__)
        module = getattr(value, "__module__", None) if callable(value) else None
        return self._test_module(module or type(value).__module__)

    def _test_module(self, name):
        """Whether module `name` is one of the hidden test files (or a helper beside them)."""
        path = getattr(sys.modules.get(name) if isinstance(name, str) else None, "__file__", "")
        return bool(self.tests_root) and str(path or "").startswith(self.tests_root)

    # -- wire -> harness values (validated) ---------------------------------------------
    def decode(self, value):
        try:
            return self._decode(value)
        except GradingAbort:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError,
                OverflowError, decimal.InvalidOperation) as exc:
            name = type(exc).__name__
            raise GradingAbort(f"the solution's process sent malformed data ({name})") from None

    def _decode(self, value):
        kind = type(value)
        if value is None or kind in (bool, int, float, str):
            return value
        if kind is list:
            return [self._decode(v) for v in value]
        if kind is not dict:
            raise TypeError(kind.__name__)
        tag, v = value.get("$"), value.get("v")
        simple = {
            "tuple": lambda: tuple(self._decode(x) for x in v),
            "set": lambda: set(self._decode(x) for x in v),
            "frozenset": lambda: frozenset(self._decode(x) for x in v),
            "deque": lambda: collections.deque(self._decode(x) for x in v),
            "dict": lambda: {self._decode(k): self._decode(x) for k, x in v},
            "odict": lambda: collections.OrderedDict((self._decode(k), self._decode(x))
                                                     for k, x in v),
            "counter": lambda: collections.Counter({self._decode(k): self._decode(x)
                                                    for k, x in v}),
            "bytes": lambda: base64.b64decode(str(v), validate=True),
            "bytearray": lambda: bytearray(base64.b64decode(str(v), validate=True)),
            "float": lambda: float({"nan": "nan", "inf": "inf", "-inf": "-inf"}[v]),
            "bigint": lambda: int(str(v), 16),
            "complex": lambda: complex(float(v[0]), float(v[1])),
            "decimal": lambda: decimal.Decimal(str(v)),
            "fraction": lambda: fractions.Fraction(int(v[0]), int(v[1])),
            "range": lambda: range(*[int(x) for x in v][:3]),
            "date": lambda: datetime.date.fromisoformat(str(v)),
            "datetime": lambda: datetime.datetime.fromisoformat(str(v)),
            "time": lambda: datetime.time.fromisoformat(str(v)),
            "timedelta": lambda: datetime.timedelta(*[int(x) for x in v][:3]),
        }
        if tag in simple:
            return simple[tag]()
        if tag == "builtin":  # only pure builtins: never eval, exec, open, getattr, ...
            if v in SAFE_BUILTINS:
                return getattr(builtins, v)
            found = getattr(builtins, str(v), None)
            if isinstance(found, type) and issubclass(found, BaseException):
                return self.exception_class({"builtin": str(v)}) or RuntimeError
            raise TypeError("builtin")
        if tag == "class":
            return self.mirror(value["d"])
        if tag == "module":
            return self.module(value)
        if tag == "ref":
            return self.proxy(int(value["id"]), self.mirror(value["cls"]))
        raise TypeError("tag")

    def proxy(self, handle, cls):
        key = (self.generation, handle)
        obj = self.proxies.get(handle)
        if obj is not None:
            return obj
        obj = cls.__new__(cls)
        object.__getattribute__(obj, "__dict__")["_opd_ref"] = key
        self.proxies[handle] = obj
        return obj

    def exception_class(self, desc):
        name = desc.get("builtin")
        found = getattr(builtins, str(name), None)
        if isinstance(found, type) and issubclass(found, BaseException) \
                and name not in NOT_MIRRORED:
            return found
        return None

    def mirror(self, desc):
        """The local stand-in class for a class of the solution (bases mirrored too)."""
        if not isinstance(desc, dict):
            raise TypeError("class")
        if "builtin" in desc:
            found = self.exception_class(desc)
            if found is not None:
                return found
            return RemoteObject
        handle = int(desc["id"])
        if handle in self.classes:
            return self.classes[handle]
        if "name" not in desc:
            raise KeyError("class")
        bases = tuple(dict.fromkeys(self.mirror(d) for d in list(desc.get("bases", []))[:16]))
        if len(bases) > 1:
            bases = tuple(b for b in bases if b is not RemoteObject)
        bases = bases or (RemoteObject,)
        is_exc = bool(desc.get("exception"))
        if is_exc and not any(issubclass(b, BaseException) for b in bases):
            bases = (Exception,) + bases
        namespace = {"__module__": str(desc.get("module", "")),
                     "__qualname__": str(desc.get("qualname", desc["name"])),
                     "_opd_plain": desc.get("plain") in PLAIN_KINDS}
        if is_exc:
            namespace.update(__getattr__=RemoteObject.__getattr__, __str__=_exception_str)
        try:
            cls = RemoteMeta(str(desc["name"]), bases, namespace)
        except TypeError:  # a layout the mirror cannot reproduce: keep the kind, lose the bases
            cls = RemoteMeta(str(desc["name"]), (Exception,) if is_exc else (RemoteObject,),
                             namespace)
        type.__setattr__(cls, "_opd_ref", (self.generation, handle))
        self.classes[handle] = cls
        return cls

    def module(self, value):
        name = str(value["name"])
        handle = int(value["id"])
        existing = sys.modules.get(name)
        if isinstance(existing, RemoteModule) and existing._opd_ref == (self.generation, handle):
            return existing
        module = RemoteModule(name)
        module._opd_ref = (self.generation, handle)
        module.__all__ = [str(n) for n in list(value.get("all", []))[:100000]]
        if value.get("package"):
            module.__path__ = []
        return module

    def rebuild_error(self, error):
        cls = self.mirror(error.get("cls"))
        args = tuple(self.decode(a) for a in list(error.get("args", []))[:64])
        text = error.get("str")
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            return GradingAbort("the solution's process reported an error of unknown kind")
        if isinstance(cls, RemoteMeta):
            handle = error.get("ref")
            exc = self.proxy(int(handle), cls) if type(handle) is int else cls.__new__(cls)
            BaseException.__init__(exc, *args)
            exc.__dict__["_opd_str"] = str(text) if isinstance(text, str) else None
        else:
            try:
                exc = cls(*args)
            except Exception:
                exc = cls.__new__(cls)
                exc.args = args
        tb = error.get("tb")
        if isinstance(tb, str) and tb and hasattr(exc, "add_note"):
            exc.add_note("In the solution's code:\n" + tb[-2000:])
        return exc


HARNESS_OPS = {name: getattr(__import__("operator"), name) for name in (
    "getitem", "setitem", "delitem", "contains", "eq", "ne", "lt", "le", "gt", "ge", "add",
    "sub", "mul")}
HARNESS_OPS.update(len=len, iter=iter, next=next, hash=hash, bool=bool, str=str, repr=repr,
                   getattr=getattr, call=None)


def _exception_str(self):
    text = self.__dict__.get("_opd_str")
    return text if isinstance(text, str) else BaseException.__str__(self)


CHANNEL = None


def _apply(fn, *args):
    try:
        wire = [CHANNEL.encode(a) for a in args]
    except TypeError:
        return NotImplemented
    return CHANNEL.call("apply", fn=fn, args=wire)


def _typed(value, kinds, what):
    if type(value) not in kinds:
        raise GradingAbort(f"the solution's {what} returned a {type(value).__name__}")
    return value


def _is_remote(value):
    return isinstance(value, (RemoteObject, RemoteModule)) or isinstance(value, RemoteMeta)


class RemoteMeta(type):
    """Metaclass of mirrored classes: calling one builds the object in the solution's process."""

    def __call__(cls, *args, **kwargs):
        return CHANNEL.call("call", obj=CHANNEL.ref_of(cls),
                            args=[CHANNEL.encode(a) for a in args],
                            kwargs={k: CHANNEL.encode(v) for k, v in kwargs.items()})

    def __getattr__(cls, name):
        if name.startswith("_opd_") or "_opd_ref" not in cls.__dict__:
            raise AttributeError(name)
        return CHANNEL.call("getattr", obj=CHANNEL.ref_of(cls), name=name)

    def __repr__(cls):
        return f"<class {cls.__module__}.{cls.__qualname__} (solution)>"


class RemoteObject:
    """An object living in the solution's process; every use is a request over the channel."""

    def __getattr__(self, name):
        if name.startswith("_opd_") or name in ("__dict__", "__class__") \
                or "_opd_ref" not in object.__getattribute__(self, "__dict__"):
            raise AttributeError(name)
        return CHANNEL.call("getattr", obj=CHANNEL.ref_of(self), name=name)

    def __setattr__(self, name, value):
        if name.startswith("_opd_"):
            raise AttributeError(name)
        CHANNEL.call("setattr", obj=CHANNEL.ref_of(self), name=name, value=CHANNEL.encode(value))

    def __delattr__(self, name):
        CHANNEL.call("delattr", obj=CHANNEL.ref_of(self), name=name)

    def __call__(self, *args, **kwargs):
        return CHANNEL.call("call", obj=CHANNEL.ref_of(self),
                            args=[CHANNEL.encode(a) for a in args],
                            kwargs={k: CHANNEL.encode(v) for k, v in kwargs.items()})

    # Equality with plain data is never delegated: a value the solution returns must *be*
    # plain data to equal plain data. Between two objects of the solution, its own __eq__
    # decides (the test compares the solution's objects with each other then).
    def __eq__(self, other):
        if self is other:
            return True
        if not _is_remote(other):
            if getattr(type(self), "_opd_plain", False):
                return _plain(self) == other
            return NotImplemented
        return _typed(_apply("eq", self, other), (bool,), "__eq__")

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self):
        if getattr(type(self), "_opd_plain", False):
            return hash(_plain(self))
        return hash(("opd-remote",) + tuple(object.__getattribute__(self, "__dict__")
                                             .get("_opd_ref", ())))

    def __bool__(self):
        return _typed(_apply("bool", self), (bool,), "__bool__")

    def __len__(self):
        return _typed(_apply("len", self), (int,), "__len__")

    def __repr__(self):
        try:
            return _typed(_apply("repr", self), (str,), "__repr__")
        except GradingAbort:
            return "<solution object>"

    def __str__(self):
        return _typed(_apply("str", self), (str,), "__str__")

    def __format__(self, spec):
        return _typed(_apply("format", self, spec), (str,), "__format__")

    def __iter__(self):
        return _apply("iter", self)

    def __next__(self):
        return _apply("next", self)

    def __reversed__(self):
        return _apply("reversed", self)

    def __contains__(self, item):
        return _typed(_apply("contains", self, item), (bool,), "__contains__")

    def __getitem__(self, key):
        return _apply("getitem", self, key)

    def __setitem__(self, key, value):
        _apply("setitem", self, key, value)

    def __delitem__(self, key):
        _apply("delitem", self, key)

    def __int__(self):
        return _typed(_apply("int", self), (int,), "__int__")

    def __index__(self):
        return _typed(_apply("index", self), (int,), "__index__")

    def __float__(self):
        return _typed(_apply("float", self), (float,), "__float__")

    def __enter__(self):
        return self.__getattr__("__enter__")()

    def __exit__(self, kind, value, tb):
        return self.__getattr__("__exit__")(None, None, None)

    def __dir__(self):
        return [str(n) for n in _apply("dir", self)]


def _plain(obj):
    """The builtin value a solution object of a builtin subclass holds, as plain data."""
    return CHANNEL.call("plain", obj=CHANNEL.ref_of(obj))


def _ordering(fn):
    compare = getattr(__import__("operator"), fn)

    def method(self, other):
        if not _is_remote(other):
            if getattr(type(self), "_opd_plain", False):
                return compare(_plain(self), other)
            return NotImplemented
        return _typed(_apply(fn, self, other), (bool,), "comparison")
    return method


def _binary(fn, reflected=False):
    def method(self, other):
        return _apply(fn, other, self) if reflected else _apply(fn, self, other)
    return method


def _unary(fn):
    def method(self):
        return _apply(fn, self)
    return method


for _fn in ("lt", "le", "gt", "ge"):
    setattr(RemoteObject, f"__{_fn}__", _ordering(_fn))
for _fn in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
            "xor", "lshift", "rshift"):
    _op = _fn + "_" if _fn in ("and", "or") else _fn
    setattr(RemoteObject, f"__{_fn}__", _binary(_op))
    setattr(RemoteObject, f"__r{_fn}__", _binary(_op, reflected=True))
for _fn in ("neg", "pos", "invert", "abs"):
    setattr(RemoteObject, f"__{_fn}__", _unary(_fn))


class RemoteModule(types.ModuleType):
    """A module of the solution: attributes are fetched from the solution's process."""

    def __getattr__(self, name):
        if name.startswith("_opd_") or name in IMPORT_SYSTEM_NAMES:
            raise AttributeError(name)
        return CHANNEL.call("getattr", obj=CHANNEL.ref_of(self), name=name)


class SolutionFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: modules the tests import that only the workspace has."""

    def __init__(self, names, workspace):
        self.names = set(names)
        self.workspace = workspace

    def _in_workspace(self, top):
        for candidate in (top + ".py", top):
            try:
                mode = os.lstat(os.path.join(self.workspace, candidate)).st_mode
            except OSError:
                continue
            if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
                return True
        return False

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if top != fullname:
            if not isinstance(sys.modules.get(top), RemoteModule):
                return None
        elif top not in self.names or not self._in_workspace(top):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=None)

    def create_module(self, spec):
        return CHANNEL.call("import", name=spec.name)

    def exec_module(self, module):
        pass


# -- the API the hidden tests use (module `opd_grading`) ----------------------------------
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
    left = max(deadline - time.monotonic(), 0.01)
    try:
        proc.wait(timeout=left)
    except subprocess.TimeoutExpired:
        return None
    return bytes(out[proc.stdout.fileno()]), bytes(out[proc.stderr.fileno()])


def make_api(workspace, processes, budget, scratch_root):
    """The `opd_grading` module: run the solution's programs, read its files, scratch dirs."""
    api = types.ModuleType("opd_grading")
    api.__doc__ = "What hidden tests use to reach the solution beyond importing its modules."
    api.WORKSPACE = workspace
    api.GradingAbort = GradingAbort
    counter = [0]

    def run(argv, stdin=None, timeout=10.0, text=True):
        """Run a program in the workspace as the solution's user; returns a ProgramResult."""
        if isinstance(argv, str):
            argv = [argv]
        argv = [str(a) for a in argv]
        if argv and argv[0] in ("python", "python3", sys.executable):
            argv[0] = sys.executable
        data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
        limit = min(float(timeout), budget.left())
        if limit <= 0:
            budget.exhausted = True
            raise GradingAbort("the time budget of the test run is spent")
        proc = processes.popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
        try:
            result = _drain(proc, data, limit)
        finally:
            processes.kill_all(proc)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                try:
                    stream.close()
                except OSError:
                    pass
        if result is None:
            if budget.left() <= 0:
                budget.exhausted = True
            raise GradingAbort(f"the program {argv} did not finish within {limit:.3g} s")
        stdout, stderr = result
        if text:
            stdout = stdout.decode("utf-8", "replace")
            stderr = stderr.decode("utf-8", "replace")
        return ProgramResult(argv, proc.returncode, stdout, stderr)

    def _open(path):
        parts = pathlib.PurePosixPath(path).parts
        if not parts or parts[0] == "/" or ".." in parts:
            raise PermissionError(f"path {path!r} is not a relative path inside the workspace")
        fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for part in parts[:-1]:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = nxt
            return os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
        finally:
            os.close(fd)

    def read_bytes(path, max_bytes=MAX_PROGRAM_OUTPUT):
        """A regular file of the workspace (no symlinks, FIFOs or devices)."""
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
        return read_bytes(path).decode("utf-8")

    def is_file(path):
        try:
            fd = _open(path)
        except OSError:
            return False
        try:
            return stat.S_ISREG(os.fstat(fd).st_mode)
        finally:
            os.close(fd)

    def exists(path):
        try:
            os.close(_open(path))
            return True
        except OSError:
            return False

    def scratch_dir():
        """A fresh directory the solution can read but not change (for input files)."""
        counter[0] += 1
        path = os.path.join(scratch_root, str(counter[0]))
        os.mkdir(path, 0o755)
        os.chmod(path, 0o755)
        return pathlib.Path(path)

    for function in (run, read_bytes, read_text, is_file, exists, scratch_dir):
        setattr(api, function.__name__, function)
    api.ProgramResult = ProgramResult
    return api


# -- pytest --------------------------------------------------------------------------------
def imported_names(sources):
    """Top-level module names the hidden tests import (static `import` statements and
    `importlib.import_module`/`__import__` calls with a constant name)."""
    import ast

    names = set()
    for text in sources:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name.partition(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.partition(".")[0])
            elif isinstance(node, ast.Call) and node.args \
                    and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                func = node.func
                called = getattr(func, "attr", None) or getattr(func, "id", None)
                if called in ("import_module", "__import__"):
                    names.add(node.args[0].value.partition(".")[0])
    stdlib = getattr(sys, "stdlib_module_names", ())
    return sorted(n for n in names if n and n not in stdlib and n not in ("pytest", "_pytest",
                                                                         "opd_grading"))


def make_plugin(pytest, scratch_dir):
    """Collects outcomes in memory, keeps the solution's objects out of collection."""

    class Verdict:
        def __init__(self):
            self.tests = {}
            self.collected = []
            self.collect_errors = []

        @pytest.hookimpl(tryfirst=True)
        def pytest_pycollect_makeitem(self, collector, name, obj):
            if _is_remote(obj):  # e.g. `from solution import *` bringing a `test_x` along
                return []
            return None

        def pytest_collection_finish(self, session):
            self.collected = [item.nodeid for item in session.items]


        def pytest_collectreport(self, report):
            if report.failed:
                self.collect_errors.append([report.nodeid, _message(report)])

        def pytest_runtest_logreport(self, report):
            entry = self.tests.setdefault(report.nodeid, ["passed", ""])
            if report.when == "call":
                if report.passed:
                    return
                if report.skipped:
                    outcome = "passed" if hasattr(report, "wasxfail") else "skipped"
                    entry[:] = [outcome, _message(report)]
                else:
                    entry[:] = ["failed", _message(report)]
            elif report.skipped and entry[0] == "passed":
                entry[:] = ["skipped", _message(report)]
            elif report.failed:
                entry[:] = ["error", _message(report)]

        @pytest.fixture
        def tmp_path(self):
            return scratch_dir()

    return Verdict()


def _message(report):
    try:
        crash = getattr(report.longrepr, "reprcrash", None)
        if crash is not None:
            return str(crash.message)[:MESSAGE_CHARS]
        if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
            return str(report.longrepr[2])[:MESSAGE_CHARS]
        return str(report.longreprtext).strip().splitlines()[-1][:MESSAGE_CHARS]
    except Exception:
        return ""


def main():
    global CHANNEL
    started = time.monotonic()
    raw = sys.stdin.buffer.read(256 << 20)
    request = json.loads(raw)
    verdict_fd = os.dup(1)
    workspace = os.path.realpath(request["workspace"])
    uid = request.get("agent_uid")
    budget = Budget(float(request.get("timeout", 60.0)))
    private = tempfile.mkdtemp(prefix="opd-grade-")  # 0700, owned by this uid
    tests_dir = os.path.join(private, "tests")
    os.mkdir(tests_dir, 0o700)
    for rel, text in request["tests"].items():
        target = os.path.join(tests_dir, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8") as fh:
            fh.write(text)
    ini = os.path.join(private, "pytest.ini")
    with open(ini, "w") as fh:
        fh.write("[pytest]\n")
    scratch_root = tempfile.mkdtemp(prefix="opd-scratch-")
    os.chmod(scratch_root, 0o755)
    processes = AgentProcesses(uid, workspace)
    CHANNEL = Channel(request["runner"], processes, budget)
    CHANNEL.tests_root = tests_dir + os.sep
    api = make_api(workspace, processes, budget, scratch_root)
    sys.modules["opd_grading"] = api
    sys.meta_path.append(SolutionFinder(imported_names(request["tests"].values()), workspace))
    os.environ.clear()
    os.environ.update(PATH="/usr/local/bin:/usr/bin:/bin", HOME=private, LANG="C.UTF-8",
                      PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    os.chdir(tests_dir)
    CHANNEL.spawn()
    phases = {"setup": time.monotonic() - started}

    import pytest

    phases["import"] = time.monotonic() - started

    plugin = make_plugin(pytest, api.scratch_dir)
    log = tempfile.TemporaryFile()
    saved = os.dup(2)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    args = ["-q", "-p", "no:cacheprovider", "-p", "no:junitxml",
            "--continue-on-collection-errors", "-c", ini, "--rootdir", tests_dir,
            "--", *request["paths"]]
    try:
        status = int(pytest.main(args, plugins=[plugin]))
    except BaseException as exc:  # pytest itself failed: report it, never hang
        status = -1
        plugin.collect_errors.append(["<session>", f"{type(exc).__name__}: {exc}"])
    finally:
        phases["session"] = time.monotonic() - started
        CHANNEL.stop()
        phases["stop"] = time.monotonic() - started
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved, 2)
    log.seek(0, 2)
    size = log.tell()
    log.seek(max(0, size - 8000))
    output = log.read().decode("utf-8", "replace")
    tests = [{"id": nodeid, "outcome": o, "message": m}
             for nodeid, (o, m) in plugin.tests.items()]
    verdict = {"version": 1, "exit": status, "tests": tests, "collected": plugin.collected,
               "collect_errors": plugin.collect_errors, "timed_out": budget.exhausted,
               "output": output, "duration": time.monotonic() - started, "phases": phases}
    shutil.rmtree(private, ignore_errors=True)
    os.write(verdict_fd, json.dumps(verdict).encode("utf-8", "surrogatepass") + b"\n")
    os.close(verdict_fd)
    os._exit(0)


if __name__ == "__main__":
    main()
