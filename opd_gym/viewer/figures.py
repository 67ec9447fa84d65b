"""The report's top section: labelled metric figures, small inline SVG charts, the run's config.

Values that cannot exist are shown as "n/a" with the reason (no student logprobs, no scored
tokens, OPD off), never as NaN or a dash without explanation. Charts are static inline SVG:
the report stays one offline file with no extra script.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from opd_gym.runs import hint_rate
from opd_gym.runs.summary import scoring_text
from opd_gym.viewer.markup import esc, fmt
from opd_gym.viewer.run import Episode, Run, as_dict, as_float

# key -> (label, what it means, kind) ; kind: "count", "rate", "nats", "seconds", "number"
RUN_FIGURES: dict[str, tuple[str, str, str]] = {
    "rows": ("Rows", "episode rows in the run (one per episode id)", "count"),
    "episodes": ("Played", "finished episodes the rates count (not interrupted, no infra "
                 "error)", "count"),
    "pass_rate": ("Pass rate", "played episodes whose hidden tests all passed", "rate"),
    "mean_reward": ("Mean reward", "final reward per played episode", "number"),
    "mean_turns": ("Mean turns", "assistant turns per episode row", "number"),
    "hint_rate": ("Hint rate", "scored turns that received a judge hint", "rate"),
    "tokens_scored": ("Tokens scored", "student tokens the teacher scored", "count"),
    "turns_scored": ("Turns scored", "assistant turns the teacher scored", "count"),
    "interrupted_episodes": ("Interrupted", "episodes cut short by Ctrl-C (--resume plays "
                             "them again)", "count"),
    "infra_errors": ("Infra errors", "episodes whose grading failed on our side (--resume "
                     "plays them again)", "count"),
    "unfinished": ("Unfinished", "other episodes cut off before their end", "count"),
    "seconds": ("Wall time", "seconds for the whole run (summary.json)", "seconds"),
    "unreadable_records": ("Unreadable records", "played episodes whose OPD records could "
                           "not be read (counted without them)", "count"),
    "bad_lines": ("Unreadable lines", "lines of trajectories.jsonl that could not be read",
                  "count"),
}
ALWAYS_SHOWN = {"rows", "episodes", "pass_rate", "mean_reward", "mean_turns", "hint_rate",
                "tokens_scored", "turns_scored", "interrupted_episodes", "infra_errors"}
# summary.json keys that are the run's own numbers (recomputed here), never shown from the file
SUMMARY_KEYS = {"skipped", "passed", "reward_sum", "failures", "config", "interrupted",
                "groups", "opd", "finished"}
NEEDS_STUDENT = {"top1_mismatch", "topk_mass", "mean_teacher_minus_student", "kl_k3",
                 "log_ratio_k1", "hinted/mean_teacher_minus_student", "hinted/top1_mismatch"}
GAP_KEYS = ("kl_k3", "log_ratio_k1", "mean_teacher_minus_student",
            "hinted/mean_teacher_minus_student")  # from student logprobs: may be forced
OPD_FIGURES: dict[str, tuple[str, str, str]] = {
    "turns_scored": ("Turns scored", "assistant turns the teacher scored", "count"),
    "hint_rate": ("Hint rate", "scored turns with a judge hint", "rate"),
    "mean_hints_per_rollout": ("Hints per episode", "judge hints per episode", "number"),
    "tokens_scored": ("Tokens scored", "student tokens with a teacher logprob", "count"),
    "mean_teacher_minus_student": ("Teacher − student", "mean logprob gap per token (nats)",
                                   "nats"),
    "kl_k3": ("KL (k3)", "KL(student‖teacher) per token, k3 estimate on sampled tokens: "
              "mean of e^r − 1 − r, r = teacher − student logprob; never negative (nats)",
              "number"),
    "log_ratio_k1": ("Log ratio (k1)", "mean student − teacher logprob per token, sampled "
                     "estimate; may be negative, unlike a KL (nats)", "nats"),
    "top1_mismatch": ("Top-1 mismatch", "tokens the teacher would not have picked first", "rate"),
    "topk_mass": ("Top-K mass", "teacher probability inside its top-K", "rate"),
    "hinted/turns": ("Hinted turns", "scored turns that got a judge hint: where the "
                     "teaching signal is", "count"),
    "hinted/mean_teacher_minus_student": ("Hinted: teacher − student", "mean logprob gap "
                                          "per token over hinted turns only (nats)", "nats"),
    "hinted/top1_mismatch": ("Hinted: top-1 mismatch", "tokens of hinted turns the teacher "
                             "would not have picked first", "rate"),
    "copy_rate": ("Copy rate", "scored tokens copied from the hint", "rate"),
    "copied_tokens": ("Copied tokens", "tokens copied verbatim from the hint", "count"),
}
FIGURE_STYLE = """
.figs{display:grid;grid-template-columns:repeat(auto-fill,minmax(170px,1fr));gap:8px}
.fig{background:#fff;border:1px solid #e5e7eb;border-radius:6px;padding:8px 10px}
.fig .l{font-size:12px;color:#374151;font-weight:600}
.fig .n{font-size:22px;font-variant-numeric:tabular-nums;margin:2px 0}
.fig .n.na{color:#9ca3af;font-size:18px}
.fig .n.small{font-size:13px;word-break:break-word}
.fig .d{font-size:11px;color:#6b7280}
.fig.warn{border-color:#f59e0b;background:#fffbeb}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(360px,1fr));gap:10px}
.chart{background:#fff;border:1px solid #e5e7eb;border-radius:6px;padding:8px}
.chart h3{margin:0 0 4px;font-size:13px}
.chart .na{color:#6b7280;font-size:13px;padding:18px 0}
.chart svg text{font:10px system-ui,sans-serif;fill:#374151}
table.config td{padding:2px 10px 2px 0;vertical-align:top}
table.config td.k{color:#374151;font-weight:600;white-space:nowrap}
"""


def _number(value: float, kind: str) -> str:
    if kind == "rate":
        return f"{100 * value:.1f}%"
    if kind == "count":
        return f"{value:,.0f}"
    if kind == "seconds":
        return f"{value:.1f} s" if value < 600 else f"{value / 60:.1f} min"
    if kind == "nats":
        return f"{value:+.3f}" if abs(value) < 100 else f"{value:+.0f}"
    return f"{value:.3f}" if abs(value) < 1000 else f"{value:.0f}"


def _figure(label: str, value: float | None, kind: str, description: str, why: str = "",
            *, warn: bool = False) -> str:
    if value is None or not math.isfinite(value):
        shown, cls, note = "n/a", " na", why or "no value recorded"
    else:
        shown, cls, note = _number(value, kind), "", description
    box = "fig warn" if warn else "fig"
    return (f'<div class="{box}" title="{esc(description)}"><div class="l">{esc(label)}</div>'
            f'<div class="n{cls}">{esc(shown)}</div><div class="d">{esc(note)}</div></div>')


def student_gaps(episodes: Sequence[Episode]) -> np.ndarray:
    """Teacher − student logprob per scored token, over every record with student logprobs."""
    gaps = []
    for ep in episodes:
        records, _ = ep.opd
        for record in records.values():
            student = getattr(record, "student_logprobs", None)
            if student is None:
                continue
            gap = np.asarray(record.teacher_token_logprobs, np.float64) - student
            gaps.append(gap[np.asarray(record.mask, bool) & np.isfinite(gap)])
    return np.concatenate(gaps) if gaps else np.zeros(0)


FORCED_NOTE = "student logprobs teacher-forced on the policy's text, not sampled"


def forced_source(episodes: Sequence[Episode]) -> str | None:
    """A record's `student_logprobs_source` when the run's student logprobs were teacher-forced
    (scripted turns scored by a model) rather than sampled, so the figures can say so."""
    for ep in episodes:
        for record in ep.opd[0].values():
            source = getattr(record, "student_logprobs_source", None)
            if source and record.student_logprobs is not None:
                return str(source)
    return None


def _why_missing(key: str, opd: dict[str, Any], gaps: np.ndarray) -> str:
    tokens = as_float(opd.get("opd/tokens_scored"))
    if not opd:
        return "OPD was off for this run (no teacher scoring)"
    if not tokens:
        return "no token was scored (OPD off, or no turn reached the teacher)"
    if key.startswith("hinted/") and not as_float(opd.get("opd/hinted/turns")):
        return "no scored turn got a hint (the judge found nothing to teach)"
    if key in NEEDS_STUDENT and gaps.size == 0:
        return "needs student logprobs; the policy gave none (e.g. a scripted or replayed policy)"
    if key in NEEDS_STUDENT:
        return "not in the run's metrics (only some episodes have student logprobs)"
    return "not defined for this run"


def metric_figures(run: Run) -> str:
    """The run summary and the OPD metrics as labelled figures."""
    summary = run.summary()
    gaps = student_gaps(run.episodes)
    nothing_scored = not as_float(summary.get("tokens_scored")) and not any(
        ep.tokens_scored for ep in run.episodes)
    run_cards = []
    for key, (label, description, kind) in RUN_FIGURES.items():
        if key not in summary or (key not in ALWAYS_SHOWN and not summary.get(key)):
            continue
        value = as_float(summary.get(key))
        why = "no episode was played" if key != "hint_rate" else "no turn was scored (OPD off?)"
        if key == "hint_rate" and nothing_scored:
            value = None
        warn = key in ("bad_lines", "unreadable_records") or (
            key in ("interrupted_episodes", "infra_errors", "unfinished") and bool(value))
        run_cards.append(_figure(label, value, kind, description, why, warn=warn))
    failures = as_dict(run.summary_file).get("failures")
    if isinstance(failures, list) and failures:
        run_cards.append(_figure("Episode errors", float(len(failures)), "count",
                                 "episodes that raised (summary.json)", warn=True))
    shown = set(RUN_FIGURES) | SUMMARY_KEYS
    for key, raw in as_dict(run.summary_file).items():  # anything else it holds, as text
        if key not in shown and not str(key).startswith("_"):
            text = fmt(raw, percent=str(key).endswith("rate"))
            run_cards.append(
                f'<div class="fig"><div class="l">{esc(str(key).replace("_", " "))}</div>'
                f'<div class="n small">{esc(text)}</div><div class="d">from summary.json</div>'
                "</div>")
    # recomputed from the played rows' records (never a row's running metrics)
    opd = as_dict(summary.get("opd")) if run.stats.turns_scored else {}
    forced = forced_source(run.episodes) is not None
    opd_cards = []
    for key, (label, description, kind) in OPD_FIGURES.items():
        if forced and key in GAP_KEYS:
            description = (description.replace(" on sampled tokens", "")
                           .replace(", sampled estimate", "") + f"; {FORCED_NOTE}")
        full = f"opd/{key}"
        value = as_float(opd.get(full)) if opd else None
        if key in NEEDS_STUDENT and gaps.size == 0:
            value = None
        elif key == "mean_teacher_minus_student" and (value is None or not math.isfinite(value)):
            value = float(gaps.mean()) if gaps.size else None  # from the records themselves
        if nothing_scored and kind in ("rate", "nats") or nothing_scored and key.startswith(
                "mean_"):
            value = None
        opd_cards.append(_figure(label, value, kind, description, _why_missing(key, opd, gaps)))
    return (
        '<h2>Run summary <span class="sub">(computed from the rows)</span></h2>'
        f'<div class="figs" id="run-figures">{"".join(run_cards)}</div>'
        + _disagreement(run) + group_section(run) +
        '<h2>OPD metrics</h2>'
        f'<div class="figs" id="opd-metrics">{"".join(opd_cards)}</div>'
        + turn_scoring(run)
    )


def turn_scoring(run: Run) -> str:
    """Scored turns beside the unscored ones, with the count per reason, recounted from the
    played rows' records (as the CLI summary prints them); a warning when any was left out
    for a reason other than the judge having no hint."""
    metrics = run.stats.metrics
    if not metrics.turns:
        return ""
    missing = sum(n for reason, n in metrics.unscored.items() if reason != "no_hint")
    box = "card err-note" if missing else "card"
    return (f'<div class="{box}" id="turn-scoring" style="margin-top:8px"><b>Turns scored</b> '
            f"{esc(scoring_text(metrics))}</div>")


def _disagreement(run: Run) -> str:
    """A warning where summary.json says otherwise than the rows (the rows' numbers win)."""
    differ = run.disagreements()
    if not differ:
        return ""
    rate = {key: key.endswith("rate") for key, _, _ in differ}
    items = "".join(f"<li>{esc(key)}: summary.json {esc(fmt(theirs, percent=rate[key]))}, "
                    f"rows {esc(fmt(ours, percent=rate[key]))}</li>"
                    for key, theirs, ours in differ)
    return ('<div class="card err-note" id="summary-disagrees" style="margin-top:8px">'
            "<b>summary.json disagrees with the rows</b> (the figures above are the rows'): "
            f"<ul>{items}</ul></div>")


def group_section(run: Run) -> str:
    """Group statistics of a run played with --repeat N: pass@k and each task's group."""
    groups = run.stats.groups
    if not groups:
        return ""
    cards = [_figure(f"pass@{k}", value, "rate", f"unbiased, over tasks with >= {k} graded "
                     "rollouts") for k, value in groups["pass_at_k"].items()]
    cards.append(_figure("Reward std", groups["mean_reward_std"], "number",
                         "within-task reward std, mean over tasks", "no group"))
    rows = "".join(
        f'<tr><td>{esc(task)}</td><td class="num">{g["n"]}</td>'
        f'<td class="num">{g["passed"]}/{g["graded"]}</td>'
        f'<td class="num">{esc(fmt(g["mean_reward"]))}</td>'
        f'<td class="num">{esc(fmt(g["reward_std"]))}</td></tr>'
        for task, g in sorted(groups["per_task"].items()))
    head = ("<tr><th>task</th><th>rollouts</th><th>passed</th><th>mean reward</th>"
            "<th>reward std</th></tr>")
    return (f'<h2>Groups <span class="sub">({groups["tasks"]} tasks x {groups["repeat"]} '
            'rollouts, played episodes only)</span></h2>'
            f'<div class="figs" id="group-figures">{"".join(cards)}</div>'
            f'<table class="index" id="groups" style="margin-top:8px">{head}{rows}</table>')


def _bars_svg(labels: Sequence[str], series: Sequence[tuple[str, Sequence[float | None], str]],
              *, maximum: float, unit: str = "") -> str:
    """Horizontal grouped bars, one group per label; values 0..maximum."""
    row, bar, left, width = 14 * len(series) + 8, 12, 150, 200
    height = row * len(labels) + 24
    parts = [f'<svg width="{left + width + 80}" height="{height}" role="img">']
    for i, label in enumerate(labels):
        y = 4 + i * row
        parts.append(f'<text x="{left - 6}" y="{y + row / 2}" text-anchor="end">'
                     f"{esc(label[:26])}</text>")
        for j, (_, values, colour) in enumerate(series):
            value = values[i]
            yy = y + j * 14
            if value is None or not math.isfinite(value):
                parts.append(f'<text x="{left + 2}" y="{yy + 10}">n/a</text>')
                continue
            w = 0 if maximum <= 0 else max(1.0, width * min(value, maximum) / maximum)
            parts.append(f'<rect x="{left}" y="{yy}" width="{w:.1f}" height="{bar}" '
                         f'fill="{colour}"><title>{esc(f"{label}: {value:.3g}{unit}")}</title>'
                         "</rect>")
            parts.append(f'<text x="{left + w + 4:.1f}" y="{yy + 10}">{value:.2f}{unit}</text>')
    legend_y = height - 6
    for j, (name, _, colour) in enumerate(series):
        x = left + j * 110
        parts.append(f'<rect x="{x}" y="{legend_y - 9}" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{x + 14}" y="{legend_y}">{esc(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _histogram_svg(counts: Sequence[int], edges: Sequence[float], *, xlabel: str,
                   colour: str = "#2563eb", integer: bool = False) -> str:
    """A vertical-bar histogram with its x range and bin counts as tooltips."""
    width, height, bottom = 340, 140, 28
    top = max(max(counts), 1)
    step = min(width / max(len(counts), 1), 48.0)  # a few bins stay bars, not one block
    parts = [f'<svg width="{width + 20}" height="{height + bottom}" role="img">']
    for i, count in enumerate(counts):
        h = (height - 10) * count / top
        a, b = edges[i], edges[i + 1]
        span = f"{a:g}" if integer else f"{a:.2f} to {b:.2f}"
        parts.append(f'<rect x="{10 + i * step:.1f}" y="{height - h:.1f}" width="'
                     f'{max(step - 1, 1):.1f}" height="{h:.1f}" fill="{colour}">'
                     f"<title>{esc(span)}: {count}</title></rect>")
    right = 10 + step * len(counts)
    parts.append(f'<line x1="10" y1="{height}" x2="{right:.1f}" y2="{height}" stroke="#9ca3af"/>')
    first, last = (f"{edges[0]:g}", f"{edges[-2]:g}") if integer else (
        f"{edges[0]:.2f}", f"{edges[-1]:.2f}")
    parts.append(f'<text x="10" y="{height + 12}">{esc(first)}</text>'
                 f'<text x="{right:.1f}" y="{height + 12}" text-anchor="end">{esc(last)}</text>'
                 f'<text x="{width / 2 + 10}" y="{height + 25}" text-anchor="middle">'
                 f"{esc(xlabel)} (max bin {top})</text></svg>")
    return "".join(parts)


def _chart(title: str, body: str, chart_id: str) -> str:
    return f'<div class="chart" id="{chart_id}"><h3>{esc(title)}</h3>{body}</div>'


def _na(reason: str) -> str:
    return f'<div class="na">n/a: {esc(reason)}</div>'


def charts(run: Run) -> str:
    """Gap distribution, hint rate and reward per task, turns per episode, as inline SVG."""
    episodes = run.episodes
    gaps = student_gaps(episodes)
    if gaps.size:
        lo, hi = float(np.percentile(gaps, 1)), float(np.percentile(gaps, 99))
        if hi <= lo:
            lo, hi = lo - 0.5, hi + 0.5
        counts, edges = np.histogram(np.clip(gaps, lo, hi), bins=24, range=(lo, hi))
        gap_body = _histogram_svg(counts.tolist(), edges.tolist(),
                                  xlabel=f"teacher − student logprob, {gaps.size} tokens, "
                                  f"mean {gaps.mean():+.3f}")
        source = forced_source(episodes)
        if source:
            gap_body += f'<div class="d" id="forced-student">{esc(source)}</div>'
    else:
        scored = sum(ep.tokens_scored for ep in episodes)
        gap_body = _na("no student logprobs in this run (the policy gave none)" if scored
                       else "no scored tokens in this run")
    tasks: dict[str, list[Episode]] = {}
    for ep in episodes:
        tasks.setdefault(ep.task_id, []).append(ep)
    if tasks:
        names = sorted(tasks)
        rewards = [_mean([ep.reward for ep in tasks[n]]) for n in names]
        hint_rates = [_hint_rate(tasks[n]) for n in names]
        top = max([1.0, *(r for r in rewards if r is not None)])
        task_body = _bars_svg(names, [("hint rate", hint_rates, "#f59e0b"),
                                      ("mean reward", rewards, "#10b981")], maximum=top)
        if all(h is None for h in hint_rates):
            task_body += '<div class="d">hint rate n/a: no turn was scored</div>'
    else:
        task_body = _na("no episodes")
    turns = [ep.num_turns for ep in episodes]
    if turns:
        lo, hi = min(turns), max(turns)
        edges = list(range(lo, hi + 2))
        counts = [turns.count(t) for t in range(lo, hi + 1)]
        turn_body = _histogram_svg(counts, [float(e) for e in edges], xlabel="turns per episode",
                                   colour="#7c3aed", integer=True)
    else:
        turn_body = _na("no episodes")
    return ('<h2>Charts</h2><div class="charts">'
            + _chart("Reward over episodes", reward_chart([run]), "chart-reward")
            + _chart("Teacher − student logprob gaps", gap_body, "chart-gaps")
            + _chart("Hint rate and reward per task", task_body, "chart-tasks")
            + _chart("Turns per episode", turn_body, "chart-turns")
            + "</div>")


SERIES_COLOURS = ("#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2")


def reward_points(run: Run) -> list[tuple[int, float, bool | None]]:
    """(episode id, reward, passed) of every played episode, in episode order."""
    points = []
    for position, ep in enumerate(run.rows()):
        row = ep.row
        if row.played:
            ident = row.episode if row.episode is not None else position
            points.append((ident, row.reward, row.passed))
    return sorted(points, key=lambda p: p[0])


def reward_chart(runs: Sequence[Run]) -> str:
    """Reward of each played episode over episode ids (points: green passed, red failed) and
    each run's running mean as a line; one colour per run when several are compared."""
    series = [(run, reward_points(run)) for run in runs]
    if not any(points for _, points in series):
        return _na("no played episode")
    width, height, left = 340, 140, 34
    bottom = 28 + (12 * len(runs) + 4 if len(runs) > 1 else 0)  # room for the legend
    xs = [p[0] for _, points in series for p in points]
    ys = [p[1] for _, points in series for p in points]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)
    y0, y1 = min(0.0, min(ys)), max(1.0, max(ys))

    def at(x: float, y: float) -> tuple[float, float]:
        return (left + (x - x0) / (x1 - x0) * (width - left - 6),
                6 + (y1 - y) / (y1 - y0) * (height - 12))

    parts = [f'<svg width="{width + 20}" height="{height + bottom}" role="img">',
             f'<line x1="{left}" y1="{height}" x2="{width}" y2="{height}" stroke="#9ca3af"/>',
             f'<text x="{left - 4}" y="{at(0, y1)[1] + 4:.1f}" text-anchor="end">{y1:g}</text>',
             f'<text x="{left - 4}" y="{at(0, y0)[1]:.1f}" text-anchor="end">{y0:g}</text>']
    for index, (run, points) in enumerate(series):
        colour = SERIES_COLOURS[index % len(SERIES_COLOURS)]
        total, line = 0.0, []
        for n, (x, y, passed) in enumerate(points, 1):
            total += y
            line.append("{:.1f},{:.1f}".format(*at(x, total / n)))
            px, py = at(x, y)
            fill = colour if len(runs) > 1 else (
                "#10b981" if passed else "#ef4444" if passed is False else "#9ca3af")
            verdict = {True: "passed", False: "failed", None: "ungraded"}[passed]
            parts.append(f'<circle class="pt" cx="{px:.1f}" cy="{py:.1f}" r="2.5" '
                         f'fill="{fill}"><title>{esc(run.name)} episode {x}: reward '
                         f"{y:.3f}, {verdict}</title></circle>")
        if len(line) > 1:
            parts.append(f'<polyline points="{" ".join(line)}" fill="none" stroke="{colour}" '
                         'stroke-width="1.5" opacity="0.8"/>')
    parts.append(f'<text x="{left}" y="{height + 12}">{x0}</text>'
                 f'<text x="{width}" y="{height + 12}" text-anchor="end">{max(xs)}</text>'
                 f'<text x="{(width + left) / 2:.0f}" y="{height + 25}" text-anchor="middle">'
                 "episode (line: running mean reward)</text>")
    if len(runs) > 1:
        for index, run in enumerate(runs):
            colour = SERIES_COLOURS[index % len(SERIES_COLOURS)]
            y = height + 32 + 12 * index
            parts.append(f'<rect x="{left}" y="{y}" width="8" height="8" fill="{colour}"/>'
                         f'<text x="{left + 12}" y="{y + 8}">{esc(run.name[:40])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None and math.isfinite(v)]
    return sum(kept) / len(kept) if kept else None


def _hint_rate(episodes: Sequence[Episode]) -> float | None:
    return hint_rate(ep.row for ep in episodes)


def run_config(run: Run) -> dict[str, Any]:
    """The run's configuration: `config.json` beside the run, else summary.json's `config`."""
    config = dict(run.config_file or {})
    if not config:
        config = as_dict(run.summary().get("config"))
    return {k: v for k, v in config.items() if v is not None and k != "func"}


def config_table(run: Run) -> str:
    """The configuration as a key/value table (or why there is none)."""
    config = run_config(run)
    if not config:
        body = ('<p class="muted">n/a: this run recorded no configuration (no config.json, '
                "empty config in summary.json).</p>")
    else:
        rows = "".join(f'<tr><td class="k">{esc(str(k).replace("_", "-"))}</td>'
                       f'<td class="mono">{esc(fmt(v))}</td></tr>'
                       for k, v in sorted(config.items()))
        body = f'<table class="config">{rows}</table>'
    return f'<h2>Configuration</h2><div class="card" id="run-config">{body}</div>'
