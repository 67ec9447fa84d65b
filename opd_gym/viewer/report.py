"""Render a run directory as one static, self-contained HTML report (`RUN_DIR/report.html`).

Everything shown comes from agent and model output, so every string is HTML-escaped and
the only script is the report's own (token tooltips, expand/collapse). No external assets:
the file works offline and can be mailed around.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

from opd_gym.opd.metrics import current_names
from opd_gym.viewer.assets import PAGE, SCRIPT, STYLE, bucket_css
from opd_gym.viewer.conversation import render_conversation, turn_failed
from opd_gym.viewer.figures import FIGURE_STYLE, charts, config_table, metric_figures
from opd_gym.viewer.markup import chip, esc, fmt, pre, script_json
from opd_gym.viewer.run import Episode, Run, as_float, as_list, load_run
from opd_gym.viewer.tokens import (
    DIVERGING_COLOURS,
    DIVERGING_EDGES,
    MAX_TOKENS,
    MAX_TOTAL_TOKENS,
    SEQUENTIAL_COLOURS,
    SEQUENTIAL_PROBS,
    TOPK_SHOWN,
    TokenBudget,
    TokenNames,
)

REPORT = "report.html"
FILTER_CONTROL = (
    '<label for="filter">Show</label><select id="filter" name="filter">'
    '<option value="all">all episodes</option>'
    '<option value="failed-episodes">failed episodes (not passed or not played)</option>'
    '<option value="failed-turns">failed turns (format error, tool error or exit != 0)</option>'
    '<option value="hinted-turns">hinted turns (the judge gave a hint)</option>'
    '</select><span id="filter-status"></span>'
)
MAX_PROBLEMS = 50
MAX_DIFF_CHARS = 250_000  # characters of one episode's diff shown (the row keeps it all)
HUNK = re.compile(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
SUMMARY_ORDER = ("episodes", "finished", "unfinished", "pass_rate", "mean_reward", "mean_turns",
                 "hint_rate", "tokens_scored", "seconds", "bad_lines")


def write_report(
    run_dir: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    tokenizer: Any = None,
    max_episodes: int | None = None,
    max_tokens: int = MAX_TOKENS,
    topk_shown: int = TOPK_SHOWN,
    max_total_tokens: int = MAX_TOTAL_TOKENS,
) -> Path:
    """Write the HTML report of a run (default `RUN_DIR/report.html`) and return its path.

    `tokenizer` (a transformers tokenizer) names token ids; without it tokens show as `#id`.
    `max_episodes` renders only the first episodes (the summary still covers all of them);
    `max_tokens` (per turn), `topk_shown` (per token) and `max_total_tokens` (per report) cap
    the token heatmaps so the file stays small.
    """
    run = load_run(run_dir)
    target = Path(out) if out is not None else run.path / REPORT
    budget = TokenBudget(per_turn=max_tokens, topk=topk_shown, total=max_total_tokens)
    page = render_report(run, tokenizer=tokenizer, max_episodes=max_episodes, budget=budget)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(page, encoding="utf-8")
    return target


def render_report(
    run: Run,
    *,
    tokenizer: Any = None,
    max_episodes: int | None = None,
    budget: TokenBudget | None = None,
) -> str:
    """The report page of a loaded run, as a string."""
    names = TokenNames(tokenizer)
    budget = budget if budget is not None else TokenBudget()
    shown = run.episodes if max_episodes is None else run.episodes[:max(max_episodes, 0)]
    body = [
        f"<h1>OPD run report</h1><div class=\"sub\">{esc(run.path.name)} &middot; "
        f"{len(run.episodes)} episode(s)</div>",
        metric_figures(run),
        _footing_warning(run),
        _problems(run),
        charts(run),
        config_table(run),
        _legend(),
        _index(run.episodes, len(shown)),
        '<div class="toolbar"><button data-open="1">Expand all</button>'
        '<button data-open="0">Collapse all</button>' + FILTER_CONTROL +
        '<span id="js-status">static view (script not run)</span></div>',
    ]
    if len(shown) < len(run.episodes):
        body.append(f'<p class="muted">Showing the first {len(shown)} of {len(run.episodes)} '
                    "episodes.</p>")
    body += [_episode(ep, names, budget, open_=i == 0)
             for i, ep in enumerate(shown)]
    return PAGE.substitute(
        title=esc(f"OPD run report: {run.path.name}"),
        style=STYLE + FIGURE_STYLE,
        buckets=bucket_css(),
        body="\n".join(body),
        vocab=script_json({str(k): v for k, v in sorted(names.used.items())}),
        script=SCRIPT,
    )


def _footing_warning(run: Run) -> str:
    """A warning card when turns were scored on a teacher context rebuilt from the messages
    (the agent passed no prompt_ids) or with ids nobody checked against the teacher's."""
    raws = [raw for ep in run.episodes for raw in as_list(ep.data.get("opd"))
            if isinstance(raw, dict)]
    rebuilt = sum(bool(raw.get("reconstructed")) for raw in raws)
    unchecked = sum(bool(raw.get("ids_unchecked")) for raw in raws)
    notes = []
    if rebuilt:
        notes.append(f"{rebuilt} of {len(raws)} turns ({rebuilt / len(raws):.0%}) were scored "
                     "on a teacher context rebuilt from the messages: the agent passed no "
                     "prompt_ids, so their teacher-student gaps may come from the rendering, "
                     "not the hint.")
    if unchecked:
        notes.append(f"{unchecked} of {len(raws)} turns carry token ids never checked against "
                     "the teacher's tokenizer (student_tokenizer='unchecked').")
    if not notes:
        return ""
    return ('<div class="card err-note warning-footing" style="margin-top:8px"><b>Warning</b> '
            + " ".join(esc(n) for n in notes) + "</div>")


