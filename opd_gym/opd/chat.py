"""Token-exact teacher inputs: chat-template rendering plus the student's sampled ids, verbatim.

Turn scope: ``ids = template(context + [hint], tools, add_generation_prompt=True) + student_ids``.
The student's response is never re-tokenized from text.

Episode scope builds ONE sequence for a whole trajectory, every hint inserted right before
its turn, every assistant turn taken verbatim from the student's sampled ids:

    seg_0 = template(ctx_0 + [hint_0], gen=True)                 then student_ids_0
    seg_t = closing_tail(t-1) + template(ctx_t + [hint_t], gen=True)[len(through_t):]
                                                                 then student_ids_t

where ``through_t = template(ctx_t[:k + 1])`` renders ctx_t up to and including the
assistant message k of turn t-1 (so the suffix is the non-assistant messages after it, plus
the hint and the generation prompt), and ``closing_tail`` is the part of the template's
rendering of that assistant message that the student did not sample (for ChatML the newline
after ``<|im_end|>``): if the student's ids are a prefix of the rendered assistant block the
tail is the rest of the block, otherwise it is what follows the block's last end-of-turn
token (or that token onwards, when the student's turn was cut before it). Every prefix
relation used is checked on token ids, and a template that is not prefix-stable is refused
with a clear error. With no hints and student ids equal to the template's rendering, the
episode sequence equals the turn-scope input of the last turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

HINT_PREFIX = "[Hindsight hint] "
HINT_ROLE = "user"
Placement = Literal["before_turn", "task_message"]
PLACEMENTS = ("before_turn", "task_message")


def make_hint_message(hint: str) -> dict[str, str]:
    """The message that carries a judge's hint to the teacher (role and wording live here)."""
    return {"role": HINT_ROLE, "content": f"{HINT_PREFIX}{hint.strip()}"}


def render_ids(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    *,
    add_generation_prompt: bool,
) -> list[int]:
    """Token ids of the chat template applied to `messages` with `tools` in the prompt."""
    ids = tokenizer.apply_chat_template(
        [dict(m) for m in messages],
        tools=list(tools) if tools else None,
        add_generation_prompt=add_generation_prompt,
        tokenize=True,
        return_dict=False,
    )
    if isinstance(ids, Mapping):  # older transformers versions ignore return_dict
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def _require_prefix(prefix: list[int], full: list[int], what: str) -> None:
    if full[:len(prefix)] != prefix:
        at = next((i for i, (a, b) in enumerate(zip(prefix, full, strict=False)) if a != b),
                  min(len(prefix), len(full)))
        raise ValueError(f"chat template is not prefix-stable: {what} (ids differ at position "
                         f"{at}); build the teacher input per turn instead")


def _with_hint_in_task(messages: list[dict[str, Any]], hint_message: Mapping[str, Any]):
    """Copy of `messages` with the hint text appended to the first user message."""
    for i, message in enumerate(messages):
        if message.get("role") == "user":
            out = [dict(m) for m in messages]
            out[i]["content"] = f"{message.get('content') or ''}\n\n{hint_message['content']}"
            return out
    raise ValueError("placement 'task_message' needs a user message in the context")


def build_teacher_ids(
    tokenizer: Any,
    context_messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    hint_message: Mapping[str, Any] | None,
    student_ids: Sequence[int],
    *,
    placement: Placement = "before_turn",
    context_ids: Sequence[int] | None = None,
) -> tuple[list[int], tuple[int, int]]:
    """Teacher input for one turn and the span of the student's tokens in it.

    `placement` "before_turn" inserts `hint_message` as its own message right before the scored
    turn; "task_message" appends its text to the first user message. `context_ids`, when
    given, are the exact ids the student was prompted with (ending in the generation prompt)
    and are used verbatim instead of rendering `context_messages`.
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    messages = [dict(m) for m in context_messages]
    student = [int(i) for i in student_ids]
    if context_ids is not None:
        prefix = _prefix_from_context_ids(tokenizer, messages, tools, hint_message,
                                          [int(i) for i in context_ids], placement)
    elif hint_message is None:
        prefix = render_ids(tokenizer, messages, tools, add_generation_prompt=True)
    elif placement == "before_turn":
        prefix = render_ids(tokenizer, [*messages, dict(hint_message)], tools,
                            add_generation_prompt=True)
    else:
        prefix = render_ids(tokenizer, _with_hint_in_task(messages, hint_message), tools,
                            add_generation_prompt=True)
    return prefix + student, (len(prefix), len(prefix) + len(student))


def _prefix_from_context_ids(tokenizer, messages, tools, hint_message, context_ids, placement):
    """Splice the hint block into the student's exact prompt ids, before its generation prompt."""
    if hint_message is None:
        return context_ids
    if placement != "before_turn":
        raise ValueError("context_ids can only be combined with placement 'before_turn'")
    bare = render_ids(tokenizer, messages, tools, add_generation_prompt=False)
    prompted = render_ids(tokenizer, messages, tools, add_generation_prompt=True)
    _require_prefix(bare, prompted, "context without generation prompt vs with it")
    gen_prompt = prompted[len(bare):]
    if gen_prompt and context_ids[-len(gen_prompt):] != gen_prompt:
        raise ValueError("context_ids do not end with the chat template's generation prompt "
                         f"{gen_prompt}; cannot place the hint before the turn")
    hinted = render_ids(tokenizer, [*messages, dict(hint_message)], tools,
                        add_generation_prompt=True)
    _require_prefix(bare, hinted, "context vs context + hint")
    return context_ids[:len(context_ids) - len(gen_prompt)] + hinted[len(bare):]


