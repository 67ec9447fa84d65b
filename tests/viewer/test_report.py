"""The HTML trajectory viewer on a real recorded OPD rollout, checked as text and in Chromium."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from html import escape, unescape
from pathlib import Path

import pytest

from opd_gym.records.opd_record import OPDRecord
from opd_gym.viewer import load_run, write_report

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # local backend notice

XSS = "<script>alert(1)</script>"  # what the markup episode's agent echoes (see conftest)
SPAN = re.compile(r'<span class="tk ([a-z]\d*)" data-j="(\d+)" data-i="(-?\d+)"([^>]*)>')
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def read_lines(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]


def test_recorder_writes_opd_records_and_metrics(run_dir):
    lines = read_lines(run_dir)
    assert [line["finished"] for line in lines] == [True, True, True, False]
    for line in lines:
        records = [OPDRecord.from_dict(r) for r in line["opd"]]
        assert [r.turn_index for r in records] == list(range(len(line["turns"])))
        assert all(r.scored for r in records)
    assert all(line["opd_metrics"]["opd/turns_scored"] >= 1 for line in lines[:3])
    assert lines[0]["opd"][0]["hint"] and lines[1]["grade"]["passed"] == lines[1]["grade"]["total"]
    assert lines[3]["opd"][0]["student_logprobs"] is not None


def test_report_renders_episodes_tokens_hints_and_escapes(run_dir, tiny_tokenizer):
    path = write_report(run_dir, tokenizer=tiny_tokenizer)
    assert path == run_dir / "report.html"
    page = path.read_text(encoding="utf-8")
    lines = read_lines(run_dir)

    assert re.findall(r'<details class="ep" id="ep-(\d+)"', page) == ["1", "2", "3", "4"]
    assert "badge pass" in page and "badge fail" in page and "UNFINISHED" in page
    assert "Run summary" in page and "computed from the rows" in page

    spans = SPAN.findall(page)
    records = [r for line in lines for r in line["opd"]]
    assert len(spans) == sum(len(r["token_ids"]) for r in records)
    assert [int(i) for _, _, i, _ in spans] == [t for r in records for t in r["token_ids"]]
    classes = {cls for cls, *_ in spans}
    assert any(c.startswith("d") for c in classes), "student logprobs give the diverging scale"
    assert any(c.startswith("q") for c in classes), "no student logprobs: sequential scale"
    for cls, _, _, attrs in spans:
        assert "data-t=" in attrs and "data-k=" in attrs  # every turn is fully scored here
        assert ("data-s=" in attrs) == cls.startswith("d")
        assert len(re.search(r'data-k="([^"]*)"', attrs).group(1).split()) == 5

    hints = [r["hint"] for r in records if r["hint"]]
    assert len(hints) >= 3 and page.count('<div class="hint">') == len(hints)
    assert all(escape(hint) in page for hint in hints)
    assert page.count('class="fmt-err"') == sum(len(t["format_errors"])
                                                 for line in lines for t in line["turns"])

    # agent output is text, never markup: only the report's two own script elements exist
    assert XSS not in page and escape(XSS) in page
    assert "<img" not in page and "<b>bold" not in page and "&lt;b&gt;bold&lt;/b&gt;" in page
    assert page.count("<script") == 2 and "<link" not in page and "<iframe" not in page

    vocab = json.loads(re.search(r'<script type="application/json" id="vocab">(.*?)</script>',
                                 page, re.S).group(1))
    call_id = tiny_tokenizer.convert_tokens_to_ids("<tool_call>")
    assert vocab[str(call_id)] == "<tool_call>"
    assert re.search(f'data-i="{call_id}"[^>]*>&lt;tool_call&gt;</span>', page)


def test_report_options_summary_file_and_plain_ids(run_dir, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(run_dir / "trajectories.jsonl", run)
    summary = {"episodes": 4, "pass_rate": 0.25, "teacher": "tiny", "judge": {"type": "rule"}}
    (run / "summary.json").write_text(json.dumps(summary))
    out = write_report(run, tmp_path / "out" / "view.html", max_episodes=2, max_tokens=5)
    page = out.read_text(encoding="utf-8")
    assert out.parent.name == "out" and not (run / "report.html").exists()
    assert re.findall(r'<details class="ep" id="ep-(\d+)"', page) == ["1", "2"]
    assert "Showing the first 2 of 4 episodes" in page
    # the figures are the rows' (1 of 3 played passed); summary.json's 4 and 25% are flagged
    flagged = page.split('id="summary-disagrees"')[1][:600]
    assert "33.3%" in page and "pass_rate: summary.json 25.0%, rows 33.3%" in flagged
    assert "episodes: summary.json 4, rows 3" in flagged
    assert "tiny" in page and "&quot;rule&quot;" in page
    spans = SPAN.findall(page)
    assert spans and all(int(j) < 5 for _, j, _, _ in spans)
    assert "Showing the first 5 of" in page
    first = read_lines(run_dir)[0]["opd"][0]["token_ids"][0]
    assert f'data-i="{first}"' in page and f">#{first}</span>" in page  # no tokenizer: #id

    page = write_report(run, max_total_tokens=60, topk_shown=2).read_text(encoding="utf-8")
    spans = SPAN.findall(page)
    assert len(spans) == 60 and "Token heatmap omitted" in page
    assert all(len(re.search(r'data-k="([^"]*)"', a).group(1).split()) == 2 for *_, a in spans)


def test_bad_lines_and_partial_episodes_do_not_crash(run_dir, tmp_path):
    good = (run_dir / "trajectories.jsonl").read_text().splitlines()[0]
    odd = [
        good,
        "{not json",
        "[1, 2, 3]",
        "{}",
        json.dumps({"task_id": "broken_opd", "opd": [{"token_ids": [1, 2], "bogus": 1}],
                    "turns": [{"text": "hi", "token_ids": [5, 6], "logprobs": [-0.1, "NaN"]}]}),
        json.dumps({"task_id": "no_opd", "finished": True, "grade": {"passed": 1, "total": 1},
                    "messages": [{"role": "user", "content": None}], "opd": None,
                    "reward_breakdown": None, "rewards": [0.5, "x"]}),
    ]
    (tmp_path / "trajectories.jsonl").write_text("\n".join(odd) + "\n\n")
    run = load_run(tmp_path)
    assert run.bad_lines == 2 and len(run.episodes) == 4
    page = write_report(tmp_path).read_text(encoding="utf-8")
    assert re.search(r'<div class="fig warn" [^>]*><div class="l">Unreadable lines</div>'
                     r'<div class="n">2</div>', page)
    assert "line 2: not JSON" in page and "line 3: not a JSON object" in page
    assert "OPD record 0: KeyError" in page  # the broken record is a note, its turn still shows
    assert '<span class="tk n" data-j="0" data-i="5" data-s="-0.100">#5</span>' in page
    assert page.count('<details class="ep"') == 4 and "PASS 1/1" in page


def png_rows(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and raw (filtered) scanlines of a non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = len(raw) // height
    return width, height, [raw[i * stride:(i + 1) * stride] for i in range(height)]


def chromium(*args: str, tmp_path: Path, name: str) -> subprocess.CompletedProcess:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.fail("chromium is not installed (apt-get install chromium; scripts/setup.sh does)")
    profile = tmp_path / f"profile-{name}"
    return subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=180, check=False)


def test_report_loads_in_headless_chromium(run_dir, tiny_tokenizer, tmp_path):
    report = write_report(run_dir, tmp_path / "report.html", tokenizer=tiny_tokenizer)
    tokens = len(SPAN.findall(report.read_text(encoding="utf-8")))

    shot = tmp_path / "report.png"
    done = chromium(f"--screenshot={shot}", "--window-size=1280,2000", report.as_uri(),
                    tmp_path=tmp_path, name="shot")
    assert shot.is_file(), done.stderr[-2000:]
    data = shot.read_bytes()
    width, height, rows = png_rows(data)
    assert (width, height) == (1280, 2000) and len(data) > 30_000
    assert len(set(rows)) > 200 and len(set(b"".join(rows))) > 64  # a page, not one colour

    dom = chromium("--dump-dom", report.as_uri(), tmp_path=tmp_path, name="dom").stdout
    assert 'data-viewer="ready"' in dom, "the inline script did not finish"
    assert f"interactive: {tokens} tokens" in dom
    assert len(re.findall(r'<details class="ep" id="ep-\d+"', dom)) == 4
    assert len(SPAN.findall(dom)) == tokens and dom.count('<div class="hint">') >= 3
    assert escape(XSS) in dom and dom.count("<script") == 2


# -- repository tasks: the agent's diff ------------------------------------------------------
DIFF = (
    "diff --git a/core.py b/core.py\n"
    "index 1111111..2222222 100644\n"
    "--- a/core.py\n"
    "+++ b/core.py\n"
    "@@ -1,3 +1,3 @@\n"
    " def f():\n"
    "-    return '<old>'\n"
    "+    return \"<script>alert(3)</script>\"\n"
    " # end\n"
    "diff --git a/new.md b/new.md\n"
    "new file mode 100644\n"
    "index 0000000..3333333\n"
    "--- /dev/null\n"
    "+++ b/new.md\n"
    "@@ -0,0 +1,2 @@\n"
    "+++ not a header & <b>\n"
    "+last\n"
    "\\ No newline at end of file\n"
)


def diff_run(path: Path) -> Path:
    """A run of repository-task rows: a diff, no change, unknown, truncated, and a row of
    another task (no diff key)."""
    def row(task: str, diff: dict | None) -> str:
        data = {"task_id": task, "finished": True, "grade": {"passed": 0, "total": 1}}
        if diff is not None:
            data["diff"] = diff
        return json.dumps(data)

    rows = [
        row("changed", {"text": DIFF, "reason": None, "truncated": False, "lossy": False}),
        row("same", {"text": "", "reason": None, "truncated": False, "lossy": False}),
        row("unknown", {"text": None, "reason": "the base commit cannot be read: <gone>",
                        "truncated": False, "lossy": False}),
        row("cut", {"text": "diff --git a/x b/x\n", "reason": None, "truncated": True,
                    "lossy": True}),
        row("other", None),
    ]
    path.mkdir()
    (path / "trajectories.jsonl").write_text("\n".join(rows) + "\n")
    return path


def test_repository_diffs_are_escaped_coloured_folded_and_honest(tmp_path):
    run = diff_run(tmp_path / "run")
    assert load_run(run).episodes[4].row.diff is None
    page = write_report(run).read_text(encoding="utf-8")
    episodes = page.split('<details class="ep"')[1:]
    assert len(episodes) == 5
    changed, same, unknown, cut, other = episodes

    assert '<details class="diff card"><summary>' in changed  # folded until opened
    assert "2 file(s)" in changed and "+3</span>" in changed and "-1</span>" in changed
    assert ('<span class="ln-add">+    return &quot;&lt;script&gt;alert(3)&lt;/script&gt;'
            "&quot;</span>") in changed
    assert "<span class=\"ln-del\">-    return &#x27;&lt;old&gt;&#x27;</span>" in changed
    assert '<span class="ln-add">+++ not a header &amp; &lt;b&gt;</span>' in changed
    assert '<span class="ln-meta">+++ b/core.py</span>' in changed
    assert '<span class="ln-hunk">@@ -1,3 +1,3 @@</span>' in changed
    assert "\n def f():\n" in changed  # context lines are plain text
    assert "<script>alert(3)" not in page and page.count("<script") == 2

    assert "<b>No change</b>" in same and "Diff unknown" not in same
    assert "<b>Diff unknown</b>" in unknown and "No change" not in unknown
    assert "the base commit cannot be read: &lt;gone&gt;" in unknown
    assert "truncated" in cut and "not UTF-8" in cut and "No change" not in cut
    assert 'class="diff' not in other


def test_diffs_in_headless_chromium(tmp_path):
    run = diff_run(tmp_path / "run")
    report = write_report(run, tmp_path / "report.html")
    probe = """<script>
    var d = document.querySelector("details.diff"), pre = d.querySelector("pre");
    var add = getComputedStyle(pre.querySelector(".ln-add")).backgroundColor;
    var del = getComputedStyle(pre.querySelector(".ln-del")).backgroundColor;
    var folded = d.open ? "open" : "folded";
    document.body.setAttribute("data-probe", JSON.stringify([folded, add, del,
                               pre.textContent]));
    </script></body>"""
    probed = tmp_path / "probed.html"
    probed.write_text(report.read_text(encoding="utf-8").replace("</body>", probe),
                      encoding="utf-8")
    done = chromium("--enable-logging=stderr", "--v=0", "--dump-dom", probed.as_uri(),
                    tmp_path=tmp_path, name="diff")
    dom = done.stdout
    assert 'data-viewer="ready"' in dom, done.stderr[-2000:]
    found = re.search(r'data-probe="([^"]*)"', dom)
    assert found, done.stderr[-2000:]
    folded, add, remove, text = json.loads(unescape(found.group(1)))
    assert folded == "folded"
    assert add == "rgb(220, 252, 231)" and remove == "rgb(254, 226, 226)"  # green, red
    assert text == DIFF  # the page shows the diff exactly, markup as text