def _problems(run: Run) -> str:
    """What could not be read in the run, folded away."""
    if not run.problems:
        return ""
    items = "".join(f"<li>{esc(p)}</li>" for p in run.problems[:MAX_PROBLEMS])
    more = len(run.problems) - MAX_PROBLEMS
    if more > 0:
        items += f"<li>... and {more} more</li>"
    return (f'<details class="card" style="margin-top:8px"><summary>'
            f"{len(run.problems)} problem(s) reading the run</summary><ul>{items}</ul>"
            "</details>")


def _legend() -> str:
    div = []
    lows = (-math.inf, *DIVERGING_EDGES)
    for i, colour in enumerate(DIVERGING_COLOURS):
        label = f"&lt;{DIVERGING_EDGES[0]:g}" if i == 0 else (
            f"&gt;{DIVERGING_EDGES[-1]:g}" if i == len(DIVERGING_EDGES) else f"{lows[i]:+g}")
        div.append(f'<span class="sw"><i style="background:{colour}"></i>{label}</span>')
    seq = []
    for i, colour in enumerate(SEQUENTIAL_COLOURS):
        label = (f"p&ge;{SEQUENTIAL_PROBS[0]:g}" if i < len(SEQUENTIAL_PROBS) and i == 0
                 else f"&lt;{SEQUENTIAL_PROBS[i - 1]:g}")
        seq.append(f'<span class="sw"><i style="background:{colour}"></i>{label}</span>')
    return (
        '<h2>Legend</h2><div class="card legend">'
        f'<div class="scale"><span class="name">teacher &minus; student logprob</span>'
        f'{"".join(div)}</div>'
        f'<div class="scale"><span class="name">teacher probability</span>{"".join(seq)}</div>'
        '<div class="scale"><span class="name">other</span>'
        '<span class="sw"><i class="m"></i>masked</span>'
        '<span class="sw"><i style="background:#fff;border-color:#9ca3af"></i>no record</span>'
        "</div>"
        '<div class="note">Each assistant turn\'s tokens are coloured by teacher minus student '
        "logprob when the student's logprobs are known (red: the teacher, given the hint, finds "
        "the token less likely; blue: more likely), otherwise by the teacher's probability of "
        "the sampled token (dark: surprising). Hover a token for its id, logprobs and the "
        "teacher's top-K. Hints from the judge are shown in yellow above the turn they "
        "apply to.</div></div>"
    )


