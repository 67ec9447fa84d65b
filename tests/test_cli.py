"""The opd-gym CLI end to end: the default rollout in Docker, kill + resume, user errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opd_gym.rollout import read_trajectories

CLI = [sys.executable, "-m", "opd_gym.cli"]


def opd_gym(
    *args: str, timeout: float = 600, env: dict | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


@pytest.fixture(scope="module")
def tiny_cache(tmp_path_factory):
    """A private cache so the tiny model is built fresh (as on a new machine); the converted
    SmolLM2 (the default teacher) stays in the shared model cache, converted once per machine."""
    from opd_gym.models.smollm2 import cache_root

    return {"XDG_CACHE_HOME": str(tmp_path_factory.mktemp("cache")),
            "OPD_GYM_MODEL_CACHE": str(cache_root())}


@pytest.mark.docker
def test_default_rollout_end_to_end(tmp_path, tiny_cache):
    out = tmp_path / "run"
    # The README's main job is `opd-gym rollout` with no flags; only the output dir and a
    # short episode count are set here to keep CI fast.
    result = opd_gym(
        "rollout", "--episodes", "3", "--out", str(out), "--log", "jsonl", env=tiny_cache
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "pipeline demo" in result.stderr
    assert "pass rate      100%" in result.stdout and "hint rate" in result.stdout
    rows = list(read_trajectories(out / "trajectories.jsonl"))
    assert sorted(r["episode"] for r in rows) == [0, 1, 2]
    for row in rows:
        assert row["finished"] and row["grade"]["passed"] == row["grade"]["total"] > 0
        assert len(row["opd"]) == len(row["turns"]) == 6
        assert any(r["hint"] for r in row["opd"]) or row["task_id"] == "decode_secret"
        for record in row["opd"]:  # teacher-forced student logprobs, labelled as such
            assert record["student_logprobs"] is not None and record["retokenized"]
            assert record["student_logprobs_source"].startswith("teacher-forced: ")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 3 and summary["pass_rate"] == 1.0
    assert summary["config"]["episodes"] == 3 and summary["config"]["out_dir"] == str(out)
    assert (out / "report.html").stat().st_size > 10_000
    report = (out / "report.html").read_text()
    assert 'id="forced-student"' in report and "needs student logprobs" not in report
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 3 and {"opd/hint_rate", "train/pass_rate"} <= set(metrics[-1])


def test_killed_rollout_resumes_without_duplicates_or_losses(tmp_path, tiny_cache):
    out = tmp_path / "run"
    args = [
        "rollout",
        "--episodes",
        "8",
        "--parallel",
        "1",
        "--sandbox",
        "local",
        "--out",
        str(out),
        "--no-report",
        "--quiet",
        "--teacher",  # resume semantics only: the tiny teacher keeps this test fast
        "tiny",
    ]
    proc = subprocess.Popen(
        [*CLI, *args],
        env={**os.environ, **tiny_cache},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    path = out / "trajectories.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= 2:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = [r["episode"] for r in read_trajectories(path)]
    assert 2 <= len(before) < 8, "the run must have been killed midway"
    result = opd_gym(*args, "--resume", env=tiny_cache)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"({len(before)} from before this invocation)" in result.stdout
    episodes = [r["episode"] for r in read_trajectories(path) if r["finished"]]
    assert sorted(episodes) == list(range(8))  # every episode once: none lost, none twice


def test_rerun_without_resume_is_refused(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "trajectories.jsonl").write_text('{"episode": 0, "finished": true}\n')
    result = opd_gym("rollout", "--out", str(out), "--sandbox", "local")
    assert result.returncode != 0
    assert "pass --resume" in result.stderr and "Traceback" not in result.stderr
    assert not (out / "config.json").exists()  # refused before anything was written


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["rollout", "--bogus"], {}, "unrecognized arguments: --bogus"),
        (
            ["rollout", "--tasks", "/no/such/tasks.jsonl", "--sandbox", "local"],
            {},
            "no task source",
        ),
        (["rollout", "--task-ids", "nope", "--sandbox", "local"], {}, "unknown task id"),
        (["rollout", "--policy", "magic", "--sandbox", "local"], {}, "unknown policy"),
        (
            ["rollout", "--policy", "openai:http://127.0.0.1:9/v1", "--sandbox", "local"],
            {},
            "cannot reach the policy server",
        ),
        (
            ["rollout", "--sandbox", "docker", "--episodes", "1"],
            {"DOCKER_HOST": "unix:///nonexistent/docker.sock"},
            "no Docker engine answers",
        ),
        (["rollout", "--log", "wandb", "--sandbox", "local", "--episodes", "1"], {}, "pip install"),
        (
            ["rollout", "--teacher", "vllm:http://127.0.0.1:9", "--teacher-dtype", "float32",
             "--sandbox", "local"],
            {},
            "a vllm: server sets it",
        ),
        (
            ["rollout", "--policy", "vllm:http://127.0.0.1:9", "--policy-dtype", "float32",
             "--sandbox", "local"],
            {},
            "not by the policy",
        ),
        (["rollout", "--tool-format", "nope", "--sandbox", "local"], {}, "unknown tool_format"),
        (["view", "/no/such/run"], {}, "no run directory"),
        (["export", "/no/such/run", "--to", "trl"], {}, "no run directory"),
        (["tasks", "show", "nope"], {}, "no task 'nope'"),
        (["rollout", "--topk", "-1", "--sandbox", "local"], {}, "topk must be an integer >= 0"),
        (["rollout", "--judge", "oracle", "--sandbox", "local"], {},
         "unknown judge spec 'oracle'; use one of: rule | none | openai:URL | vllm:URL"),
        (["rollout", "--teacher", "/models/x", "--sandbox", "local"], {},
         "unknown teacher spec '/models/x'"),
        (["rollout", "--episodes", "0"], {}, "argument --episodes: must be at least 1, got 0"),
        (["rollout", "--episodes", "-3"], {}, "argument --episodes: must be at least 1, got -3"),
        (["rollout", "--episodes", "two"], {}, "argument --episodes: 'two' is not an integer"),
        (["rollout", "--parallel", "0"], {}, "argument --parallel: must be at least 1"),
        (["rollout", "--max-turns", "0"], {}, "argument --max-turns: must be at least 1"),
        (["rollout", "--grace", "-1"], {}, "argument --grace: must be a finite number >= 0"),
        (["rollout", "--workers", "3", "--sandbox", "local"], {},
         "--workers only apply with --ray"),
        (["rollout", "--resume", "--sandbox", "local"], {}, "--resume needs --out"),
        (["rollout", "--out", "FILE", "--sandbox", "local"], {}, "is a file, not a directory"),
        (["rollout", "--out", "FILE/run", "--sandbox", "local"], {},
         "is a file, not a directory"),
        (["rollout", "--out", "/proc/opd-gym-run", "--sandbox", "local"], {},
         "cannot write in '/proc'"),
        (["tasks", "list", "--tasks", "/no/such/tasks.jsonl"], {}, "no task source"),
        (["tasks", "show", "fizzbuzz", "--tasks", "/no/such/tasks.jsonl"], {}, "no task source"),
        (["tasks", "validate", "--tasks", "/no/such/tasks.jsonl"], {}, "no task source"),
        (["tasks", "validate", "/no/such/tasks.jsonl"], {}, "no task source"),
        (["tasks", "validate", "--task-ids", "fizzbuzz,nope,nix"], {},
         "unknown task id(s) nix, nope"),
        (["tasks", "validate", "--sample", "0"], {}, "argument --sample: must be at least 1"),
        (["tasks", "calibrate", "--sandbox", "local"], {},
         "the following arguments are required: --calibrations"),
        (["tasks", "calibrate", "--calibrations", "FILE", "--sandbox", "local"], {},
         "cannot make or open the folder"),
        (["rollout", "--calibrations", "FILE", "--sandbox", "local"], {},
         "cannot make or open the folder"),
    ],
)
def test_user_errors_are_one_clear_line(tmp_path, args, env, expected):
    (tmp_path / "FILE").write_text("not a directory\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    result = opd_gym(*_with_out(args, tmp_path), env=env, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
    lines = [ln for ln in result.stderr.splitlines() if "error:" in ln]
    assert len(lines) == 1, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def _with_out(args: list[str], tmp_path: Path) -> list[str]:
    if args[0] == "rollout" and "--bogus" not in args and "--out" not in args \
            and "--resume" not in args:
        return [*args, "--out", str(tmp_path / "out")]
    return [str(tmp_path / a) if a.startswith("FILE") else a for a in args]


def test_tasks_list_and_show():
    listed = opd_gym("tasks", "list")
    assert listed.returncode == 0 and "fizzbuzz" in listed.stdout and "32 tasks" in listed.stdout
    shown = opd_gym("tasks", "show", "fizzbuzz")
    assert shown.returncode == 0 and "solution.py" in shown.stdout


def _store_files(folder: Path) -> dict[str, tuple[int, int]]:
    """{name: (size, mtime ns)} of a calibration store's files: what a grade would change."""
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


