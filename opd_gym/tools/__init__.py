"""The agent's tools: schemas, parsing of model output into calls, and their execution."""

from opd_gym.tools.executor import ToolExecutor, ToolResult, describe_run
from opd_gym.tools.parsing import (
    ParsedOutput,
    ToolCall,
    format_tool_call,
    parse_model_output,
    parse_openai_tool_calls,
)
from opd_gym.tools.prompt import default_system_prompt
from opd_gym.tools.schemas import TOOL_NAMES, TOOL_SCHEMAS, check_arguments, tool_schemas

__all__ = [
    "TOOL_NAMES",
    "TOOL_SCHEMAS",
    "ParsedOutput",
    "ToolCall",
    "ToolExecutor",
    "ToolResult",
    "check_arguments",
    "default_system_prompt",
    "describe_run",
    "format_tool_call",
    "parse_model_output",
    "parse_openai_tool_calls",
    "tool_schemas",
]
