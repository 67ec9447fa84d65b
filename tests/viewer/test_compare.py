"""The report's numbers are the rows' (recounted here from the raw JSON, independently of
opd_gym), its filters tag the right episodes and turns, group statistics appear with
--repeat, and `opd-gym report RUN1 RUN2` compares runs side by side; checked as text and in
headless Chromium."""

from __future__ import annotations

import copy
import json
import re
from html import unescape
from itertools import combinations
from pathlib import Path

import pytest
from test_report import chromium

from opd_gym.cli import main
from opd_gym.viewer import write_report

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # local backend notice


# -- an independent recount of a run's raw rows --------------------------------------------

def raw_rows(run: Path) -> list[dict]:
    """One row per episode id, the last written (as a resumed run leaves them)."""
    last: dict[int, dict] = {}
    for line in (run / "trajectories.jsonl").read_text().splitlines():
        row = json.loads(line)
        last[row["episode"]] = row
    return list(last.values())


def is_played(row: dict) -> bool:
    return bool(row.get("finished")) and not row.get("interrupted") and not (
        row.get("grade") or {}).get("infra_error")


def is_passed(row: dict) -> bool:
    grade = row.get("grade") or {}
    return bool(grade) and not grade.get("reason") and grade.get("total", 0) > 0 and (
        grade.get("passed") == grade.get("total"))


def recount(run: Path) -> dict:
    rows = raw_rows(run)
    played = [r for r in rows if is_played(r)]
    scored = [rec for r in played for rec in r.get("opd") or [] if any(rec["mask"])]
    return {
        "rows": len(rows),
        "played": len(played),
        "pass_rate": sum(map(is_passed, played)) / len(played),
        "mean_reward": sum(r["return"] for r in played) / len(played),
        "hint_rate": sum(bool(rec["hint"]) for rec in scored) / len(scored),
        "turns_scored": len(scored),
        "tokens_scored": sum(sum(map(bool, rec["mask"])) for rec in scored),
        "interrupted": sum(bool(r.get("interrupted")) for r in rows),
        "infra": sum(bool((r.get("grade") or {}).get("infra_error")) and r.get("finished")
                     and not r.get("interrupted") for r in rows),
        "unfinished": sum(not r.get("finished") and not r.get("interrupted") for r in rows),
    }


def figure(page: str, label: str) -> str:
    found = re.search(rf'<div class="l">{re.escape(label)}</div><div class="n[^"]*">([^<]*)'
                      "</div>", page)
    assert found, f"no figure {label!r}"
    return unescape(found.group(1))


def pct(value: float) -> str:
    return f"{100 * value:.1f}%"


@pytest.fixture
def mixed_run(run_dir: Path, tmp_path: Path) -> Path:
    """The recorded run plus what real runs also hold: an episode replayed by --resume (its
    first row superseded), an interrupted row, an infra-error row; and a summary.json whose
    numbers are wrong."""
    lines = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text()
             .splitlines()]
    fail, passed, markup, unfinished = lines
    rows = []
    for episode, row in enumerate([fail, passed, markup, unfinished]):
        rows.append({**copy.deepcopy(row), "episode": episode})
    rows.append({**copy.deepcopy(passed), "episode": 4, "finished": False,
                 "interrupted": True})
    infra = copy.deepcopy(fail)
    infra.update(episode=5, grade={**infra["grade"], "infra_error": True})
    rows.append(infra)
    rows.append({**copy.deepcopy(passed), "episode": 0})  # episode 0 replayed: it passes now
    out = tmp_path / "mixed"
    out.mkdir()
    (out / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / "summary.json").write_text(json.dumps({"episodes": 99, "pass_rate": 0.01,
                                                  "seconds": 12.5}))
    (out / "config.json").write_text(json.dumps({"teacher": "tiny", "hint_scope": "episode",
                                                 "seed": 0}))
    return out


