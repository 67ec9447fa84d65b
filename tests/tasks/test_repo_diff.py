"""The diff a repository task's agent made: recorded exact or refused, never steered by the
agent's git config, and shown (escaped) in the HTML report. Real git in real sandboxes."""

from __future__ import annotations

import json
import subprocess
from html import escape

import gymnasium as gym
import pytest
from repo_project import CORE_FIXED, build_project

from opd_gym.episode import Episode, EpisodeSettings
from opd_gym.grading import Grader
from opd_gym.sandboxes import make_pool
from opd_gym.tasks import RepoInfo, Task
from opd_gym.tasks.repo import workspace_files
from opd_gym.tasks.repo_diff import WorkspaceDiff, base_commit, collect_diff
from opd_gym.tasks.swebench import load_swebench
from opd_gym.tools import format_tool_call
from opd_gym.viewer import write_report
from opd_gym.wrappers import TrajectoryRecorder

MARKUP = '<script>alert("diff")</script> & <b>bold</b>'
SUBMIT = format_tool_call("submit", {})


def terminal(command: str) -> str:
    return format_tool_call("terminal", {"command": command})


def write(path: str, content: str) -> str:
    return format_tool_call("write_file", {"path": path, "content": content})


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return build_project(tmp_path_factory.mktemp("repo"))


@pytest.fixture(scope="module")
def swe_task(project) -> Task:
    return load_swebench([project.row], {"minicalc/minicalc": project.bundle})[0]


@pytest.fixture(scope="module")
def docker_pool():
    from opd_gym.sandboxes.docker import DockerEngine
    from opd_gym.sandboxes.image import DEFAULT_IMAGE

    if not DockerEngine().has_image(DEFAULT_IMAGE):
        pytest.fail(f"the sandbox image {DEFAULT_IMAGE} (with git) is not built: "
                    "run `opd-gym sandbox build`")
    pool = make_pool("docker", size=2)
    yield pool
    pool.close()


class KeepingPool:
    """Hands out a pool's sandboxes and keeps them open after release, to look inside."""

    def __init__(self, pool):
        self.pool, self.kept = pool, []

    def acquire(self):
        sandbox = self.pool.acquire()
        self.kept.append(sandbox)
        return sandbox

    def release(self, sandbox) -> None:
        pass

    def close(self) -> None:
        for sandbox in self.kept:
            sandbox.close()


# -- without a sandbox ---------------------------------------------------------------------
def test_from_bytes_is_exact_or_marked():
    assert WorkspaceDiff.from_bytes(b"") == WorkspaceDiff("")
    exact = WorkspaceDiff.from_bytes(b"+a\n+b\n", cap=6)
    assert exact.text == "+a\n+b\n" and not exact.truncated
    cut = WorkspaceDiff.from_bytes(b"+a\n+b\n+c", cap=7)  # cap + 1 bytes: there was more
    assert cut.text == "+a\n+b\n" and cut.truncated and cut.reason is None
    lossy = WorkspaceDiff.from_bytes(b"+caf\xe9\n")
    assert lossy.text == "+caf\ufffd\n" and lossy.lossy
    unknown = WorkspaceDiff.unknown("gone")
    assert unknown.to_dict() == {"text": None, "reason": "gone", "truncated": False,
                                 "lossy": False}


def test_base_commit_is_the_workspace_branch_head(swe_task, tmp_path):
    for path, data in workspace_files(swe_task).items():
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True,
                          text=True, check=True).stdout.strip()
    assert base_commit(swe_task) == head


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the local backend's notice
def test_a_sandbox_that_died_leaves_the_diff_unknown_with_the_reason(swe_task):
    from opd_gym.env import CodingEnv

    pool = make_pool("local", size=1)
    env = CodingEnv(tasks=[swe_task], sandbox=pool, max_turns=3)
    try:
        env.reset(seed=0)
        env.step(write("minicalc/core.py", CORE_FIXED))
        *_, truncated, info = env.step(terminal("kill -9 $PPID; sleep 5"))
        assert truncated and info["end_reason"] == "sandbox_died"
        assert info["diff"]["text"] is None
        assert info["diff"]["reason"].startswith("the sandbox stopped before the diff was taken")
    finally:
        env.close()
        pool.close()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the local backend's notice
def test_tasks_without_a_repository_record_no_diff(local_pool, toy_task):
    episode = Episode(toy_task, local_pool, EpisodeSettings(max_turns=1))
    try:
        turn = episode.play(SUBMIT)
        assert episode.diff is None and "diff" not in episode.info(turn)
    finally:
        episode.release()


