"""Tool-call formats per model family: outputs written from each family's public format."""

from __future__ import annotations

import random

import pytest

from opd_gym.tools.formats import (
    CALL_BEGIN,
    CALL_END,
    CALLS_BEGIN,
    CALLS_END,
    FORMATS,
    TOOL_SEP,
    detect_tool_format,
    get_tool_format,
    parse_tool_calls,
)
from opd_gym.tools.prompt import default_system_prompt

WRITE = {"path": "sol.py", "content": 'def f(x):\n    return "<done>" if x else {}\n'}

# Each family's documented output for: think, write_file, terminal (with a number), submit.
SPEC_OUTPUTS = {
    "hermes": (
        "<think>\nWrite it, test it.\n</think>\n\n"
        '<tool_call>\n{"name": "write_file", "arguments": {"path": "sol.py", "content": '
        '"def f(x):\\n    return \\"<done>\\" if x else {}\\n"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "terminal", "arguments": {"command": "python3 sol.py", '
        '"timeout": 30}}\n</tool_call>\n'
        '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'
    ),
    "qwen3_coder": (
        "<think>\nWrite it, test it.\n</think>\n\n"
        "<tool_call>\n<function=write_file>\n<parameter=path>\nsol.py\n</parameter>\n"
        '<parameter=content>\ndef f(x):\n    return "<done>" if x else {}\n\n</parameter>\n'
        "</function>\n</tool_call>\n"
        "<tool_call>\n<function=terminal>\n<parameter=command>\npython3 sol.py\n</parameter>\n"
        "<parameter=timeout>\n30\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=submit>\n</function>\n</tool_call>"
    ),
    "llama3": (
        "<think>\nWrite it, test it.\n</think>\n\n<|python_tag|>"
        '{"name": "write_file", "parameters": {"path": "sol.py", "content": '
        '"def f(x):\\n    return \\"<done>\\" if x else {}\\n"}}; '
        '{"name": "terminal", "parameters": {"command": "python3 sol.py", "timeout": 30}}; '
        '{"name": "submit", "parameters": {}}'
    ),
    "mistral": (
        "<think>\nWrite it, test it.\n</think>\n\n"
        '[TOOL_CALLS][{"name": "write_file", "arguments": {"path": "sol.py", "content": '
        '"def f(x):\\n    return \\"<done>\\" if x else {}\\n"}}, '
        '{"name": "terminal", "arguments": {"command": "python3 sol.py", "timeout": 30}}, '
        '{"name": "submit", "arguments": {}}]'
    ),
    "deepseek": (
        "<think>\nWrite it, test it.\n</think>\n\n"
        f"{CALLS_BEGIN}{CALL_BEGIN}function{TOOL_SEP}write_file\n```json\n"
        '{"path": "sol.py", "content": "def f(x):\\n    return \\"<done>\\" if x else {}\\n"}'
        f"\n```{CALL_END}\n{CALL_BEGIN}function{TOOL_SEP}terminal\n```json\n"
        '{"command": "python3 sol.py", "timeout": 30}\n```'
        f"{CALL_END}\n{CALL_BEGIN}function{TOOL_SEP}submit\n```json\n{{}}\n```{CALL_END}"
        f"{CALLS_END}"
    ),
}
EXPECTED = [
    ("write_file", WRITE),
    ("terminal", {"command": "python3 sol.py", "timeout": 30}),
    ("submit", {}),
]


@pytest.mark.parametrize("name", sorted(SPEC_OUTPUTS))
def test_spec_output_parses_to_the_same_calls(name):
    parsed = parse_tool_calls(SPEC_OUTPUTS[name], name, id_prefix="call_2")
    assert parsed.errors == []
    assert [(c.name, c.arguments) for c in parsed.calls] == EXPECTED
    assert [c.id for c in parsed.calls] == ["call_2_0", "call_2_1", "call_2_2"]
    assert parsed.content == "<think>\nWrite it, test it.\n</think>"


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_format_call_round_trips(name):
    fmt = FORMATS[name]
    text = "Plan.\n" + fmt.format_calls(EXPECTED)
    parsed = fmt.parse(text)
    assert parsed.errors == []
    assert [(c.name, c.arguments) for c in parsed.calls] == EXPECTED
    assert parsed.content == "Plan."


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_calls_inside_thinking_are_ignored(name):
    fmt = FORMATS[name]
    text = f"<think>maybe {fmt.format_call('submit')}</think>\n" + fmt.format_call(
        "read_file", {"path": "a.py"}
    )
    parsed = fmt.parse(text)
    assert [c.name for c in parsed.calls] == ["read_file"] and parsed.errors == []
    # A lone closing tag (the template opened the reasoning) hides everything before it.
    parsed = fmt.parse(f"I could {fmt.format_call('submit')}</think>" + fmt.format_call(
        "terminal", {"command": "ls"}))
    assert [c.name for c in parsed.calls] == ["terminal"]
    parsed = fmt.parse("<think>still thinking " + fmt.format_call("submit"))
    assert parsed.calls == [] and "inside <think>" in parsed.errors[0]