def _verdict(ep: Episode) -> str:
    grade = ep.grade
    if ep.passed is None:
        return '<span class="badge ungraded">UNGRADED</span>'
    count = f"{fmt(grade.get('passed'))}/{fmt(grade.get('total'))}"
    if ep.passed:
        return f'<span class="badge pass">PASS {esc(count)}</span>'
    return f'<span class="badge fail">FAIL {esc(count)}</span>'


def _state(ep: Episode) -> str:
    """Badges for an episode that does not count as played: interrupted (Ctrl-C), an infra
    error in grading, or otherwise unfinished; --resume plays each again."""
    row = ep.row
    if row.interrupted:
        return ' <span class="badge unfinished">INTERRUPTED</span>'
    if not row.finished:
        return ' <span class="badge unfinished">UNFINISHED</span>'
    if row.infra_error:
        return ' <span class="badge unfinished">INFRA ERROR</span>'
    return ""


def filter_attrs(ep: Episode) -> str:
    """The episode's tags for the report's filters: data-failed (not passed, or not played),
    data-fail-turns and data-hint-turns (how many of its turns failed or got a hint)."""
    row = ep.row
    attrs = []
    if not row.played or not ep.passed:
        attrs.append(' data-failed="1"')
    failed = sum(turn_failed(t) for t in ep.turns if isinstance(t, dict))
    if failed:
        attrs.append(f' data-fail-turns="{failed}"')
    if ep.hints:
        attrs.append(f' data-hint-turns="{ep.hints}"')
    return "".join(attrs)


def _index(episodes: list[Episode], shown: int) -> str:
    if not episodes:
        return '<h2>Episodes</h2><p class="muted">No episodes in this run.</p>'
    rows = []
    for ep in episodes:
        name = esc(ep.task_id)
        link = f'<a href="#ep-{ep.number}">{name}</a>' if ep.number <= shown else name
        unfinished = _state(ep)
        rows.append(
            f'<tr class="eprow"{filter_attrs(ep)}><td class="num">{ep.number}</td><td>{link}</td>'
            f'<td class="num">{esc(fmt(ep.row.seed))}</td>'
            f'<td class="num">{esc(fmt(ep.reward))}</td><td>{_verdict(ep)}{unfinished}</td>'
            f'<td class="num">{ep.num_turns}</td><td class="num">{ep.hints}</td>'
            f'<td class="num">{ep.tokens_scored}</td>'
            f'<td>{esc(ep.row.end_reason)}</td></tr>'
        )
    head = ("<tr><th>#</th><th>task</th><th>seed</th><th>reward</th><th>result</th>"
            "<th>turns</th><th>hints</th><th>tokens scored</th><th>end</th></tr>")
    return f'<h2>Episodes</h2><table class="index">{head}{"".join(rows)}</table>'


