"""Token-exact teacher inputs: chat-template rendering plus the student's sampled ids, verbatim.

Turn scope: ``ids = template(context + [hint], tools, add_generation_prompt=True) + student_ids``.
The student's response is never re-tokenized from text.

Episode scope builds one sequence for a run of turns from the student's EXACT contexts: each
turn's prompt P_t (its `prompt_ids`, or, without them, the template's rendering of its
messages) must extend the sequence so far, P_{t-1} + student_ids_{t-1}, checked on ids:

    seq = hinted(P_0) + student_ids_0
    seq += hinted(P_t)[len(P_{t-1} + student_ids_{t-1}):] + student_ids_t    (t >= 1)

where hinted(P) is P with the hint block spliced in right before its generation prompt. With
no hints the sequence is exactly P_last + student_ids_last, so every turn is scored on the
context the student saw. When a turn's prompt does not extend the sequence (a template that
rewrites history: whitespace stripped, tool calls not rendered, earlier thinking dropped,
ids that are not the tokenizer's canonical split), nothing is guessed: that turn starts a new
pass from its own prompt (scored exactly like turn scope) and the break is reported per turn
(`EpisodePlan.notes`), or the turn is refused, by option.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from opd_gym.errors import ConfigError
from opd_gym.models.tokenizer import render_ids  # moved to the models layer; kept importable

HINT_PREFIX = "[Hindsight hint] "
HINT_ROLE = "user"
Placement = Literal["before_turn", "task_message"]
PLACEMENTS = ("before_turn", "task_message")


def make_hint_message(hint: str) -> dict[str, str]:
    """The message that carries a judge's hint to the teacher (role and wording live here)."""
    return {"role": HINT_ROLE, "content": f"{HINT_PREFIX}{hint.strip()}"}


def _require_prefix(prefix: list[int], full: list[int], what: str) -> None:
    if full[:len(prefix)] != prefix:
        at = next((i for i, (a, b) in enumerate(zip(prefix, full, strict=False)) if a != b),
                  min(len(prefix), len(full)))
        raise ConfigError(f"chat template is not prefix-stable: {what} (ids differ at position "
                         f"{at}); build the teacher input per turn instead")


def _with_hint_in_task(messages: list[dict[str, Any]], hint_message: Mapping[str, Any]):
    """Copy of `messages` with the hint text appended to the first user message."""
    for i, message in enumerate(messages):
        if message.get("role") == "user":
            out = [dict(m) for m in messages]
            out[i]["content"] = f"{message.get('content') or ''}\n\n{hint_message['content']}"
            return out
    raise ConfigError("placement 'task_message' needs a user message in the context")


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
        raise ConfigError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
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
        raise ConfigError("context_ids can only be combined with placement 'before_turn'")
    bare = render_ids(tokenizer, messages, tools, add_generation_prompt=False)
    prompted = render_ids(tokenizer, messages, tools, add_generation_prompt=True)
    _require_prefix(bare, prompted, "context without generation prompt vs with it")
    gen_prompt = prompted[len(bare):]
    if gen_prompt and context_ids[-len(gen_prompt):] != gen_prompt:
        raise ConfigError("context_ids do not end with the chat template's generation prompt "
                         f"{gen_prompt}; cannot place the hint before the turn")
    hinted = render_ids(tokenizer, [*messages, dict(hint_message)], tools,
                        add_generation_prompt=True)
    _require_prefix(bare, hinted, "context vs context + hint")
    return context_ids[:len(context_ids) - len(gen_prompt)] + hinted[len(bare):]


def splice_hint(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    hint_message: Mapping[str, Any] | None,
    prompt_ids: Sequence[int],
) -> list[int]:
    """`prompt_ids` with the hint block inserted right before the generation prompt.

    Raises ValueError when the template cannot take the hint in place (it rewrites the
    history when a message is added, or the prompt does not end in its generation prompt).
    """
    return _prefix_from_context_ids(tokenizer, [dict(m) for m in messages], tools, hint_message,
                                    [int(i) for i in prompt_ids], "before_turn")


@dataclass(frozen=True)
class EpisodeTurn:
    """One scored turn of an episode: the messages it saw, what it sampled, and its hint.

    `prompt_ids`, when known, are the exact ids the student was prompted with.
    """

    context_messages: Sequence[Mapping[str, Any]]
    student_ids: Sequence[int]
    hint_message: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    prompt_ids: Sequence[int] | None = None


