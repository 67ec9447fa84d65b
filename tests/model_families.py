"""Chat templates of real model families on the tiny model, for exactness tests on CPU.

Each template is written from the family's publicly documented chat format and keeps the
behaviour that matters for token-exact OPD (how tool calls and history are rendered):

- `tiny`: the tiny model's own ChatML template (Qwen2.5-style `<tool_call>` JSON; renders
  `tool_calls`, leaves history as it is);
- `qwen3`: ChatML with `<tool_call>` JSON and thinking: `<think>` blocks are kept only for
  assistant messages after the last user query and dropped from earlier ones (history is
  rewritten when a user message follows);
- `llama3.1`: Llama 3.1 headers and `<|eot_id|>`, tools in the first user message, at most
  one tool call rendered as `{"name": ..., "parameters": ...}` without the content, message
  content trimmed, tool results as `ipython` messages (JSON-encoded);
- `smollm2`: SmolLM2-Instruct's ChatML template, which renders no tools and drops
  `tool_calls` (only `content` is shown).

`family_tokenizer(model_dir, family)` returns the tiny tokenizer with that template, the
family's control tokens mapped onto the tiny vocabulary's reserved ids (so the tiny model
and any server already serving it score them unchanged) and the family's end-of-turn token
as eos.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from opd_gym.errors import ConfigError
from opd_gym.models.template import CHAT_TEMPLATE

QWEN3_TEMPLATE = (
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if messages[0].role == 'system' -%}{{- messages[0].content + '\\n\\n' -}}{%- endif -%}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' -}}"
    "{%- for tool in tools -%}{{- '\\n' -}}{{- tool | tojson -}}{%- endfor -%}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\\n</tool_call><|im_end|>\\n' -}}"
    "{%- elif messages[0].role == 'system' -%}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) -%}"
    "{%- for message in messages[::-1] -%}"
    "{%- set index = (messages|length - 1) - loop.index0 -%}"
    "{%- if ns.multi_step_tool and message.role == 'user' and message.content is string and "
    "not (message.content.startswith('<tool_response>') and "
    "message.content.endswith('</tool_response>')) -%}"
    "{%- set ns.multi_step_tool = false -%}{%- set ns.last_query_index = index -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- for message in messages -%}"
    "{%- set content = message.content if message.content is string else '' -%}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' -}}"
    "{%- elif message.role == 'assistant' -%}"
    "{%- set reasoning_content = '' -%}"
    "{%- if message.reasoning_content is string -%}"
    "{%- set reasoning_content = message.reasoning_content -%}"
    "{%- elif '</think>' in content -%}"
    "{%- set reasoning_content = content.split('</think>')[0].rstrip('\\n')"
    ".split('<think>')[-1].lstrip('\\n') -%}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}"
    "{%- endif -%}"
    "{%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) -%}"
    "{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + "
    "'\\n</think>\\n\\n' + content.lstrip('\\n') -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + content -}}"
    "{%- endif -%}"
    "{%- if message.tool_calls -%}"
    "{%- for tool_call in message.tool_calls -%}"
    "{%- if (loop.first and content) or (not loop.first) -%}{{- '\\n' -}}{%- endif -%}"
    "{%- if tool_call.function -%}{%- set tool_call = tool_call.function -%}{%- endif -%}"
    "{{- '<tool_call>\\n{\"name\": \"' + tool_call.name + '\", \"arguments\": ' -}}"
    "{%- if tool_call.arguments is string -%}{{- tool_call.arguments -}}"
    "{%- else -%}{{- tool_call.arguments | tojson -}}{%- endif -%}"
    "{{- '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- elif message.role == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}"
    "{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' -}}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}"
    "{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

LLAMA31_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- if not date_string is defined -%}{%- set date_string = '26 Jul 2024' -%}{%- endif -%}"
    "{%- if not tools is defined -%}{%- set tools = none -%}{%- endif -%}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set system_message = messages[0]['content'] | trim -%}"
    "{%- set messages = messages[1:] -%}"
    "{%- else -%}{%- set system_message = '' -%}{%- endif -%}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' -}}"
    "{%- if tools is not none -%}{{- 'Environment: ipython\\n' -}}{%- endif -%}"
    "{{- 'Cutting Knowledge Date: December 2023\\n' -}}"
    "{{- 'Today Date: ' + date_string + '\\n\\n' -}}"
    "{{- system_message -}}{{- '<|eot_id|>' -}}"
    "{%- if tools is not none -%}"
    "{%- if messages | length != 0 -%}"
    "{%- set first_user_message = messages[0]['content'] | trim -%}"
    "{%- set messages = messages[1:] -%}"
    "{%- else -%}"
    "{{- raise_exception('Cannot put tools in the first user message when there is no first "
    "user message!') -}}"
    "{%- endif -%}"
    "{{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}"
    "{{- 'Given the following functions, please respond with a JSON for a function call ' -}}"
    "{{- 'with its proper arguments that best answers the given prompt.\\n\\n' -}}"
    "{{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of "
    "argument name and its value}.' -}}"
    "{{- 'Do not use variables.\\n\\n' -}}"
    "{%- for t in tools -%}{{- t | tojson(indent=4) -}}{{- '\\n\\n' -}}{%- endfor -%}"
    "{{- first_user_message + '<|eot_id|>' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if not (message.role == 'ipython' or message.role == 'tool' or "
    "'tool_calls' in message) -%}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
    "message['content'] | trim + '<|eot_id|>' -}}"
    "{%- elif 'tool_calls' in message -%}"
    "{%- if not message.tool_calls | length == 1 -%}"
    "{{- raise_exception('This model only supports single tool-calls at once!') -}}"
    "{%- endif -%}"
    "{%- set tool_call = message.tool_calls[0].function -%}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}"
    "{{- '{\"name\": \"' + tool_call.name + '\", ' -}}"
    "{{- '\"parameters\": ' -}}{{- tool_call.arguments | tojson -}}{{- '}' -}}"
    "{{- '<|eot_id|>' -}}"
    "{%- elif message.role == 'tool' or message.role == 'ipython' -%}"
    "{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' -}}"
    "{%- if message.content is mapping or message.content is iterable -%}"
    "{{- message.content | tojson -}}"
    "{%- else -%}{{- message.content -}}{%- endif -%}"
    "{{- '<|eot_id|>' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}"
    "{%- endif -%}"
)

SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

LLAMA_TOKENS = ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                "<|python_tag|>")

# family -> (template, control tokens mapped onto reserved ids, eos, bos)
FAMILIES: dict[str, tuple[str, tuple[str, ...], str, str | None]] = {
    "tiny": (CHAT_TEMPLATE, (), "<|im_end|>", None),
    "qwen3": (QWEN3_TEMPLATE, (), "<|im_end|>", None),
    "llama3.1": (LLAMA31_TEMPLATE, LLAMA_TOKENS, "<|eot_id|>", "<|begin_of_text|>"),
    "smollm2": (SMOLLM2_TEMPLATE, (), "<|im_end|>", None),
}


# Assistant turns that exercise each family's history behaviour: thinking, compact JSON,
# canonical JSON, a format error with trailing spaces (content trimmed by Llama 3.1; the user
# note after it makes Qwen3 drop earlier thinking), a failing command, then submit.
PROBE_TURNS = (
    "<think>\nI should look at the files first.\n</think>\n\nLet me list them.\n<tool_call>\n"
    '{"name":"terminal","arguments":{"command":"ls"}}\n</tool_call>',
    '<tool_call>\n{"name": "terminal", "arguments": {"command": "echo hi; exit 1"}}\n'
    "</tool_call>",
    "I am not sure what to do next.  ",
    "<think>\nRead the task again.\n</think>\n\n<tool_call>\n"
    '{"name": "terminal", "arguments": {"command": "cat missing.txt"}}\n</tool_call>',
    '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>',
)


def family_tokenizer_dir(model_dir: str | Path, family: str, out_dir: str | Path) -> Path:
    """Write the tiny tokenizer of `model_dir` with `family`'s template into `out_dir`."""
    if family not in FAMILIES:
        raise ConfigError(f"unknown family {family!r}; known: {sorted(FAMILIES)}")
    template, tokens, eos, bos = FAMILIES[family]
    src, out = Path(model_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    reserved = [t for t in data["added_tokens"] if t["content"].startswith("<|reserved_")]
    if len(reserved) < len(tokens):
        raise ConfigError(f"the tokenizer has {len(reserved)} reserved ids, {family} needs "
                         f"{len(tokens)}")
    for entry, token in zip(reserved, tokens, strict=False):
        entry["content"] = token
    (out / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    config = json.loads((src / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["eos_token"] = eos
    if bos is not None:
        config["bos_token"] = bos
    config.pop("chat_template", None)
    config.pop("added_tokens_decoder", None)
    (out / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    (out / "chat_template.jinja").write_text(template, encoding="utf-8")
    return out


def family_tokenizer(model_dir: str | Path, family: str) -> Any:
    """The tiny tokenizer with `family`'s chat template and control tokens (see module doc)."""
    from transformers import AutoTokenizer

    tmp = Path(tempfile.mkdtemp(prefix=f"opd-gym-{family}-"))
    try:
        return AutoTokenizer.from_pretrained(family_tokenizer_dir(model_dir, family, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