# -- in Docker -------------------------------------------------------------------------------
@pytest.mark.docker
def test_the_report_shows_each_episodes_change(docker_pool, swe_task, tmp_path):
    """Edited + new file (then committed: the diff is still against the base), untouched,
    and `.git` deleted: a diff naming both files, a known empty diff, an unknown one."""
    run = tmp_path / "run"
    env = gym.make("opd_gym/Coding-v0", tasks=[swe_task], sandbox=docker_pool, max_turns=4)
    env = TrajectoryRecorder(env, run / "trajectories.jsonl")
    scripts = {
        "edited": [write("minicalc/core.py", CORE_FIXED), write("notes/NEW.md", MARKUP + "\n"),
                   terminal("git add -A && git commit -qm 'fix' && git status --short"),
                   SUBMIT],
        "untouched": [terminal("git status --short"), SUBMIT],
        "no git": [terminal("rm -rf .git"), SUBMIT],
    }
    infos = {}
    try:
        for seed, (name, script) in enumerate(scripts.items()):
            env.reset(seed=seed)
            for action in script:
                *_, terminated, truncated, info = env.step(action)
                if terminated or truncated:
                    break
            assert terminated, info["messages"][-1]
            infos[name] = info
    finally:
        env.close()

    edited = infos["edited"]["diff"]
    assert edited["reason"] is None and not edited["truncated"] and not edited["lossy"]
    text = edited["text"]
    assert "diff --git a/minicalc/core.py b/minicalc/core.py\n" in text
    assert "diff --git a/notes/NEW.md b/notes/NEW.md\nnew file mode 100644\n" in text
    assert f"\n+{MARKUP}\n" in text and "+    middle = len(ordered) // 2\n" in text
    assert ".opd-diff" not in text  # the file the diff crossed in is no part of it
    assert infos["untouched"]["diff"] == WorkspaceDiff("").to_dict()
    gone = infos["no git"]["diff"]
    assert gone["text"] is None and ".git" in gone["reason"], gone

    rows = [json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines()]
    assert [row["diff"] for row in rows] == [infos[name]["diff"] for name in scripts]

    page = write_report(run).read_text(encoding="utf-8")
    assert f'<span class="ln-add">+{escape(MARKUP)}</span>' in page
    assert MARKUP not in page and "<b>bold" not in page and page.count("<script") == 2
    assert '<span class="ln-meta">diff --git a/notes/NEW.md b/notes/NEW.md</span>' in page
    assert "2 file(s)" in page
    assert page.count("<b>No change</b>") == 1
    assert page.count("<b>Diff unknown</b>") == 1 and escape(gone["reason"]) in page


EVIL = r"""
set -e
printf '#!/bin/sh\necho "$0 $*" >> /tmp/pwned\ncat\n' > /tmp/evil.sh
chmod +x /tmp/evil.sh
mkdir -p /tmp/hooks
for h in pre-commit post-checkout post-index-change fsmonitor-watchman reference-transaction; do
  cp /tmp/evil.sh /tmp/hooks/$h
done
for conf in ".git/config" "$HOME/.gitconfig"; do
  git config -f "$conf" core.pager /tmp/evil.sh
  git config -f "$conf" diff.external /tmp/evil.sh
  git config -f "$conf" core.fsmonitor /tmp/evil.sh
  git config -f "$conf" core.hooksPath /tmp/hooks
  git config -f "$conf" filter.x.clean /tmp/evil.sh
  git config -f "$conf" filter.x.smudge /tmp/evil.sh
  git config -f "$conf" filter.x.process /tmp/evil.sh
  git config -f "$conf" diff.x.textconv /tmp/evil.sh
  git config -f "$conf" diff.x.command /tmp/evil.sh
done
printf '* filter=x diff=x\n' > .gitattributes
mkdir -p .git/info && printf '* filter=x diff=x\n' > .git/info/attributes
mkdir nested && cd nested && git init -q && cp ../.gitattributes . && echo one > f
git add f .gitattributes && git -c user.name=a -c user.email=b commit -qm nested
git config filter.x.clean /tmp/evil.sh && git config core.fsmonitor /tmp/evil.sh
echo two > f && touch -d 2001-01-01 f && cd ..
"""
PROVE = """
set +e
git diff HEAD >/dev/null; git status --short >/dev/null; git add -N .; git diff HEAD >/dev/null
git reset -q; test -s /tmp/pwned && echo LIVE; rm -f /tmp/pwned
"""
EXPORTS = ("export GIT_EXTERNAL_DIFF=/tmp/evil.sh GIT_PAGER=/tmp/evil.sh PAGER=/tmp/evil.sh "
           "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0=/tmp/evil.sh "
           "GIT_CONFIG_PARAMETERS=\"'diff.external'='/tmp/evil.sh' "
           "'filter.x.clean'='/tmp/evil.sh'\"")


