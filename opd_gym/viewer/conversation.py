"""The conversation of one episode: messages, assistant turns with hints, tool calls, tokens.

Turn k is the k-th assistant message; its OPD record is the one with `turn_index == k`, and
the tool messages after it are matched to the turn's tool results by call id.
"""

from __future__ import annotations

import json
from typing import Any

from opd_gym.viewer.markup import chip, esc, fmt, pre, text_of
from opd_gym.viewer.run import Episode, as_dict, as_float, as_list
from opd_gym.viewer.tokens import TokenBudget, TokenNames, TurnTokens


def render_conversation(ep: Episode, records: dict[int, Any], names: TokenNames,
                        budget: TokenBudget) -> str:
    """The episode's messages in order, each assistant message as a turn block."""
    turns = {int(t.get("index", i)) if isinstance(t.get("index", i), int) else i: t
             for i, t in enumerate(ep.turns)}
    messages = ep.messages or _messages_from_turns(ep.turns)
    out: list[str] = []
    results: dict[Any, dict[str, Any]] = {}
    k = 0
    seen_user = False
    grouped = False  # a turn's group (the turn and its tool messages) is open
    for message in messages:
        role = message.get("role")
        if role != "tool" and grouped:
            out.append("</div>")
            grouped = False
        if role == "assistant":
            turn = turns.get(k, {})
            results = {r.get("call_id"): r for r in as_list(turn.get("tool_results"))
                       if isinstance(r, dict)}
            out.append(_group(turn, records.get(k)))
            out.append(_turn(k, message, turn, records.get(k), names, budget, ep.number))
            grouped = True
            k += 1
        elif role == "tool":
            out.append(_tool_message(message, results.get(message.get("tool_call_id"))))
        elif role == "system":
            text = text_of(message.get("content"))
            out.append(f'<details class="msg system"><summary class="h"><span class="role">'
                       f"system</span> prompt ({len(text)} characters)</summary>"
                       f"{pre(text)}</details>")
        else:
            label = "task" if role == "user" and not seen_user else "environment note"
            seen_user = seen_user or role == "user"
            cls = "user" if label == "task" else "note"
            out.append(f'<div class="msg {cls}"><div class="h"><span class="role">'
                       f'{esc(role or "?")}</span> &middot; {label}</div>'
                       f"{pre(text_of(message.get('content')))}</div>")
    if grouped:
        out.append("</div>")
    for index in sorted(set(turns) | set(records)):
        if index >= k:  # turns or records with no assistant message left to attach to
            turn = turns.get(index, {})
            message = {"role": "assistant", "content": turn.get("text", "")}
            out.append(_group(turn, records.get(index)))
            out.append(_turn(index, message, turn, records.get(index), names, budget,
                             ep.number))
            out.append("</div>")
    if not out:
        out.append('<p class="muted">No messages recorded.</p>')
    return "".join(out)


def turn_failed(turn: dict[str, Any]) -> bool:
    """Whether a turn's action failed: a format error, or a tool result with an error, a
    timeout or a non-zero exit status (what the report's "failed turns" filter shows)."""
    if as_list(turn.get("format_errors")):
        return True
    for result in as_list(turn.get("tool_results")):
        if isinstance(result, dict) and (result.get("error") or result.get("timed_out") or (
                result.get("exit_code") not in (None, 0))):
            return True
    return False


def _group(turn: dict[str, Any], record: Any) -> str:
    """The opening of a turn's group: the turn and its tool messages, tagged for the filters
    (data-hint: the judge gave a hint; data-fail: `turn_failed`)."""
    hinted = ' data-hint="1"' if record is not None and record.hint else ""
    failed = ' data-fail="1"' if turn_failed(turn) else ""
    return f'<div class="tgroup"{hinted}{failed}>'


