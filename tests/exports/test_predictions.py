"""`export --to swebench-predictions`: one prediction per repository-task instance, every
episode left out counted by its reason, refused (rc 2, no file) when nothing is exportable."""

from __future__ import annotations

import json

import pytest

from opd_gym.cli import main
from opd_gym.errors import ConfigError
from opd_gym.exports import export_run
from opd_gym.exports.predictions import export_predictions
from opd_gym.runs import RunDirectory

PATCH = "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"


def row(episode, task_id, diff=None, finished=True, **extra):
    data = {"task_id": task_id, "episode": episode, "finished": finished, "rewards": [1.0],
            "messages": [], "turns": [], **extra}
    if diff is not None:
        data["diff"] = diff
    return data


def diff(text, truncated=False):
    return {"text": text, "reason": None if text is not None else "sandbox stopped",
            "truncated": truncated, "lossy": False}


def make_run(root, rows, policy="hf:/models/coder"):
    run = RunDirectory(root)
    for data in rows:
        run.append(data, fsync=False)
    if policy is not None:
        run.write_config({"policy": policy})
    return root


def test_predictions_and_what_was_left_out(tmp_path):
    run = make_run(tmp_path / "run", [
        row(0, "org__a-1", diff(PATCH)),
        row(1, "org__b-2", diff(PATCH.replace("x = 2", "x = 3"))),
        row(2, "org__a-1", diff(PATCH)),                     # a repeat of an instance
        row(3, "org__c-3", diff("")),                        # no change
        row(4, "org__d-4", diff(None)),                      # unknown
        row(5, "org__e-5", diff(PATCH, truncated=True)),     # cut: would not apply
        row(6, "coding-task"),                               # not a repository task
        row(7, "org__f-6", finished=False),                  # unfinished
    ])
    done = export_predictions(run)
    lines = [json.loads(line) for line in done.path.read_text().splitlines()]
    assert done.path == run / "export-swebench-predictions.jsonl"
    assert lines == [
        {"instance_id": "org__a-1", "model_name_or_path": "hf:/models/coder",
         "model_patch": PATCH},
        {"instance_id": "org__b-2", "model_name_or_path": "hf:/models/coder",
         "model_patch": PATCH.replace("x = 2", "x = 3")}]
    assert done.written == 2 and sum(done.left_out.values()) == 6
    assert done.left_out == {"unfinished or interrupted": 1,
                             "not a repository task (no diff recorded)": 1,
                             "diff unknown": 1, "no change": 1, "diff truncated": 1,
                             "another episode of the same instance exported first": 1}
    assert export_run(run, "swebench-predictions", tmp_path / "p.jsonl",
                      model_name="m").read_text().count('"model_name_or_path": "m"') == 2


def test_nothing_exportable_is_refused_with_no_file(tmp_path, capsys):
    run = make_run(tmp_path / "run", [row(0, "coding-task"), row(1, "org__a-1", diff(""))])
    out = tmp_path / "preds.jsonl"
    assert main(["export", str(run), "--to", "swebench-predictions", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no episode" in err
    assert "1 not a repository task (no diff recorded), 1 no change" in err
    assert not out.exists() and not list(tmp_path.glob("**/*.tmp"))


def test_the_model_name_comes_from_the_run_or_the_flag(tmp_path, capsys):
    run = make_run(tmp_path / "run", [row(0, "org__a-1", diff(PATCH))], policy=None)
    with pytest.raises(ConfigError, match="--model-name"):
        export_predictions(run)
    assert main(["export", str(run), "--to", "swebench-predictions", "--model-name",
                 "gpt-x"]) == 0
    assert "wrote 1 prediction(s) of 'gpt-x'" in capsys.readouterr().out
    assert main(["export", str(run), "--to", "trl", "--model-name", "gpt-x"]) == 2