@pytest.mark.docker
def test_a_planted_git_config_is_never_run_by_the_diff(docker_pool, swe_task):
    pool = KeepingPool(docker_pool)
    episode = Episode(swe_task, pool, EpisodeSettings(max_turns=4), Grader(docker_pool))
    try:
        turn = episode.play(terminal(EVIL + PROVE))
        assert "LIVE" in turn.observation, turn.observation  # the traps work on git here
        episode.play(terminal(EXPORTS))
        episode.play(write("minicalc/core.py", CORE_FIXED))
        info = episode.info(episode.play(SUBMIT))
        assert info["end_reason"] == "submitted"
        diff = info["diff"]
        assert diff["reason"] is None, diff
        assert "diff --git a/minicalc/core.py b/minicalc/core.py\n" in diff["text"]
        assert "+    middle = len(ordered) // 2\n" in diff["text"]
        assert "diff --git a/nested b/nested\nnew file mode 160000\n" in diff["text"]
        # the agent's HOME is outside the workspace (sandboxes.environment.AGENT_HOME): the
        # ~/.gitconfig it planted is neither run nor part of its change
        assert "b/.gitconfig" not in diff["text"]
        sandbox = pool.kept[0]  # the agent's sandbox, after the diff was taken in it
        found = sandbox.run("cat /tmp/pwned 2>&1; ls -a; echo END", timeout=30)
        assert "No such file" in found.output and found.output.endswith("END\n"), found.output
        assert ".opd-diff" not in found.output
    finally:
        episode.release()
        pool.close()


@pytest.mark.docker
def test_truncation_and_refusals_in_the_sandbox(docker_pool, swe_task):
    sandbox = docker_pool.acquire()
    base = base_commit(swe_task)
    try:
        sandbox.write_files(workspace_files(swe_task))
        assert collect_diff(sandbox, base) == WorkspaceDiff("")
        sandbox.run("seq 1 5000 > big.txt")
        cut = collect_diff(sandbox, base, cap=1000)
        assert cut.truncated and cut.reason is None and cut.text.endswith("\n")
        assert cut.text.startswith("diff --git a/big.txt b/big.txt\nnew file mode")
        assert len(cut.text.encode()) <= 1000
        assert collect_diff(sandbox, base).text.endswith("+5000\n")

        wrong = collect_diff(sandbox, "0" * 40)
        assert wrong.text is None and "base commit cannot be read" in wrong.reason

        sandbox.run("mkdir -p locked && echo x > locked/f && chmod 000 locked")
        locked = collect_diff(sandbox, base)
        assert locked.text is None and "cannot be read" in locked.reason, locked
        sandbox.run("chmod 700 locked && rm -rf .git")
        assert "no .git/objects" in collect_diff(sandbox, base).reason
    finally:
        sandbox.close()
    closed = collect_diff(sandbox, base)
    assert closed.text is None and "could not be taken" in closed.reason, closed


def test_a_synthesized_workspace_names_its_base_commit():
    task = Task(id="synth-diff", prompt="Fix it.", files={"a.py": "x = 1\n"},
                tests={"test_a.py": "def test_a():\n    assert True\n"},
                repo=RepoInfo(name="toy", fail_to_pass=["test_a.py::test_a"], synthesized=True))
    head = workspace_files(task)[".git/refs/heads/main"].decode().strip()
    assert base_commit(task) == head and len(head) == 40


@pytest.mark.docker
def test_build_outputs_never_enter_the_diff(docker_pool, swe_task):
    """Running the tests and installing the project write .pyc, __pycache__/, .pytest_cache/
    and *.egg-info in the workspace: the diff holds the agent's edit alone."""
    sandbox = docker_pool.acquire()
    try:
        sandbox.write_files(workspace_files(swe_task))
        sandbox.write_file("minicalc/core.py", CORE_FIXED)
        made = sandbox.run(
            "python3 -m pytest -q -p cacheprovider tests >/dev/null 2>&1; "
            "python3 -m compileall -q minicalc >/dev/null; touch top.pyc stale.pyo && "
            "mkdir -p src/minicalc.egg-info && echo x > src/minicalc.egg-info/PKG-INFO && "
            "echo y > old.egg-info && find . -path ./.git -prune -o -type f -print | sort",
            timeout=120).output
        for built in ("minicalc/__pycache__/core.cpython-", ".pytest_cache/", "./top.pyc",
                      "src/minicalc.egg-info/PKG-INFO", "./old.egg-info"):
            assert built in made, made  # they are there...
        diff = collect_diff(sandbox, base_commit(swe_task))
        assert diff.reason is None, diff
        # ...and only the edit is in the diff
        assert diff.text.count("diff --git") == 1, diff.text
        assert "diff --git a/minicalc/core.py b/minicalc/core.py\n" in diff.text
    finally:
        sandbox.close()
