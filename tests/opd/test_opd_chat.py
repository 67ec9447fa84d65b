"""Token-exact teacher inputs: turn scope, hint placement, episode scope, tokenizer checks."""

from __future__ import annotations

import pytest

from opd_gym.models import build_tiny_model
from opd_gym.opd.chat import (
    HINT_PREFIX,
    EpisodeTurn,
    build_episode_ids,
    build_teacher_ids,
    check_same_tokenizer,
    make_hint_message,
    plan_episode,
    render_ids,
)


def test_turn_scope_appends_student_ids_verbatim(tiny_tokenizer, tools, episode):
    turns, hints = episode
    turn = turns[1]
    odd_ids = [7, 7, 1, 2, 3]  # not what re-tokenizing any text would give: kept as sampled
    ids, span = build_teacher_ids(tiny_tokenizer, turn.context_messages, tools, None, odd_ids)
    prompt = render_ids(tiny_tokenizer, turn.context_messages, tools, add_generation_prompt=True)
    assert ids == prompt + odd_ids and span == (len(prompt), len(prompt) + 5)


def test_hint_before_turn_and_in_task_message(tiny_tokenizer, tools, episode):
    turns, hints = episode
    turn, hint = turns[2], hints[2]
    assert hint["role"] == "user" and hint["content"].startswith(HINT_PREFIX)
    ids, span = build_teacher_ids(tiny_tokenizer, turn.context_messages, tools, hint,
                                  turn.student_ids)
    text = tiny_tokenizer.decode(ids[:span[0]])
    assert text.endswith(f"<|im_start|>user\n{hint['content']}<|im_end|>\n"
                         "<|im_start|>assistant\n")
    assert ids[span[0]:] == list(turn.student_ids)

    ids, span = build_teacher_ids(tiny_tokenizer, turn.context_messages, tools, hint,
                                  turn.student_ids, placement="task_message")
    text = tiny_tokenizer.decode(ids[:span[0]])
    assert f"Fix it.\n\n{hint['content']}<|im_end|>" in text
    assert text.count(HINT_PREFIX) == 1 and text.endswith("</tool_response><|im_end|>\n"
                                                         "<|im_start|>assistant\n")
    with pytest.raises(ValueError, match="placement"):
        build_teacher_ids(tiny_tokenizer, turn.context_messages, tools, hint, [1],
                          placement="elsewhere")


def test_context_ids_are_used_verbatim(tiny_tokenizer, tools, episode):
    turns, hints = episode
    turn = turns[3]
    context_ids = render_ids(tiny_tokenizer, turn.context_messages, tools,
                             add_generation_prompt=True)
    for hint in (None, hints[3]):
        a = build_teacher_ids(tiny_tokenizer, turn.context_messages, tools, hint,
                              turn.student_ids, context_ids=context_ids)
        b = build_teacher_ids(tiny_tokenizer, turn.context_messages, tools, hint,
                              turn.student_ids)
        assert a == b
    with pytest.raises(ValueError, match="generation prompt"):
        build_teacher_ids(tiny_tokenizer, turn.context_messages, tools, hints[3],
                          turn.student_ids, context_ids=context_ids[:-1])


def test_episode_without_hints_equals_last_turn_input(tiny_tokenizer, tools, episode):
    turns, _ = episode
    ids, spans = build_episode_ids(tiny_tokenizer, turns, tools)
    last = turns[-1]
    want, span = build_teacher_ids(tiny_tokenizer, last.context_messages, tools, None,
                                   last.student_ids)
    assert ids == want and spans[-1] == span
    for turn, (s, e) in zip(turns, spans, strict=True):
        assert ids[s:e] == list(turn.student_ids)
        t_ids, t_span = build_teacher_ids(tiny_tokenizer, turn.context_messages, tools, None,
                                          turn.student_ids)
        assert ids[:e] == t_ids and t_span == (s, e)


def test_episode_with_hints_inserts_each_before_its_turn(tiny_tokenizer, tools, episode):
    turns, hints = episode
    hinted = [EpisodeTurn(t.context_messages, t.student_ids, h) for t, h in zip(turns, hints,
                                                                                 strict=True)]
    ids, spans = build_episode_ids(tiny_tokenizer, hinted, tools)
    text = tiny_tokenizer.decode(ids)
    assert text.count(HINT_PREFIX) == len(turns)
    for (s, e), turn, hint in zip(spans, hinted, hints, strict=True):
        assert ids[s:e] == list(turn.student_ids)
        before = tiny_tokenizer.decode(ids[:s])
        assert before.endswith(f"{hint['content']}<|im_end|>\n<|im_start|>assistant\n")
    # The first turn's prefix is exactly the turn-scope input with its hint.
    first, span = build_teacher_ids(tiny_tokenizer, turns[0].context_messages, tools, hints[0],
                                    turns[0].student_ids)
    assert ids[:spans[0][1]] == first and span == spans[0]


