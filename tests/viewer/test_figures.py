"""The report's figures, charts and configuration, as text and in headless Chromium."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from test_report import chromium, png_rows

from opd_gym.viewer import load_run, write_report
from opd_gym.viewer.figures import student_gaps

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # local backend notice


def figure(page: str, label: str) -> tuple[str, str]:
    """(value, note) of the labelled figure `label`."""
    found = re.search(rf'<div class="l">{re.escape(label)}</div><div class="n[^"]*">([^<]*)</div>'
                      r'<div class="d">([^<]*)</div>', page)
    assert found, f"no figure {label!r}"
    return found.group(1), found.group(2)


def test_metrics_are_labelled_figures_with_reasons_for_na(run_dir, tmp_path):
    (run_dir / "config.json").write_text(json.dumps({"policy": "demo", "teacher": "smollm2",
                                                     "topk": 5, "func": None}))
    page = write_report(run_dir, tmp_path / "r.html").read_text(encoding="utf-8")
    assert "NaN" not in page and '"opd/' not in page.split("<h2>Legend")[0]
    gaps = student_gaps(load_run(run_dir).episodes)
    assert gaps.size > 0  # the sampled episode has student logprobs
    value, _ = figure(page, "Teacher − student")
    assert value != "n/a" and figure(page, "Rows")[0] == "4" and figure(page, "Played")[0] == "3"
    assert figure(page, "Pass rate")[0].endswith("%")
    # the charts: a gap histogram, bars per task, a turns histogram
    assert re.search(r'id="chart-gaps"><h3>[^<]*</h3><svg', page)
    assert f"{gaps.size} tokens" in page and f"mean {gaps.mean():+.3f}" in page
    assert page.count("<title>fizzbuzz: ") == 2  # hint rate and reward bars
    assert re.search(r'id="chart-turns"><h3>[^<]*</h3><svg', page)
    config = page[page.index('id="run-config"'):]
    assert "teacher" in config and "smollm2" in config and "func" not in config.split("</table")[0]


def test_na_reasons_without_student_logprobs_or_scoring(run_dir, tmp_path):
    lines = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text()
             .splitlines()]
    scripted = tmp_path / "scripted"
    scripted.mkdir()
    kept = []
    for line in lines:
        for record in line.get("opd", []):
            record.pop("student_logprobs", None)
        kept.append(json.dumps(line))
    (scripted / "trajectories.jsonl").write_text("\n".join(kept) + "\n")
    page = write_report(scripted).read_text(encoding="utf-8")
    value, why = figure(page, "KL (k3)")
    assert value == "n/a" and "student logprobs" in why
    assert "n/a: no student logprobs in this run" in page
    assert figure(page, "Hint rate")[0] != "n/a"
    assert "no configuration" in page

    unscored = tmp_path / "unscored"
    unscored.mkdir()
    bare = [{k: v for k, v in line.items() if k not in ("opd", "opd_metrics")} for line in lines]
    (unscored / "trajectories.jsonl").write_text("\n".join(map(json.dumps, bare)) + "\n")
    page = write_report(unscored).read_text(encoding="utf-8")
    assert figure(page, "Hint rate")[0] == "n/a" and "NaN" not in page
    assert "n/a: no scored tokens in this run" in page


def test_forced_student_logprobs_are_labelled_not_sampled(run_dir, tmp_path):
    """Records whose student logprobs were teacher-forced: the KL and gap figures and the gap
    chart say so, and the KL figure no longer calls itself a sampled estimate."""
    forced = tmp_path / "forced"
    forced.mkdir()
    source = "teacher-forced: tiny (the teacher model, without the hint) scored the policy's text"
    lines = []
    for line in (run_dir / "trajectories.jsonl").read_text().splitlines():
        row = json.loads(line)
        for record in row.get("opd", []):
            record["student_logprobs"] = record["teacher_token_logprobs"]
            record["student_logprobs_source"] = source
        lines.append(json.dumps(row))
    (forced / "trajectories.jsonl").write_text("\n".join(lines) + "\n")
    page = write_report(forced).read_text(encoding="utf-8")
    value, note = figure(page, "KL (k3)")
    assert value != "n/a" and "not sampled" in note and "sampled estimate" not in note
    assert "not sampled" in figure(page, "Teacher − student")[1]
    assert re.search(r'id="chart-gaps"><h3>[^<]*</h3><svg', page)
    assert 'id="forced-student">teacher-forced: tiny' in page


def test_report_with_figures_in_headless_chromium(run_dir, tiny_tokenizer, tmp_path):
    (run_dir / "config.json").write_text(json.dumps({"policy": "demo", "episodes": 4}))
    report = write_report(run_dir, tmp_path / "report.html", tokenizer=tiny_tokenizer)
    text = report.read_text(encoding="utf-8")
    assert "http://" not in text.replace("http://www.w3.org", "") and "https://" not in text
    shot = tmp_path / "top.png"
    done = chromium(f"--screenshot={shot}", "--window-size=1280,1400", "--enable-logging=stderr",
                    "--v=0", report.as_uri(), tmp_path=tmp_path, name="figs")
    assert shot.is_file(), done.stderr[-2000:]
    width, height, rows = png_rows(shot.read_bytes())
    assert (width, height) == (1280, 1400) and len(set(rows)) > 200
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, console
    dom = chromium("--dump-dom", report.as_uri(), tmp_path=tmp_path, name="figs-dom").stdout
    assert 'data-viewer="ready"' in dom
    for element in ('id="opd-metrics"', 'id="chart-gaps"', 'id="chart-tasks"',
                    'id="chart-turns"', 'id="run-config"'):
        assert element in dom
    assert len(re.findall(r"<svg", dom)) >= 3 and dom.count("<script") == 2
    assert np.isfinite([float(v) for v in re.findall(r'<div class="n">([-+0-9.]+)</div>', dom)
                        ]).all()


def test_hinted_turn_figures_and_an_old_runs_k1_under_its_own_name(run_dir, tmp_path):
    """The report adds the hinted turns' own figures (count, gap, top-1 mismatch), recounted
    from the played rows' records as summary.json counts them; a row written with the old
    `opd/kl_estimate` (k1) shows it as the log ratio, never as a KL."""
    from opd_gym.runs.summary import hinted_text

    stats = load_run(run_dir).stats
    numbers = stats.metrics.summary()
    assert stats.metrics.hints > 0  # the rule judge hinted the failing episode's turns
    page = write_report(run_dir, tmp_path / "r.html").read_text(encoding="utf-8")
    assert figure(page, "Hinted turns")[0] == str(stats.metrics.hints)
    miss = numbers["opd/hinted/top1_mismatch"]
    assert figure(page, "Hinted: top-1 mismatch")[0] == f"{100 * miss:.1f}%"
    assert figure(page, "KL (k3)")[0] == "n/a" or not figure(page, "KL (k3)")[0].startswith("-")
    assert f"{stats.metrics.hints}, " in hinted_text(stats.metrics)
    assert "hinted turns" in stats.table() and stats.to_dict()["opd"]["opd/hinted/turns"] == \
        stats.metrics.hints

    old = tmp_path / "old"
    old.mkdir()
    rows = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text()
            .splitlines()]
    for row in rows:
        metrics = row.get("opd_metrics") or {}
        metrics.pop("opd/kl_k3", None)
        metrics["opd/kl_estimate"] = metrics.pop("opd/log_ratio_k1", -3.7e-4)
    (old / "trajectories.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
    page = write_report(old).read_text(encoding="utf-8")
    assert "kl_estimate" not in page and "log_ratio_k1" in page



def _floats(values) -> np.ndarray:
    """A stored float list (non-finite values spelled as strings) as float64."""
    return np.array([float(v) for v in values], np.float64)


def _recount(records: list[dict]) -> dict[str, float]:
    """The OPD figures straight from raw stored record dicts with numpy, not OPDMetrics:
    gap, k1 and k3 over scored positions with a student logprob, top-1 mismatch over scored
    positions, and the same over the scored turns with a non-empty hint."""
    delta, hinted_delta, miss, hinted_miss, hinted_turns = [], [], [], [], 0
    for rec in records:
        on = np.array(rec["mask"], bool)
        if not on.any():
            continue
        hinted = bool(rec["hint"])
        hinted_turns += hinted
        top1 = np.array(rec["teacher_topk_ids"], np.int64).reshape(len(on), -1)[:, 0]
        wrong = (top1 != np.array(rec["token_ids"]))[on]
        miss.append(wrong)
        hinted_miss += [wrong] if hinted else []
        if rec["student_logprobs"] is not None:
            student = _floats(rec["student_logprobs"])
            d = (_floats(rec["teacher_token_logprobs"]) - student)[on & np.isfinite(student)]
            delta.append(d)
            hinted_delta += [d] if hinted else []

    def mean(parts: list[np.ndarray], of=lambda x: x) -> float:
        return float(np.mean(of(np.concatenate(parts)))) if parts else float("nan")

    return {"opd/mean_teacher_minus_student": mean(delta),
            "opd/log_ratio_k1": -mean(delta),
            "opd/kl_k3": mean(delta, lambda r: np.exp(r) - 1 - r),
            "opd/top1_mismatch": mean(miss),
            "opd/hinted/turns": float(hinted_turns),
            "opd/hinted/mean_teacher_minus_student": mean(hinted_delta),
            "opd/hinted/top1_mismatch": mean(hinted_miss)}


def test_gap_kl_and_hinted_figures_match_a_numpy_recount_of_the_stored_rows(run_dir, tmp_path):
    """The summary's and report's figures equal a numpy recount of the raw records stored in
    trajectories.jsonl: over the finished rows (what the summary counts), and, per row, the
    metrics of the records read back (the sampled row has student logprobs: gap, k1, k3)."""
    from opd_gym.opd.metrics import OPDMetrics
    from opd_gym.runs import RunDirectory

    rows = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text()
            .splitlines()]
    finished = _recount([rec for row in rows if row["finished"] for rec in row["opd"] or []])
    stats = load_run(run_dir).stats
    opd = stats.to_dict()["opd"]
    assert finished["opd/hinted/turns"] > 0
    for key, value in finished.items():
        assert opd[key] == pytest.approx(value, nan_ok=True), key
    miss = finished["opd/hinted/top1_mismatch"]
    assert f"{stats.metrics.hints}, " in stats.table() and f"{miss:.1%}" in stats.table()
    page = write_report(run_dir, tmp_path / "r.html").read_text(encoding="utf-8")
    assert figure(page, "Hinted turns")[0] == str(int(finished["opd/hinted/turns"]))
    assert figure(page, "Hinted: top-1 mismatch")[0] == f"{100 * miss:.1f}%"

    sampled = 0
    for row, stored in zip(rows, RunDirectory(run_dir).episodes(), strict=True):
        expected = _recount(row["opd"] or [])
        got = OPDMetrics().episode(stored.records())
        for key, value in expected.items():
            assert got[key] == pytest.approx(value, nan_ok=True), key
        if np.isfinite(expected["opd/kl_k3"]):
            sampled += 1
            assert got["opd/kl_k3"] >= 0 and got["opd/hinted/turns"] > 0
            assert np.isfinite(got["opd/hinted/mean_teacher_minus_student"])
    assert sampled  # the sampled episode: student logprobs on hinted turns
