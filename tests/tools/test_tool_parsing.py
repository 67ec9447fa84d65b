"""Parsing model output into tool calls: the Hermes format, OpenAI shape, and every error path."""

from __future__ import annotations

import json

import pytest

from opd_gym.tools import format_tool_call, parse_model_output, parse_openai_tool_calls
from opd_gym.tools.schemas import check_arguments, check_tool_names, tool_schemas


def call(name, **arguments):
    return format_tool_call(name, arguments)


def test_single_call_and_content_without_the_block():
    parsed = parse_model_output("Let me look.\n" + call("terminal", command="ls -la"))
    assert parsed.errors == []
    [c] = parsed.calls
    assert (c.id, c.name, c.valid) == ("call_0", "terminal", True)
    assert c.arguments == {"command": "ls -la"}
    assert parsed.content == "Let me look."


def test_several_calls_keep_their_order_and_ids():
    text = call("write_file", path="a.py", content="x = 1\n") + "\n"
    text += call("terminal", command="python3 a.py")
    parsed = parse_model_output(text + call("submit"), id_prefix="call_3")
    assert [c.name for c in parsed.calls] == ["write_file", "terminal", "submit"]
    assert [c.id for c in parsed.calls] == ["call_3_0", "call_3_1", "call_3_2"]
    assert parsed.content == ""


def test_think_blocks_are_ignored_for_parsing_but_kept_in_content():
    text = "<think>maybe " + call("submit") + "</think>\nOK " + call("read_file", path="a.py")
    parsed = parse_model_output(text)
    assert [c.name for c in parsed.calls] == ["read_file"]
    assert parsed.content.startswith("<think>maybe <tool_call>")
    # A lone closing tag (template opened the reasoning) hides everything before it.
    text = "reasoning " + call("submit") + "</think>" + call("terminal", command="ls")
    parsed = parse_model_output(text)
    assert [c.name for c in parsed.calls] == ["terminal"]


def test_unclosed_think_explains_the_problem():
    parsed = parse_model_output("<think>still thinking about " + call("submit"))
    assert parsed.calls == []
    assert "inside <think>" in parsed.errors[0]


def test_missing_closing_tag_at_the_end_is_accepted():
    text = '<tool_call>\n{"name": "terminal", "arguments": {"command": "pwd"}}\n'
    parsed = parse_model_output(text)
    assert [c.arguments for c in parsed.calls] == [{"command": "pwd"}]
    assert parsed.errors == []


def test_openai_shape_json_string_arguments_and_parameters_alias():
    inner = {"type": "function", "function": {"name": "terminal", "arguments": '{"command": "ls"}'}}
    parsed = parse_model_output(f"<tool_call>{json.dumps(inner)}</tool_call>")
    assert parsed.calls[0].arguments == {"command": "ls"}
    text = '<tool_call>{"name": "read_file", "parameters": {"path": "x"}}</tool_call>'
    parsed = parse_model_output(text)
    assert parsed.calls[0].arguments == {"path": "x"}


def test_code_fence_inside_block_is_tolerated():
    body = '```json\n{"name": "submit", "arguments": {}}\n```'
    assert parse_model_output(f"<tool_call>{body}</tool_call>").calls[0].name == "submit"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("I will now write the code.", "No tool call found"),
        ('{"name": "terminal", "arguments": {"command": "ls"}}', "not inside <tool_call> tags"),
        ("<tool_call>{'name': 'terminal'}</tool_call>", "not valid JSON"),
        ("<tool_call>   </tool_call>", "is empty"),
        ('<tool_call>["terminal"]</tool_call>', "must hold a JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'no "name" string'),
    ],
)
def test_format_errors_say_what_is_wrong_and_what_is_expected(text, needle):
    parsed = parse_model_output(text)
    assert parsed.calls == []
    [error] = parsed.errors
    assert needle in error
    assert "<tool_call>" in error  # always shows the expected format
    assert error.count(". ") <= 3  # one or two sentences (plus the example)


