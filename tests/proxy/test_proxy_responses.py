"""The recording proxy speaking OpenAI's Responses API to the official `openai` client, over
the real in-process tiny model: converted to the chat request, rendered with the template
once, recorded token-exact, answered (plain and streamed) as a Response with output items."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from opd_gym.models.tokenizer import render_ids
from opd_gym.proxy import responses as responses_api
from opd_gym.proxy.backends.transformers import (
    TransformersBackend,
    _as_chunks,
    template_messages,
)
from opd_gym.proxy.protocol import sampled_from_response

TOOLS = [{"type": "function", "name": "terminal",
          "description": "Run a shell command in the workspace.",
          "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                         "required": ["command"]}}]
CHAT_TOOLS = [{"type": "function", "function": {
    "name": "terminal", "description": "Run a shell command in the workspace.",
    "parameters": TOOLS[0]["parameters"]}}]
INSTRUCTIONS = "You are a careful coding assistant."


def test_a_responses_call_is_recorded_token_exact_and_answered_with_output_items(
        hf_proxy, client_for, tiny_tokenizer):
    key = hf_proxy.open_episode()
    reply = client_for(hf_proxy.base_url(key)).responses.create(
        model="tiny", instructions=INSTRUCTIONS, input="List the files, please.",
        tools=TOOLS, max_output_tokens=12, temperature=0.0)
    (turn,) = hf_proxy.close_episode(key)
    internal = [{"role": "system", "content": INSTRUCTIONS},
                {"role": "user", "content": "List the files, please."}]
    assert turn.messages == internal and turn.tools == CHAT_TOOLS
    assert turn.prompt_ids == render_ids(tiny_tokenizer, template_messages(internal),
                                         CHAT_TOOLS, add_generation_prompt=True)
    assert reply.object == "response" and reply.id.startswith("resp_")
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == \
        (len(turn.prompt_ids), len(turn.token_ids))
    assert reply.output_text == (turn.content or "")
    assert reply.status == ("incomplete" if turn.finish_reason == "length" else "completed")
    assert turn.sampling == {"temperature": 0.0, "max_tokens": 12}


def test_a_streamed_responses_call_sends_responses_events_and_records_the_same_turn(
        hf_proxy, client_for):
    key = hf_proxy.open_episode()
    client = client_for(hf_proxy.base_url(key))
    args = {"model": "tiny", "input": "Say hello.", "max_output_tokens": 8,
            "temperature": 0.0}
    plain = client.responses.create(**args)
    events = list(client.responses.create(**args, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert "response.output_item.added" in kinds and "response.output_item.done" in kinds
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == plain.output_text
    last = events[-1].response
    assert (last.status, last.usage.output_tokens) == (plain.status, plain.usage.output_tokens)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    one, two = hf_proxy.close_episode(key)
    assert two.stream and not one.stream
    assert (two.prompt_ids, two.token_ids, two.logprobs) == \
        (one.prompt_ids, one.token_ids, one.logprobs)


def test_function_call_items_become_the_templates_tool_messages(hf_proxy, client_for,
                                                               tiny_tokenizer):
    key = hf_proxy.open_episode()
    items = [{"role": "developer", "content": "Use the terminal."},
             {"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "List the files."}]},
             {"type": "message", "role": "assistant",
              "content": [{"type": "output_text", "text": "Let me look."}]},
             {"type": "function_call", "call_id": "call_1", "name": "terminal",
              "arguments": '{"command": "ls"}'},
             {"type": "function_call_output", "call_id": "call_1", "output": "a.py"}]
    client_for(hf_proxy.base_url(key)).responses.create(model="tiny", input=items,
                                                        tools=TOOLS, max_output_tokens=4)
    (turn,) = hf_proxy.close_episode(key)
    assert turn.messages == [
        {"role": "system", "content": "Use the terminal."},
        {"role": "user", "content": "List the files."},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "terminal", "arguments": '{"command": "ls"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py"}]
    assert turn.prompt_ids == render_ids(tiny_tokenizer, template_messages(turn.messages),
                                         CHAT_TOOLS, add_generation_prompt=True)
    prompt = tiny_tokenizer.decode(turn.prompt_ids)
    assert '{"name": "terminal", "arguments": {"command": "ls"}}' in prompt
    assert "<tool_response>\na.py\n</tool_response>" in prompt


def test_a_sampled_tool_call_is_answered_as_a_function_call_item(tiny_model, tiny_tokenizer):
    backend = TransformersBackend(tiny_model, tokenizer=tiny_tokenizer)
    eos = tiny_tokenizer.eos_token_id
    text = '<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}}\n</tool_call>'
    ids = [*tiny_tokenizer.encode(text, add_special_tokens=False), eos]
    chat = {"messages": [{"role": "user", "content": "go"}], "tools": CHAT_TOOLS}
    response = backend._response(chat, [1, 2], ids, [-0.1] * len(ids), eos)
    sampled = sampled_from_response(response)
    answer = responses_api.from_chat(response, sampled, {"tools": TOOLS})
    (item,) = answer["output"]
    assert (item["type"], item["name"], json.loads(item["arguments"])) == \
        ("function_call", "terminal", {"command": "ls"})
    assert item["call_id"] == response["choices"][0]["message"]["tool_calls"][0]["id"]
    stream = responses_api.ResponsesStream({"model": "tiny", "tools": TOOLS})

    async def chunks():
        return [chunk async for chunk in _as_chunks(response, chat)]

    events = [event for chunk in asyncio.run(chunks()) for event in stream.feed(chunk)]
    events += stream.finish(sampled)
    data = [json.loads(e.decode().split("data: ", 1)[1]) for e in events]
    arguments = "".join(d["delta"] for d in data
                        if d["type"] == "response.function_call_arguments.delta")
    assert json.loads(arguments) == {"command": "ls"}
    final = data[-1]
    assert final["type"] == "response.completed"
    assert final["response"]["output"][0]["call_id"] == item["call_id"]


@pytest.mark.parametrize("body", [
    b"{not json", b'{"model": "tiny"}', b'{"input": []}',
    b'{"input": [{"type": "reasoning", "summary": []}]}',
    b'{"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}',
    b'{"input": "hi", "tools": [{"type": "web_search"}]}',
    b'{"input": "hi", "previous_response_id": "resp_1"}',
    b'{"input": "hi", "stream": "yes"}',
])
def test_malformed_or_refused_requests_get_openai_errors_and_are_not_recorded(hf_proxy,
                                                                              body):
    key = hf_proxy.open_episode()
    response = httpx.post(f"{hf_proxy.base_url(key)}/responses", content=body,
                          headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    assert hf_proxy.close_episode(key) == []


def test_the_sdk_raises_its_own_errors_for_refused_calls(hf_proxy, client_for):
    with pytest.raises(openai.NotFoundError, match="not open"):
        client_for(hf_proxy.base_url("never-opened")).responses.create(model="tiny",
                                                                       input="hi")
    key = hf_proxy.open_episode()
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        client_for(hf_proxy.base_url(key)).responses.create(
            model="tiny", input="hi", previous_response_id="resp_1")
    assert hf_proxy.close_episode(key) == []
