"""The agent's tools: schemas, parsing of model output into calls, and their execution."""

from opd_gym.tools.executor import ToolExecutor, ToolResult, describe_run
from opd_gym.tools.formats import (
    FORMATS,
    ToolFormat,
    detect_tool_format,
    get_tool_format,
    parse_tool_calls,
)
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
    "FORMATS",
    "TOOL_NAMES",
    "TOOL_SCHEMAS",
    "ParsedOutput",
    "ToolCall",
    "ToolExecutor",
    "ToolFormat",
    "ToolResult",
    "check_arguments",
    "default_system_prompt",
    "describe_run",
    "detect_tool_format",
    "format_tool_call",
    "get_tool_format",
    "parse_model_output",
    "parse_openai_tool_calls",
    "parse_tool_calls",
    "tool_schemas",
]
