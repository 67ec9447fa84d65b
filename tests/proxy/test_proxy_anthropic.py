"""The recording proxy speaking Anthropic's Messages API to the official `anthropic` client,
over the real in-process tiny model: converted to the chat request, rendered with the
template once, recorded token-exact, answered (plain and streamed) in Anthropic's shape."""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest

from opd_gym.models.tokenizer import render_ids
from opd_gym.proxy import anthropic as messages_api
from opd_gym.proxy.backends.transformers import TransformersBackend, template_messages

SYSTEM = [{"type": "text", "text": "You are a careful coding assistant."},
          {"type": "text", "text": "Use the terminal."}]
TOOLS = [{"name": "terminal", "description": "Run a shell command in the workspace.",
          "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                           "required": ["command"]}}]
CHAT_TOOLS = [{"type": "function", "function": {
    "name": "terminal", "description": "Run a shell command in the workspace.",
    "parameters": TOOLS[0]["input_schema"]}}]
USER = [{"role": "user", "content": "List the files, please."}]


@pytest.fixture
def claude(hf_proxy):
    """`claude(key)`: an official Anthropic client recording into episode `key`."""
    made = []

    def make(key: str | None = None, **kwargs):
        url = hf_proxy.url if key is None else f"{hf_proxy.url}/{key}"
        made.append(anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0,
                                        **kwargs))
        return made[-1]

    yield make
    for client in made:
        client.close()


def test_a_messages_call_is_recorded_token_exact_and_answered_in_anthropic_shape(
        hf_proxy, claude, tiny_tokenizer):
    key = hf_proxy.open_episode()
    reply = claude(key).messages.create(model="tiny", system=SYSTEM, messages=USER,
                                        tools=TOOLS, max_tokens=12,
                                        extra_body={"temperature": 0.0})
    (turn,) = hf_proxy.close_episode(key)
    internal = [{"role": "system",
                 "content": "You are a careful coding assistant.\n\nUse the terminal."}, *USER]
    assert turn.messages == internal and turn.tools == CHAT_TOOLS
    # the prompt is the template's rendering of the converted messages and tools, exactly
    assert turn.prompt_ids == render_ids(tiny_tokenizer, template_messages(internal),
                                         CHAT_TOOLS, add_generation_prompt=True)
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == \
        (len(turn.prompt_ids), len(turn.token_ids))
    assert reply.type == "message" and reply.role == "assistant" and reply.id.startswith("msg_")
    text = "".join(b.text for b in reply.content if b.type == "text")
    assert text == (turn.content or "")
    assert reply.stop_reason == {"stop": "end_turn", "length": "max_tokens",
                                 "tool_calls": "tool_use"}[turn.finish_reason]
    assert turn.sampling == {"temperature": 0.0, "max_tokens": 12}


def test_a_streamed_messages_call_sends_anthropic_events_and_records_the_same_turn(
        hf_proxy, claude):
    key = hf_proxy.open_episode()
    client = claude(key)
    # greedy (this SDK takes temperature only as an extra), so both calls sample the same
    args = {"model": "tiny", "system": "Be brief.", "messages": USER, "max_tokens": 10,
            "extra_body": {"temperature": 0.0}}
    plain = client.messages.create(**args)
    with client.messages.stream(**args) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "message_delta" in kinds
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in plain.content]
    assert (final.stop_reason, final.usage.output_tokens) == \
        (plain.stop_reason, plain.usage.output_tokens)
    one, two = hf_proxy.close_episode(key)
    assert two.stream and not one.stream
    assert (two.prompt_ids, two.token_ids, two.logprobs) == \
        (one.prompt_ids, one.token_ids, one.logprobs)
    assert final.usage.input_tokens == len(two.prompt_ids)