@pytest.mark.parametrize(
    ("name", "arguments", "needle"),
    [
        ("rm_rf", {}, "Unknown tool 'rm_rf'. The tools are: terminal, read_file"),
        ("read_file", {}, "Missing required argument 'path' for read_file"),
        ("read_file", {"path": 3}, "Argument 'path' of read_file must be a string, got an integer"),
        ("read_file", {"path": "a", "offset": "2"}, "'offset' of read_file must be an integer"),
        ("terminal", {"command": "ls", "timeout": True}, "must be a number, got a boolean"),
        ("write_file", {"path": "a", "content": "x", "mode": 7}, "Unexpected argument 'mode'"),
        ("submit", [], "must be a JSON object, got an array"),
    ],
)
def test_invalid_calls_are_kept_as_calls_with_an_error(name, arguments, needle):
    text = f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'
    parsed = parse_model_output(text)
    assert parsed.errors == []
    [c] = parsed.calls
    assert not c.valid
    assert needle in c.error
    assert "Expected" in c.error or "tools are" in c.error


def test_integral_floats_become_ints():
    args, error = check_arguments("read_file", {"path": "a", "offset": 2.0, "limit": 5})
    assert error is None and args == {"path": "a", "offset": 2, "limit": 5}
    assert isinstance(args["offset"], int)


def test_mixed_good_and_bad_blocks():
    text = call("terminal", command="ls") + "<tool_call>{oops}</tool_call>" + call("submit")
    parsed = parse_model_output(text)
    assert [c.name for c in parsed.calls] == ["terminal", "submit"]
    assert len(parsed.errors) == 1 and "block 2 of 3" in parsed.errors[0]
    assert "{oops}" in parsed.content  # the malformed block stays visible in the transcript


def test_bash_blocks_only_when_enabled_and_no_tool_call_present():
    text = "Run this:\n```bash\npython3 -m pytest -q\n```\n"
    assert parse_model_output(text).calls == []
    parsed = parse_model_output(text, parse_bash_blocks=True)
    [c] = parsed.calls
    assert (c.name, c.arguments) == ("terminal", {"command": "python3 -m pytest -q"})
    both = text + call("submit")
    assert [c.name for c in parse_model_output(both, parse_bash_blocks=True).calls] == ["submit"]


def test_tool_subset_makes_other_tools_unknown():
    parsed = parse_model_output(call("terminal", command="ls"), tools=("read_file", "submit"))
    assert "Unknown tool 'terminal'. The tools are: read_file, submit." == parsed.calls[0].error
    with pytest.raises(ValueError, match="submit"):
        check_tool_names(["terminal"])
    with pytest.raises(ValueError, match="unknown tool"):
        check_tool_names(["submit", "browse"])


def test_parse_openai_tool_calls():
    calls = [
        {"id": "abc", "type": "function",
         "function": {"name": "terminal", "arguments": '{"command": "ls"}'}},
        {"type": "function", "function": {"name": "submit", "arguments": "{}"}},
        {"type": "function", "function": {"name": "terminal", "arguments": "{not json"}},
        "garbage",
    ]
    parsed = parse_openai_tool_calls(calls, id_prefix="call_1")
    assert [c.id for c in parsed.calls] == ["abc", "call_1_1", "call_1_2"]
    assert parsed.calls[2].error.startswith("The arguments of terminal are not valid JSON")
    assert len(parsed.errors) == 1 and "Tool call 4 of 4" in parsed.errors[0]
    assert "No tool call" in parse_openai_tool_calls([]).errors[0]


def test_never_raises_on_odd_input():
    for text in ["", "<tool_call>", "</tool_call>", "<tool_call>null</tool_call>", "\x00\ud800",
                 "<tool_call>" * 50, '<tool_call>{"name": 5}</tool_call>', "<think>"]:
        parsed = parse_model_output(text, parse_bash_blocks=True)
        assert parsed.errors or parsed.calls


def test_to_openai_round_trip_and_schemas():
    [c] = parse_model_output(call("write_file", path="ü.py", content="print('é')")).calls
    entry = c.to_openai()
    assert entry["type"] == "function" and entry["id"] == c.id
    assert json.loads(entry["function"]["arguments"]) == {"path": "ü.py", "content": "print('é')"}
    schemas = tool_schemas()
    assert [s["function"]["name"] for s in schemas] == [
        "terminal", "read_file", "write_file", "edit_file", "submit"]
    schemas[0]["function"]["name"] = "mutated"
    assert tool_schemas()[0]["function"]["name"] == "terminal"
