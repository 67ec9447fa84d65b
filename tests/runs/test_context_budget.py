"""Long episodes against a short teacher: the warning before the first episode, and the
unscored turns with their reasons in the CLI summary, summary.json and the HTML report, each
checked against a recount of the rows. The teacher is the tiny local model with a small
max_position_embeddings; the run is the CLI's own (demo policy, rule judge, local sandbox)."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from opd_gym.cli import main
from opd_gym.errors import ConfigError
from opd_gym.rollout_core import build_env
from opd_gym.runs.budget import config_window, context_warning, episode_tokens, teacher_window
from opd_gym.runs.config import RolloutConfig

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # local backend notice

WINDOW = 2000  # tokens: the demo's first turn fits, its later turns do not


def short_teacher(tiny_model_path: Path, folder: Path, window: int) -> Path:
    """The tiny model with its config saying `window` positions."""
    shutil.copytree(tiny_model_path, folder)
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = window
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def recount(run: Path) -> tuple[int, int, Counter]:
    """(turns with a record, scored turns, unscored turns by skip_reason) from the rows."""
    turns = scored = 0
    unscored: Counter = Counter()
    for line in (run / "trajectories.jsonl").read_text().splitlines():
        row = json.loads(line)
        for record in row["opd"]:
            turns += 1
            if any(record["mask"]):
                scored += 1
            else:
                unscored[record["skip_reason"]] += 1
    return turns, scored, unscored


@pytest.fixture(scope="module")
def long_run(tmp_path_factory, tiny_model_path):
    """One CLI rollout whose later turns outgrow the teacher's window: (run dir, stdout,
    stderr)."""
    base = tmp_path_factory.mktemp("context")
    teacher = short_teacher(tiny_model_path, base / "teacher", WINDOW)
    out = base / "run"
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(["rollout", "--episodes", "1", "--parallel", "1", "--sandbox", "local",
                     "--quiet", "--max-turns", "6", "--max-tool-output", "2000",
                     "--teacher", f"hf:{teacher}", "--out", str(out)])
    assert code == 0, stderr.getvalue()[-3000:]
    return out, stdout.getvalue(), stderr.getvalue()


def test_the_warning_names_the_window_and_the_budget_once(long_run):
    _, _, stderr = long_run
    lines = [line for line in stderr.splitlines() if "context window" in line]
    need = episode_tokens(6, 2000, 256)
    assert lines == [
        f"opd-gym rollout: warning: the teacher's context window is {WINDOW} tokens "
        f"(max_position_embeddings), but an episode may reach about {need} tokens (6 turns x "
        "(tool output budget 2000 characters / 4 + 256 new tokens)); turns past the window "
        "are left unscored (context too long): lower --max-turns or --max-tool-output, or use "
        "a teacher with a longer context"]


def test_summary_and_report_count_unscored_turns_by_reason_as_the_rows_do(long_run):
    out, stdout, _ = long_run
    turns, scored, unscored = recount(out)
    assert unscored["context_too_long"] >= 1 and scored >= 1  # the run shows both kinds
    reasons = ", ".join(f"{reason.replace('_', ' ')}: {n}"
                        for reason, n in sorted(unscored.items(), key=lambda kv: (-kv[1], kv[0])))
    expected = f"{scored} of {turns}; unscored {sum(unscored.values())} ({reasons})"
    assert f"turns scored   {expected}" in stdout.splitlines()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["turns_scored"] == scored
    assert summary["config"]["max_tool_output_chars"] == 2000  # the flag reached the run
    for reason, n in unscored.items():
        assert summary["opd"][f"opd/unscored/{reason}"] == n
    report = (out / "report.html").read_text()
    assert f'id="turn-scoring" style="margin-top:8px"><b>Turns scored</b> {expected}</div>' \
        in report
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    errors = [r["error"] for row in rows for r in row["opd"]
              if r["skip_reason"] == "context_too_long"]
    assert errors and all(e.startswith("context too long: the teacher input has ") and
                          f"context window of {WINDOW}" in e for e in errors)


def test_teacher_window_is_read_without_loading_the_model(tiny_model_path, tmp_path):
    folder = short_teacher(tiny_model_path, tmp_path / "teacher", 512)
    assert config_window(folder) == 512
    assert teacher_window(f"hf:{folder}") == (512, "max_position_embeddings")
    assert teacher_window(f"hf:{folder}", {"max_model_len": 300}) == (300, "max_model_len")
    assert teacher_window(object()) == (None, "")
    assert context_warning(None, "", max_turns=50, max_tool_output_chars=None,
                           max_new_tokens=256) is None
    fits = episode_tokens(2, 1000, 100)
    assert fits == 2 * (250 + 100)
    assert context_warning(fits, "x", max_turns=2, max_tool_output_chars=1000,
                           max_new_tokens=100) is None
    line = context_warning(fits - 1, "x", max_turns=2, max_tool_output_chars=1000,
                           max_new_tokens=100)
    assert line is not None and f"window is {fits - 1} tokens" in line
    assert f"about {fits} tokens" in line


def test_the_run_config_budget_reaches_the_env(local_pool, toy_task, tmp_path):
    config = RolloutConfig(out_dir=str(tmp_path), max_tool_output_chars=500)
    recorder = build_env(config, tasks=[toy_task], pool=local_pool)
    try:
        assert recorder.unwrapped.settings.max_tool_output_chars == 500
    finally:
        recorder.close()
    with pytest.raises(ConfigError, match="max_tool_output_chars must be a whole number"):
        build_env(RolloutConfig(out_dir=str(tmp_path), max_tool_output_chars=10),
                  tasks=[toy_task], pool=local_pool)


def test_the_flag_from_a_config_file_and_a_bad_flag(tmp_path, capsys):
    from opd_gym.cli import build_parser
    from opd_gym.runs.config import read_config_file

    parser = build_parser()
    roll = next(a for a in parser._actions if hasattr(a, "choices") and a.choices
                and "rollout" in a.choices).choices["rollout"]
    path = tmp_path / "run.toml"
    path.write_text("max-tool-output = 3000\n")
    assert read_config_file(path, roll._actions) == {"max_tool_output": 3000}
    with pytest.raises(SystemExit) as exited:
        main(["rollout", "--max-tool-output", "5", "--out", str(tmp_path / "never")])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--max-tool-output: must be at least 200 characters, or 0 for no limit, got 5" in err
    assert not (tmp_path / "never").exists()