def _episode(ep: Episode, names: TokenNames, budget: TokenBudget, *,
             open_: bool = False) -> str:
    data, row = ep.data, ep.row
    summary = [
        f'<span class="ep-title">#{ep.number} {esc(ep.task_id)}</span>',
        _verdict(ep),
        _state(ep),
        chip("reward", fmt(ep.reward)),
        chip("turns", ep.num_turns),
        chip("hints", ep.hints),
    ]
    if row.end_reason:
        summary.append(chip("end", row.end_reason))
    meta = [chip("seed", fmt(row.seed))]
    for key in ("terminated", "truncated", "duration"):
        if key in data:
            meta.append(chip(key, fmt(data[key])))
    rewards = [as_float(r) for r in row.rewards]
    if rewards:
        meta.append(chip("rewards", " ".join(fmt(r) for r in rewards)))
    for key, value in (row.reward_breakdown or {}).items():
        meta.append(chip(f"reward.{key}", fmt(as_float(value))))
    records, problems = ep.opd
    body = [f'<div class="meta">{"".join(meta)}</div>']
    body += [f'<div class="err-note"><b>unreadable</b> {esc(p)}</div>' for p in problems]
    body.append(render_conversation(ep, records, names, budget))
    body.append(render_diff(row.diff))
    body.append(_grade(ep.grade))
    metrics = current_names(row.opd_metrics or {})  # an old row's k1 as the log ratio it is
    if metrics:
        chips = "".join(chip(k.removeprefix("opd/"), _or_na(as_float(v)))
                        for k, v in metrics.items())
        body.append(f'<div class="meta"><span class="muted">OPD metrics:</span> {chips}</div>')
    opened = " open" if open_ else ""
    return (f'<details class="ep" id="ep-{ep.number}"{filter_attrs(ep)}{opened}>'
            f'<summary>{"".join(summary)}</summary>'
            f'<div class="ep-body">{"".join(body)}</div></details>')


def _or_na(value: float | None) -> str:
    """A metric value, or "n/a" where it cannot exist (NaN: e.g. no student logprobs)."""
    return "n/a" if value is None or not math.isfinite(value) else fmt(value)


# A repository task's test split, as marked in the grade (RepoInfo.mark_tests).
_TEST_KINDS = {
    "FAIL_TO_PASS": ' <span class="badge kind f2p" title="FAIL_TO_PASS: fails at the base '
                    'commit, must pass once fixed (earns the grade)">F2P</span>',
    "PASS_TO_PASS": ' <span class="badge kind p2p" title="PASS_TO_PASS: passes at the base '
                    'commit and must keep passing (gates the grade)">P2P</span>',
}


def _grade(grade: dict[str, Any]) -> str:
    if not grade:
        return ""
    passed, total = grade.get("passed"), grade.get("total")
    title = f"Hidden tests: {fmt(passed)} of {fmt(total)} passed"
    notes = []
    if grade.get("reason"):
        notes.append(chip("grading failed", grade["reason"]))
    if grade.get("timed_out"):
        notes.append(chip("timed out"))
    rows = []
    for test in as_list(grade.get("tests")):
        if not isinstance(test, dict):
            continue
        outcome = str(test.get("outcome", "?"))
        cls = "pass" if outcome == "passed" else "fail"
        message = pre(str(test.get("message") or "")) if test.get("message") else ""
        kind = _TEST_KINDS.get(test.get("kind"), "")  # repository tasks: F2P or P2P
        rows.append(f'<tr><td><span class="badge {cls}">{esc(outcome)}</span>{kind}</td>'
                    f'<td class="mono">{esc(test.get("name", "?"))}</td><td>{message}</td></tr>')
    table = f'<table class="tests">{"".join(rows)}</table>' if rows else ""
    split = _split(as_list(grade.get("tests")))
    level = _difficulty(grade.get("difficulty"))
    output = ""
    if grade.get("output"):
        output = (f'<details><summary class="muted">test run output</summary>'
                  f'{pre(str(grade["output"]))}</details>')
    return (f'<div class="grade card"><div class="h">{esc(title)} {"".join(notes)}</div>'
            f"{split}{level}{table}{output}</div>")


def _split(tests: list[Any]) -> str:
    """A repository task's outcome per side of its test split: how many FAIL_TO_PASS tests
    now pass (the fix) and how many PASS_TO_PASS tests still pass (no regression)."""
    chips = []
    for kind, short in (("FAIL_TO_PASS", "F2P"), ("PASS_TO_PASS", "P2P")):
        marked = [t for t in tests if isinstance(t, dict) and t.get("kind") == kind]
        if not marked:
            continue
        passed = sum(t.get("outcome") == "passed" for t in marked)
        cls = "pass" if passed == len(marked) else "fail"
        chips.append(f'<span class="chip split {short.lower()}">{kind} <b>{passed}/'
                     f'{len(marked)}</b> passed <span class="badge {cls}">{short}</span></span>')
    return f'<div class="meta split">{"".join(chips)}</div>' if chips else ""


