"""opd_gym grading runner: executes the agent's code for the grading harness, under the agent's uid.

Started by `grade_harness.py` (which runs under another uid and holds the hidden tests) with
the workspace as cwd. It imports the agent's modules and serves requests from the harness,
one JSON line each way: import a module, get/set an attribute, call an object, apply an
operator. Results go back as plain data (numbers, strings, containers of them) or as opaque
handles to objects that stay here; the harness never receives an object with behaviour, so
every comparison the hidden tests make happens on the harness side.

Nothing in this file is trusted by the harness: the agent's code runs in this process and may
rewrite any of it. The harness validates every reply and treats it as data.
"""

import base64
import builtins
import collections
import datetime
import decimal
import fractions
import importlib
import io
import json
import operator
import os
import sys
import traceback

MAX_DEPTH = 900
PLAIN_BASES = (int, float, str, bytes, tuple, list, dict, frozenset, set)
MAX_ITEMS = 1_000_000
BIG_INT_DIGITS = 4000

OBJECTS = {}  # handle -> object (kept alive while the harness may refer to it)
HANDLES = {}  # id(object) -> handle
CLASS_SENT = set()
CHANNEL_IN = None
CHANNEL_OUT = None

OPERATORS = {
    name: getattr(operator, name)
    for name in (
        "eq", "ne", "lt", "le", "gt", "ge", "add", "sub", "mul", "truediv", "floordiv", "mod",
        "pow", "matmul", "and_", "or_", "xor", "lshift", "rshift", "neg", "pos", "invert",
        "contains", "getitem", "setitem", "delitem", "index", "abs",
    )
}
OPERATORS.update(
    len=len, repr=repr, str=str, bool=bool, hash=hash, iter=iter, next=next, int=int,
    float=float, complex=complex, format=format, reversed=reversed, dir=dir, divmod=divmod,
    round=round, bytes=bytes,
)


class Unsupported(Exception):
    """A value the wire format cannot carry."""


def handle_of(obj):
    key = id(obj)
    if key in HANDLES and OBJECTS.get(HANDLES[key]) is obj:
        return HANDLES[key]
    handle = len(OBJECTS) + 1
    OBJECTS[handle] = obj
    HANDLES[key] = handle
    return handle


def describe_class(cls):
    """A class as data: its handle, names and bases (builtin bases named, not described)."""
    if getattr(builtins, cls.__name__, None) is cls:
        return {"builtin": cls.__name__}
    handle = handle_of(cls)
    if handle in CLASS_SENT:
        return {"id": handle}
    CLASS_SENT.add(handle)
    bases = [describe_class(b) for b in cls.__bases__ if b is not object]
    return {
        "id": handle,
        "name": str(cls.__name__),
        "qualname": str(getattr(cls, "__qualname__", cls.__name__)),
        "module": str(getattr(cls, "__module__", "")),
        "bases": bases,
        "exception": issubclass(cls, BaseException),
        "plain": next((b.__name__ for b in PLAIN_BASES if issubclass(cls, b)), None),
    }


def plain_value(obj):
    """The builtin value inside an instance of a subclass of a builtin type (read with the
    builtin type's own methods, so the subclass's overrides do not take part)."""
    if isinstance(obj, int):
        return int.__int__(obj)
    if isinstance(obj, float):
        return float.__float__(obj)
    if isinstance(obj, str):
        return str.__str__(obj)
    if isinstance(obj, bytes):
        return b"".join([obj])
    if isinstance(obj, tuple):
        return tuple(tuple.__iter__(obj))
    if isinstance(obj, list):
        return list(list.__iter__(obj))
    if isinstance(obj, dict):
        return dict(dict.items(obj))
    if isinstance(obj, frozenset):
        return frozenset(frozenset.__iter__(obj))
    if isinstance(obj, set):
        return set(set.__iter__(obj))
    raise TypeError(f"{type(obj).__name__} holds no builtin value")


