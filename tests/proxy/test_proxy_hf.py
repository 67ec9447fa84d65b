"""The recording proxy over an in-process transformers model, called by the official OpenAI
client through a real uvicorn server on loopback: exact ids, logprobs, streaming, tools."""

from __future__ import annotations

import json

import httpx
import pytest
import torch

from opd_gym.models.tokenizer import render_ids
from opd_gym.proxy.backends.transformers import TransformersBackend, template_messages

MESSAGES = [{"role": "system", "content": "You are a careful coding assistant."},
            {"role": "user", "content": "List the files, please."}]


def _forward_logprobs(model, prompt, ids, temperature=1.0):
    """Each sampled id's logprob from one independent full forward pass (no cache)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + ids])).logits[0].double()
    rows = torch.log_softmax(logits[len(prompt) - 1:-1] / temperature, dim=-1)
    return rows[torch.arange(len(ids)), torch.tensor(ids)].tolist()


def test_recorded_turns_are_token_exact(hf_proxy, client_for, tiny_model, tiny_tokenizer,
                                       tools):
    key = hf_proxy.open_episode()
    client = client_for(hf_proxy.base_url(key))
    first = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=tools,
                                           max_tokens=12, seed=1)
    # the client sees a plain chat completion: nothing the proxy added for itself
    raw = first.model_dump()
    assert raw["choices"][0]["logprobs"] is None and "prompt_token_ids" not in raw
    messages = [*MESSAGES, first.choices[0].message.model_dump(exclude_none=True),
                {"role": "user", "content": "Now run the tests."}]
    client.chat.completions.create(model="tiny", messages=messages, tools=tools,
                                   max_tokens=12, seed=2, temperature=0.7)
    turns = hf_proxy.close_episode(key)
    assert len(turns) == 2
    for turn, msgs, temperature in zip(turns, (MESSAGES, messages), (1.0, 0.7), strict=True):
        # prompt ids: the chat template with the tools, exactly as the model saw them
        assert turn.prompt_ids == render_ids(tiny_tokenizer, template_messages(msgs), tools,
                                             add_generation_prompt=True)
        assert 1 <= len(turn.token_ids) == len(turn.logprobs) <= 12
        # logprobs: those of the distribution sampled from, checked by a separate pass
        expected = _forward_logprobs(tiny_model, turn.prompt_ids, turn.token_ids, temperature)
        assert turn.logprobs == pytest.approx(expected, abs=1e-4)
        assert turn.tools == tools and turn.messages == msgs and not turn.stream
    assert turns[0].content == first.choices[0].message.content
    assert turns[0].sampling == {"seed": 1, "max_tokens": 12}
    assert turns[1].extends_previous in (True, False)  # rendered history may differ: said


def test_streaming_passes_through_and_records_the_same_turn(hf_proxy, client_for):
    key = hf_proxy.open_episode()
    client = client_for(hf_proxy.base_url(key))
    args = {"model": "tiny", "messages": MESSAGES, "max_tokens": 10, "seed": 5}
    plain = client.chat.completions.create(**args)
    chunks = list(client.chat.completions.create(**args, stream=True,
                                                 stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    assert text == plain.choices[0].message.content
    one, two = hf_proxy.close_episode(key)
    assert two.stream and not one.stream
    assert (two.prompt_ids, two.token_ids, two.logprobs) == \
        (one.prompt_ids, one.token_ids, one.logprobs)
    assert two.finish_reason == chunks[-2].choices[0].finish_reason


def test_logprobs_and_ids_reach_a_client_that_asks_for_them(hf_proxy, client_for):
    key = hf_proxy.open_episode()
    reply = client_for(hf_proxy.base_url(key)).chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=6, logprobs=True,
        extra_body={"return_token_ids": True})
    (turn,) = hf_proxy.close_episode(key)
    assert [e.logprob for e in reply.choices[0].logprobs.content] == turn.logprobs
    assert reply.model_extra["prompt_token_ids"] == turn.prompt_ids


def test_header_names_the_episode_and_the_control_api_serves_turns(hf_proxy, client_for):
    opened = httpx.post(f"{hf_proxy.url}/opd/episodes", json={"key": "hdr-1"}).json()
    assert opened == {"key": "hdr-1", "base_url": hf_proxy.base_url("hdr-1")}
    client = client_for(f"{hf_proxy.url}/v1", default_headers={"X-OPD-Episode": "hdr-1"})
    assert [m.id for m in client.models.list().data] == ["tiny"]
    client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=4)
    turns = httpx.get(f"{hf_proxy.url}/opd/episodes/hdr-1").json()["turns"]
    assert len(turns) == 1 and turns[0]["token_ids"] == hf_proxy.turns("hdr-1")[0].token_ids
    closed = httpx.delete(f"{hf_proxy.url}/opd/episodes/hdr-1").json()
    assert json.dumps(closed["turns"]) == json.dumps(turns)
    assert httpx.get(f"{hf_proxy.url}/opd/episodes/hdr-1").status_code == 404


def test_tool_calls_in_the_template_format_come_back_as_openai_tool_calls(tiny_model,
                                                                          tiny_tokenizer,
                                                                          tools):
    backend = TransformersBackend(tiny_model, tokenizer=tiny_tokenizer)
    text = 'Let me look.\n<tool_call>{"name": "terminal", "arguments": {"command": "ls"}}' \
           '</tool_call>'
    content, calls = backend._tool_calls(text, tools)
    assert content == "Let me look."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] \
        == [("terminal", {"command": "ls"})]
    assert backend._tool_calls("no call here", tools) == ("no call here", None)
    # an assistant turn with OpenAI tool calls (arguments as a JSON string) renders
    history = [*MESSAGES, {"role": "assistant", "content": "", "tool_calls": calls},
               {"role": "tool", "tool_call_id": calls[0]["id"], "content": "a.py"}]
    ids = backend.prompt_ids({"messages": history, "tools": tools})
    assert '"command": "ls"' in tiny_tokenizer.decode(ids)


def test_a_template_whose_tool_format_is_unknown_gets_its_text_back_unparsed(tiny_model,
                                                                             tiny_model_path,
                                                                             tools):
    from transformers import AutoTokenizer

    plain = AutoTokenizer.from_pretrained(tiny_model_path)  # its own copy: not the shared one
    plain.chat_template = ("{%- for m in messages -%}{{- '<|im_start|>' + m['role'] + '\\n' + "
                           "m['content'] + '<|im_end|>\\n' -}}{%- endfor -%}")
    backend = TransformersBackend(tiny_model, tokenizer=plain)
    text = '<tool_call>{"name": "terminal", "arguments": {"command": "ls"}}</tool_call>'
    # no format is guessed for a template that shows none: the text is the answer
    assert backend._tool_calls(text, tools) == (text, None)


def test_top_k_is_applied_and_the_logprobs_are_of_the_top_k_distribution(hf_proxy, client_for,
                                                                          tiny_model):
    key = hf_proxy.open_episode()
    client_for(hf_proxy.base_url(key)).chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=6, seed=3, extra_body={"top_k": 2})
    (turn,) = hf_proxy.close_episode(key)
    with torch.no_grad():
        logits = tiny_model(input_ids=torch.tensor([turn.prompt_ids + turn.token_ids])
                            ).logits[0, len(turn.prompt_ids) - 1:-1].double()
    top = logits.topk(2, dim=-1)
    for row, (values, ids), token, logprob in zip(logits, zip(top.values, top.indices,
                                                              strict=True),
                                                  turn.token_ids, turn.logprobs, strict=True):
        assert token in ids.tolist()  # drawn from the two most likely ids only
        assert logprob == pytest.approx(float(row[token] - values.logsumexp(0)), abs=1e-4)
    assert turn.sampling["top_k"] == 2