@pytest.mark.docker
def test_tasks_calibrate_fills_a_store_that_rollout_reads(tmp_path):
    """`tasks calibrate` fills the store; run again it calibrates nothing (both already
    there, no file touched); a rollout given the store says so up front and its grades
    read it: no entry is written again."""
    store = tmp_path / "calibrations"
    picked = ["--task-ids", "fizzbuzz,flatten", "--sandbox", "docker", "--quiet"]
    first = opd_gym("tasks", "calibrate", "--calibrations", str(store), *picked)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "2 calibrated, 0 already there, 0 failed" in first.stdout
    files = _store_files(store)
    assert len([n for n in files if n.endswith(".pickle")]) == 2 and "secret" in files
    again = opd_gym("tasks", "calibrate", "--calibrations", str(store), *picked)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "0 calibrated, 2 already there, 0 failed" in again.stdout
    assert _store_files(store) == files
    out = tmp_path / "run"
    run = opd_gym("rollout", "--calibrations", str(store), "--no-opd", "--episodes", "2",
                  "--out", str(out), "--no-report", *picked)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"2 of 2 tasks calibrated in {store}\n" in run.stderr
    rows = list(read_trajectories(out / "trajectories.jsonl"))
    assert sorted(r["task_id"] for r in rows) == ["fizzbuzz", "flatten"]
    assert all(r["grade"]["total"] > 0 and not r["grade"].get("infra_error") for r in rows)
    assert _store_files(store) == files  # read, not calibrated again


