"""Harbor task folders in: the loader (task.toml mapped or refused), and episodes played on Docker.

The fixtures under tests/fixtures/harbor are Harbor's layout; their Dockerfiles name the
placeholder `{{ sandbox_image }}`, which `harbor_dir` writes over with the local sandbox
image's name, so building them pulls nothing. Four Docker episodes in all: each of the two
playable tasks solved by its solution/solve.sh run through the terminal tool (reward 1), and
submitted untouched (reward 0).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from opd_gym import CodingEnv
from opd_gym.agents import ReferenceAgent, WrongAgent, reference_script, run_episode
from opd_gym.errors import ConfigError, DatasetError
from opd_gym.grading.harbor import read_reward
from opd_gym.sandboxes.env_image import DockerfileSpec
from opd_gym.sandboxes.image import DEFAULT_IMAGE
from opd_gym.tasks.harbor import HarborNote, HarborTaskError, load_harbor, load_harbor_task
from opd_gym.tasks.resolve import resolve_tasks
from opd_gym.tools import format_tool_call

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "harbor"
PLACEHOLDER = "{{ sandbox_image }}"
# the notes a task's load warns with (asserted where they matter, with pytest.warns)
pytestmark = pytest.mark.filterwarnings("ignore::opd_gym.tasks.harbor.HarborNote")


def copy_task(tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(FIXTURES / name, target)
    return target


@pytest.fixture(scope="session")
def harbor_dir(tmp_path_factory) -> Path:
    """The fixture tasks with their Dockerfiles FROM the local sandbox image (one copy per
    session: its environment images are built once, then found in the image cache)."""
    root = tmp_path_factory.mktemp("harbor") / "tasks"
    shutil.copytree(FIXTURES, root)
    for dockerfile in root.glob("*/environment/Dockerfile"):
        text = dockerfile.read_text(encoding="utf-8")
        dockerfile.write_text(text.replace(PLACEHOLDER, DEFAULT_IMAGE), encoding="utf-8")
    return root


# -- the loader (no Docker) -----------------------------------------------------------------
def test_a_task_folder_maps_its_fields():
    task = load_harbor_task(FIXTURES / "edit-greeting")
    info = task.harbor
    assert task.id == "opd-gym/edit-greeting"
    assert task.prompt == (FIXTURES / "edit-greeting" / "instruction.md").read_text()
    assert set(task.tests) == {"test.sh"} and set(task.solution) == {"solve.sh"}
    assert task.timeout == info.verifier_timeout == 60.0
    assert (info.cpus, info.memory_mb, info.storage_mb, info.build_timeout) == (1.0, 512, 64,
                                                                                 300.0)
    assert info.workdir == "/app" and info.agent_timeout == 120.0
    assert any("not a wall clock" in note for note in info.notes)  # said, not ignored
    assert task.metadata["difficulty"] == "easy"
    # Harbor's legacy size string, and reward.json's task with its pytest file
    calc = load_harbor_task(FIXTURES / "fix-calc")
    assert calc.harbor.memory_mb == 1024 and set(calc.tests) == {"test.sh", "test_calc.py"}


def test_a_task_asking_for_network_gets_none_and_says_so():
    with pytest.warns(HarborNote, match="network_mode = 'public'.*no network"):
        task = load_harbor_task(FIXTURES / "fetch-data")
    assert task.id == "fetch-data"  # no [task] name: the folder's
    assert any("no network" in note for note in task.harbor.notes)
    assert task.metadata["harbor"]["notes"] == list(task.harbor.notes)


def test_a_folder_of_tasks_and_the_spec_forms():
    with pytest.warns(HarborNote):
        tasks = load_harbor(FIXTURES)
    assert [t.id for t in tasks] == ["opd-gym/edit-greeting", "fetch-data", "opd-gym/fix-calc"]
    with pytest.warns(HarborNote):
        assert [t.id for t in resolve_tasks(f"harbor:{FIXTURES}")] == [t.id for t in tasks]
    one = resolve_tasks({"harbor": FIXTURES / "fix-calc"})
    assert [t.id for t in one] == ["opd-gym/fix-calc"]
    with pytest.raises(HarborTaskError, match="neither a Harbor task folder"):
        load_harbor(FIXTURES.parent)


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: (d / "task.toml").write_text("[verifier\n"), "not valid TOML"),
    (lambda d: (d / "instruction.md").unlink(), "instruction.md is missing"),
    (lambda d: (d / "tests" / "test.sh").unlink(), "no tests/test.sh"),
    (lambda d: (d / "environment" / "docker-compose.yaml").write_text("services: {}\n"),
     "docker-compose environments are not supported yet"),
    (lambda d: _append(d, '\n[verifier.environment]\ncpus = 1\n'),
     "separate verifier environment .* not yet supported"),
    (lambda d: _append(d, '\n[extra]\nx = 1\n'), r"unknown top-level field\(s\) \['extra'\]"),
    (lambda d: _set(d, "[environment]", "gpus = 1"), "gpus is not supported"),
    (lambda d: _set(d, "[environment]", "cpus = 4096"), "this machine has"),
    (lambda d: _set(d, "[verifier]", "timeout_sec = -1"), "positive number of seconds"),
    (lambda d: _set(d, "[agent]", 'user = "root"'), "uid 1000"),
])
def test_bad_task_folders_are_refused_naming_why(tmp_path, change, message):
    folder = copy_task(tmp_path, "edit-greeting")
    change(folder)
    with pytest.raises(HarborTaskError, match=message):
        load_harbor_task(folder)


def _append(folder: Path, text: str) -> None:
    path = folder / "task.toml"
    path.write_text(path.read_text() + text)


def _set(folder: Path, section: str, line: str) -> None:
    path = folder / "task.toml"
    text = path.read_text()
    key = line.split("=")[0].strip()
    kept = [row for row in text.splitlines() if not row.startswith(key + " ")]
    path.write_text("\n".join(kept).replace(section, f"{section}\n{line}", 1) + "\n")


# -- episodes on Docker ----------------------------------------------------------------------
@pytest.mark.docker
def test_harbor_tasks_play_on_docker_solved_and_untouched(harbor_dir):
    greeting, calc = (resolve_tasks(f"harbor:{harbor_dir / name}")[0]
                      for name in ("edit-greeting", "fix-calc"))
    env = CodingEnv(tasks=[greeting, calc], sandbox="docker", pool_size=1, max_turns=4)
    try:
        # the agent starts in the image's workdir, holding what the Dockerfile put there
        env.reset(options={"task_id": greeting.id})
        obs, *_ = env.step(format_tool_call("terminal", {"command": "pwd; cat greeting.txt"}))
        assert "/app" in obs and "Hello, world!" in obs
        *_, info = env.step(format_tool_call("submit"))
        grade = info["grade"]
        assert grade["reward"] == 0.0 and grade["score"] == 0.0 and not grade["infra_error"]
        assert info["reward_breakdown"]["correctness"] == 0.0

        # the reference: solution/solve.sh run through the terminal tool
        info = run_episode(env, ReferenceAgent([greeting]),
                           options={"task_id": greeting.id})["info"]
        assert info["grade"]["reward"] == 1.0, info["grade"]
        assert info["reward_breakdown"]["correctness"] == 1.0
        assert "verifier (tests/test.sh) gave reward 1" in info["messages"][-1]["content"]

        # the pytest-graded task (reward.json), in its own image
        info = run_episode(env, WrongAgent([calc]), options={"task_id": calc.id})["info"]
        assert info["grade"]["reward"] == 0.0 and "2 failed" in info["grade"]["output"]
        info = run_episode(env, ReferenceAgent([calc]), options={"task_id": calc.id})["info"]
        assert info["grade"]["reward"] == 1.0, info["grade"]
        assert "2 passed" in info["grade"]["output"]
    finally:
        env.close()


# -- the reward file and the command line (no Docker) ---------------------------------------
@pytest.mark.parametrize(("files", "reward"), [
    ({"reward.txt": b"1\n"}, 1.0), ({"reward.txt": b" 0.25 "}, 0.25),
    ({"reward.json": b'{"reward": 0.5}'}, 0.5)])
def test_the_reward_file_is_read(files, reward):
    assert read_reward(files) == reward


@pytest.mark.parametrize(("files", "message"), [
    ({}, "wrote neither /logs/verifier/reward.txt nor reward.json .found: nothing"),
    ({"log.txt": b"x"}, "found: log.txt"),
    ({"reward.txt": b"passed"}, "holds 'passed', not a number"),
    ({"reward.txt": b"nan"}, "outside"), ({"reward.txt": b"2"}, "outside"),
    ({"reward.json": b"{"}, "not JSON"),
    ({"reward.json": b'{"accuracy": 1}'}, "no 'reward' key .found \\['accuracy'\\]"),
    ({"reward.json": b'{"reward": true}'}, "not a number")])
def test_a_missing_or_garbled_reward_is_refused_never_a_zero(files, message):
    with pytest.raises(ValueError, match=message):
        read_reward(files)


def test_the_command_line_takes_harbor_folders(capsys):
    from opd_gym.cli import options
    from opd_gym.cli.errors import UserError

    args = argparse.Namespace(tasks=f"harbor:{FIXTURES}", schema=None, repo=None, repos=None)
    spec = options.task_spec(args)
    assert spec == f"harbor:{FIXTURES}"
    tasks = options.load_tasks(spec)
    assert len(tasks) == 3
    assert "task fetch-data: [environment] asks for network_mode = 'public'" in \
        capsys.readouterr().err  # said at load
    with pytest.raises(UserError, match="do not apply to harbor"):
        options.task_spec(argparse.Namespace(tasks=f"harbor:{FIXTURES}", schema="mbpp",
                                             repo=None, repos=None))
    with pytest.raises(UserError, match="harbor:.*missing: no such folder"):
        options.load_tasks(f"harbor:{FIXTURES / 'missing'}")


@pytest.mark.parametrize("workdir", ["/", "/tmp/work", "/etc", "/a b"])
def test_a_workdir_that_cannot_be_the_workspace_is_refused(tmp_path, workdir):
    folder = copy_task(tmp_path, "edit-greeting")
    _set(folder, "[environment]", f'workdir = "{workdir}"')
    with pytest.raises(HarborTaskError, match="cannot be the agent's workspace"):
        load_harbor_task(folder)


@pytest.mark.filterwarnings("ignore:opd_gym local sandbox")
def test_a_harbor_task_is_refused_off_docker(local_pool):
    env = CodingEnv(tasks={"harbor": FIXTURES / "fix-calc"}, sandbox=local_pool)
    try:
        for start in (env.reset, env.verify):  # verify: its image is what it checks first
            with pytest.raises(ConfigError, match="plays only on the docker sandbox backend"):
                start()
    finally:
        env.close()


def test_the_dockerfile_names_its_bases(tmp_path):
    (tmp_path / "Dockerfile").write_text(
        "FROM python:3.12-slim AS build\nRUN true\nFROM --platform=linux/amd64 build\n"
        "FROM debian:12 AS final\n")
    spec = DockerfileSpec(tmp_path)
    assert spec.bases == ("python:3.12-slim", "debian:12")  # a stage is not a base
    before = spec.tag("sha256:a")
    (tmp_path / "data.txt").write_text("x")  # every file of the context is in the tag
    assert spec.tag("sha256:a") != before and spec.tag("sha256:b") != spec.tag("sha256:a")
    (tmp_path / "Dockerfile").write_text("ARG BASE\nFROM ${BASE}\n")
    with pytest.raises(ConfigError, match="names a build argument"):
        _ = DockerfileSpec(tmp_path).bases


@pytest.mark.docker
def test_a_base_image_not_on_the_machine_is_refused_not_pulled(tmp_path):
    from opd_gym.sandboxes import SandboxUnavailable
    from opd_gym.sandboxes.docker import DockerEngine
    from opd_gym.sandboxes.env_image import ImageCache

    (tmp_path / "Dockerfile").write_text("FROM opd-gym-no-such-base:0\nRUN true\n")
    cache = ImageCache(DockerEngine(), directory=tmp_path / "state")
    with pytest.raises(SandboxUnavailable, match=r"not on this machine.*docker pull "
                       "opd-gym-no-such-base:0"):
        cache.ensure(DockerfileSpec(tmp_path))


def test_the_reference_runs_solve_sh_alone(tmp_path):
    task = load_harbor_task(FIXTURES / "fix-calc")
    run, submit = reference_script(task)
    assert "bash <<'OPD_SOLVE'" in run and "return a + b" in run and '"submit"' in submit
    assert reference_script(task, wrong=True) == [submit]
    folder = copy_task(tmp_path, "fix-calc")
    (folder / "solution" / "patch.diff").write_text("x\n")
    with pytest.raises(DatasetError, match="runs solve.sh alone"):
        reference_script(load_harbor_task(folder))