def test_report_figures_are_recounted_from_the_rows(mixed_run):
    want = recount(mixed_run)
    assert want["rows"] == 6 and want["played"] == 3 and want["interrupted"] == 1
    assert want["infra"] == 1 and want["unfinished"] == 1
    page = write_report(mixed_run).read_text(encoding="utf-8")
    assert figure(page, "Rows") == str(want["rows"])
    assert figure(page, "Played") == str(want["played"])
    assert figure(page, "Pass rate") == pct(want["pass_rate"])
    assert figure(page, "Mean reward") == f"{want['mean_reward']:.3f}"
    assert figure(page, "Hint rate") == pct(want["hint_rate"])
    assert figure(page, "Tokens scored") == f"{want['tokens_scored']:,}"
    assert figure(page, "Turns scored") == str(want["turns_scored"])
    assert figure(page, "Interrupted") == "1" and figure(page, "Infra errors") == "1"
    assert figure(page, "Unfinished") == "1" and figure(page, "Wall time") == "12.5 s"
    assert "INTERRUPTED" in page and "INFRA ERROR" in page
    flagged = page.split('id="summary-disagrees"')[1][:800]
    assert "episodes: summary.json 99, rows 3" in flagged
    # the reward chart: one point per played episode, at its reward
    chart = page.split('id="chart-reward"')[1].split("</svg>")[0]
    points = re.findall(r"episode (\d+): reward ([0-9.]+), (passed|failed)", chart)
    played = sorted((r["episode"], r["return"], is_passed(r)) for r in raw_rows(mixed_run)
                    if is_played(r))
    assert [(int(e), round(float(v), 3), p == "passed") for e, v, p in points] == [
        (e, round(v, 3), p) for e, v, p in played]


def test_filters_tag_failed_and_hinted_turns_and_episodes(mixed_run):
    page = write_report(mixed_run).read_text(encoding="utf-8")
    options = re.findall(r'<option value="([a-z-]+)"', page)
    assert options == ["all", "failed-episodes", "failed-turns", "hinted-turns"]
    rows = sorted(raw_rows(mixed_run), key=lambda r: r["episode"])
    lines = [json.loads(line) for line in (mixed_run / "trajectories.jsonl").read_text()
             .splitlines()]
    episodes = re.findall(r'<details class="ep" id="ep-(\d+)"([^>]*)>', page)
    assert len(episodes) == len(lines)  # every line is shown, superseded ones too
    for (number, attrs), line in zip(episodes, lines, strict=True):
        failed_turns = sum(bool(t.get("format_errors")) or any(
            r.get("error") or r.get("timed_out") or r.get("exit_code") not in (None, 0)
            for r in t.get("tool_results") or []) for t in line["turns"])
        hints = sum(bool(rec["hint"]) for rec in line.get("opd") or [])
        assert ('data-failed="1"' in attrs) == (not is_played(line) or not is_passed(line))
        assert (f'data-fail-turns="{failed_turns}"' in attrs) == bool(failed_turns), number
        assert (f'data-hint-turns="{hints}"' in attrs) == bool(hints), number
    all_hints = sum(bool(rec["hint"]) for line in lines for rec in line.get("opd") or [])
    assert page.count('<div class="tgroup" data-hint="1"') == all_hints
    assert page.count('class="tgroup"') == sum(len(line["turns"]) for line in lines)
    assert len(rows) == 6


def test_group_statistics_with_repeat(run_dir, tmp_path):
    lines = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text()
             .splitlines()]
    fail, passed = lines[0], lines[1]
    plan = [("alpha", passed, 1.0), ("alpha", fail, 0.2), ("alpha", fail, 0.1),
            ("beta", fail, 0.0), ("beta", fail, 0.3), ("beta", fail, 0.3)]
    run = tmp_path / "groups"
    run.mkdir()
    rows = [{**copy.deepcopy(src), "episode": i, "task_id": task, "return": reward}
            for i, (task, src, reward) in enumerate(plan)]
    (run / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "config.json").write_text(json.dumps({"repeat": 3}))
    page = write_report(run).read_text(encoding="utf-8")

    def pass_at(k: int) -> float:  # brute force: a k-subset passes if any member does
        per_task = []
        for task in ("alpha", "beta"):
            group = [is_passed(r) for r in rows if r["task_id"] == task]
            subsets = list(combinations(group, k))
            per_task.append(sum(any(s) for s in subsets) / len(subsets))
        return sum(per_task) / len(per_task)

    for k in (1, 2, 3):
        assert figure(page, f"pass@{k}") == pct(pass_at(k))
    stds = []
    for task in ("alpha", "beta"):
        values = [r["return"] for r in rows if r["task_id"] == task]
        mean = sum(values) / 3
        stds.append((sum((v - mean) ** 2 for v in values) / 3) ** 0.5)
    assert figure(page, "Reward std") == f"{sum(stds) / 2:.3f}"
    table = page.split('id="groups"')[1].split("</table>")[0]
    assert re.findall(r"<td>(\w+)</td><td class=\"num\">3</td><td class=\"num\">(\d)/3</td>",
                      table) == [("alpha", "1"), ("beta", "0")]
    assert "Groups" in page and "2 tasks x 3" in page