def _messages_from_turns(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages rebuilt from turns, for lines that lack `messages`."""
    messages: list[dict[str, Any]] = []
    for turn in turns:
        messages.append({"role": "assistant", "content": turn.get("text", "")})
        for result in as_list(turn.get("tool_results")):
            if isinstance(result, dict):
                messages.append({"role": "tool", "tool_call_id": result.get("call_id"),
                                 "name": result.get("name"), "content": result.get("content")})
    return messages


def _turn(k: int, message: dict[str, Any], turn: dict[str, Any], record: Any,
          names: TokenNames, budget: TokenBudget, ep_number: int) -> str:
    head = [f'<span class="role">assistant</span> &middot; turn {k}']
    if turn.get("end_reason"):
        head.append(chip("end", turn["end_reason"]))
    if record is not None:
        if record.retokenized:
            head.append(chip("retokenized"))
        if record.reconstructed:
            head.append(chip("reconstructed"))
        if record.scope != "turn":
            head.append(chip("scope", record.scope))
    out = [f'<section class="turn" id="ep-{ep_number}-t{k}"><div class="h">{"".join(head)}'
           "</div>"]
    if record is not None:
        out.append(_hint(record))
        if record.error:
            out.append(f'<div class="err-note"><b>not scored</b> {esc(record.error)}</div>')
    content = text_of(message.get("content"))
    if content.strip():
        out.append(pre(content, "text"))
    for call in as_list(message.get("tool_calls")):
        if isinstance(call, dict):
            out.append(_call(call))
    for error in as_list(turn.get("format_errors")):
        out.append(f'<div class="fmt-err"><b>format error</b> {esc(error)}</div>')
    tokens = TurnTokens.build(record, turn)
    if tokens is not None:
        out.append(_tokens(tokens, names, budget))
    out.append("</section>")
    return "".join(out)


def _hint(record: Any) -> str:
    votes = ""
    if record.votes:
        votes = f' <span class="votes">votes: {esc(_votes(record.votes))}</span>'
    if not record.hint:
        return f'<div class="nohint">No hint for this turn.{votes}</div>'
    return (f'<div class="hint"><div class="h">Hint (judge, hindsight) &rarr; teacher '
            f"context{votes}</div>{esc(record.hint)}</div>")


def _votes(votes: list[Any]) -> str:
    """Judge votes compactly: their signed scores when they have one, else short JSON."""
    shown = []
    for vote in votes[:16]:
        score = as_float(vote.get("score")) if isinstance(vote, dict) else as_float(vote)
        shown.append(f"{score:+g}" if score is not None else fmt(vote)[:60])
    return " ".join(shown) + (" ..." if len(votes) > 16 else "")


def _call(call: dict[str, Any]) -> str:
    fn = as_dict(call.get("function")) or call
    arguments = fn.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass
    rows = []
    if isinstance(arguments, dict):
        for key, value in arguments.items():
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            rows.append(f'<div class="arg"><span class="k">{esc(key)}</span>{pre(text)}</div>')
    elif arguments not in (None, ""):
        rows.append(f'<div class="arg"><span class="k">arguments</span>'
                    f"{pre(text_of(arguments))}</div>")
    return (f'<div class="call"><div class="h">tool call &middot; <span class="fn">'
            f'{esc(fn.get("name", "?"))}</span></div>{"".join(rows)}</div>')


def _tool_message(message: dict[str, Any], result: dict[str, Any] | None) -> str:
    head = [f'<span class="role">tool</span> &middot; {esc(message.get("name") or "?")}']
    bad = False
    if result:
        exit_code = result.get("exit_code")
        if exit_code is not None:
            head.append(chip("exit", exit_code))
            bad = exit_code != 0
        if result.get("timed_out"):
            head.append(chip("timed out"))
            bad = True
        if result.get("truncated"):
            head.append(chip("truncated"))
        if result.get("error"):
            head.append(chip("error", result["error"]))
            bad = True
        if as_float(result.get("duration")) is not None:
            head.append(chip("took", f"{as_float(result['duration']):.2f} s"))
    cls = "msg tool bad" if bad else "msg tool"
    return (f'<div class="{cls}"><div class="h">{"".join(head)}</div>'
            f'{pre(text_of(message.get("content")))}</div>')


def _tokens(tokens: TurnTokens, names: TokenNames, budget: TokenBudget) -> str:
    if tokens.record is None:
        scale = "no OPD record (student logprobs only)"
    elif tokens.diverging:
        scale = "colour: teacher &minus; student logprob"
    else:
        scale = "colour: teacher probability"
    stats = "".join(chip(k, fmt(v, percent=k.startswith("teacher top-1")))
                    for k, v in tokens.stats().items())
    total = len(tokens.token_ids)
    count = budget.take(total)
    more = ""
    if count == 0 and total:
        more = (f'<div class="more">Token heatmap omitted: the report already shows '
                f"{budget.total} tokens (raise max_total_tokens or render fewer episodes)."
                "</div>")
    elif count < total:
        more = f'<div class="more">Showing the first {count} of {total} tokens.</div>'
    box = f'<div class="tokbox">{tokens.spans(names, count, budget.topk)}</div>' if count else ""
    return (f'<details class="tokens" open><summary>Student tokens &middot; {scale} {stats}'
            f"</summary>{box}{more}</details>")
