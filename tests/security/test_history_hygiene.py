"""History hygiene: no git command inside the sandbox leads the agent to the fix.

The project (tests/repo_project.py) has real history with the fix in a later commit, and leak
markers in a tag, a branch, a stash, a reflog entry and a remote. Episodes are reset through
the env on a real Docker pool (image with git); the agent's own terminal then runs every git
command that could reach other history, and greps every object for the fix's text. For a
synthesized bug, no git command may show the bug being introduced.
"""

from __future__ import annotations

import re

import gymnasium as gym
import pytest
from repo_project import (
    CORE_BASE,
    CORE_FIXED,
    FIX_MARKER,
    LEAK_MARKERS,
    PYPROJECT,
    TESTS_BASE,
    TESTS_FIXED,
    build_project,
)

from opd_gym.sandboxes import make_pool
from opd_gym.tasks import RepoInfo, Task
from opd_gym.tasks.swebench import load_swebench
from opd_gym.tools import format_tool_call

pytestmark = pytest.mark.docker

FIX_TEXTS = (FIX_MARKER, "(ordered[middle - 1] + ordered[middle]) / 2", "test_median_even")
PROBE = """\
set -u
echo "== log"; git log --all --format='%H %s'
echo "== revs"; git rev-list --all --reflog | sort
echo "== reflog"; git reflog
echo "== stash"; git stash list
echo "== tags"; git tag -l
echo "== branches"; git branch -a
echo "== remotes"; git remote -v
echo "== fsck"; git fsck --lost-found --unreachable --dangling --no-progress 2>&1
echo "== lost"; find .git/lost-found -type f 2>/dev/null
echo "== objects"; git cat-file --batch-all-objects --batch-check | wc -l
echo "== hits"; git cat-file --batch-all-objects --batch | grep -a -c -F {patterns}
echo "== files"; grep -r -l -F {patterns} . | sort
echo "== diff"; git diff HEAD
echo "== status"; git status --porcelain
echo "== fix"; git cat-file -t {fix} 2>&1
echo "== end"
"""


@pytest.fixture(scope="module")
def pool():
    from opd_gym.sandboxes.docker import DockerEngine
    from opd_gym.sandboxes.image import DEFAULT_IMAGE

    if not DockerEngine().has_image(DEFAULT_IMAGE):
        pytest.fail(f"the sandbox image {DEFAULT_IMAGE} (with git) is not built")
    pool = make_pool("docker", size=2)
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return build_project(tmp_path_factory.mktemp("hygiene"))


def probe(pool, task: Task, fix_commit: str) -> dict[str, str]:
    """Reset an episode of `task` and run PROBE in its terminal: section name -> output."""
    patterns = " ".join(f"-e '{text}'" for text in (*FIX_TEXTS, *LEAK_MARKERS.values()))
    command = PROBE.format(patterns=patterns, fix=fix_commit)
    env = gym.make("opd_gym/Coding-v0", tasks=[task], sandbox=pool, max_turns=3)
    try:
        env.reset(seed=0)
        env.step(format_tool_call("terminal", {"command": command}))
        output = env.unwrapped.turns[-1].tool_results[0].content
    finally:
        env.close()
    assert "== end" in output, output
    sections = re.split(r"^== (\w+)\n", output, flags=re.M)[1:]
    return {name: body.strip() for name, body in zip(sections[::2], sections[1::2], strict=True)}


@pytest.mark.parametrize("source", ["bundle", "path"])
def test_the_fix_in_later_history_is_unreachable(pool, project, source):
    history = project.bundle if source == "bundle" else project.path
    task = load_swebench([project.row], {"minicalc/minicalc": history})[0]
    seen = probe(pool, task, project.fix_commit)
    log = seen["log"].splitlines()
    assert [line.split(" ", 1)[1] for line in log] == ["Add median", "Initial helpers"], seen
    assert log[0].startswith(project.base_commit)  # genuine history up to the base commit
    assert len(seen["revs"].splitlines()) == 2, seen
    for name in ("reflog", "stash", "tags", "remotes", "fsck", "lost", "files", "diff",
                 "status"):
        assert seen[name] == "", (name, seen)
    assert seen["branches"] == "* main", seen
    assert seen["hits"].splitlines()[0] == "0", seen  # no object holds the fix or a marker
    assert int(seen["objects"]) >= 10, seen  # the history is really there
    assert "bad object" in seen["fix"] or "could not get object" in seen["fix"], seen


def test_a_synthesized_bug_shows_no_change(pool):
    tree = {"pyproject.toml": PYPROJECT, "minicalc/__init__.py": "",
            "minicalc/core.py": CORE_BASE, "tests/test_core.py": TESTS_BASE}
    task = Task(
        id="synth-median", prompt="median() is wrong for even lengths.", files=tree,
        tests={"tests/test_core.py": TESTS_FIXED}, solution={"minicalc/core.py": CORE_FIXED},
        repo=RepoInfo(name="minicalc", fail_to_pass=["tests/test_core.py::test_median_even"],
                      synthesized=True),
    )
    seen = probe(pool, task, "0" * 40)
    assert len(seen["log"].splitlines()) == 1 and seen["log"].endswith(" Base tree"), seen
    assert len(seen["revs"].splitlines()) == 1, seen
    for name in ("reflog", "stash", "tags", "remotes", "fsck", "lost", "files", "diff",
                 "status"):
        assert seen[name] == "", (name, seen)
    assert seen["hits"].splitlines()[0] == "0", seen
    # the one commit holds the buggy tree as it is: 4 blobs, 3 trees, 1 commit
    assert int(seen["objects"]) == 8, seen


def test_the_probe_finds_the_fix_when_it_is_there(pool, project):
    """Control: with the fix commit as base, the same probe sees the fix (it can fail)."""
    from dataclasses import replace

    task = load_swebench([project.row], {"minicalc/minicalc": project.bundle})[0]
    leaky = replace(task, repo=replace(task.repo, base_commit=project.fix_commit))
    seen = probe(pool, leaky, project.fix_commit)
    assert int(seen["hits"].splitlines()[0]) > 0, seen
    assert seen["fix"] == "commit", seen
    assert "Fix median for even lengths" in seen["log"], seen
