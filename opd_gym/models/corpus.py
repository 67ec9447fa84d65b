"""Built-in training text for the tiny tokenizer: code, English and tool-call JSON, made locally."""

from __future__ import annotations

import json

_PROSE = """\
You are a careful coding assistant. Read the task, inspect the repository, make the smallest
change that fixes the problem, run the tests, and submit when they pass.
The function returns the wrong value when the list is empty. We should check the length first.
The test failed because the expected output has a trailing newline. Let me print the file.
I will open the file, find the bug, and edit the line that computes the total.
All tests passed. The fix handles negative numbers, empty strings and missing keys.
Error: the command timed out after 30 seconds. Try a smaller input or add a timeout.
Traceback (most recent call last): File "main.py", line 12, in <module> ValueError: bad input
The user wants a function that parses a date string and returns a tuple of integers.
Hint: the loop stops one element too early; use range(len(items)) instead of len(items) - 1.
Think step by step. First list the files, then read the tests, then write the solution.
This module reads a configuration file, validates the fields, and reports clear errors.
"""

_CODE = '''\
import json
import os
import sys
from pathlib import Path


def read_lines(path: str) -> list[str]:
    """Return the lines of a text file without trailing newlines."""
    with open(path, encoding="utf-8") as handle:
        return [line.rstrip("\\n") for line in handle]


def total(values: list[int]) -> int:
    result = 0
    for value in values:
        if value < 0:
            continue
        result += value
    return result


class Stack:
    def __init__(self) -> None:
        self.items: list[int] = []

    def push(self, item: int) -> None:
        self.items.append(item)

    def pop(self) -> int:
        if not self.items:
            raise IndexError("pop from empty stack")
        return self.items.pop()


def fibonacci(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def test_total():
    assert total([1, 2, 3]) == 6
    assert total([]) == 0
    assert total([-1, 5]) == 5


if __name__ == "__main__":
    data = json.loads(Path(sys.argv[1]).read_text())
    print(json.dumps({"count": len(data), "cwd": os.getcwd()}, indent=2))
'''

_SHELL = """\
$ ls -la
total 24
drwxr-xr-x 3 user user 4096 main.py
-rw-r--r-- 1 user user  512 test_main.py
$ python -m pytest -q
..F.                                                                     [100%]
FAILED test_main.py::test_total - assert 4 == 6
1 failed, 3 passed in 0.12s
$ cat README.md
# Project
Run `python main.py data.json` to print a summary.
$ grep -n "def " main.py
7:def read_lines(path: str) -> list[str]:
12:def total(values: list[int]) -> int:
"""

_NAMES = ["main", "utils", "parser", "solution", "test_main", "config", "app", "models", "io"]
_EXTS = ["py", "txt", "json", "md", "toml", "cfg"]
_COMMANDS = [
    "ls -la",
    "python -m pytest -q",
    "cat {f}",
    "grep -rn 'def ' .",
    "python {f}",
    "head -n 20 {f}",
    "wc -l {f}",
    "git diff",
    "sed -n 1,40p {f}",
]


def _tool_call_lines() -> list[str]:
    """Deterministic tool-call and tool-result examples that teach the tokenizer JSON shapes."""
    lines = []
    for i, name in enumerate(_NAMES):
        for j, ext in enumerate(_EXTS):
            path = f"src/{name}.{ext}"
            cmd = _COMMANDS[(i + j) % len(_COMMANDS)].format(f=path)
            calls = [
                {"name": "terminal", "arguments": {"command": cmd}},
                {"name": "read_file", "arguments": {"path": path}},
                {"name": "write_file", "arguments": {"path": path, "content": f"x = {i * j}\n"}},
                {"name": "edit_file", "arguments": {"path": path, "old": "x", "new": f"y{j}"}},
                {"name": "submit", "arguments": {}},
            ]
            call = calls[(i * 7 + j) % len(calls)]
            lines.append(f"<tool_call>\n{json.dumps(call)}\n</tool_call>")
            lines.append(f"<tool_response>\nexit code {(i + j) % 3}: {len(path) * 37} bytes"
                         f" read from {path}\n</tool_response>")
    return lines


_PARTS = [
    "get", "set", "read", "write", "parse", "load", "save", "file", "path", "user", "data",
    "list", "item", "count", "value", "name", "test", "check", "error", "config", "line",
    "text", "index", "result", "total", "stack", "queue", "node", "tree", "graph", "string",
    "number", "date", "time", "size", "key", "map", "filter", "sort", "merge",
]


def _identifier_lines() -> list[str]:
    """Small code lines over composed identifiers, so BPE learns real word and code pieces."""
    lines = []
    for i, a in enumerate(_PARTS):
        for j, b in enumerate(_PARTS):
            if (i + j) % 3:
                continue
            lines.append(
                f"def {a}_{b}({b}: str, limit: int = {i * j}) -> {a.title()}{b.title()}:\n"
                f"    \"\"\"The {b} {a} of the {b}.\"\"\"\n    return {a}({b})[:limit]\n"
            )
    return lines


def _tool_schemas() -> str:
    """A few OpenAI-style tool schemas, rendered as JSON like a chat template would."""
    schemas = []
    for name, arg in [("terminal", "command"), ("read_file", "path"), ("submit", "reason")]:
        schemas.append({
            "type": "function",
            "function": {
                "name": name,
                "description": f"Run {name} with one string argument.",
                "parameters": {
                    "type": "object",
                    "properties": {arg: {"type": "string", "description": f"The {arg}."}},
                    "required": [arg],
                },
            },
        })
    return "\n".join(json.dumps(s) for s in schemas)


def default_corpus() -> str:
    """The built-in corpus; the same string every call, so tokenizer builds are reproducible."""
    numbers = " ".join(str(n) for n in range(0, 1000, 7))
    parts = [
        _PROSE, _CODE, _SHELL, _tool_schemas(), *_tool_call_lines(), *_identifier_lines(), numbers
    ]
    return "\n".join(parts)