def _difficulty(level: Any) -> str:
    """A synthesized task's recorded difficulty: the kind(s) of change, the lines it touches,
    its FAIL_TO_PASS count and how many tests failed on the bug (before the F2P cap)."""
    if not isinstance(level, dict):
        return ""
    kinds = ", ".join(str(k) for k in as_list(level.get("kinds")))
    chips = [chip("difficulty")]
    for key, label in (("lines_changed", "lines changed"), ("fail_to_pass", "FAIL_TO_PASS"),
                       ("tests_failing", "tests failing")):
        if key in level:
            chips.append(chip(label, fmt(level[key])))
    if kinds:
        chips.append(chip("kind", kinds))
    return f'<div class="meta difficulty">{"".join(chips)}</div>'


def render_diff(diff: dict[str, Any] | None) -> str:
    """A repository task's change against its base commit, folded away, its lines coloured;
    "no change" only for a diff known to be empty, the reason when it is unknown, and
    nothing for a row without one (other tasks, older rows)."""
    if not isinstance(diff, dict):
        return ""
    text = diff.get("text")
    if not isinstance(text, str):
        reason = diff.get("reason") or "no reason was recorded"
        return ('<div class="diff card unknown"><b>Diff unknown</b> '
                f'<span class="why">{esc(reason)}</span></div>')
    if not text:
        return ('<div class="diff card none"><b>No change</b> <span class="muted">the '
                "workspace equals the base commit</span></div>")
    shown, hidden = text, 0
    if len(text) > MAX_DIFF_CHARS:
        cut = text.rfind("\n", 0, MAX_DIFF_CHARS) + 1 or MAX_DIFF_CHARS
        shown, hidden = text[:cut], len(text) - cut
    lines, files, added, removed = _diff_lines(shown.removesuffix("\n").split("\n"))
    notes = []
    if diff.get("truncated"):
        notes.append('<span class="chip warn-chip">truncated: the diff is longer than '
                     "the part recorded</span>")
    if diff.get("lossy"):
        notes.append(chip("not UTF-8", "bytes shown as \ufffd"))
    more = (f'<div class="more">{hidden} more characters of the diff are in the run\'s '
            "trajectories.jsonl</div>" if hidden else "")
    return (f'<details class="diff card"><summary><b>Diff</b> against the base commit: '
            f"{files} file(s), "
            f'<span class="ln-add">+{added}</span> <span class="ln-del">-{removed}</span> '
            f'{"".join(notes)}</summary><pre class="diff-text">{"".join(lines)}</pre>'
            f"{more}</details>")


def _diff_lines(lines: list[str]) -> tuple[list[str], int, int, int]:
    """Escaped, classed lines of a git diff (hunk bodies by their line counts, so an added
    line reading "+++ x" is an addition, not a header), and its files, additions, removals."""
    out: list[str] = []
    files = added = removed = 0
    old = new = 0  # lines left in the current hunk
    for line in lines:
        cls = ""
        if old > 0 or new > 0:
            mark = line[:1]
            if mark == "+":
                cls, new, added = "ln-add", new - 1, added + 1
            elif mark == "-":
                cls, old, removed = "ln-del", old - 1, removed + 1
            elif mark == "\\":
                cls = "ln-meta"
            else:
                old, new = old - 1, new - 1
        elif match := HUNK.match(line):
            cls = "ln-hunk"
            old = int(match.group(1) or 1)
            new = int(match.group(2) or 1)
        else:
            cls = "ln-meta"
            files += line.startswith("diff --git ")
        text = esc(line)
        out.append(f'<span class="{cls}">{text}</span>\n' if cls else f"{text}\n")
    return out, files, added, removed
