"""`opd-gym rollout --config FILE` through the real CLI: a run's config.json runs the same
rollout again (and round-trips), a hand-written TOML file works, flags given on the command
line override the file, and a bad key or value is one line, rc 2, with nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from opd_gym.cli import main

CLI = [sys.executable, "-m", "opd_gym.cli"]
FLAGS = ["rollout", "--sandbox", "local", "--no-opd", "--task-ids", "fizzbuzz,flatten",
         "--repeat", "2", "--seed", "5", "--max-turns", "6", "--parallel", "2", "--quiet"]


def rollout(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines()]


def plan(run: Path) -> list[tuple[int, str, int]]:
    """(episode, task, seed) of every row: what the config decided."""
    return sorted((r["episode"], r["task_id"], r["seed"]) for r in rows(run))


def test_a_runs_config_json_runs_it_again_and_round_trips(tmp_path):
    rollout(*FLAGS, "--out", "a", cwd=tmp_path)
    first = json.loads((tmp_path / "a" / "config.json").read_text())
    assert first["repeat"] == 2 and first["episodes"] == 4 and "config" not in first
    assert plan(tmp_path / "a") == [(0, "fizzbuzz", 5), (1, "fizzbuzz", 6), (2, "flatten", 7),
                                    (3, "flatten", 8)]

    # write -> read -> equal: the config a --config run records is the file it read
    rollout("rollout", "--config", "a/config.json", "--out", "b", cwd=tmp_path)
    second = json.loads((tmp_path / "b" / "config.json").read_text())
    assert {k: v for k, v in second.items() if k != "out"} == {
        k: v for k, v in first.items() if k != "out"}
    assert second["out"] == "b" and plan(tmp_path / "b") == plan(tmp_path / "a")
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["groups"]["repeat"] == 2 and summary["groups"]["tasks"] == 2

    # a flag given on the command line wins over the file
    rollout("rollout", "--config", "b/config.json", "--out", "c", "--seed", "40",
            "--episodes", "2", cwd=tmp_path)
    third = json.loads((tmp_path / "c" / "config.json").read_text())
    assert third["seed"] == 40 and third["episodes"] == 2 and third["task_ids"] == [
        "fizzbuzz", "flatten"]
    assert plan(tmp_path / "c") == [(0, "fizzbuzz", 40), (1, "fizzbuzz", 41)]

    # the run's own config.json with --resume: its --out, nothing played twice
    before = (tmp_path / "a" / "trajectories.jsonl").read_bytes()
    rollout("rollout", "--config", "a/config.json", "--resume", cwd=tmp_path)
    assert (tmp_path / "a" / "trajectories.jsonl").read_bytes() == before


def test_hand_written_toml_with_dashed_keys(tmp_path):
    (tmp_path / "run.toml").write_text(
        'sandbox = "local"\nno-opd = true\ntask-ids = "flatten"\nepisodes = 1\nseed = 3\n'
        'max_turns = 6\nquiet = true\nout = "from-toml"\n')
    rollout("rollout", "--config", "run.toml", cwd=tmp_path)
    assert plan(tmp_path / "from-toml") == [(0, "flatten", 3)]
    config = json.loads((tmp_path / "from-toml" / "config.json").read_text())
    assert config["task_ids"] == ["flatten"] and config["no_opd"] is True


def test_config_json_task_spec_mapping_reads_back_as_flags(tmp_path):
    """A run with --schema/--skip-invalid records tasks as a mapping; --config reads it back."""
    from opd_gym.cli import build_parser
    from opd_gym.runs.config import read_config_file

    roll = build_parser()._subparsers._group_actions[0].choices["rollout"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"tasks": {"source": "t.jsonl", "schema": "mbpp",
                                          "skip_invalid": True}}))
    assert read_config_file(path, roll._actions) == {"tasks": "t.jsonl", "schema": "mbpp",
                                                     "skip_invalid": True}
    path.write_text(json.dumps({"tasks": {"dataset": "openai_humaneval", "schema": None,
                                          "split": "test"}}))
    assert read_config_file(path, roll._actions) == {"tasks": "hf:openai_humaneval@test"}


@pytest.mark.parametrize(("text", "suffix", "expected"), [
    ('{"episdoes": 3}', ".json", "key 'episdoes': not a rollout flag"),
    ('{"episodes": 0}', ".json", "key 'episodes': must be at least 1, got 0"),
    ('{"episodes": "two"}', ".json", "key 'episodes': 'two' is not an integer"),
    ('{"episodes": true}', ".json", "key 'episodes': True is not a positive integer"),
    ('{"sandbox": "nope"}', ".json", "key 'sandbox': 'nope' is not one of"),
    ('{"no_opd": "yes"}', ".json", "key 'no_opd': 'yes' is not true or false"),
    ('{"grace": -1}', ".json", "key 'grace': must be a finite number >= 0"),
    ('{"tasks": null}', ".json", "key 'tasks': null, but the flag needs a value"),
    ('{"tasks": {"source": "x", "bogus": 1}}', ".json", "unknown task spec key(s) bogus"),
    ('{"command": "export"}', ".json", "key 'command': a 'export' config, not a rollout's"),
    ('{"config": "other.json"}', ".json", "key 'config': a config file cannot name another"),
    ("[1, 2]", ".json", "not a table of flag = value"),
    ("{episodes: 1", ".json", "not JSON"),
    ("episodes = ", ".toml", "not TOML"),
    ("max-turns = 0", ".toml", "key 'max-turns': must be at least 1, got 0"),
    ('{"max_tool_output": 5}', ".json", "key 'max_tool_output': must be at least 200 "
     "characters, or 0 for no limit, got 5"),
    ("max-tool-output = 2.5", ".toml", "key 'max-tool-output': '2.5' is not a whole number"),
])
def test_bad_config_file_is_one_line_rc2_nothing_written(tmp_path, capsys, monkeypatch,
                                                         text, suffix, expected):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / f"config{suffix}"
    path.write_text(text)
    assert main(["rollout", "--config", str(path), "--out", "never", "--sandbox", "local"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("opd-gym: error: --config ")
    assert expected in err and str(path) in err
    assert not (tmp_path / "never").exists() and not (tmp_path / "runs").exists()


def test_missing_config_file_is_refused(tmp_path, capsys):
    assert main(["rollout", "--config", str(tmp_path / "none.json")]) == 2
    assert "cannot read it" in capsys.readouterr().err