@dataclass
class EpisodePass:
    """One teacher input: a run of consecutive turns whose prompts extend each other."""

    ids: list[int]
    spans: list[tuple[int, int]]
    turns: list[int]


@dataclass
class EpisodePlan:
    """The passes that score an episode, with per-turn notes on the context each turn got.

    `notes[t]` says which context turn t is scored on; `refused[t]` (with
    `on_break="refuse"`) says why turn t gets no score.
    """

    passes: list[EpisodePass]
    notes: dict[int, str]
    refused: dict[int, str] = field(default_factory=dict)


BREAKS = ("split", "refuse")


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)))


def plan_episode(
    tokenizer: Any,
    turns: Sequence[EpisodeTurn],
    tools: Sequence[Mapping[str, Any]] | None,
    *,
    on_break: str = "split",
) -> EpisodePlan:
    """Passes over the student's exact contexts (see module doc); breaks are reported per turn.

    `on_break="split"` scores a turn whose prompt does not extend the sequence from its own
    prompt (a new pass, which later turns may extend); "refuse" leaves it unscored (in
    `refused`) while later turns still build on its prompt.
    """
    if on_break not in BREAKS:
        raise ConfigError(f"on_break must be one of {BREAKS}, got {on_break!r}")
    passes: list[EpisodePass] = []
    notes: dict[int, str] = {}
    refused: dict[int, str] = {}
    base: list[int] | None = None  # unhinted P_{t-1} + student_{t-1} of the current pass
    for t, turn in enumerate(turns):
        ctx = [dict(m) for m in turn.context_messages]
        student = [int(i) for i in turn.student_ids]
        exact = turn.prompt_ids is not None
        source = "the student's prompt ids" if exact else "the rendered messages (no prompt ids)"
        prompt = [int(i) for i in turn.prompt_ids] if exact else render_ids(
            tokenizer, ctx, tools, add_generation_prompt=True)
        why = ""
        broke = base is not None and prompt[:len(base)] != base
        if broke:
            first = passes[-1].turns[0]
            why = (f"turn {t}'s prompt does not extend the sequence of turns {first}-{t - 1} "
                   f"(ids differ at position {_first_difference(prompt, base)} of "
                   f"{len(base)}): the template rewrites history")
        try:
            hinted = (splice_hint(tokenizer, ctx, tools, turn.hint_message, prompt)
                      if turn.hint_message is not None else prompt)
            hint_ok = True
        except ValueError as exc:
            hinted = render_ids(tokenizer, [*ctx, dict(turn.hint_message)], tools,
                                add_generation_prompt=True)
            hint_ok = False
            why = (why + "; " if why else "") + (
                f"the hint cannot be placed in turn {t}'s prompt ({exc}): scored on the "
                "template's rendering of its messages plus the hint")
        if base is not None and not why and hinted[:len(base)] != base:
            why = f"turn {t}'s hint would fall inside the previous turn's tokens"
        if base is not None and not why:
            current = passes[-1]
            start = len(current.ids) + len(hinted) - len(base)
            current.ids += hinted[len(base):] + student
            current.spans.append((start, start + len(student)))
            current.turns.append(t)
            notes[t] = f"episode pass {len(passes)}, from {source}"
        else:
            if broke and on_break == "refuse":
                refused[t] = why
            passes.append(EpisodePass(hinted + student, [(len(hinted), len(hinted) + len(student))],
                                      [t]))
            notes[t] = f"episode pass {len(passes)}, from {source}" + (
                f" (new pass: {why})" if why else "")
        base = (prompt + student) if hint_ok else None
    return EpisodePlan(passes, notes, refused)


def build_episode_ids(
    tokenizer: Any,
    turns: Sequence[EpisodeTurn],
    tools: Sequence[Mapping[str, Any]] | None,
) -> tuple[list[int], list[tuple[int, int]]]:
    """One teacher input for a whole episode and one span per turn (see module doc).

    Raises ValueError naming the first turn whose prompt does not extend the sequence; use
    `plan_episode` to score such episodes in several passes instead.
    """
    plan = plan_episode(tokenizer, turns, tools)
    if len(plan.passes) > 1:
        breaking = plan.passes[1].turns[0]
        raise ConfigError(f"episode turn {breaking}: its context must extend the earlier turns' "
                         f"sequence: {plan.notes[breaking]}")
    return plan.passes[0].ids, plan.passes[0].spans