def test_tasks_calibrate_names_failures_and_stores_nothing_for_them(tmp_path):
    """A task whose reference times out fails (exit 1, its reason said, nothing stored); one
    whose reference fails its test is calibrated and named as one no grade can vouch for."""
    starter = {"m.py": "def f():\n    return 0\n"}
    tests = {"test_m.py": "from m import f\n\ndef test_f():\n    assert f() == 1\n"}
    rows = [{"id": "good", "solution": {"m.py": "def f():\n    return 1\n"}},
            {"id": "wrong_ref", "solution": {"m.py": "def f():\n    return 2\n"}},
            {"id": "hangs", "timeout": 1,
             "solution": {"m.py": "import time\ndef f():\n    time.sleep(60)\n    return 1\n"}}]
    source = tmp_path / "tasks.jsonl"
    source.write_text("".join(json.dumps({"prompt": "p", "files": starter, "tests": tests, **r})
                              + "\n" for r in rows))
    store = tmp_path / "calibrations"
    result = opd_gym("tasks", "calibrate", "--tasks", str(source), "--calibrations", str(store),
                     "--sandbox", "local", "--quiet")
    assert result.returncode == 1, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0] == f"2 calibrated, 0 already there, 1 failed (store {store})"
    assert lines[1].startswith("  failed hangs: ") and "timed out" in lines[1]
    assert lines[2].startswith("  calibrated, but no grade can vouch for wrong_ref")
    assert len(list(store.glob("*.pickle"))) == 2


@pytest.mark.docker
def test_tasks_validate_grades_references_and_starters():
    """`--task-ids` picks the tasks checked, and only those are graded."""
    fixture = Path(__file__).parent / "fixtures" / "tasks.yaml"
    result = opd_gym("tasks", "validate", str(fixture), "--sandbox", "docker",
                     "--task-ids", "yaml_fix_greeting")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "validating 1 of the source's 2 tasks" in result.stdout
    assert "yaml_fix_greeting" in result.stdout and "yaml_add" not in result.stdout
    assert "1/1 tasks valid" in result.stdout and "BAD" not in result.stdout


