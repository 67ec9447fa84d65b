"""Turn samples: an immutable snapshot of one assistant turn and what followed it.

The env keeps mutating its transcript; the OPD scorer (possibly in a background thread)
works only on these snapshots, taken when the turn's next state is known.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opd_gym.opd.judges import JudgeInput
from opd_gym.transcript import Turn, messages_for_template


def head_tail(text: str, limit: int) -> str:
    """`text` cut to about `limit` chars as head + tail with an explicit elision marker."""
    if limit <= 0 or len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - 2 * half} chars elided] ...\n{text[-half:]}"


def next_state_text(turn: Turn, limit: int = 4000) -> str:
    """What followed the turn: its tool results joined, format errors, and the test verdict."""
    parts = [f"[{r.name}] {r.content}" for r in turn.tool_results]
    parts += [f"[format error] {e}" for e in turn.format_errors]
    grade = turn.grade
    if grade is not None:
        failing = [t.name for t in grade.tests if t.outcome != "passed"][:5]
        verdict = f"[test verdict] {grade.passed}/{grade.total} hidden tests passed"
        if grade.timed_out:
            verdict += " (the test run timed out)"
        if failing:
            verdict += "; failing: " + ", ".join(failing)
        parts.append(verdict)
    elif turn.end_reason and turn.end_reason != "submitted":
        parts.append(f"[episode ended] {turn.end_reason}")
    return head_tail("\n\n".join(parts), limit)


@dataclass(frozen=True)
class TurnSample:
    """A played (frozen) turn plus what judging and scoring it needs beyond the turn itself:
    the context it was sampled in (template-ready), the tools, the judge's view and the
    next-state text. Detached from the env: safe in background threads."""

    turn: Turn
    context: tuple[Mapping[str, Any], ...]
    tools: tuple[Mapping[str, Any], ...]
    judge_input: JudgeInput
    next_state: str
    extends_previous: bool | None = None  # prompt ids continue the last turn's (None: unknown)

    index = property(lambda self: self.turn.index)
    text = property(lambda self: self.turn.text)
    token_ids = property(lambda self: self.turn.token_ids)
    logprobs = property(lambda self: self.turn.logprobs)
    prompt_ids = property(lambda self: self.turn.prompt_ids)
    student_topk_ids = property(lambda self: self.turn.student_topk_ids)


def sample_turn(
    turn: Turn,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    task_prompt: str,
    *,
    max_next_state_chars: int = 4000,
    tokenizer: Any = None,
) -> TurnSample:
    """Snapshot `turn` of an episode whose transcript is `messages`.

    With `tokenizer`, the context's assistant messages take the form its chat template
    renders as the model's raw output (see `messages_for_template`).
    """
    context = tuple(messages_for_template(messages[: turn.context_len], tokenizer))
    judge_input = JudgeInput(
        index=turn.index,
        task=task_prompt,
        text=turn.text,
        messages=context,
        tool_results=tuple(r.to_dict() for r in turn.tool_results),
        format_errors=tuple(turn.format_errors),
        grade=turn.grade.to_dict() if turn.grade is not None else None,
    )
    return TurnSample(
        turn=turn,
        context=context,
        tools=tuple(tools),
        judge_input=judge_input,
        next_state=next_state_text(turn, max_next_state_chars),
    )
