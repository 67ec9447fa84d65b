"""End to end through Docker: built-in tasks solved by their reference, check_env, failures.

The reference/wrong test plays every fourth built-in task through the env, concurrently on
threads, each env borrowing sandboxes from one shared warm pool. Every task's grade (starter
0, reference 1.0, wrong below) is checked by tests/authoring/test_validate.py and every task is
played through the env by tests/agents/test_demo.py; this file checks the env's path
(episode end, reward, the agent's own check run) on a spread of them, for CI's time.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from opd_gym import CodingEnv
from opd_gym.agents import MalformedAgent, ReferenceAgent, WrongAgent, run_episode
from opd_gym.sandboxes import make_pool
from opd_gym.tasks import load_suite
from opd_gym.tools import format_tool_call

pytestmark = pytest.mark.docker

TASKS = load_suite("coding")
SAMPLE = TASKS[::4]  # a spread over the sorted suite: easy to hard, stdin and library tasks
THREADS = 4


@pytest.fixture(scope="module")
def shared_pool():
    pool = make_pool("docker", size=THREADS + 2, workers=THREADS)
    yield pool
    pool.close()


def play(pool, agent_type, task_id, grader=None):
    env = CodingEnv(tasks=TASKS, sandbox=pool, grader=grader)
    try:
        result = run_episode(env, agent_type(TASKS), options={"task_id": task_id})
        result["turns"] = env.turns
        return result
    finally:
        env.close()


def test_builtin_tasks_reference_passes_and_wrong_scores_lower(shared_pool, docker_grader):
    # one Grader for every env, as a run shares one: each task is calibrated once, not per env
    # (the session's: other modules grading the built-in suite share its calibrations)
    grader = docker_grader
    jobs = [(agent, task.id) for task in SAMPLE for agent in (ReferenceAgent, WrongAgent)]
    with ThreadPoolExecutor(THREADS) as workers:
        results = list(workers.map(lambda job: play(shared_pool, *job, grader=grader), jobs))
    failures = []
    for (agent, task_id), result in zip(jobs, results, strict=True):
        info = result["info"]
        assert result["terminated"] and info["end_reason"] == "submitted", (task_id, info)
        correctness = info["reward_breakdown"]["correctness"]
        if agent is ReferenceAgent and correctness != 1.0:
            failures.append((task_id, info["grade"]["reason"], info["grade"]["output"][-800:]))
    assert not failures, failures
    by_job = dict(zip(jobs, results, strict=True))
    for task in SAMPLE:
        good, bad = by_job[(ReferenceAgent, task.id)], by_job[(WrongAgent, task.id)]
        assert bad["info"]["reward_breakdown"]["correctness"] < 1.0, task.id
        assert bad["return"] < good["return"], task.id
        # the reference agent wrote every file, ran a check that succeeded, then submitted
        checks = [r for t in good["turns"] for r in t.tool_results if r.name == "terminal"]
        assert checks and checks[0].exit_code == 0, (task.id, checks[0].content)


def test_malformed_agent_gets_errors_not_a_crash(shared_pool):
    env = CodingEnv(tasks=TASKS, sandbox=shared_pool, max_format_errors=4)
    try:
        result = run_episode(env, MalformedAgent(), options={"task_id": "fizzbuzz"})
        assert result["truncated"] and result["info"]["end_reason"] == "format_errors"
        assert result["steps"] == 4
        observations = [t.observation for t in env.turns]
        assert all("Error" in o or "error" in o for o in observations)
        assert result["info"]["reward_breakdown"]["correctness"] == 0.0
    finally:
        env.close()


def test_sandbox_death_and_memory_kill_in_docker(shared_pool):
    env = CodingEnv(tasks=TASKS, sandbox=shared_pool)
    try:
        env.reset(options={"task_id": "fizzbuzz"})
        hog = "python3 -c \"b = bytearray(4 << 30)\""
        obs, *_ = env.step(format_tool_call("terminal", {"command": hog}))
        assert "exit code: 137" in obs and "memory limit" in obs
        obs, *_ = env.step(format_tool_call("terminal", {"command": "echo alive"}))
        assert obs == "alive\n[exit code: 0]"  # the shell survives; only the hog was killed
        # $PPID is the sandbox helper: it runs as root, so the agent cannot kill it
        obs, _, term, trunc, info = env.step(
            format_tool_call("terminal", {"command": "kill -9 $PPID; echo still here"}))
        assert "Operation not permitted" in obs and "still here" in obs
        assert not term and not trunc
        env.sandbox.container.kill()  # what the agent cannot do, the host can
        obs, _, term, trunc, info = env.step(
            format_tool_call("terminal", {"command": "echo hi"}))
        assert trunc and not term and info["end_reason"] == "sandbox_died"
    finally:
        env.close()


@pytest.mark.filterwarnings("ignore:.*not having a spec")
def test_check_env_with_docker():
    env = gym.make("opd_gym/Coding-v0", pool_size=1)
    check_env(env.unwrapped)
    env.close()
    raw = CodingEnv(tasks=["fizzbuzz", "two_sum"], pool_size=1)
    check_env(raw)
    raw.close()