def test_episode_never_guesses_a_tail_for_ids_the_template_would_not_render(
        tiny_tokenizer, tools, episode):
    turns, _ = episode
    eos = tiny_tokenizer.eos_token_id
    sampled = [9, 10, 11, eos]  # differs from the template's rendering of that message
    cut = [12, 13]  # truncated: no end-of-turn token
    changed = [EpisodeTurn(turns[0].context_messages, sampled),
               EpisodeTurn(turns[1].context_messages, cut),
               turns[2], turns[3]]
    plan = plan_episode(tiny_tokenizer, changed, tools)
    # turn 1's rendered prompt does not extend P_0 + sampled, nor turn 2's P_1 + cut: each
    # starts a new pass from its own prompt, said per turn; turn 3 extends turn 2 again
    assert [p.turns for p in plan.passes] == [[0], [1], [2, 3]]
    for t in (1, 2):
        assert "does not extend the sequence" in plan.notes[t] and "new pass" in plan.notes[t]
    assert "new pass" not in plan.notes[3] and "rendered messages" in plan.notes[3]
    for p in plan.passes:
        first = changed[p.turns[0]]
        want, span = build_teacher_ids(tiny_tokenizer, first.context_messages, tools, None,
                                       first.student_ids)
        assert p.ids[:span[1]] == want and p.spans[0] == span  # exactly the turn-scope input
        for t, (s, e) in zip(p.turns, p.spans, strict=True):
            assert p.ids[s:e] == list(changed[t].student_ids)
    refused = plan_episode(tiny_tokenizer, changed, tools, on_break="refuse")
    assert sorted(refused.refused) == [1, 2]
    with pytest.raises(ValueError, match="must extend"):
        build_episode_ids(tiny_tokenizer, changed, tools)


def test_episode_from_prompt_ids_equals_the_students_contexts(tiny_tokenizer, tools, episode):
    turns, hints = episode
    # prompt ids that differ from any rendering (a non-canonical split of the system text):
    # the one-pass sequence must be built from them, not from the template
    odd = tiny_tokenizer.encode(" x", add_special_tokens=False)
    prompts, sequence = [], []
    for t, turn in enumerate(turns):
        rendered = render_ids(tiny_tokenizer, turn.context_messages, tools,
                              add_generation_prompt=True)
        if t == 0:
            prompt = odd + rendered
        else:
            prompt = sequence + rendered[len(render_ids(
                tiny_tokenizer, turns[t - 1].context_messages, tools,
                add_generation_prompt=True)) + len(turns[t - 1].student_ids):]
        prompts.append(prompt)
        sequence = prompt + list(turn.student_ids)
    exact = [EpisodeTurn(t.context_messages, t.student_ids, prompt_ids=p)
             for t, p in zip(turns, prompts, strict=True)]
    plan = plan_episode(tiny_tokenizer, exact, tools)
    assert len(plan.passes) == 1 and plan.passes[0].ids == sequence
    assert all("prompt ids" in note for note in plan.notes.values())
    hinted = [EpisodeTurn(t.context_messages, t.student_ids, h, prompt_ids=t.prompt_ids)
              for t, h in zip(exact, hints, strict=True)]
    (one,) = plan_episode(tiny_tokenizer, hinted, tools).passes
    assert one.ids[:len(odd)] == odd and tiny_tokenizer.decode(one.ids).count(HINT_PREFIX) == 4
    # a prompt that rewrites an earlier turn (e.g. drops its thinking) starts a new pass
    rewritten = [*exact[:2], EpisodeTurn(exact[2].context_messages, exact[2].student_ids,
                                         prompt_ids=prompts[2][len(odd):])]
    plan = plan_episode(tiny_tokenizer, rewritten, tools)
    assert [p.turns for p in plan.passes] == [[0, 1], [2]]
    assert plan.passes[1].ids == prompts[2][len(odd):] + list(exact[2].student_ids)


def test_episode_rejects_non_extending_contexts(tiny_tokenizer, tools, episode):
    turns, _ = episode
    with pytest.raises(ValueError, match="must extend"):
        build_episode_ids(tiny_tokenizer, [turns[2], turns[1]], tools)


def test_hint_message_wording():
    assert make_hint_message("  use a set  ") == {"role": "user",
                                                  "content": f"{HINT_PREFIX}use a set"}


def test_check_same_tokenizer(tiny_tokenizer, tiny_model_path, tmp_path):
    from transformers import AutoTokenizer

    check_same_tokenizer(tiny_tokenizer, AutoTokenizer.from_pretrained(tiny_model_path))
    other_path = build_tiny_model(tmp_path / "other", hidden_size=64, num_heads=1,
                                  vocab_size=1024, corpus="def f(x):\n    return x + 1\n" * 50)
    other = AutoTokenizer.from_pretrained(other_path)
    with pytest.raises(ValueError,
                       match=r"tokenizers differ: .* vocabularies differ \(2048 vs 1024 tokens"):
        check_same_tokenizer(tiny_tokenizer, other)
    renamed = AutoTokenizer.from_pretrained(tiny_model_path)
    renamed.eos_token = "<|endoftext|>"
    with pytest.raises(ValueError, match="special tokens"):
        check_same_tokenizer(tiny_tokenizer, renamed)
