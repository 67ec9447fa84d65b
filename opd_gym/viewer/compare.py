"""Two or more runs side by side in one static HTML page (`opd-gym report RUN1 RUN2 ...`).

Every number is recomputed from each run's rows (`Run.stats`, the code that writes
summary.json), so runs written by older versions or hand-edited summaries compare on the same
footing: pass rate, mean reward, hint rate, tokens scored, interrupted and infra-error counts,
group statistics (pass@k, reward std), a per-task table, the reward curves and the config
keys that differ (teacher A against B, hint scopes).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from opd_gym.runs.summary import RunSummary
from opd_gym.viewer.assets import PAGE, STYLE, bucket_css
from opd_gym.viewer.figures import FIGURE_STYLE, SERIES_COLOURS, reward_chart, run_config
from opd_gym.viewer.markup import esc, fmt
from opd_gym.viewer.run import Run, load_run

COMPARE = "compare.html"
# config keys that say how a run was played or shown, not what it measured
NOT_COMPARED = {"out", "resume", "quiet", "no_report", "log", "grace", "func", "command",
                "parallel", "ray", "workers", "episodes_per_worker", "out_dir"}
COMPARE_STYLE = """
table.cmp{background:#fff;border:1px solid #e5e7eb;border-collapse:collapse}
table.cmp th,table.cmp td{padding:4px 10px;border-bottom:1px solid #f0f1f3;text-align:right;
font-variant-numeric:tabular-nums}
table.cmp th:first-child,table.cmp td:first-child{text-align:left;color:#374151}
table.cmp th{background:#f9fafb;font-size:12px}
table.cmp td.best{font-weight:700}
"""


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _count(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def _opd(key: str) -> Callable[[RunSummary], float | None]:
    def read(stats: RunSummary) -> float | None:
        if not stats.turns_scored:
            return None
        value = stats.metrics.summary().get(key)
        return value if isinstance(value, float) and value == value else None
    return read


# (label, value from the recomputed summary, how shown, which is better: 1 high, -1 low, 0)
METRICS: list[tuple[str, Callable[[RunSummary], Any], Callable[[Any], str], int]] = [
    ("played episodes", lambda s: s.episodes, str, 0),
    ("pass rate", lambda s: s.pass_rate if s.episodes else None, _rate, 1),
    ("mean reward", lambda s: s.mean_reward if s.episodes else None, _num, 1),
    ("hint rate", lambda s: s.hint_rate if s.turns_scored else None, _rate, 0),
    ("turns scored", lambda s: s.turns_scored, str, 0),
    ("tokens scored", lambda s: s.tokens_scored, str, 0),
    ("teacher - student (nats)", _opd("opd/mean_teacher_minus_student"), _num, 0),
    ("KL, k3 estimate (nats)", _opd("opd/kl_k3"), _num, 0),
    ("hinted turns", _opd("opd/hinted/turns"), _count, 0),
    ("hinted: teacher - student (nats)", _opd("opd/hinted/mean_teacher_minus_student"), _num,
     0),
    ("hinted: top-1 mismatch", _opd("opd/hinted/top1_mismatch"), _rate, 0),
    ("interrupted", lambda s: s.interrupted_episodes, str, 0),
    ("infra errors", lambda s: s.infra_errors, str, 0),
    ("unfinished", lambda s: s.unfinished, str, 0),
]


def compare_rows(runs: Sequence[Run]) -> list[tuple[str, list[str], int | None]]:
    """(label, one cell per run, index of the best run or None) of the side-by-side table."""
    stats = [run.stats for run in runs]
    out: list[tuple[str, list[str], int | None]] = [
        ("rows", [str(len(run.rows())) for run in runs], None)]
    for label, read, show, better in METRICS:
        values = [read(s) for s in stats]
        out.append((label, [show(v) if v is not None else "n/a" for v in values],
                    _best(values, better)))
    if any(s.groups for s in stats):
        out.append(("repeat (rollouts per task)",
                    [str(s.groups["repeat"]) if s.groups else "1" for s in stats], None))
        stds = [s.groups["mean_reward_std"] if s.groups else None for s in stats]
        out.append(("reward std within a task", [_num(v) for v in stds], None))
        ks = sorted({int(k) for s in stats if s.groups for k in s.groups["pass_at_k"]})
        for k in ks:
            values = [s.groups["pass_at_k"].get(str(k)) if s.groups else None for s in stats]
            out.append((f"pass@{k}", [_rate(v) for v in values], _best(values, 1)))
    return out


def _best(values: Sequence[Any], better: int) -> int | None:
    known = [(v, i) for i, v in enumerate(values) if isinstance(v, int | float)]
    if not better or len(known) < 2 or len({v for v, _ in known}) < 2:
        return None
    return (max(known) if better > 0 else min(known))[1]


def per_task(runs: Sequence[Run]) -> dict[str, list[tuple[int, int, float | None]]]:
    """task -> per run (played, passed, mean reward of played episodes or None)."""
    tasks: dict[str, list[tuple[int, int, float | None]]] = {}
    names = sorted({ep.row.task_id or "?" for run in runs for ep in run.rows()})
    for task in names:
        cells = []
        for run in runs:
            played = [ep.row for ep in run.rows() if (ep.row.task_id or "?") == task
                      and ep.row.played]
            rewards = [row.reward for row in played]
            cells.append((len(played), sum(bool(row.passed) for row in played),
                          sum(rewards) / len(rewards) if rewards else None))
        tasks[task] = cells
    return tasks


def config_differences(runs: Sequence[Run]) -> dict[str, list[Any]]:
    """Config keys (config.json, else summary.json's config) whose values differ between
    the runs, with each run's value (None: not recorded)."""
    configs = [run_config(run) for run in runs]
    keys = sorted({k for c in configs for k in c} - NOT_COMPARED)
    return {k: [c.get(k) for c in configs] for k in keys
            if len({repr(c.get(k)) for c in configs}) > 1}


def render_compare(runs: Sequence[Run], *, links: Sequence[str | None] | None = None) -> str:
    """The comparison page of loaded runs, as a string."""
    links = list(links) if links is not None else [None] * len(runs)
    names = [_label(run, i) for i, run in enumerate(runs)]
    if len(set(names)) < len(names):  # same folder names: tell them apart by their paths
        names = [str(run.path) for run in runs]
    head = "".join(
        f'<th><span style="color:{SERIES_COLOURS[i % len(SERIES_COLOURS)]}">&#9632;</span> '
        + (f'<a href="{esc(link)}">{esc(name)}</a>' if link else esc(name)) + "</th>"
        for i, (name, link) in enumerate(zip(names, links, strict=True)))
    body = [f"<h1>OPD run comparison</h1><div class=\"sub\">{len(runs)} runs: "
            f"{esc(', '.join(str(run.path) for run in runs))}</div>",
            '<h2>Runs side by side <span class="sub">(computed from each run\'s rows; bold: '
            "the better value)</span></h2>"]
    rows = []
    for label, cells, best in compare_rows(runs):
        tds = "".join(f'<td class="best">{esc(c)}</td>' if i == best else f"<td>{esc(c)}</td>"
                      for i, c in enumerate(cells))
        rows.append(f"<tr><td>{esc(label)}</td>{tds}</tr>")
    body.append(f'<table class="cmp" id="compare-metrics"><tr><th>metric</th>{head}</tr>'
                f'{"".join(rows)}</table>')
    differ = config_differences(runs)
    if differ:
        rows = "".join(f'<tr><td class="mono">{esc(k.replace("_", "-"))}</td>'
                       + "".join(f'<td class="mono">{esc(fmt(v))}</td>' for v in values)
                       + "</tr>" for k, values in differ.items())
        body.append('<h2>Config differences</h2><table class="cmp" id="compare-config">'
                    f"<tr><th>key</th>{head}</tr>{rows}</table>")
    else:
        body.append('<h2>Config differences</h2><p class="muted" id="compare-config">none '
                    "recorded (same config, or no config.json)</p>")
    body.append('<h2>Reward over episodes</h2><div class="charts"><div class="chart" '
                f'id="chart-reward">{reward_chart(runs)}</div></div>')
    tasks = per_task(runs)
    sub = "".join("<th>passed / played</th><th>mean reward</th>" for _ in runs)
    task_rows = "".join(
        f"<tr><td>{esc(task)}</td>" + "".join(
            f"<td>{passed}/{played}</td><td>{_num(mean)}</td>" for played, passed, mean in cells)
        + "</tr>" for task, cells in tasks.items())
    top = "".join(f'<th colspan="2">{esc(name)}</th>' for name in names)
    body.append(f'<h2>Per task</h2><table class="cmp" id="compare-tasks"><tr><th></th>{top}'
                f"</tr><tr><th>task</th>{sub}</tr>{task_rows}</table>")
    problems = [f"{name}: {p}" for name, run in zip(names, runs, strict=True)
                for p in run.problems]
    if problems:
        items = "".join(f"<li>{esc(p)}</li>" for p in problems[:50])
        body.append(f'<details class="card"><summary>{len(problems)} problem(s) reading the '
                    f"runs</summary><ul>{items}</ul></details>")
    return PAGE.substitute(
        title=esc("OPD run comparison: " + " vs ".join(names)),
        style=STYLE + FIGURE_STYLE + COMPARE_STYLE,
        buckets=bucket_css(),
        body="\n".join(body),
        vocab="{}",
        script='document.body.setAttribute("data-viewer", "ready");',
    )


def _label(run: Run, index: int) -> str:
    return run.name or f"run {index + 1}"


def write_compare(run_dirs: Sequence[str | os.PathLike[str]],
                  out: str | os.PathLike[str] = COMPARE) -> Path:
    """Write the comparison of `run_dirs` (two or more) to `out`; its path. Each run's
    report.html, when there, is linked from its column."""
    if len(run_dirs) < 2:
        raise ValueError("a comparison needs two or more runs")
    runs = [load_run(path) for path in run_dirs]
    target = Path(out)
    links = []
    for run in runs:
        report = run.path / "report.html"
        links.append(os.path.relpath(report, target.resolve().parent) if report.is_file()
                     else None)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_compare(runs, links=links), encoding="utf-8")
    return target


__all__ = ["COMPARE", "compare_rows", "config_differences", "per_task", "render_compare",
           "write_compare"]
