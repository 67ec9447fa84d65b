"""The five tools of a coding episode as OpenAI function-calling schemas, plus argument checks."""

from __future__ import annotations

import copy
import json
from collections.abc import Collection
from typing import Any

from opd_gym.errors import ConfigError

TERMINAL, READ_FILE, WRITE_FILE, EDIT_FILE, SUBMIT = (
    "terminal", "read_file", "write_file", "edit_file", "submit",
)
TOOL_NAMES = (TERMINAL, READ_FILE, WRITE_FILE, EDIT_FILE, SUBMIT)
FILE_WRITING_TOOLS = frozenset({WRITE_FILE, EDIT_FILE})


def _function(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


_PATH = {"type": "string", "description": "File path, relative to the workspace root."}

TOOL_SCHEMAS: tuple[dict[str, Any], ...] = (
    _function(
        TERMINAL,
        "Run a bash command in the workspace and return its combined stdout and stderr with the "
        "exit code. The working directory and exported variables persist between calls. There "
        "is no network access.",
        {
            "command": {"type": "string", "description": "The bash command to run."},
            "timeout": {
                "type": "number",
                "description": "Seconds before the command is killed (default 60).",
            },
        },
        ["command"],
    ),
    _function(
        READ_FILE,
        "Read a text file from the workspace, optionally a range of lines.",
        {
            "path": _PATH,
            "offset": {"type": "integer", "description": "First line, 1-based (default 1)."},
            "limit": {"type": "integer", "description": "Maximum number of lines (default 2000)."},
        },
        ["path"],
    ),
    _function(
        WRITE_FILE,
        "Create or overwrite a file in the workspace with the given content (parent "
        "directories are created).",
        {"path": _PATH, "content": {"type": "string", "description": "The full new content."}},
        ["path", "content"],
    ),
    _function(
        EDIT_FILE,
        "Replace one exact occurrence of old_text with new_text in a file. old_text must match "
        "exactly once (whitespace included).",
        {
            "path": _PATH,
            "old_text": {"type": "string", "description": "The exact text to replace."},
            "new_text": {"type": "string", "description": "The replacement text."},
        },
        ["path", "old_text", "new_text"],
    ),
    _function(
        SUBMIT,
        "Finish the task: hidden tests then grade the files in the workspace. Call it once the "
        "work is done; no further actions are possible afterwards.",
        {},
        [],
    ),
)

_BY_NAME = {schema["function"]["name"]: schema["function"] for schema in TOOL_SCHEMAS}
_JSON_TYPES = {"string": "a string", "integer": "an integer", "number": "a number"}


def signature(name: str) -> str:
    """Human-readable call signature, e.g. `read_file(path, offset?, limit?)`."""
    spec = _BY_NAME[name]["parameters"]
    args = [p if p in spec["required"] else f"{p}?" for p in spec["properties"]]
    return f"{name}({', '.join(args)})"


def _type_ok(value: Any, kind: str) -> bool:
    if isinstance(value, bool):
        return False
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, int | float)
    return True


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", str: "a string", int: "an integer", float: "a number",
            list: "an array", dict: "an object"}.get(type(value), type(value).__name__)


def tool_schemas(names: Collection[str] | None = None) -> list[dict[str, Any]]:
    """A fresh deep copy of the schemas (of the tools in `names`, default all), safe to mutate."""
    chosen = [s for s in TOOL_SCHEMAS if names is None or s["function"]["name"] in names]
    return copy.deepcopy(chosen)


def check_tool_names(names: Collection[str]) -> tuple[str, ...]:
    """Validate a tool subset (it must include submit); returned in canonical order."""
    unknown = sorted(set(names) - set(TOOL_NAMES))
    if unknown:
        raise ConfigError(f"unknown tool(s) {unknown}; the tools are {list(TOOL_NAMES)}")
    if SUBMIT not in names:
        raise ConfigError("the tool set must include submit (it ends the episode)")
    return tuple(name for name in TOOL_NAMES if name in names)


def check_arguments(
    name: str, arguments: Any, tools: Collection[str] | None = None
) -> tuple[dict[str, Any] | None, str | None]:
    """Validate arguments for tool `name`: (normalised arguments, None) or (None, error text)."""
    if name not in _BY_NAME or (tools is not None and name not in tools):
        known = ", ".join(t for t in TOOL_NAMES if tools is None or t in tools)
        return None, f"Unknown tool {name!r}. The tools are: {known}."
    spec = _BY_NAME[name]["parameters"]
    expected = f"Expected {signature(name)}."
    if arguments is None:
        arguments = {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return None, f"The arguments of {name} are not valid JSON ({exc.msg}). {expected}"
        except (ValueError, RecursionError) as exc:  # nesting too deep, integer too long
            why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:100]
            return None, f"The arguments of {name} cannot be read as JSON ({why}). {expected}"
    if not isinstance(arguments, dict):
        kind = _type_name(arguments)
        return None, f"The arguments of {name} must be a JSON object, got {kind}. {expected}"
    unknown = [key for key in arguments if key not in spec["properties"]]
    if unknown:
        return None, f"Unexpected argument {unknown[0]!r} for {name}. {expected}"
    missing = [key for key in spec["required"] if key not in arguments]
    if missing:
        return None, f"Missing required argument {missing[0]!r} for {name}. {expected}"
    clean: dict[str, Any] = {}
    for key, value in arguments.items():
        kind = spec["properties"][key]["type"]
        if not _type_ok(value, kind):
            return None, (
                f"Argument {key!r} of {name} must be {_JSON_TYPES.get(kind, kind)}, "
                f"got {_type_name(value)}. {expected}"
            )
        if isinstance(value, str) and not _valid_text(value):
            return None, (
                f"Argument {key!r} of {name} is not valid Unicode text (it contains a lone "
                f"surrogate code point). {expected}"
            )
        clean[key] = int(value) if kind == "integer" else value
    return clean, None


def _valid_text(value: str) -> bool:
    """True if `value` can be encoded as UTF-8 (no lone surrogates)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
