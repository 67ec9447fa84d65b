"""Rollouts on a real local two-node Ray cluster: parity with the local runner, worker and
teacher faults (actors killed for real: `ray.kill` and SIGKILL of the worker's process)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from opd_gym.agents.policies import make_agent_factory
from opd_gym.distributed import RayOptions, RayRollout, run_ray_rollout
from opd_gym.records.opd_record import OPDRecord, SkipReason
from opd_gym.rollout import RolloutConfig, run_rollout
from opd_gym.runs import RunDirectory
from opd_gym.tasks import load_suite

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore::RuntimeWarning")]

TASKS = ["fizzbuzz", "flatten"]


def _config(out, episodes: int, sandbox: str = "local", **kw) -> RolloutConfig:
    return RolloutConfig(out_dir=str(out), episodes=episodes, task_ids=TASKS, sandbox=sandbox,
                         max_turns=6, opd_options={"topk": 2}, **kw)


def _essence(row) -> tuple:
    """What must not depend on where an episode ran (no timings)."""
    return (row.episode, row.task_id, row.seed, row.finished, row.rewards, row.passed,
            [t["text"] for t in row.turns],
            [(r["turn_index"], r["hint"], r["token_ids"], r["mask"]) for r in row.opd_dicts])


def test_same_episodes_as_the_local_runner(ray_cluster, tmp_path):
    agent = make_agent_factory("demo", load_suite())
    local = run_rollout(_config(tmp_path / "local", 4), agent, teacher="tiny", judge="rule",
                        progress=False)
    distributed = run_ray_rollout(
        _config(tmp_path / "ray", 4), agent, teacher="tiny", judge="rule", progress=False,
        options=RayOptions(workers=2, episodes_per_worker=2),
    )
    assert local.episodes == distributed.episodes == 4 and not distributed.failures
    rows = {r.episode: _essence(r) for r in RunDirectory(tmp_path / "local").rows()}
    ray_rows = {r.episode: _essence(r) for r in RunDirectory(tmp_path / "ray").rows()}
    assert ray_rows == rows
    assert distributed.hint_rate == local.hint_rate and distributed.passed == local.passed
    summary = RunDirectory(tmp_path / "ray").read_summary()
    assert summary["episodes"] == 4 and summary["config"]["ray"]["workers"] == 2


def _containers_of(pids: set[int]) -> list[str]:
    import docker

    client = docker.from_env()
    try:
        return [c.name for pid in pids for c in client.containers.list(
            all=True, filters={"label": f"opd_gym.owner.pid={pid}"})]
    finally:
        client.close()


@pytest.mark.docker
def test_killed_workers_lose_no_episode(ray_cluster, tmp_path):
    """ray.kill one worker and SIGKILL the other mid-run: every episode exactly once."""
    import ray

    config = _config(tmp_path / "run", 6, sandbox="docker")
    options = RayOptions(workers=2, episodes_per_worker=2, max_restarts=2)
    with RayRollout(config, make_agent_factory("demo", load_suite()), teacher="tiny",
                    judge="rule", options=options) as rollout:
        infos = rollout.worker_info()
        assert len({i["node_id"] for i in infos}) == 2  # spread over both nodes
        pids = {i["pid"] for i in infos}
        kills: list[str] = []

        def kill(row, metrics) -> None:
            if not kills:  # first finished episode: ray.kill (Ray restarts the actor)
                ray.kill(rollout.workers[0].handle, no_restart=False)
                kills.append("ray.kill")
            elif len(kills) == 1:  # second: SIGKILL the other worker's process
                os.kill(infos[1]["pid"], signal.SIGKILL)
                kills.append("SIGKILL")

        summary = rollout.record(on_episode=kill, progress=False)
        assert kills == ["ray.kill", "SIGKILL"]
        assert rollout.stats.worker_deaths == 2 and rollout.stats.requeued >= 1
        restarted = {i["pid"] for i in rollout.worker_info()}
        assert not restarted & pids  # both are new processes
    rows = list(RunDirectory(tmp_path / "run").rows())
    assert not summary.failures
    assert sorted(r.episode for r in rows) == list(range(6))  # each exactly once
    assert all(r.finished for r in rows) and summary.episodes == 6
    deadline = time.monotonic() + 30
    while _containers_of(pids | restarted) and time.monotonic() < deadline:
        time.sleep(1)
    assert _containers_of(pids | restarted) == []


def test_dead_teacher_leaves_turns_unscored_with_a_reason(ray_cluster, tmp_path):
    import ray

    options = RayOptions(workers=1, episodes_per_worker=1, teacher_timeout=60)
    with RayRollout(_config(tmp_path / "run", 1), make_agent_factory("demo", load_suite()),
                    teacher="tiny", judge="rule", options=options) as rollout:
        ray.kill(rollout.teacher_actor, no_restart=True)
        started = time.monotonic()
        results = list(rollout.play([0]))
        assert time.monotonic() - started < 60  # no hang
    assert len(results) == 1 and results[0].ok
    records = [OPDRecord.from_dict(r) for r in results[0].row.opd_dicts]
    assert records and all(not r.scored for r in records)
    assert all(r.skip_reason == SkipReason.TEACHER_ERROR for r in records)
    assert all("teacher actor died" in r.error for r in records)


def test_cli_rollout_on_a_cluster_address_then_resume(ray_cluster, tmp_path):
    """`opd-gym rollout --ray ADDRESS`: the same run directory as the local runner (rows,
    summary, report), and `--resume` on it runs nothing twice. With `--calibrations DIR` the
    workers (other processes) calibrate into that store, under its secret."""
    from opd_gym import cli
    from opd_gym.grading import CalibrationStore

    out, store = tmp_path / "run", tmp_path / "calibrations"
    argv = ["rollout", "--ray", ray_cluster.address, "--workers", "2",
            "--episodes-per-worker", "1", "--episodes", "3", "--task-ids", ",".join(TASKS),
            "--sandbox", "local", "--teacher", "tiny", "--topk", "2", "--out", str(out),
            "--quiet", "--calibrations", str(store)]
    assert cli.main(argv) == 0
    tasks = [t for t in load_suite() if t.id in TASKS]
    assert CalibrationStore.open(store).count(tasks) == len(TASKS)
    run = RunDirectory(out)
    assert sorted(row.episode for row in run.rows()) == [0, 1, 2]
    assert run.read_summary()["episodes"] == 3 and (out / "report.html").is_file()
    assert cli.main(argv + ["--resume"]) == 0
    assert sorted(row.episode for row in RunDirectory(out).rows()) == [0, 1, 2]


def test_cli_tool_format_reaches_the_ray_workers(ray_cluster, tmp_path):
    """`--tool-format qwen3_coder --ray`: the workers (other processes) build their envs from
    the run config they receive, so the tool calls are written and parsed as qwen3_coder (the
    scripted policy writes the env's format; a worker left on hermes would show <tool_call>)."""
    from opd_gym import cli

    out = tmp_path / "run"
    argv = ["rollout", "--ray", ray_cluster.address, "--workers", "2",
            "--episodes-per-worker", "1", "--episodes", "2", "--task-ids", ",".join(TASKS),
            "--sandbox", "local", "--no-opd", "--tool-format", "qwen3_coder", "--out", str(out),
            "--quiet", "--no-report"]
    assert cli.main(argv) == 0
    rows = list(RunDirectory(out).rows())
    assert sorted(r.episode for r in rows) == [0, 1]
    for row in rows:
        system = row.messages[0]["content"]
        assert "<function=" in system and "<tool_call>\n{" not in system
        texts = [t["text"] for t in row.turns]
        assert texts and all("<function=" in t and "<tool_call>\n{" not in t for t in texts)
        tool_results = [m for m in row.messages if m.get("role") == "tool"]
        assert len(tool_results) == len(texts) - 1 or len(tool_results) == len(texts)
        assert row.passed  # every call parsed and run: the scripted fix passes the tests
    assert RunDirectory(out).read_summary()["config"]["tool_format"] == "qwen3_coder"


def test_ctrl_c_on_a_ray_run_records_no_casualty(ray_cluster, tmp_path):
    """A real SIGINT to `opd-gym rollout --ray ADDRESS`: no new episodes, those in flight
    cancelled at the end of the grace period (0 s here) and never recorded as played, summary
    and report written, exit 130; `--resume` then completes the run with one row per episode."""
    import json
    import subprocess
    import sys

    out = tmp_path / "run"
    argv = [sys.executable, "-m", "opd_gym.cli", "rollout", "--ray", ray_cluster.address,
            "--workers", "2", "--episodes-per-worker", "1", "--episodes", "8",
            "--task-ids", ",".join(TASKS), "--sandbox", "local", "--teacher", "tiny",
            "--topk", "2", "--out", str(out), "--quiet", "--grace", "0"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    path = out / "trajectories.jsonl"
    while proc.poll() is None and not (path.is_file() and path.read_text().count("\n") >= 1):
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stderr[-3000:]
    assert "interrupted: starting no new episodes" in stderr
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert 1 <= len(rows) < 8
    for row in rows:  # played, or marked interrupted: never an infra casualty counted
        infra = (row.get("grade") or {}).get("infra_error")
        assert (row["finished"] and not infra) or row.get("interrupted")
    summary = RunDirectory(out).read_summary()
    assert summary["interrupted"] is True
    assert summary["episodes"] == sum(r["finished"] and not r.get("interrupted") for r in rows)
    assert (out / "report.html").is_file()
    resumed = subprocess.run([*argv[:-2], "--resume"], capture_output=True, text=True,
                             timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert sorted(r.episode for r in RunDirectory(out).rows()) == list(range(8))
    assert RunDirectory(out).read_summary()["episodes"] == 8


@pytest.mark.parametrize("policy,teacher", [("tiny", "smollm2"), ("smollm2", "tiny")])
def test_tokenizer_mismatch_stops_the_ray_run_before_any_episode(ray_cluster, tmp_path,
                                                                  policy, teacher):
    """Each worker checks its agent's tokenizer against the teacher's when it starts: the
    real tiny/SmolLM2 pair, either way round, is refused in one line and no row is written."""
    from opd_gym import specs
    from opd_gym.errors import ConfigError

    path = specs.model_path(policy)

    def agent(env):  # built in the worker (a loaded model does not travel to the actors)
        from opd_gym.agents.hf import TransformersPolicy

        return TransformersPolicy(path, max_new_tokens=4)

    with pytest.raises(ConfigError, match="tokenizers differ.*vocabularies differ"):
        run_ray_rollout(_config(tmp_path / "ray", 1), agent, teacher=teacher, judge="rule",
                        progress=False, options=RayOptions(workers=1, episodes_per_worker=1))
    rows = tmp_path / "ray" / "trajectories.jsonl"
    assert not rows.exists() or not rows.read_text().strip()


@pytest.mark.docker
def test_repository_tasks_flow_through_ray_opd_exports_and_report(ray_cluster, tmp_path):
    """Tasks of the `repo` suite (real library code, git workspace) on Ray workers with OPD:
    the demo policy's fix earns 1.0 in Docker, the rows carry teacher records (the first turn
    scored; later turns, whose context outgrows the tiny teacher's 4096 positions, refused
    with a reason, never filled) and the agent's diff, an export reads them, and the report
    shows the diff."""
    from opd_gym import cli
    from opd_gym.tasks.repo_suite import load_repo_suite, sample

    # two libraries, the fastest to grade now that PASS_TO_PASS is every passing test
    picked = [t for t in sample(load_repo_suite(), 1) if t.repo.name in ("inflection", "parse")]
    out = tmp_path / "run"
    argv = ["rollout", "--ray", ray_cluster.address, "--workers", "2",
            "--episodes-per-worker", "1", "--episodes", "2", "--tasks", "repo",
            "--task-ids", ",".join(t.id for t in picked), "--policy", "demo",
            "--sandbox", "docker", "--teacher", "tiny", "--topk", "2", "--out", str(out),
            "--quiet"]
    assert cli.main(argv) == 0
    rows = sorted(RunDirectory(out).rows(), key=lambda r: r.episode)
    assert [r.task_id for r in rows] == [t.id for t in picked]
    for row, task in zip(rows, picked, strict=True):
        assert row.passed and row.grade["score"] == 1.0, row.grade
        assert row.diff is not None and row.diff["text"], row.diff
        changed = next(iter(task.solution))
        assert f"a/{changed}" in row.diff["text"]
        records = row.opd_dicts
        assert records and not records[0].get("skip_reason") and records[0]["token_ids"]
        assert all(r.get("skip_reason") or r["teacher_token_logprobs"] for r in records)
    assert cli.main(["export", str(out), "--to", "trl", "--out", str(tmp_path / "t.jsonl")]) == 0
    assert (tmp_path / "t.jsonl").read_text().count("\n") >= len(rows)
    report = (out / "report.html").read_text()
    first = rows[0].diff["text"].splitlines()[0]
    assert __import__("html").escape(first) in report


def test_a_task_no_grade_can_vouch_for_is_refused_before_the_first_ray_episode(
        ray_cluster, tmp_path, capsys):
    """As the local runner: the Ray run checks the tasks it plans before any episode (in a
    worker, where the sandboxes are); an unverifiable one (the starter already passes every
    test) is refused by name, and with `skip_unverifiable` the run plays without it."""
    import dataclasses

    from opd_gym.errors import UnverifiableTaskError

    suite = load_suite()
    fizz = next(t for t in suite if t.id == "fizzbuzz")
    solved = dataclasses.replace(fizz, id="fizzbuzz-solved", files={**fizz.files,
                                                                   **fizz.solution})
    agent = make_agent_factory("demo", suite)
    options = RayOptions(workers=2, episodes_per_worker=1)

    def config(out, **kw):
        return RolloutConfig(out_dir=str(tmp_path / out), episodes=4, tasks=[fizz, solved],
                             sandbox="local", max_turns=6, opd=False, **kw)

    with pytest.raises(UnverifiableTaskError, match="fizzbuzz-solved: .*starter-passes"):
        run_ray_rollout(config("refused"), agent, options=options, progress=False)
    assert not RunDirectory(tmp_path / "refused").has_rows()
    summary = run_ray_rollout(config("skipped", skip_unverifiable=True), agent,
                              options=options, progress=False)
    rows = list(RunDirectory(tmp_path / "skipped").rows())
    assert summary.episodes == 4 and not summary.failures
    assert sorted(r.episode for r in rows) == [0, 1, 2, 3]
    assert {r.task_id for r in rows} == {"fizzbuzz"}
    assert "skipping 1 of 2 task(s) that cannot be verified" in capsys.readouterr().err
