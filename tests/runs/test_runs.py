"""The run schema and run directory: old runs load, new rows round-trip, bad input is refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from opd_gym.errors import DatasetError
from opd_gym.runs import (
    SCHEMA_VERSION,
    EpisodeRow,
    RunDirectory,
    RunSummary,
    grade_passed,
    hint_rate,
)

# written by the rollout code before the run schema existed (demo policy, tiny teacher, rule
# judge, local sandbox); its second row has no `schema` key, as rows of the oldest writer
V1_RUN = Path(__file__).parent / "fixtures" / "v1-run"


@pytest.fixture
def v1_run(tmp_path) -> RunDirectory:
    shutil.copytree(V1_RUN, tmp_path / "run")
    return RunDirectory(tmp_path / "run")


def test_old_run_loads_with_its_facts(v1_run):
    rows = list(v1_run.rows())
    assert [r.episode for r in rows] == [0, 1]
    assert [r.schema_version for r in rows] == [1, 1]
    assert all(r.passed is True and r.finished for r in rows)
    summary = v1_run.read_summary()
    # the facts computed once in the schema agree with what the old code wrote in summary.json
    assert sum(bool(r.passed) for r in rows) == summary["passed"] == 2
    assert hint_rate(rows) == pytest.approx(summary["hint_rate"])
    assert sum(r.scored_turns for r in rows) == summary["turns_scored"]
    assert sum(r.tokens_scored for r in rows) == summary["tokens_scored"]
    assert sum(r.reward for r in rows) == pytest.approx(summary["reward_sum"])
    assert all(len(r.records()) == r.length for r in rows)


def test_row_round_trips_exactly(v1_run):
    raw = [json.loads(line) for line in v1_run.trajectories.read_text().splitlines()]
    for data in raw:
        again = EpisodeRow.from_dict(data).to_dict()
        assert again == {"schema": SCHEMA_VERSION, **{k: v for k, v in data.items()
                                                      if k != "schema"}}
        assert EpisodeRow.from_dict(again) == EpisodeRow.from_dict(data)


def test_a_repository_diff_round_trips_and_old_rows_have_none(v1_run):
    assert all(row.diff is None and "diff" not in row.to_dict() for row in v1_run.rows())
    diff = {"text": "", "reason": None, "truncated": False, "lossy": False}
    row = EpisodeRow.from_dict({"task_id": "repo", "diff": diff})
    assert row.diff == diff and row.to_dict()["diff"] == diff and "diff" not in row.extra
    assert EpisodeRow.from_dict({"task_id": "repo", "diff": "oops"}).diff is None


def test_unknown_keys_survive_and_wrong_types_read_as_absent():
    row = EpisodeRow.from_dict(
        {"task_id": "t", "turns": "oops", "grade": [1], "rewards": None, "worker": "w1"}
    )
    assert row.turns == [] and row.grade is None and row.rewards == [] and row.passed is None
    assert row.to_dict()["worker"] == "w1"


@pytest.mark.parametrize("version", [2, 99, "1", None])
def test_unsupported_version_fails_naming_it(tmp_path, version):
    run = RunDirectory(tmp_path)
    run.append({"schema": version, "task_id": "t", "episode": 0, "finished": True})
    with pytest.raises(DatasetError, match=f"schema version {version!r}"
                       if not isinstance(version, int) else f"schema version {version}"):
        list(run.rows())
    problems: list[tuple[int, str]] = []
    assert list(run.rows(on_problem=lambda n, why: problems.append((n, why)))) == []
    assert problems and problems[0][0] == 1 and "schema version" in problems[0][1]


@pytest.mark.parametrize(
    ("grade", "expected"),
    [
        (None, None),
        ({}, None),
        ({"passed": 3, "total": 3}, True),
        ({"passed": 2, "total": 3}, False),
        ({"passed": 2, "failed": 1}, False),
        ({"passed": 2, "failed": 0, "errors": 0, "skipped": 0}, True),
        ({"passed": 0, "total": 0}, False),
        ({"passed": 1, "total": 1, "reason": "timeout"}, False),
    ],
)
def test_passed_is_defined_once(grade, expected):
    assert grade_passed(grade) is expected
    assert EpisodeRow(grade=grade).passed is expected


def test_hint_rate_counts_only_scored_turns():
    scored_hint = {"mask": [0, 1], "hint": "use a loop"}
    scored = {"mask": [1], "hint": None}
    unscored_hint = {"mask": [0, 0], "hint": "x", "error": "teacher error: down"}
    rows = [EpisodeRow(opd=[scored_hint, scored]), EpisodeRow(opd=[unscored_hint]), EpisodeRow()]
    assert hint_rate(rows) == 0.5
    assert hint_rate([EpisodeRow()]) is None


def test_append_resume_and_torn_tail(tmp_path):
    run = RunDirectory(tmp_path / "out")
    assert run.open_for_run(resume=False) == set()
    run.append(EpisodeRow(task_id="a", episode=0, finished=True))
    run.append(EpisodeRow(task_id="b", episode=1, finished=False))
    with open(run.trajectories, "a") as fh:  # a writer killed mid-line
        fh.write('{"task_id": "c", "episo')
    with pytest.raises(FileExistsError, match="resume"):
        run.open_for_run(resume=False)
    assert run.open_for_run(resume=True) == {0}  # the unfinished row is dropped: replayed
    run.append(EpisodeRow(task_id="b", episode=1, finished=True))
    problems: list[tuple[int, str]] = []
    rows = list(run.rows(on_problem=lambda n, why: problems.append((n, why))))
    assert [(r.task_id, r.episode, r.finished) for r in rows] == [("a", 0, True), ("b", 1, True)]
    assert problems == [(2, problems[0][1])] and "not JSON" in problems[0][1]
    assert run.done() == {0, 1}


INFRA = {"passed": 0, "total": 0, "reason": "no grading sandbox: the sandbox pool is closed",
         "infra_error": True}


def test_resume_replays_interrupted_infra_and_unfinished_rows_once(tmp_path):
    """Rows that do not count as played are dropped when a run resumes (the file rewritten
    atomically), so the replayed row is the only row of its episode."""
    run = RunDirectory(tmp_path)
    good = {"passed": 1, "total": 1}
    run.append(EpisodeRow(task_id="a", episode=0, finished=True, grade=good))
    run.append(EpisodeRow(task_id="b", episode=1, finished=True, grade=INFRA))
    run.append(EpisodeRow(task_id="c", episode=2, extra={"interrupted": True}))
    run.append(EpisodeRow(task_id="d", episode=3, finished=False, extra={"error": "boom"}))
    run.append(EpisodeRow(task_id="e", episode=4, finished=True, grade={"passed": 0, "total": 2}))
    assert run.done() == {0, 4}
    summary = RunSummary.of_rows(run.episodes())
    assert (summary.episodes, summary.passed, summary.infra_errors, summary.interrupted_episodes,
            summary.unfinished, summary.replayable) == (2, 1, 1, 1, 1, 3)
    assert run.open_for_run(resume=True) == {0, 4}
    assert [r.episode for r in run.rows()] == [0, 4]
    assert not list(tmp_path.glob("*.tmp"))
    for episode in (1, 2, 3):
        run.append(EpisodeRow(task_id="x", episode=episode, finished=True, grade=good))
    assert sorted(r.episode for r in run.rows()) == [0, 1, 2, 3, 4]
    summary = RunSummary.of_rows(run.episodes())
    assert (summary.episodes, summary.passed, summary.replayable) == (5, 4, 0)


def test_readers_keep_the_last_row_of_an_episode(tmp_path):
    run = RunDirectory(tmp_path)
    run.append(EpisodeRow(task_id="a", episode=0, finished=True, grade=INFRA))
    run.append(EpisodeRow(task_id="b", episode=1, finished=True))
    run.append(EpisodeRow(task_id="a2", episode=0, finished=True, grade={"passed": 1, "total": 1}))
    assert [(r.episode, r.task_id) for r in run.episodes()] == [(0, "a2"), (1, "b")]
    assert run.done() == {0, 1}


def test_strict_json_everywhere(tmp_path):
    """NaN and Infinity are written as null (other parsers reject bare NaN); old files that hold
    a bare NaN still read."""
    run = RunDirectory(tmp_path)
    nan = float("nan")
    run.append(EpisodeRow(episode=0, finished=True, duration=nan, rewards=[1.0, float("inf")],
                          opd_metrics={"opd/kl": nan, "opd/tokens": 3.0}))
    line = run.trajectories.read_text()
    assert "NaN" not in line and "Infinity" not in line
    json.loads(line, parse_constant=lambda name: pytest.fail(f"bare {name}"))
    row = next(run.rows())
    assert row.rewards == [1.0, None] and row.opd_metrics == {"opd/kl": None, "opd/tokens": 3.0}
    summary = RunSummary.of_rows(run.episodes())
    run.write_summary(summary.to_dict())
    json.loads(run.summary_path.read_text(), parse_constant=lambda name: pytest.fail(name))
    run.write_config({"topk": nan})
    assert run.read_config() == {"topk": None}
    with open(run.trajectories, "a") as fh:  # an old writer's bare NaN
        fh.write('{"episode": 1, "finished": true, "duration": NaN, "rewards": [NaN]}\n')
    old = list(run.rows())[1]
    assert old.duration is None and old.reward == 0.0


def test_summary_written_atomically_and_read_back(tmp_path):
    run = RunDirectory(tmp_path)
    summary = RunSummary()
    metrics = summary.count(EpisodeRow(grade={"passed": 1, "total": 1}, rewards=[0.0, 1.0]))
    assert metrics["train/passed"] == 1.0 and metrics["train/pass_rate"] == 1.0
    run.write_summary(summary.to_dict())
    assert run.read_summary()["passed"] == 1
    assert not list(tmp_path.glob("*.tmp"))
    run.summary_path.write_text("[1]")
    with pytest.raises(DatasetError, match="not a JSON object"):
        run.read_summary()


def test_file_path_names_its_directory(v1_run):
    by_file = RunDirectory(v1_run.trajectories)
    assert by_file.root == v1_run.root and by_file.summary_path == v1_run.summary_path
    with pytest.raises(FileNotFoundError, match="rollout directory"):
        list(RunDirectory(v1_run.root / "nothing").rows())


def test_appends_from_processes_never_interleave(tmp_path):
    """Several writer processes appending big rows at once leave only whole lines."""
    code = (
        "import sys; from opd_gym.runs import RunDirectory, EpisodeRow\n"
        "run = RunDirectory(sys.argv[1]); w = int(sys.argv[2])\n"
        "for i in range(20):\n"
        "    run.append(EpisodeRow(task_id='x' * 200_000, episode=w * 100 + i, finished=True),"
        " fsync=False)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(w)])
             for w in range(3)]
    assert all(p.wait(timeout=60) == 0 for p in procs)
    run = RunDirectory(tmp_path)
    assert run.done() == {w * 100 + i for w in range(3) for i in range(20)}
    assert os.path.getsize(run.trajectories) > 3 * 20 * 200_000


def test_old_import_paths_keep_working():
    from opd_gym import rollout
    from opd_gym.viewer import run as viewer_run

    assert rollout.RunSummary is RunSummary
    assert rollout.TRAJECTORIES == viewer_run.TRAJECTORIES == "trajectories.jsonl"
    assert list(rollout.read_trajectories(V1_RUN / "trajectories.jsonl"))[0]["episode"] == 0
    assert rollout.finished_episodes(V1_RUN / "trajectories.jsonl") == {0, 1}


def test_old_run_renders_exports_and_replays(v1_run, tmp_path):
    """Every reader takes a run written before the schema: viewer, exports, the replay policy."""
    from opd_gym.agents.policies import ReplayAgent
    from opd_gym.exports import export_run
    from opd_gym.viewer import load_run, write_report

    run = load_run(v1_run.root)
    assert run.bad_lines == 0 and [e.passed for e in run.episodes] == [True, True]
    assert run.summary()["hint_rate"] == pytest.approx(v1_run.read_summary()["hint_rate"])
    html = write_report(v1_run.root).read_text()
    assert "fizzbuzz" in html and "flatten" in html
    lines = export_run(v1_run.root, "trl").read_text().splitlines()
    assert len(lines) == sum(r.length for r in v1_run.rows())
    agent = ReplayAgent.from_file(str(v1_run.trajectories))
    agent.reset("", {"task_id": "flatten"})
    flatten = next(r for r in v1_run.rows() if r.task_id == "flatten")
    assert str(agent.act("", {})) == flatten.turns[0]["text"]


def test_viewer_counts_a_future_row_as_a_bad_line(v1_run):
    from opd_gym.viewer import load_run

    v1_run.append({"schema": 7, "task_id": "later", "episode": 2, "finished": True})
    run = load_run(v1_run.root)
    assert len(run.episodes) == 2 and run.bad_lines == 1
    assert "line 3" in run.problems[0] and "schema version 7" in run.problems[0]


def test_pass_at_k_is_the_unbiased_estimator():
    from opd_gym.runs.summary import pass_at_k

    assert pass_at_k(4, 1, 1) == 0.25
    assert pass_at_k(4, 1, 2) == 0.5  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(4, 1, 4) == 1.0 and pass_at_k(4, 0, 4) == 0.0
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)  # 1 - C(7,5)/C(10,5)


def test_group_statistics_over_repeated_rollouts():
    ok, bad = {"passed": 1, "total": 1}, {"passed": 0, "total": 1}
    rows = [EpisodeRow(task_id="a", episode=i, finished=True, grade=g, episode_return=r)
            for i, (g, r) in enumerate([(ok, 1.0), (bad, 0.0), (bad, 0.0), (ok, 1.0)])]
    rows += [EpisodeRow(task_id="b", episode=4 + i, finished=True, grade=ok, episode_return=0.5)
             for i in range(4)]
    rows.append(EpisodeRow(task_id="b", episode=8, finished=True, grade=INFRA))  # not counted
    summary = RunSummary.of_rows(rows, repeat=4)
    groups = summary.groups
    assert groups["tasks"] == 2 and groups["per_task"]["a"]["reward_std"] == 0.5
    assert groups["per_task"]["b"] == {"n": 4, "passed": 4, "graded": 4, "mean_reward": 0.5,
                                       "reward_std": 0.0}
    # task a: n=4, c=2 -> pass@1 0.5, pass@2 1 - 1/6; task b: 1.0
    assert groups["pass_at_k"]["1"] == pytest.approx(0.75)
    assert groups["pass_at_k"]["2"] == pytest.approx((1 - 1 / 6 + 1) / 2)
    assert groups["pass_at_k"]["4"] == 1.0 and groups["mean_reward_std"] == 0.25
    assert "pass@k" in summary.table() and json.loads(json.dumps(summary.to_dict()))
    assert RunSummary.of_rows(rows).groups is None  # repeat 1: no groups