SAMPLE_TEXT = ("def add(a, b):\n    return a + b  # Grüße, 数字 and émoji 🙂\n"
               "<tool_call>{\"name\": \"terminal\", \"arguments\": {\"command\": \"ls\"}}"
               "</tool_call>")
SAMPLE_CHAT = ({"role": "system", "content": "You are a coding agent."},
               {"role": "user", "content": "Fix the bug in add()."},
               {"role": "assistant", "content": "Reading the file."},
               {"role": "user", "content": "ok"})


def tokenizer_difference(a: Any, b: Any) -> str | None:
    """Why tokens sampled under tokenizer `a` would mean something else under `b`, or None.

    Compares the vocabularies (every token and its id), the special tokens, the ids the
    chat templates give a sample conversation (their special-token ids and markup), and a
    round trip of sample text (encoded by one, decoded by the other)."""
    va, vb = a.get_vocab(), b.get_vocab()
    if va != vb:
        only_a = sorted(set(va) - set(vb))
        only_b = sorted(set(vb) - set(va))
        moved = sorted(tok for tok in set(va) & set(vb) if va[tok] != vb[tok])
        parts = [f"vocabularies differ ({len(va)} vs {len(vb)} tokens"]
        if only_a:
            parts.append(f"{len(only_a)} only in the first, e.g. {only_a[:2]}")
        if only_b:
            parts.append(f"{len(only_b)} only in the second, e.g. {only_b[:2]}")
        if moved:
            tok = moved[0]
            parts.append(f"{len(moved)} with other ids, e.g. {tok!r}: {va[tok]} vs {vb[tok]}")
        return "; ".join(parts) + ")"
    sa, sb = _special_tokens(a), _special_tokens(b)
    if sa != sb:
        diff = sorted(set(sa.items()) ^ set(sb.items()))
        return f"special tokens differ: {diff[:4]}"
    ta, tb = _template_ids(a), _template_ids(b)
    if ta != tb:
        at = _first_difference(ta or [], tb or [])
        return (f"chat templates give different ids (first difference at position {at}: "
                f"{(ta or [])[at:at + 4]} vs {(tb or [])[at:at + 4]})")
    ea = list(a.encode(SAMPLE_TEXT, add_special_tokens=False))
    eb = list(b.encode(SAMPLE_TEXT, add_special_tokens=False))
    if ea != eb:
        return (f"sample text encodes differently (first difference at token "
                f"{_first_difference(ea, eb)})")
    if b.decode(ea, skip_special_tokens=False) != a.decode(ea, skip_special_tokens=False):
        return "sample text decodes differently"
    return None


def _template_ids(tok: Any) -> list[int] | None:
    """The ids a tokenizer's chat template gives the sample conversation (None: no template)."""
    if not getattr(tok, "chat_template", None):
        return None
    return render_ids(tok, SAMPLE_CHAT, None, add_generation_prompt=True)


def _name(tok: Any) -> str:
    return str(getattr(tok, "name_or_path", "") or type(tok).__name__)


def check_same_tokenizer(a: Any, b: Any, names: tuple[str, str] | None = None) -> None:
    """Raise ConfigError in one line if ids under tokenizer `a` do not mean the same under `b`.

    `names` label the two sides in the message (e.g. the student policy and the teacher)."""
    why = tokenizer_difference(a, b)
    if why is None:
        return
    first, second = names or (_name(a), _name(b))
    raise ConfigError(f"tokenizers differ: {first} vs {second}: {why}; the teacher must share "
                      "the student's tokenizer (same vocabulary, special tokens and chat "
                      "template)")


def check_tokenizers(student: Any, teacher: Any, *, student_name: str = "",
                     teacher_name: str = "") -> None:
    """`check_same_tokenizer` on two tokenizer specs or objects (see `opd_gym.specs.tokenizer`),
    labelled with the given names or the specs themselves."""
    from opd_gym.specs import tokenizer

    def label(role: str, spec: Any, given: str) -> str:
        name = given or (spec if isinstance(spec, str) else getattr(spec, "name_or_path", ""))
        return f"{role} {name}".rstrip()

    check_same_tokenizer(tokenizer(student), tokenizer(teacher),
                         names=(label("the student's tokenizer", student, student_name),
                                label("the teacher's", teacher, teacher_name)))


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