TRUNCATED = {  # the last call cut off mid-argument: the earlier ones still run
    "hermes": SPEC_OUTPUTS["hermes"][:-25],
    "qwen3_coder": SPEC_OUTPUTS["qwen3_coder"].split("<tool_call>\n<function=submit>")[0]
    + "<tool_call>\n<function=terminal>\n<parameter=command>\npytho",
    "llama3": SPEC_OUTPUTS["llama3"][:-20],
    "mistral": SPEC_OUTPUTS["mistral"][:-20],
    "deepseek": SPEC_OUTPUTS["deepseek"].split(f"{CALL_BEGIN}function{TOOL_SEP}submit")[0]
    + f"{CALL_BEGIN}function{TOOL_SEP}submit\n```json\n{{",
}


@pytest.mark.parametrize("name", sorted(TRUNCATED))
def test_truncated_final_call_is_one_sentence_and_earlier_calls_run(name):
    parsed = parse_tool_calls(TRUNCATED[name], name)
    assert [c.name for c in parsed.calls] == ["write_file", "terminal"]
    [error] = parsed.errors
    assert error.count(". ") <= 2 and "Expected" in error
    assert "3 of 3" in error


@pytest.mark.parametrize("name", sorted(SPEC_OUTPUTS))
def test_final_closing_marker_eaten_by_a_stop_sequence_is_accepted(name):
    fmt = FORMATS[name]
    text = fmt.format_call("terminal", {"command": "pwd"})
    for closing in ("</tool_call>", CALLS_END, CALL_END):
        if text.endswith(closing):
            text = text[: -len(closing)].rstrip()
    parsed = fmt.parse(text)
    assert parsed.errors == [] and [c.arguments for c in parsed.calls] == [{"command": "pwd"}]


GARBAGE = [
    "", "   ", "hello", "{", "}", "[", "<tool_call>", "<tool_call></tool_call>",
    "<tool_call>{\"name\": 5}</tool_call>", "[TOOL_CALLS]", "[TOOL_CALLS]{", "[TOOL_CALLS][}",
    "[TOOL_CALLS]terminal[ARGS]{\"command\": 1}", "[TOOL_CALLS][1, 2]", '[TOOL_CALLS]["x"',
    "<|python_tag|>", "<|python_tag|>print(1)", '{"name": "terminal"', '{"name": null}',
    '{"name": "rm", "parameters": {}}', "<function=terminal>", "<tool_call><function=>",
    "<tool_call><function=terminal><parameter=command>ls</parameter><parameter=command>x"
    "</parameter></function></tool_call>",
    "<tool_call><function=read_file><parameter=path>a</parameter><parameter=limit>many"
    "</parameter></function></tool_call>",
    CALLS_BEGIN, CALL_BEGIN, f"{CALL_BEGIN}function{TOOL_SEP}", f"{CALL_BEGIN}{TOOL_SEP}x\n{{}}",
    f"{CALL_BEGIN}function{TOOL_SEP}terminal\n```json\n[1]\n```{CALL_END}",
    "[" * 100_000, "{" * 100_000, '{"name": "terminal", "parameters": ' + "[" * 50_000,
    "[TOOL_CALLS]" + "[" * 50_000, '{"name": "x", "parameters": {"a": 1' + "0" * 5000 + "}}",
    "\ud800", '{"name": "terminal", "parameters": {"command": "\\ud800"}}',
    "</think></think><think>", "<tool_call>\n```json\n{}\n```\n</tool_call>",
]


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_garbage_never_raises_and_explains_in_a_sentence(name):
    fmt = FORMATS[name]
    rng = random.Random(16)
    alphabet = '{}[]"<>:,;=/\\ \n\tnameargumentsparameters|_▁｜' + "".join(
        sorted({m for f in FORMATS.values() for m in f.markers})
    )
    samples = list(GARBAGE) + [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 80))) for _ in range(300)
    ]
    samples += [fmt.format_call("terminal", {"command": "ls"})[:cut] for cut in range(60)]
    for text in samples:
        parsed = fmt.parse(text)
        for error in parsed.errors:
            assert isinstance(error, str) and 10 < len(error) < 600 and "\n" not in error
            error.encode("utf-8")
        for call in parsed.calls:
            assert call.valid or call.error
            call.to_openai()
        assert parsed.calls or parsed.errors


