"""One environment (issue 56 point 3): the agent's terminal, validation and grading see the
same suite environment, and `python` is Python 3 in the sandbox.

The suite's probe is a test that asserts every variable of `SUITE_ENVIRONMENT` (TERM unset, as
termcolor's colour tests need; locale, TZ, the hash seed), and a HOME outside the workspace,
writable and empty. It runs for real in each place: the local backend's terminal and the
harness here (no Docker), and, in one Docker episode, the agent's `python3 -m pytest`,
validation's `run_suite`, plain pytest (`grading.plain`) and the grade.
"""

from __future__ import annotations

import json
import re
import warnings

import pytest

from opd_gym.authoring.synth import run_suite
from opd_gym.env import CodingEnv
from opd_gym.grading.launch import HARNESS_ENV, harness_request, run_harness_here
from opd_gym.sandboxes import make_pool, sandbox_factory
from opd_gym.sandboxes.environment import (
    HELPER_PREFIX,
    SUITE_ENVIRONMENT,
    env_assignments,
    helper_environment,
    suite_environment,
    unset_variables,
)
from opd_gym.tasks import Task
from opd_gym.tools.parsing import format_tool_call

PROBE = f"""\
import os
import sys
import time

WANTED = {dict(SUITE_ENVIRONMENT)!r}


def test_the_suite_environment():
    seen = {{key: os.environ.get(key) for key in WANTED}}
    print("ENV " + repr(sorted(seen.items())))
    assert seen == WANTED
    assert os.environ.get("TERM") != "dumb"  # termcolor's colour tests fail under TERM=dumb
    assert sys.flags.hash_randomization == 0 and time.tzname[0] == "UTC"


def test_home_is_its_own_empty_writable_folder():
    home = os.path.realpath(os.environ["HOME"])
    assert not home.startswith(os.path.realpath(os.getcwd())), home
    assert os.access(home, os.W_OK) and os.listdir(home) == [], home
"""
PROBE_IDS = {"test_env.py::test_the_suite_environment",
             "test_env.py::test_home_is_its_own_empty_writable_folder"}
# the episode's task: the probe guards, a test of the function to write earns
TASK_TESTS = PROBE + "\n\ndef test_add():\n    from calc import add\n\n    assert add(2, 3) == 5\n"
TASK_IDS = PROBE_IDS | {"test_env.py::test_add"}
SOLUTION = "def add(a, b):\n    return a + b\n"


def call(name: str, **arguments) -> str:
    return format_tool_call(name, arguments)


def test_the_table_leaves_term_unset_and_reaches_the_harness_and_helper():
    env = suite_environment()
    assert "TERM" not in env and {"TERM", "COLUMNS", "LINES"} <= set(unset_variables())
    assert env["LANG"] == env["LC_ALL"] == "C.UTF-8" and env["PYTHONHASHSEED"] == "0"
    request = harness_request("/workspace", 1000, 10.0, [{"t.py": ""}], None, ())
    assert request["env"] == env
    assert set(env_assignments()) <= set(HARNESS_ENV)
    assert not any(item.startswith("TERM=") for item in HARNESS_ENV)
    helper = helper_environment("/tmp/home")
    assert helper["HOME"] == "/tmp/home"
    assert {k[len(HELPER_PREFIX):]: v for k, v in helper.items() if k != "HOME"} == env


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_terminal_and_harness_see_one_environment_locally(tmp_path):
    """No Docker: the local backend's terminal and the harness as a local process."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        box = sandbox_factory({"backend": "local"})()
        box.start()
    try:
        box.write_file("test_env.py", PROBE)
        # (bash gives itself TERM=dumb when none is set, but never exports it)
        fresh = box.run("printenv TERM || echo no-TERM; python -c 'print(6 * 7)'")
        assert fresh.output.split() == ["no-TERM", "42"], fresh.output
        ran = box.run("python3 -m pytest -q -p no:cacheprovider test_env.py 2>&1")
        assert ran.exit_code == 0 and "2 passed" in ran.output, ran.output
        # a cwd that is gone falls back to the workspace, not to HOME (outside it now)
        box.run("mkdir gone && cd gone && rmdir ../gone")
        assert box.run("pwd").output.strip() == box.workspace
    finally:
        box.close()
    ws = tmp_path / "ws"
    ws.mkdir()
    verdict = json.loads(run_harness_here(ws, [{"test_env.py": PROBE}], args=("test_env.py",),
                                          timeout=60).splitlines()[-1])
    graded = {t["id"]: t["outcome"] for t in verdict["variants"][0]["tests"]}
    assert graded == dict.fromkeys(PROBE_IDS, "passed"), verdict["variants"][0]


@pytest.mark.docker
def test_python_and_the_environment_are_the_graders_in_a_docker_episode():
    """One episode: `python` runs Python 3, and the probe passes in the agent's
    `python3 -m pytest`, in validation's `run_suite` (after the shell exported TERM=dumb), in
    plain pytest and in the grade (score 1.0, every test passed)."""
    from opd_gym.grading.plain import run_plain
    from opd_gym.sandboxes.image import DEFAULT_IMAGE

    task = Task(id="one_environment", prompt="Implement add(a, b) in calc.py.",
                files={"calc.py": "def add(a, b):\n    raise NotImplementedError\n",
                       "test_env.py": TASK_TESTS},
                tests={"test_env.py": TASK_TESTS}, solution={"calc.py": SOLUTION}, timeout=60.0)
    pool = make_pool("docker", size=1)
    env = CodingEnv(tasks=[task], sandbox=pool, max_turns=5)
    try:
        env.reset(seed=0)
        env.step(call("write_file", path="calc.py", content=SOLUTION))
        obs, *_ = env.step(call("terminal", command="python -c 'import sys; print("
                                "sys.version_info[0], sys.executable)'; printenv TERM || "
                                "echo no-TERM; echo HOME=$HOME"))
        # /usr/bin/python offline, /usr/local/bin/python in the Dockerfile's python image
        assert re.search(r"^3 /\S*bin/python$", obs, re.M), obs
        assert "no-TERM\nHOME=/tmp/home" in obs, obs
        assert "command not found" not in obs
        obs, *_ = env.step(call("terminal", command="python3 -m pytest -q -p no:cacheprovider"
                                " test_env.py"))
        assert "3 passed" in obs, obs
        # validation names the table itself: what the shell exported does not reach it
        env.step(call("terminal", command="export TERM=dumb COLUMNS=40 TZ=EST5EDT"))
        validated = run_suite(env.episode.sandbox, ["test_env.py"], timeout=120)
        assert validated.outcomes == dict.fromkeys(TASK_IDS, "passed"), validated
        *_, terminated, _, info = env.step(call("submit"))
        grade = info["grade"]
        assert terminated and grade["score"] == 1.0, (grade["reason"], grade)
        assert grade["passed"] == grade["total"] == 3, grade
    finally:
        env.close()
        pool.close()
    plain = run_plain(DEFAULT_IMAGE, {"test_env.py": TASK_TESTS.encode(),
                                      "calc.py": SOLUTION.encode()}, None,
                      ["-p", "no:cacheprovider"], timeout=120)
    assert plain.outcomes == dict.fromkeys(TASK_IDS, "passed"), plain.output