def test_tool_use_and_tool_result_become_the_templates_tool_messages(hf_proxy, claude,
                                                                    tiny_tokenizer):
    key = hf_proxy.open_episode()
    history = [*USER,
               {"role": "assistant", "content": [
                   {"type": "text", "text": "Let me look."},
                   {"type": "tool_use", "id": "toolu_1", "name": "terminal",
                    "input": {"command": "ls"}}]},
               {"role": "user", "content": [
                   {"type": "tool_result", "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "a.py\nb.py"}]},
                   {"type": "text", "text": "Now run the tests."}]}]
    claude(key).messages.create(model="tiny", messages=history, tools=TOOLS, max_tokens=4)
    (turn,) = hf_proxy.close_episode(key)
    assert turn.messages == [
        *USER,
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "toolu_1", "type": "function",
             "function": {"name": "terminal", "arguments": '{"command": "ls"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "a.py\nb.py"},
        {"role": "user", "content": "Now run the tests."}]
    assert turn.prompt_ids == render_ids(tiny_tokenizer, template_messages(turn.messages),
                                         CHAT_TOOLS, add_generation_prompt=True)
    prompt = tiny_tokenizer.decode(turn.prompt_ids)
    assert '<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}}' in prompt
    assert "<tool_response>\na.py\nb.py\n</tool_response>" in prompt


def test_a_sampled_tool_call_is_answered_as_tool_use_plain_and_streamed(tiny_model,
                                                                        tiny_tokenizer):
    # the backend's own answer for sampled text holding a call in the template's format
    backend = TransformersBackend(tiny_model, tokenizer=tiny_tokenizer)
    eos = tiny_tokenizer.eos_token_id
    text = 'Looking.\n<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}}\n' \
           '</tool_call>'
    ids = [*tiny_tokenizer.encode(text, add_special_tokens=False), eos]
    body = {"messages": USER, "tools": CHAT_TOOLS}
    response = backend._response(body, [1, 2], ids, [-0.1] * len(ids), eos)
    from opd_gym.proxy.protocol import sampled_from_response

    sampled = sampled_from_response(response)
    answer = messages_api.from_chat(response, sampled)
    assert answer["stop_reason"] == "tool_use"
    assert [(b["type"], b.get("text"), b.get("name"), b.get("input")) for b in answer["content"]] \
        == [("text", "Looking.", None, None), ("tool_use", None, "terminal", {"command": "ls"})]
    # the same call as stream events: a text block, then a tool_use block with its JSON
    stream = messages_api.MessagesStream("tiny")
    events = []
    import asyncio

    from opd_gym.proxy.backends.transformers import _as_chunks

    async def chunks():
        return [chunk async for chunk in _as_chunks(response, body)]

    for chunk in asyncio.run(chunks()):
        events += stream.feed(chunk)
    events += stream.finish(sampled)
    data = [json.loads(e.decode().split("data: ", 1)[1]) for e in events]
    starts = [d["content_block"]["type"] for d in data if d["type"] == "content_block_start"]
    assert starts == ["text", "tool_use"]
    partial = "".join(d["delta"]["partial_json"] for d in data
                      if d["type"] == "content_block_delta"
                      and d["delta"]["type"] == "input_json_delta")
    assert json.loads(partial) == {"command": "ls"}
    assert data[-2]["delta"]["stop_reason"] == "tool_use" and data[-1]["type"] == "message_stop"


@pytest.mark.parametrize("body", [
    b"{not json", b'{"model": "tiny", "max_tokens": 4}',
    b'{"messages": [{"role": "user", "content": "hi"}]}',  # no max_tokens
    b'{"max_tokens": 4, "messages": [{"role": "tool", "content": "hi"}]}',
    b'{"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image", '
    b'"source": {}}]}]}',
    b'{"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], "tools": '
    b'[{"type": "web_search_20250305", "name": "web_search"}]}',
    b'{"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], '
    b'"stop_sequences": ["\\n"]}',  # the in-process backend cannot apply them: refused
])
def test_malformed_or_refused_messages_get_anthropic_errors_and_are_not_recorded(hf_proxy,
                                                                                  body):
    key = hf_proxy.open_episode()
    response = httpx.post(f"{hf_proxy.url}/{key}/v1/messages", content=body,
                          headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert error["error"]["message"]
    assert hf_proxy.close_episode(key) == []


def test_the_sdk_raises_its_own_errors_for_refused_calls(hf_proxy, claude):
    with pytest.raises(anthropic.NotFoundError, match="not open"):
        claude("never-opened").messages.create(model="tiny", messages=USER, max_tokens=2)
    key = hf_proxy.open_episode()
    with pytest.raises(anthropic.BadRequestError, match="tool_use_id"):
        claude(key).messages.create(model="tiny", max_tokens=2, messages=[
            {"role": "user", "content": [{"type": "tool_result", "content": "x"}]}])
    assert hf_proxy.close_episode(key) == []
    # a route the proxy does not serve: a clear Anthropic-shaped 404, not an HTML page
    missing = httpx.post(f"{hf_proxy.url}/v1/messages/batches", json={})
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "not_found_error"


def test_count_tokens_is_the_templates_count_and_models_list_in_anthropic_shape(
        hf_proxy, claude, tiny_tokenizer):
    key = hf_proxy.open_episode()
    client = claude(key)
    counted = client.messages.count_tokens(model="tiny", system=SYSTEM, messages=USER,
                                           tools=TOOLS)
    reply = client.messages.create(model="tiny", system=SYSTEM, messages=USER, tools=TOOLS,
                                   max_tokens=2)
    (turn,) = hf_proxy.close_episode(key)
    assert counted.input_tokens == len(turn.prompt_ids) == reply.usage.input_tokens
    # without an episode too: counting records nothing
    assert claude().messages.count_tokens(model="tiny", messages=USER).input_tokens == len(
        render_ids(tiny_tokenizer, USER, None, add_generation_prompt=True))
    assert [m.id for m in claude().models.list().data] == ["tiny"]