def encode(obj, depth=0, budget=None):
    """Plain data for plain values (exact builtin types); a handle for anything else."""
    if budget is None:
        budget = [MAX_ITEMS]
    budget[0] -= 1
    if budget[0] < 0:
        raise Unsupported(f"the value is too large to return (over {MAX_ITEMS} items)")
    kind = type(obj)
    if obj is None or kind is bool or kind is str:
        return obj
    if kind is int:
        if abs(obj) >= 10 ** BIG_INT_DIGITS:
            return {"$": "bigint", "v": format(obj, "x")}
        return obj
    if kind is float:
        if obj != obj or obj in (float("inf"), float("-inf")):
            return {"$": "float", "v": repr(obj)}
        return obj
    if depth > MAX_DEPTH:
        return {"$": "ref", "id": handle_of(obj), "cls": describe_class(kind)}
    nested = depth + 1
    if kind is list:
        return [encode(x, nested, budget) for x in obj]
    if kind is tuple:
        return {"$": "tuple", "v": [encode(x, nested, budget) for x in tuple.__iter__(obj)]}
    if kind in (dict, collections.OrderedDict, collections.defaultdict, collections.Counter):
        tag = {dict: "dict", collections.OrderedDict: "odict", collections.Counter: "counter",
               collections.defaultdict: "dict"}[kind]
        pairs = [[encode(k, nested, budget), encode(v, nested, budget)]
                 for k, v in dict.items(obj)]
        return {"$": tag, "v": pairs}
    if kind in (set, frozenset):
        return {"$": kind.__name__, "v": [encode(x, nested, budget) for x in obj]}
    if kind is collections.deque:
        return {"$": "deque", "v": [encode(x, nested, budget) for x in obj]}
    if kind in (bytes, bytearray):
        return {"$": kind.__name__, "v": base64.b64encode(bytes(obj)).decode("ascii")}
    if kind is complex:
        return {"$": "complex", "v": [repr(obj.real), repr(obj.imag)]}
    if kind is decimal.Decimal:
        return {"$": "decimal", "v": str(obj)}
    if kind is fractions.Fraction:
        return {"$": "fraction", "v": [str(obj.numerator), str(obj.denominator)]}
    if kind is range:
        return {"$": "range", "v": [obj.start, obj.stop, obj.step]}
    if kind is datetime.date or (kind in (datetime.datetime, datetime.time) and obj.tzinfo is None):
        return {"$": kind.__name__, "v": obj.isoformat()}
    if kind is datetime.timedelta:
        return {"$": "timedelta", "v": [obj.days, obj.seconds, obj.microseconds]}
    if isinstance(obj, type(sys)):
        names = getattr(obj, "__all__", None)
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
            names = [n for n in vars(obj) if not n.startswith("_")]
        package = hasattr(obj, "__path__")
        return {"$": "module", "id": handle_of(obj), "name": obj.__name__,
                "all": [str(n) for n in names], "package": package}
    if isinstance(obj, type):
        if getattr(builtins, obj.__name__, None) is obj:
            return {"$": "builtin", "v": obj.__name__}
        return {"$": "class", "d": describe_class(obj)}
    if isinstance(obj, type(len)) and getattr(builtins, obj.__name__, None) is obj:
        return {"$": "builtin", "v": obj.__name__}
    return {"$": "ref", "id": handle_of(obj), "cls": describe_class(kind)}


def ask_harness(message):
    """Send a callback request and serve nested requests until the harness answers it."""
    send(message)
    while True:
        reply = receive()
        if "cbr" in reply:
            return decode(reply["cbr"])
        if "cbe" in reply:
            raise rebuild_error(reply["cbe"])
        serve(reply)  # a nested request made by the callback itself


class Callback:
    """A callable of the harness (e.g. a lambda a test passes in): calling it asks the harness."""

    def __init__(self, cid):
        self.cid = cid

    def __call__(self, *args, **kwargs):
        return ask_harness({"cb": self.cid, "args": [encode(a) for a in args],
                            "kwargs": {str(k): encode(v) for k, v in kwargs.items()}})


class HarnessObject:
    """An object of the hidden tests (e.g. an instrumented list): operations on it are asked
    of the harness, which allows only operators and public attributes."""

    def __init__(self, cid):
        self._opd_cid = cid

    def _opd_op(self, op, *args):
        return ask_harness({"cb": self._opd_cid, "op": op, "args": [encode(a) for a in args]})

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self._opd_op("getattr", name)


def _harness_op(op):
    def method(self, *args):
        return self._opd_op(op, *args)
    method.__name__ = f"__{op}__"
    return method


for _op in ("getitem", "setitem", "delitem", "len", "iter", "next", "contains", "eq", "ne",
            "lt", "le", "gt", "ge", "hash", "bool", "str", "repr", "add", "sub", "mul",
            "call"):
    setattr(HarnessObject, f"__{_op}__", _harness_op(_op))


