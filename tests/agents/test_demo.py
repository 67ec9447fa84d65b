"""The demo policy solves every built-in task after failing and repairing on the way."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest

import opd_gym  # noqa: F401  (registers the env)
from opd_gym.agents.demo import DemoAgent, demo_script
from opd_gym.agents.scripted import run_episode
from opd_gym.sandboxes import make_pool
from opd_gym.tasks import load_suite

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # local backend notice


def test_demo_agent_solves_every_builtin_task_after_a_planted_mistake():
    tasks = load_suite()
    with make_pool("local", size=2) as pool:

        def play(task):
            env = gym.make("opd_gym/Coding-v0", tasks=tasks, sandbox=pool)
            try:
                outcome = run_episode(env, DemoAgent(tasks), seed=0, options={"task_id": task.id})
                return task, outcome, list(env.unwrapped.turns)
            finally:
                env.close()

        with ThreadPoolExecutor(2) as workers:
            results = list(workers.map(play, tasks))
    for task, outcome, turns in results:
        assert outcome["terminated"], task.id
        assert outcome["info"]["grade"]["passed"] == outcome["info"]["grade"]["total"] > 0, task.id
        assert len(turns) == len(demo_script(task)) == 6
        if any(p.endswith(".py") for p in task.solution):
            check = turns[2].tool_results[0]
            assert check.exit_code not in (0, None) and "SyntaxError" in check.content, task.id
        assert turns[3].tool_results[0].ok, f"{task.id}: the edit_file repair failed"


def test_demo_script_refuses_tasks_without_reference():
    from opd_gym.records.task import Task

    task = Task(id="t", prompt="p", tests={"test_t.py": "def test_x():\n    pass\n"})
    with pytest.raises(ValueError, match="no reference solution"):
        demo_script(task)


@pytest.mark.parametrize("tool_format", ["qwen3_coder", "llama3", "mistral", "deepseek"])
def test_scripted_agents_write_the_env_s_tool_format(tool_format):
    """`info["tool_format"]` tells scripted agents which family's call syntax to write."""
    tasks = [t for t in load_suite() if t.id in ("two_sum", "bank_account")]
    with make_pool("local", size=2) as pool:
        for task in tasks:
            env = gym.make("opd_gym/Coding-v0", tasks=tasks, sandbox=pool,
                           tool_format=tool_format)
            try:
                outcome = run_episode(env, DemoAgent(tasks), seed=0, options={"task_id": task.id})
            finally:
                env.close()
            info = outcome["info"]
            assert info["tool_format"] == tool_format
            assert info["grade"]["passed"] == info["grade"]["total"] > 0, (tool_format, task.id)
