"""The HTML report of a run on a synthesized repository task shows the task's recorded
difficulty and marks each test FAIL_TO_PASS or PASS_TO_PASS with the outcome per side of the
split (issue 30 points 4 and 9). Real episodes in the sandbox image, a real report."""

from __future__ import annotations

import json
import re

import gymnasium as gym
import pytest

from opd_gym.sandboxes import make_pool
from opd_gym.tasks.repo_suite import load_repo_suite
from opd_gym.tools import format_tool_call
from opd_gym.viewer import write_report
from opd_gym.wrappers import TrajectoryRecorder

SUBMIT = format_tool_call("submit", {})


@pytest.fixture(scope="module")
def docker_pool():
    from opd_gym.sandboxes.docker import DockerEngine
    from opd_gym.sandboxes.image import DEFAULT_IMAGE

    if not DockerEngine().has_image(DEFAULT_IMAGE):
        pytest.fail(f"the sandbox image {DEFAULT_IMAGE} is not built: run `opd-gym sandbox build`")
    pool = make_pool("docker", size=1)
    yield pool
    pool.close()


def test_the_report_shows_difficulty_and_the_test_split(docker_pool, tmp_path):
    """The reference fix passes every FAIL_TO_PASS and PASS_TO_PASS test; the untouched bug
    fails its FAIL_TO_PASS tests and keeps every PASS_TO_PASS one: both show in the report,
    with the difficulty the manifest records."""
    task = next(t for t in load_repo_suite() if t.repo.name == "parse"
                and len(t.repo.fail_to_pass) >= 2)
    level = dict(task.metadata["difficulty"])
    assert level["fail_to_pass"] == len(task.repo.fail_to_pass) and level["lines_changed"] >= 1
    (path, fixed), = task.solution.items()
    f2p, p2p = len(task.repo.fail_to_pass), len(task.repo.pass_to_pass)
    run = tmp_path / "run"
    env = gym.make("opd_gym/Coding-v0", tasks=[task], sandbox=docker_pool, max_turns=3)
    env = TrajectoryRecorder(env, run / "trajectories.jsonl")
    scripts = [[format_tool_call("write_file", {"path": path, "content": fixed}), SUBMIT],
               [SUBMIT]]
    try:
        for seed, script in enumerate(scripts):
            env.reset(seed=seed)
            for action in script:
                *_, terminated, truncated, info = env.step(action)
                if terminated or truncated:
                    break
            assert terminated, info["messages"][-1]
    finally:
        env.close()

    rows = [json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines()]
    assert [row["grade"]["difficulty"] for row in rows] == [level, level]
    fixed_kinds = [t["kind"] for t in rows[0]["grade"]["tests"]]
    assert fixed_kinds.count("FAIL_TO_PASS") == f2p and fixed_kinds.count("PASS_TO_PASS") == p2p
    assert all(t["outcome"] == "passed" for t in rows[0]["grade"]["tests"])
    bug = {t["name"]: t for t in rows[1]["grade"]["tests"]}
    assert all(t["outcome"] != "passed" for t in bug.values() if t["kind"] == "FAIL_TO_PASS")

    page = write_report(run).read_text(encoding="utf-8")
    splits = re.findall(r'<div class="meta split">(.*?)</div>', page)
    assert len(splits) == 2, splits
    assert f"FAIL_TO_PASS <b>{f2p}/{f2p}</b> passed" in splits[0]
    assert f"PASS_TO_PASS <b>{p2p}/{p2p}</b> passed" in splits[0]
    assert f"FAIL_TO_PASS <b>0/{f2p}</b> passed" in splits[1]
    assert f"PASS_TO_PASS <b>{p2p}/{p2p}</b> passed" in splits[1]
    assert '<span class="badge fail">F2P</span>' in splits[1]
    levels = re.findall(r'<div class="meta difficulty">(.*?)</div>', page)
    assert len(levels) == 2
    for shown in levels:
        assert f"lines changed <b>{level['lines_changed']}</b>" in shown
        assert f"FAIL_TO_PASS <b>{f2p}</b>" in shown
        assert f"tests failing <b>{level['tests_failing']}</b>" in shown
        assert ", ".join(level["kinds"]) in shown
    # each test row carries its side of the split
    assert page.count('class="badge kind f2p"') == 2 * f2p
    assert page.count('class="badge kind p2p"') == 2 * p2p