def test_policy_and_teacher_options_reach_the_backends(tmp_path, tiny_cache):
    """Sampling flags reach the hf: policy, the teacher runs in fp64, and --seed makes each
    episode's draws independent of how episodes are spread over parallel workers."""
    from opd_gym.models.tiny import ensure_tiny_model

    model = ensure_tiny_model()
    runs = {}
    for parallel in ("1", "2"):
        out = tmp_path / f"run{parallel}"
        result = opd_gym(
            "rollout", "--policy", f"hf:{model}", "--teacher", f"hf:{model}",
            "--teacher-dtype", "float64", "--judge", "none", "--sandbox", "local",
            "--episodes", "3", "--parallel", parallel, "--max-turns", "2", "--seed", "7",
            "--max-new-tokens", "9", "--temperature", "0.8", "--top-p", "0.95",
            "--no-report", "--quiet", "--out", str(out), env=tiny_cache,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        rows = sorted(read_trajectories(out / "trajectories.jsonl"), key=lambda r: r["episode"])
        runs[parallel] = [[t["token_ids"] for t in row["turns"]] for row in rows]
        for row in rows:
            assert all(len(t["token_ids"]) <= 9 for t in row["turns"])
            for record in row["opd"]:  # logprobs on a stated footing (issue 23): the student's
                # at its sampling temperature (nucleus-renormalised), the teacher's at 1
                assert record["student_temperature"] == 0.8
                assert record["teacher_temperature"] == 1.0
                assert len(record["student_logprobs"]) == len(record["teacher_token_logprobs"])
    assert runs["1"] == runs["2"]  # same seed, same episodes, whatever the worker layout


def test_tool_format_travels_in_the_run_config(tiny_model_path, tmp_path):
    """`--tool-format` becomes the run config's `tool_format`, which builds the env stack; the
    gym registry is never edited (Ray workers in other processes could not see that)."""
    import gymnasium as gym
    from model_families import family_tokenizer_dir

    from opd_gym.cli import _tool_format_name
    from opd_gym.rollout import RolloutConfig
    from opd_gym.rollout_core import build_env
    from opd_gym.sandboxes import make_pool
    from opd_gym.tasks import load_suite

    llama = family_tokenizer_dir(tiny_model_path, "llama3.1", Path(tiny_model_path).parent / "l")
    assert _tool_format_name("auto", f"hf:{llama}") == "llama3"
    assert _tool_format_name("auto", "demo") == "hermes"
    name = _tool_format_name("Qwen3-Coder", "demo")
    config = RolloutConfig(out_dir=str(tmp_path), sandbox="local", tool_format=name)
    with make_pool("local", size=1) as pool:
        env = build_env(config, tasks=load_suite()[:1], pool=pool)
        assert env.unwrapped.tool_format.name == "qwen3_coder"
        assert "<function=" in env.unwrapped.system_prompt
        env.close()
    assert "tool_format" not in gym.spec("opd_gym/Coding-v0").kwargs


@pytest.mark.docker
def test_dataset_files_straight_into_the_cli(tmp_path):
    """A HumanEval file runs as is; `tasks validate` prints a table for a detected schema."""
    fixtures = Path(__file__).parent / "fixtures"
    out = tmp_path / "run"
    result = opd_gym("rollout", "--tasks", str(fixtures / "humaneval.jsonl"), "--policy",
                     "reference", "--no-opd", "--episodes", "2", "--sandbox", "docker",
                     "--out", str(out), "--quiet")
    assert result.returncode == 0, result.stderr
    assert "pass rate      100%" in result.stdout
    rows = read_trajectories(out / "trajectories.jsonl")
    assert {row["task_id"] for row in rows} <= {"FixtureEval/0", "FixtureEval/1", "FixtureEval/2"}
    table = opd_gym("tasks", "validate", str(fixtures / "mbpp.jsonl"), "--sandbox", "docker")
    assert table.returncode == 0, table.stdout + table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["task", "reference", "starter", "wrong", "verdict"]
    assert sum(line.endswith("  ok") for line in lines) == 3 and "3/3 tasks valid" in lines[-1]
    wrong = opd_gym("tasks", "list", "--tasks", str(fixtures / "apps.jsonl"), "--schema", "mbpp")
    assert wrong.returncode == 2 and "field 'task_id' is missing" in wrong.stderr


def test_hf_dataset_names_with_the_datasets_extra(tmp_path):
    pytest.importorskip("datasets")
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "test.jsonl").write_text((Path(__file__).parent / "fixtures" / "mbpp.jsonl")
                                       .read_text())
    result = opd_gym("tasks", "list", "--tasks", f"hf:{folder}",
                     env={"HF_DATASETS_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stderr
    assert "mbpp/9001" in result.stdout and "3 tasks" in result.stdout


def test_a_bug_is_a_traceback_not_one_line(tmp_path):
    """Anything that is not an OPDGymError is a bug: the CLI shows its traceback, exit 1.
    No command has a bug on demand, so this run injects one (a fake: view's run raises)."""
    script = (
        "import sys, opd_gym.cli as cli, opd_gym.cli.view as view\n"
        "def boom(args):\n"
        "    raise KeyError('a programming error')\n"
        "view.run = boom\n"
        f"sys.exit(cli.main(['view', {str(tmp_path)!r}]))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "KeyError: 'a programming error'" in result.stderr
    assert not any(line.startswith("opd-gym: error:") for line in result.stderr.splitlines())



def test_repeat_plays_groups_with_distinct_seeds(tmp_path):
    """`--repeat 3` over two tasks: 6 episodes, each task's 3 in a row with their own seeds,
    and group statistics (per-task mean/std, pass@k) in summary.json and the printed table."""
    out = tmp_path / "run"
    result = opd_gym("rollout", "--task-ids", "fizzbuzz,flatten", "--repeat", "3", "--no-opd",
                     "--sandbox", "local", "--seed", "10", "--out", str(out), "--quiet",
                     "--no-report")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = sorted(read_trajectories(out / "trajectories.jsonl"), key=lambda r: r["episode"])
    assert [(r["episode"], r["task_id"], r["seed"]) for r in rows] == [
        (0, "fizzbuzz", 10), (1, "fizzbuzz", 11), (2, "fizzbuzz", 12),
        (3, "flatten", 13), (4, "flatten", 14), (5, "flatten", 15)]
    groups = json.loads((out / "summary.json").read_text())["groups"]
    assert groups["repeat"] == 3 and set(groups["per_task"]) == {"fizzbuzz", "flatten"}
    assert all(g["n"] == 3 for g in groups["per_task"].values())
    passed = [r["grade"]["passed"] == r["grade"]["total"] for r in rows]
    assert groups["pass_at_k"]["1"] == pytest.approx(sum(passed) / 6)
    assert "pass@k" in result.stdout


def test_skip_invalid_and_editor_line_numbers(tmp_path):
    """Task-file errors name the line an editor shows; `--skip-invalid` skips and counts."""
    good = {"id": "a", "prompt": "p", "tests": {"test_a.py": "def test_x():\n    pass\n"}}
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n" + json.dumps(good) + "\n{broken\n")  # a blank first line
    refused = opd_gym("tasks", "list", "--tasks", str(path))
    assert refused.returncode == 2 and "tasks.jsonl: line 3: invalid JSON" in refused.stderr
    listed = opd_gym("tasks", "list", "--tasks", str(path), "--skip-invalid")
    assert listed.returncode == 0 and "1 tasks" in listed.stdout
    assert "skipped 1 invalid task row(s)" in listed.stderr and "line 3" in listed.stderr


@pytest.mark.docker
def test_sandbox_build_for_tasks_reports_what_the_tasks_need(tmp_path, capsys):
    """`sandbox build --tasks repo`: the suite runs in the sandbox image (no image to build);
    tasks with setup steps get their environment image built, then found, with a bar; a bad
    budget is one line, rc 2."""
    done = opd_gym("sandbox", "build", "--tasks", "repo", "--quiet")
    assert done.returncode == 0, done.stderr
    count = len(__import__("opd_gym.tasks.repo_suite", fromlist=["x"]).load_repo_suite())
    assert f"{count} task(s): {count} run in the sandbox image, 0 environment image(s)" \
        in done.stdout, done.stdout
    bad = opd_gym("sandbox", "build", "--tasks", "repo", "--budget", "lots")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--budget" in bad.stderr

    from repo_project import INSTALL_TOOLZ, toolz_task

    from opd_gym.cli import _build_environments
    from opd_gym.sandboxes.docker import DockerEngine

    tasks = [toolz_task((INSTALL_TOOLZ,)), toolz_task(())]
    _build_environments(tasks, DockerEngine(), 20 << 30, quiet=True)
    out = capsys.readouterr().out
    assert "2 task(s): 1 run in the sandbox image, 1 environment image(s) needed" in out, out
    assert "environment images ready:" in out and ("1 built" in out or "1 already here" in out)
    _build_environments(tasks, DockerEngine(), 20 << 30, quiet=True)
    assert "0 built, 1 already here" in capsys.readouterr().out


UNVERIFIABLE_TASKS = [  # a task whose every test the untouched starter passes, and a good one
    {"id": "gate-only", "prompt": "Write add(a, b).",
     "files": {"calc.py": "def add(a, b):\n    return a + b\n"},
     "tests": {"test_calc.py": "from calc import add\n\ndef test_add():\n"
                               "    assert add(1, 2) == 3\n"},
     "solution": {"calc.py": "def add(a, b):\n    return a + b\n"}},
    {"id": "good", "prompt": "Write add(a, b).",
     "files": {"calc.py": "def add(a, b):\n    raise NotImplementedError\n"},
     "tests": {"test_calc.py": "from calc import add\n\ndef test_add():\n"
                               "    assert add(1, 2) == 3\n\ndef test_neg():\n"
                               "    assert add(-1, -2) == -3\n\ndef test_zero():\n"
                               "    assert add(0, 0) == 0\n"},
     "solution": {"calc.py": "def add(a, b):\n    return a + b\n"}},
]


def test_a_task_no_grade_can_vouch_for_is_refused_before_the_first_episode(tmp_path):
    """No silent zeros through the CLI: the run calibrates the tasks it plays first and
    refuses one whose every answer would score 0 (naming it and why, nothing written);
    `--skip-unverifiable` plays without it and says so; `--no-verify` plays it, and its grade
    is an infra error the summary leaves out."""
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in UNVERIFIABLE_TASKS))
    common = ["rollout", "--tasks", str(path), "--sandbox", "local", "--no-opd",
              "--episodes", "2", "--quiet", "--no-report"]
    refused = opd_gym(*common, "--out", str(tmp_path / "refused"))
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "1 of 2 task(s) cannot be verified" in refused.stderr
    assert "gate-only: the task cannot be verified" in refused.stderr
    assert "starter-passes 1" in refused.stderr and "--skip-unverifiable" in refused.stderr
    assert not (tmp_path / "refused").exists()
    skipped = opd_gym(*common, "--skip-unverifiable", "--out", str(tmp_path / "skipped"))
    assert skipped.returncode == 0, skipped.stderr[-2000:]
    assert "skipping 1 of 2 task(s) that cannot be verified" in skipped.stderr
    rows = read_trajectories(tmp_path / "skipped" / "trajectories.jsonl")
    assert [r["task_id"] for r in rows] == ["good", "good"]
    assert all(r["grade"]["score"] == 1.0 for r in rows)
    unchecked = opd_gym(*common, "--no-verify", "--out", str(tmp_path / "unchecked"))
    assert unchecked.returncode == 0, unchecked.stderr[-2000:]
    rows = {r["task_id"]: r for r in read_trajectories(tmp_path / "unchecked"
                                                       / "trajectories.jsonl")}
    assert rows["gate-only"]["grade"]["unverifiable"] is True
    assert rows["gate-only"]["grade"]["infra_error"] is True
    summary = json.loads((tmp_path / "unchecked" / "summary.json").read_text())
    assert summary["episodes"] == 1 and summary["infra_errors"] == 1