def rebuild_error(data):
    cls = getattr(builtins, str(data.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = RuntimeError
    return cls(str(data.get("message", "")))


def decode(value):
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    tag, v = value.get("$"), value.get("v")
    if tag == "ref":
        return OBJECTS[int(value["id"])]
    if tag == "cb":
        return Callback(int(value["id"]))
    if tag == "hobj":
        return HarnessObject(int(value["id"]))
    if tag == "builtin":
        return getattr(builtins, v)
    if tag == "tuple":
        return tuple(decode(x) for x in v)
    if tag in ("dict", "odict", "counter"):
        factory = {"dict": dict, "odict": collections.OrderedDict,
                   "counter": collections.Counter}[tag]
        return factory((decode(k), decode(x)) for k, x in v)
    if tag in ("set", "frozenset", "deque"):
        factory = {"set": set, "frozenset": frozenset, "deque": collections.deque}[tag]
        return factory(decode(x) for x in v)
    if tag in ("bytes", "bytearray"):
        return (bytes if tag == "bytes" else bytearray)(base64.b64decode(v))
    if tag == "float":
        return float(v)
    if tag == "bigint":
        return int(v, 16)
    if tag == "complex":
        return complex(float(v[0]), float(v[1]))
    if tag == "decimal":
        return decimal.Decimal(v)
    if tag == "fraction":
        return fractions.Fraction(int(v[0]), int(v[1]))
    if tag == "range":
        return range(*v)
    if tag in ("date", "datetime", "time"):
        return getattr(datetime, tag).fromisoformat(v)
    if tag == "timedelta":
        return datetime.timedelta(*v)
    raise Unsupported(f"unknown tag {tag!r}")


def op_import(req):
    return importlib.import_module(req["name"])


def op_getattr(req):
    return getattr(decode(req["obj"]), req["name"])


def op_setattr(req):
    setattr(decode(req["obj"]), req["name"], decode(req["value"]))


def op_delattr(req):
    delattr(decode(req["obj"]), req["name"])


def op_call(req):
    args = [decode(a) for a in req.get("args", [])]
    kwargs = {k: decode(v) for k, v in req.get("kwargs", {}).items()}
    return decode(req["obj"])(*args, **kwargs)


def op_apply(req):
    function = OPERATORS[req["fn"]]
    return function(*[decode(a) for a in req.get("args", [])])


def op_plain(req):
    return plain_value(decode(req["obj"]))


OPS = {"plain": op_plain, "import": op_import, "getattr": op_getattr, "setattr": op_setattr,
       "delattr": op_delattr, "call": op_call, "apply": op_apply}


def serve(req):
    """Carry out one request; the reply holds the result, or the exception as data."""
    captured = io.StringIO()
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = captured
    try:
        result = OPS[req["op"]](req)
        reply = {"ok": encode(result)}
    except Unsupported as exc:
        reply = {"err": {"cls": {"builtin": "TypeError"}, "args": [str(exc)], "str": str(exc)}}
    except BaseException as exc:  # everything the agent's code raises goes back as data
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
        try:
            args = [encode(a) for a in exc.args]
        except BaseException:
            args = [str(exc)]
        try:
            text = str(exc)
        except BaseException:
            text = f"<unprintable {type(exc).__name__}>"
        reply = {"err": {"cls": describe_class(type(exc)), "args": args, "str": text,
                         "tb": tb[-4000:], "ref": handle_of(exc)}}
    finally:
        sys.stdout, sys.stderr = stdout, stderr
    out = captured.getvalue()
    if out:
        reply["out"] = out[-65536:]
    send(reply)


def send(message):
    try:
        data = json.dumps(message, allow_nan=True)
    except (TypeError, ValueError, RecursionError) as exc:
        data = json.dumps({"err": {"cls": {"builtin": "TypeError"}, "args": [str(exc)],
                                   "str": f"the result could not be encoded: {exc}"}})
    CHANNEL_OUT.write(data.encode("utf-8", "surrogatepass") + b"\n")
    CHANNEL_OUT.flush()


def receive():
    line = CHANNEL_IN.readline()
    if not line:
        os._exit(0)
    return json.loads(line)


def main():
    global CHANNEL_IN, CHANNEL_OUT
    # The channel moves to private fds; the agent's prints go to a capture, not the harness.
    CHANNEL_IN = os.fdopen(os.dup(0), "rb")
    CHANNEL_OUT = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    sys.setrecursionlimit(20000)
    workspace = os.getcwd()
    sys.path.insert(0, workspace)
    sys.argv = ["solution"]
    send({"ready": os.getpid()})
    while True:
        serve(receive())


if __name__ == "__main__":
    main()
