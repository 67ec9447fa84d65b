"""The default system prompt: what the workspace is, the tools, and the tool-call format."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opd_gym.tools.formats import get_tool_format
from opd_gym.tools.schemas import TOOL_NAMES, signature

_PURPOSE = {
    "terminal": "run a bash command in the workspace; returns its output and exit code",
    "read_file": "read a text file, optionally a range of lines",
    "write_file": "create or overwrite a file",
    "edit_file": "replace text that occurs exactly once in a file",
    "submit": "end the task; hidden tests then grade the files in the workspace",
}


def default_system_prompt(
    max_turns: int, tools: Collection[str] = TOOL_NAMES, tool_format: Any = None
) -> str:
    """Short instructions naming the tools and the call format the env parses (default Hermes)."""
    lines = [f"- {signature(n)}: {_PURPOSE[n]}." for n in TOOL_NAMES if n in tools]
    listing = "\n".join(lines)
    return (
        "You are a coding agent in a sandboxed Linux workspace with Python 3 and pytest and no "
        "network access.\n\n"
        f"Tools:\n{listing}\n\n"
        f"{get_tool_format(tool_format).instructions()}\n"
        "You may make several calls in one turn; they run in order. Test your work before you "
        f"submit. You have at most {max_turns} turns."
    )