def test_wrong_family_is_named_in_the_error():
    parsed = parse_tool_calls(SPEC_OUTPUTS["mistral"], "hermes")
    assert parsed.calls == [] and "Mistral" in parsed.errors[0]
    parsed = parse_tool_calls(SPEC_OUTPUTS["deepseek"], "llama3")
    assert "DeepSeek" in parsed.errors[0] and '"parameters"' in parsed.errors[0]
    parsed = parse_tool_calls(SPEC_OUTPUTS["hermes"], "qwen3_coder")
    assert [e for e in parsed.errors if "holds JSON" in e]


def test_schema_errors_and_types_per_format():
    parsed = parse_tool_calls(
        "<tool_call><function=read_file><parameter=path>a.py</parameter>"
        "<parameter=offset>3</parameter></function></tool_call>", "qwen3_coder")
    assert parsed.calls[0].arguments == {"path": "a.py", "offset": 3}
    parsed = parse_tool_calls('[TOOL_CALLS]terminal[ARGS]{"command": "ls"}', "mistral")
    assert parsed.calls[0].arguments == {"command": "ls"}
    parsed = parse_tool_calls('[TOOL_CALLS][{"name": "rm", "arguments": {}}]', "mistral")
    assert parsed.calls[0].valid is False and "Unknown tool" in parsed.calls[0].error
    parsed = parse_tool_calls(f'{CALLS_BEGIN}{CALL_BEGIN}terminal{TOOL_SEP}{{"command": "ls"}}'
                              f"{CALL_END}{CALLS_END}", "deepseek")  # V3.1 form
    assert parsed.calls[0].arguments == {"command": "ls"} and parsed.content == ""
    parsed = parse_tool_calls('{"name": "terminal", "parameters": {"command": 5}}', "llama3")
    assert "must be a string" in parsed.calls[0].error
    parsed = parse_tool_calls("x", "hermes", tools=("submit",))
    assert "submit" in parsed.errors[0]


def test_bash_blocks_work_in_every_format():
    for fmt in FORMATS.values():
        parsed = fmt.parse("```bash\nls -la\n```", parse_bash_blocks=True)
        assert [c.arguments for c in parsed.calls] == [{"command": "ls -la"}]


def test_get_and_detect(tiny_model_path):
    from model_families import FAMILIES, family_tokenizer

    assert get_tool_format(None).name == "hermes" and get_tool_format("Qwen3-Coder").name == (
        "qwen3_coder")
    with pytest.raises(ValueError, match="unknown tool_format"):
        get_tool_format("nope")
    assert detect_tool_format(FAMILIES["qwen3"][0]) == "hermes"
    assert detect_tool_format(family_tokenizer(tiny_model_path, "llama3.1")) == "llama3"
    assert get_tool_format(family_tokenizer(tiny_model_path, "tiny")).name == "hermes"
    assert detect_tool_format(FAMILIES["smollm2"][0]) is None
    # Fragments of the families' published templates.
    assert detect_tool_format(
        "{%- for tool_call in message.tool_calls %}{{- '<tool_call>\\n<function=' + "
        "tool_call.name + '>\\n' }}{{- '<parameter=' + args_name + '>\\n' }}") == "qwen3_coder"
    assert detect_tool_format("{{- '[TOOL_CALLS][' }}{{ tool_calls | tojson }}") == "mistral"
    assert detect_tool_format("{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + "
                              "'<｜tool▁sep｜>' + tool['function']['name']}}") == "deepseek"


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_system_prompt_states_the_format(name):
    prompt = default_system_prompt(5, tool_format=name)
    fmt = FORMATS[name]
    assert fmt.instructions() in prompt and "at most 5 turns" in prompt
    parsed = fmt.parse(fmt.format_call("submit"))
    assert [c.name for c in parsed.calls] == ["submit"]


@pytest.mark.parametrize("name", ["qwen3_coder", "deepseek"])
def test_env_reads_and_states_the_chosen_format(toy_task, name):
    import gymnasium as gym

    import opd_gym  # noqa: F401  (registers the ids)

    fmt = FORMATS[name]
    env = gym.make("opd_gym/Coding-v0", tasks=[toy_task], sandbox="docker", pool_size=1,
                   tool_format=name)
    try:
        _, info = env.reset(seed=0)
        assert fmt.instructions() in info["messages"][0]["content"]
        observation, _, _, _, _ = env.step("Hmm.")
        assert observation.startswith("Format error: No tool call")
        assert fmt._inline(fmt.format_call("submit")) in observation
        text = fmt.format_calls([
            ("write_file", {"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"}),
            ("terminal", {"command": "python3 -c 'import calc; print(calc.add(2, 3))'"}),
            ("submit", {}),
        ])
        _, reward, terminated, _, info = env.step(text)
        assert terminated and reward > 0.7
    finally:
        env.close()