@dataclass(frozen=True)
class EpisodeTurn:
    """One scored turn of an episode: the messages it saw, what it sampled, and its hint."""

    context_messages: Sequence[Mapping[str, Any]]
    student_ids: Sequence[int]
    hint_message: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)


def build_episode_ids(
    tokenizer: Any,
    turns: Sequence[EpisodeTurn],
    tools: Sequence[Mapping[str, Any]] | None,
    *,
    end_of_turn_id: int | None = None,
) -> tuple[list[int], list[tuple[int, int]]]:
    """One teacher input for a whole episode and one span per turn (see module doc).

    Each turn's context must extend the previous turn's context with that turn's assistant
    message (and then whatever came back). `end_of_turn_id` defaults to the tokenizer's eos.
    """
    eot = tokenizer.eos_token_id if end_of_turn_id is None else int(end_of_turn_id)
    ids: list[int] = []
    spans: list[tuple[int, int]] = []
    prev: EpisodeTurn | None = None
    for t, turn in enumerate(turns):
        ctx = [dict(m) for m in turn.context_messages]
        student = [int(i) for i in turn.student_ids]
        shown = [*ctx, dict(turn.hint_message)] if turn.hint_message is not None else ctx
        full = render_ids(tokenizer, shown, tools, add_generation_prompt=True)
        if prev is None:
            segment = full
        else:
            k = len(prev.context_messages)
            if len(ctx) <= k or ctx[:k] != [dict(m) for m in prev.context_messages] \
                    or ctx[k].get("role") != "assistant":
                raise ValueError(f"episode turn {t}: its context must extend turn {t - 1}'s "
                                 f"context with turn {t - 1}'s assistant message")
            before = render_ids(tokenizer, ctx[:k], tools, add_generation_prompt=True)
            through = render_ids(tokenizer, ctx[:k + 1], tools, add_generation_prompt=False)
            _require_prefix(before, through, f"turn {t - 1}'s prompt vs its assistant message")
            _require_prefix(through, full, f"turn {t - 1}'s assistant message vs turn {t}'s "
                                           "prompt")
            tail = _closing_tail(through[len(before):], [int(i) for i in prev.student_ids], eot)
            segment = tail + full[len(through):]
        start = len(ids) + len(segment)
        ids += segment + student
        spans.append((start, start + len(student)))
        prev = turn
    return ids, spans


def _closing_tail(block: list[int], student: list[int], eot: int | None) -> list[int]:
    """Rendered tokens that close an assistant turn after what the student actually sampled."""
    if block[:len(student)] == student:
        return block[len(student):]
    if eot is None or eot not in block:
        return []
    last = len(block) - 1 - block[::-1].index(eot)
    return block[last + 1:] if student and student[-1] == eot else block[last:]


def check_same_tokenizer(a: Any, b: Any) -> None:
    """Raise ValueError naming the first differences if two tokenizers do not share ids."""
    va, vb = a.get_vocab(), b.get_vocab()
    if va != vb:
        only_a = sorted(set(va) - set(vb))
        only_b = sorted(set(vb) - set(va))
        moved = sorted(tok for tok in set(va) & set(vb) if va[tok] != vb[tok])
        parts = [f"vocab sizes {len(va)} vs {len(vb)}"]
        if only_a:
            parts.append(f"{len(only_a)} tokens only in the first, e.g. {only_a[:3]}")
        if only_b:
            parts.append(f"{len(only_b)} tokens only in the second, e.g. {only_b[:3]}")
        if moved:
            tok = moved[0]
            parts.append(f"{len(moved)} tokens with different ids, e.g. {tok!r}: "
                         f"{va[tok]} vs {vb[tok]}")
        raise ValueError("tokenizers differ: " + "; ".join(parts))
    sa, sb = _special_tokens(a), _special_tokens(b)
    if sa != sb:
        diff = sorted(set(sa.items()) ^ set(sb.items()))
        raise ValueError(f"tokenizers differ in special tokens: {diff[:4]} "
                         f"(first has {sorted(sa.items())}, second has {sorted(sb.items())})")


def _special_tokens(tok: Any) -> dict[str, str]:
    """Role -> token of the named special tokens, plus which added tokens are special."""
    out = {}
    for role in ("bos_token", "eos_token", "unk_token"):  # pad is a trainer setting, not ids
        value = getattr(tok, role, None)
        if value is not None:
            out[role] = str(value)
    for idx, added in (getattr(tok, "added_tokens_decoder", None) or {}).items():
        if getattr(added, "special", False):
            out[f"special:{idx}"] = str(added.content if hasattr(added, "content") else added)
    return out