def cells(page: str, table_id: str) -> dict[str, list[str]]:
    table = page.split(f'id="{table_id}"')[1].split("</table>")[0]
    out = {}
    for row in re.findall(r"<tr>(.*?)</tr>", table):
        values = [unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>",
                                                                           row)]
        if values:
            out[values[0]] = values[1:]
    return out


def test_report_command_compares_runs_side_by_side(run_dir, mixed_run, tmp_path, capsys):
    base = tmp_path / "base"
    base.mkdir()
    lines = (run_dir / "trajectories.jsonl").read_text().splitlines()
    (base / "trajectories.jsonl").write_text("".join(
        json.dumps({**json.loads(line), "episode": i}) + "\n" for i, line in enumerate(lines)))
    (base / "config.json").write_text(json.dumps({"teacher": "smollm2", "hint_scope": "turn",
                                                  "seed": 0, "out": "elsewhere"}))
    out = tmp_path / "cmp.html"
    assert main(["report", str(base), str(mixed_run), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    page = out.read_text(encoding="utf-8")
    table = cells(page, "compare-metrics")
    for name, run in (("base", 0), ("mixed", 1)):
        want = recount([base, mixed_run][run])
        assert table["rows"][run] == str(want["rows"]), name
        assert table["played episodes"][run] == str(want["played"]), name
        assert table["pass rate"][run] == pct(want["pass_rate"]), name
        assert table["mean reward"][run] == f"{want['mean_reward']:.3f}", name
        assert table["hint rate"][run] == pct(want["hint_rate"]), name
        assert table["tokens scored"][run] == str(want["tokens_scored"]), name
        assert table["interrupted"][run] == str(want["interrupted"]), name
        assert table["infra errors"][run] == str(want["infra"]), name
    # only what differs and measures something: teacher and hint scope, not seed or out
    assert cells(page, "compare-config") == {"teacher": ["smollm2", "tiny"],
                                             "hint-scope": ["turn", "episode"]}
    tasks = cells(page, "compare-tasks")
    for run_path, offset in ((base, 0), (mixed_run, 2)):
        played = [r for r in raw_rows(run_path) if is_played(r) and r["task_id"] == "fizzbuzz"]
        assert tasks["fizzbuzz"][offset] == f"{sum(map(is_passed, played))}/{len(played)}"
    chart = page.split('id="chart-reward"')[1].split("</svg>")[0]
    assert chart.count("<circle") == recount(base)["played"] + recount(mixed_run)["played"]
    assert chart.count("<polyline") == 2


@pytest.mark.parametrize(("argv", "expected"), [
    (["report", "nowhere"], "no run directory 'nowhere'"),
    (["report"], "the following arguments are required: RUN_DIR"),
])
def test_report_command_refusals(argv, expected, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) if argv == ["report"] else _nothing() as raised:
        rc = main(argv)
    rc = raised.value.code if argv == ["report"] else rc
    assert rc == 2 and expected in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


class _nothing:  # noqa: N801  (a null context manager with a `value` slot)
    value = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.slow
def test_filters_and_comparison_in_headless_chromium(mixed_run, run_dir, tmp_path):
    report = write_report(mixed_run, tmp_path / "report.html")
    rows = [json.loads(line) for line in (mixed_run / "trajectories.jsonl").read_text()
            .splitlines()]
    hinted = sum(any(rec["hint"] for rec in r.get("opd") or []) for r in rows)
    failed = sum(not is_played(r) or not is_passed(r) for r in rows)
    for name, expected in (("hinted-turns", hinted), ("failed-episodes", failed),
                           ("all", len(rows))):
        done = chromium("--enable-logging=stderr", "--v=0", "--dump-dom",
                        report.as_uri() + f"?filter={name}", tmp_path=tmp_path, name=name)
        dom = done.stdout
        assert 'data-viewer="ready"' in dom, done.stderr[-2000:]
        assert f'data-filter="{name}"' in dom
        assert f"showing {expected} of {len(rows)} episodes" in dom
        errors = [line for line in done.stderr.splitlines()
                  if "Uncaught" in line or ("CONSOLE" in line and "ERROR" in line)]
        assert not errors, errors
    assert main(["report", str(run_dir), str(mixed_run), "--out", str(tmp_path / "c.html")]
                ) == 0
    done = chromium("--enable-logging=stderr", "--v=0", "--dump-dom",
                    (tmp_path / "c.html").as_uri(), tmp_path=tmp_path, name="compare")
    assert 'data-viewer="ready"' in done.stdout and 'id="compare-metrics"' in done.stdout
    assert not [line for line in done.stderr.splitlines() if "Uncaught" in line]
