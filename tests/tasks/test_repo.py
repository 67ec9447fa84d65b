"""Repository tasks: the workspace's tree and `.git` (host git), and grading through the env.

The project is real (tests/repo_project.py): several commits, the fix after the base commit,
a tag, a branch, a stash, a reflog entry and a remote. The Docker tests play episodes through
`gym.make` on it: the gold patch applied with `git apply` scores 1.0, the untouched base 0,
the gold patch plus a broken PASS_TO_PASS test below 1.0, with the per-test report in info.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import gymnasium as gym
import pytest
from repo_project import (
    CALC_BUGGY,
    CORE_FIXED,
    F2P,
    INSTALL_TOOLZ,
    LEAK_MARKERS,
    P2P,
    build_project,
    toolz_task,
)

from opd_gym.episode import task_prompt
from opd_gym.errors import ConfigError, OPDGymError
from opd_gym.sandboxes import make_pool
from opd_gym.tasks import RepoInfo, Task
from opd_gym.tasks.repo import FIXED_DATE, archive_tree, project_pytest_ini, workspace_files
from opd_gym.tasks.swebench import load_swebench
from opd_gym.tools import format_tool_call

TEST_FILE = "def test_a():\n    assert True\n"


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return build_project(tmp_path_factory.mktemp("repo"))


@pytest.fixture(scope="module")
def swe_task(project):
    return load_swebench([project.row], {"minicalc/minicalc": project.bundle})[0]


def materialize(files: dict[str, bytes], root: Path) -> Path:
    for path, data in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return root


def run_git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout


def synthesized_task(**repo) -> Task:
    fields = {"name": "toy", "fail_to_pass": ["test_a.py::test_a"], "synthesized": True, **repo}
    return Task(id="synth", prompt="Fix it.", files={"a.py": "x = 1\n", "sub/b.txt": "b\n"},
                tests={"test_a.py": TEST_FILE}, repo=RepoInfo(**fields))


def test_synthesized_workspace_is_one_fixed_commit(tmp_path):
    files = workspace_files(synthesized_task())
    root = materialize(files, tmp_path)
    assert run_git(root, "rev-list", "--all").split() == [run_git(root, "rev-parse", "HEAD")
                                                          .strip()]
    assert run_git(root, "log", "--format=%an <%ae> %ad", "--date=iso-strict").strip() == \
        "opd-gym <opd-gym@localhost> 2000-01-01T00:00:00+00:00"
    assert FIXED_DATE.startswith("2000-01-01")
    assert run_git(root, "status", "--porcelain") == ""
    assert run_git(root, "for-each-ref", "--format=%(refname)").split() == ["refs/heads/main"]
    assert not (root / ".git" / "logs").exists()
    # the same task gives the same bytes (cached, and the commit itself is deterministic)
    assert workspace_files(synthesized_task()) == files


def test_real_history_stops_at_the_base_commit(project, swe_task, tmp_path):
    root = materialize(workspace_files(swe_task), tmp_path)
    commits = run_git(root, "rev-list", "--all").split()
    assert commits[0] == project.base_commit and len(commits) == 2  # genuine, up to the base
    assert project.fix_commit not in commits
    assert run_git(root, "status", "--porcelain") == ""  # the binary asset is there too
    assert (root / "assets" / "logo.bin").read_bytes() == bytes(range(256))
    objects = run_git(root, "cat-file", "--batch-all-objects", "--batch-check")
    assert len(objects.splitlines()) > 5
    dump = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=root,
                          capture_output=True).stdout
    for where, marker in LEAK_MARKERS.items():
        assert marker.encode() not in dump, where
    config = (root / ".git" / "config").read_text()
    assert "remote" not in config and "url" not in config


def test_repository_path_and_bundle_give_the_same_history(project, swe_task, tmp_path):
    from dataclasses import replace

    from_path = replace(swe_task, repo=replace(swe_task.repo, history=str(project.path)))
    a = materialize(workspace_files(from_path), tmp_path / "a")
    b = materialize(workspace_files(swe_task), tmp_path / "b")
    assert run_git(a, "rev-list", "--all") == run_git(b, "rev-list", "--all")


@pytest.mark.parametrize("layout", ["clone in a folder", "bare at the top"])
def test_a_tarball_of_the_repository_is_a_history(project, swe_task, tmp_path, layout):
    """A task folder may ship its history as a tarball: the same workspace as the repository
    itself; a tarball holding no repository is refused by name."""
    import tarfile
    from dataclasses import replace

    from repo_project import git

    archive = tmp_path / "history.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        if layout == "clone in a folder":
            tar.add(project.path, arcname="minicalc")
        else:
            bare = tmp_path / "bare.git"
            git(tmp_path, "clone", "-q", "--bare", f"file://{project.path}", str(bare))
            for child in bare.iterdir():
                tar.add(child, arcname=child.name)
    from_tar = workspace_files(replace(swe_task, repo=replace(swe_task.repo,
                                                              history=str(archive))))
    assert from_tar == workspace_files(swe_task)
    empty = tmp_path / "empty.tar"
    with tarfile.open(empty, "w") as tar:
        tar.add(project.path / "minicalc", arcname="minicalc")
    with pytest.raises(ConfigError, match="holds no git repository"):
        workspace_files(replace(swe_task, repo=replace(swe_task.repo, history=str(empty))))


def test_a_shallow_source_gives_a_consistent_shallow_history(project, swe_task, tmp_path):
    from dataclasses import replace

    from repo_project import git

    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "3", "--no-single-branch",
        f"file://{project.path}", str(shallow))
    task = replace(swe_task, repo=replace(swe_task.repo, history=str(shallow)))
    root = materialize(workspace_files(task), tmp_path / "ws")
    assert run_git(root, "rev-list", "--all").split()[0] == project.base_commit
    run_git(root, "fsck")  # exit 0: no missing parents
    assert run_git(root, "status", "--porcelain") == ""


def test_refusals_name_what_is_missing(project, swe_task):
    from dataclasses import replace

    with pytest.raises(ConfigError, match="not in its history"):
        workspace_files(replace(swe_task, repo=replace(swe_task.repo, base_commit="0" * 40)))
    with pytest.raises(ConfigError, match="does not exist|cannot be read"):
        workspace_files(replace(swe_task, repo=replace(swe_task.repo, history="/nonexistent")))
    with pytest.raises(ConfigError, match="not a repository task"):
        workspace_files(Task(id="t", prompt="p", tests={"test_a.py": TEST_FILE}))


def test_archive_tree_is_the_stored_tree_whatever_the_attributes(tmp_path):
    from repo_project import git

    git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / ".gitattributes").write_text("skip.txt export-ignore\nsub.txt export-subst\n")
    (tmp_path / "skip.txt").write_text("kept\n")
    (tmp_path / "sub.txt").write_text("$Format:%H$\n")
    (tmp_path / "link").symlink_to("skip.txt")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-q", "-m", "c")
    tree = archive_tree(tmp_path, "HEAD")
    assert tree == {".gitattributes": b"skip.txt export-ignore\nsub.txt export-subst\n",
                    "skip.txt": b"kept\n", "sub.txt": b"$Format:%H$\n"}  # no symlink


def test_prompt_names_the_repository_not_every_file(swe_task):
    text = task_prompt(swe_task)
    assert "git repository of minicalc/minicalc (5 files)" in text
    assert "minicalc/core.py" not in text


def test_project_pytest_ini_follows_pytests_order():
    assert project_pytest_ini({"pytest.ini": "[pytest]\naddopts = -x\n",
                               "tox.ini": "[pytest]\naddopts = -q\n"}) == \
        "[pytest]\naddopts = -x\n"
    assert project_pytest_ini({"setup.cfg": "[tool:pytest]\ntestpaths = t\n"}) == \
        "[pytest]\ntestpaths = t\n"
    toml = '[tool.pytest.ini_options]\nxfail_strict = true\nmarkers = ["slow", "net"]\n'
    assert project_pytest_ini({"pyproject.toml": toml}) == \
        "[pytest]\nxfail_strict = true\nmarkers =\n    slow\n    net\n"
    assert project_pytest_ini({"setup.cfg": "[metadata]\nname = x\n"}) is None


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the local backend's notice
def test_reset_places_the_repository_in_one_bulk_write(local_pool, swe_task):
    from opd_gym.env import CodingEnv

    env = CodingEnv(tasks=[swe_task], sandbox=local_pool, max_turns=2)
    try:
        _, info = env.reset(seed=0)
        assert "git repository of minicalc/minicalc" in info["messages"][1]["content"]
        _, _, _, _, info = env.step(terminal("git status --porcelain; git log --format=%s"))
        assert info["messages"][-1]["content"].split("\n")[:2] == [
            "Add median", "Initial helpers"], info["messages"][-1]
    finally:
        env.close()


# -- grading through the env (Docker) -----------------------------------------------------
def needs_git_image() -> None:
    from opd_gym.sandboxes.docker import DockerEngine
    from opd_gym.sandboxes.image import DEFAULT_IMAGE

    if not DockerEngine().has_image(DEFAULT_IMAGE):
        pytest.fail(f"the sandbox image {DEFAULT_IMAGE} (with git) is not built: "
                    "run `opd-gym sandbox build`")


@pytest.fixture(scope="module")
def docker_pool():
    needs_git_image()
    pool = make_pool("docker", size=3)
    yield pool
    pool.close()


def play(pool, task, turns: list[str]) -> dict:
    env = gym.make("opd_gym/Coding-v0", tasks=[task], sandbox=pool, max_turns=len(turns))
    try:
        env.reset(seed=0)
        for turn in turns:
            _, _, terminated, truncated, info = env.step(turn)
            if terminated or truncated:
                return info
        raise AssertionError("the episode did not end")
    finally:
        env.close()


def terminal(command: str) -> str:
    return format_tool_call("terminal", {"command": command})


SUBMIT = format_tool_call("submit", {})


def module_id(test_id: str) -> str:
    """A node id in either spelling the report may use ('a/b.py::t' or 'a.b::t')."""
    return test_id.replace(".py::", "::").replace("/", ".")


def outcomes(grade: dict) -> dict[str, str]:
    """Outcome per test of the report, keyed by `module_id`."""
    return {module_id(test["name"]): test["outcome"] for test in grade["tests"]}


@pytest.mark.docker
def test_gold_base_and_regression_through_the_env(docker_pool, project, swe_task):
    patch = project.row["patch"]
    gold = play(docker_pool, swe_task, [
        terminal(f"git apply <<'PATCH'\n{patch}PATCH\ngit status --short && "
                 "git commit -qam 'fix median' && git log --oneline | wc -l"),
        SUBMIT,
    ])
    results = gold["messages"]
    applied = next(m["content"] for m in results if m["role"] == "tool")
    # git works as the agent: the patch applies, status shows it, a commit joins the base's 2
    assert applied.split("\n")[:2] == [" M minicalc/core.py", "3"], applied
    grade = gold["grade"]
    assert gold["reward_breakdown"]["correctness"] == 1.0, grade
    assert outcomes(grade) == {module_id(i): "passed" for i in F2P + P2P}, grade
    earning = {module_id(t["name"]) for t in grade["tests"] if t["earns"]}
    assert earning == {module_id(i) for i in F2P}, grade  # PASS_TO_PASS only gates

    base = play(docker_pool, swe_task, [SUBMIT])
    assert base["reward_breakdown"]["correctness"] == 0.0, base["grade"]
    assert outcomes(base["grade"])[module_id(F2P[0])] == "failed", base["grade"]

    broken = CORE_FIXED.replace("return max(lo, min(x, hi))", "return min(x, hi)")
    assert broken != CORE_FIXED
    regressed = play(docker_pool, swe_task, [
        format_tool_call("write_file", {"path": "minicalc/core.py", "content": broken}),
        SUBMIT,
    ])
    assert regressed["reward_breakdown"]["correctness"] < 1.0, regressed["grade"]
    clamp = module_id("tests/test_core.py::test_clamp")
    assert outcomes(regressed["grade"])[clamp] == "failed", regressed["grade"]
    assert clamp in map(module_id, regressed["grade"]["gates_failed"]), regressed["grade"]



@pytest.mark.docker
def test_a_task_with_setup_steps_plays_in_its_own_image(docker_pool):
    """The env builds the task's image once (setup steps on the sandbox image, offline), plays
    and grades in it from a warm pool of that image: gold 1.0, base 0; the same task without
    its setup step cannot import its dependency, so the image is what makes it work."""
    task = toolz_task((INSTALL_TOOLZ,))
    fixed = CALC_BUGGY.replace("min(counts", "max(counts")
    env = gym.make("opd_gym/Coding-v0", tasks=[task], sandbox=docker_pool, max_turns=3)
    try:
        env.reset(seed=0)  # builds (or finds) the image
        _, _, _, _, info = env.step(terminal("python3 -c 'import toolz' && echo has-toolz"))
        assert "has-toolz" in info["messages"][-1]["content"], info["messages"][-1]
        env.step(format_tool_call("write_file", {"path": "calc.py", "content": fixed}))
        _, _, _, _, gold = env.step(SUBMIT)
        assert gold["reward_breakdown"]["correctness"] == 1.0, gold["grade"]
        env.reset(seed=1)  # the image exists: found in this env's record, not ensured again
        assert list(env.unwrapped._built.values()) == [env.unwrapped.episode.sandbox.config.image]
        _, _, _, _, base = env.step(SUBMIT)
        assert base["reward_breakdown"]["correctness"] == 0.0, base["grade"]
        assert outcomes(base["grade"])["tests.test_calc::test_most_common"] == "failed"
    finally:
        env.close()
    bare = play(docker_pool, toolz_task(()), [SUBMIT])  # no setup: the sandbox image
    assert bare["reward_breakdown"]["correctness"] == 0.0
    assert "No module named 'toolz'" in bare["grade"]["tests"][0]["message"], bare["grade"]


def test_setup_steps_on_a_backend_without_images_are_refused():
    env = gym.make("opd_gym/Coding-v0", tasks=[toolz_task((INSTALL_TOOLZ,))], sandbox="local")
    try:
        with pytest.raises(ConfigError, match="only the docker sandbox backend"):
            env.reset(seed=0)
    finally:
        env.close()


FREQLIB = '''"""A stand-in dependency, installed from a setup cache of the user's own."""
MARK = "freqlib-from-the-users-setup-cache"
'''


@pytest.mark.docker
def test_setup_steps_install_from_the_setup_cache_the_env_is_given(docker_pool, tmp_path):
    """`CodingEnv(setup_cache=...)` (the CLI's --setup-cache) is what the steps see at
    /opd-cache; the default cache lacks the file, so the same task cannot build without it."""
    from opd_gym.tasks import RepoInfo, Task

    cache = tmp_path / "cache"
    (cache / "vendor").mkdir(parents=True)
    (cache / "vendor" / "freqlib.py").write_text(FREQLIB)
    step = "cp /opd-cache/vendor/freqlib.py /usr/local/lib/python3.11/dist-packages/"
    task = Task(id="uses-freqlib", prompt="p", files={"calc.py": "import freqlib\n"},
                tests={"tests/test_calc.py": "def test_ok():\n    assert 1 + 1 == 2\n"},
                repo=RepoInfo(name="calc", fail_to_pass=["tests/test_calc.py::test_ok"],
                              setup=(step,)))
    env = gym.make("opd_gym/Coding-v0", tasks=[task], sandbox=docker_pool, max_turns=2,
                   setup_cache=str(cache))
    try:
        env.reset(seed=0)
        _, _, _, _, info = env.step(terminal("python3 -c 'import freqlib; print(freqlib.MARK)'"))
        assert "freqlib-from-the-users-setup-cache" in info["messages"][-1]["content"]
    finally:
        env.close()
    with pytest.raises(ConfigError, match="is not a folder"):
        gym.make("opd_gym/Coding-v0", tasks=[task], sandbox=docker_pool,
                 setup_cache=str(tmp_path / "missing"))
    default = gym.make("opd_gym/Coding-v0", tasks=[task], sandbox=docker_pool, max_turns=2)
    try:
        with pytest.raises(OPDGymError, match="freqlib"):
            default.reset(seed=0)  # the default cache has no vendor/freqlib.py
    finally:
        default.close()
