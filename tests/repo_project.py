"""A small real project with real git history, for the repository-task tests.

`build_project(root)` makes a git repository with several commits: the base commit (a median
that is wrong for even lengths), then the fix commit after it, plus everything through which
a fix may leak: a tag, a branch, a stash, a reflog entry, a remote and a bundle of it all.
Every leak carries a marker text the hygiene tests grep for. It returns the SWE-bench row of
the bug (patch, test_patch, FAIL_TO_PASS, PASS_TO_PASS) beside the paths.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIX_MARKER = "FIXMARKER-averages-the-two-middle-values"
LEAK_MARKERS = {
    "fix commit": FIX_MARKER,
    "tag": "TAGMARKER-release-notes",
    "branch": "BRANCHMARKER-experimental",
    "stash": "STASHMARKER-work-in-progress",
    "reflog": "REFLOGMARKER-abandoned",
    "remote": "REMOTEMARKER-upstream-only",
}

CORE_V1 = '''\
"""Small numeric helpers."""


def clamp(x, lo, hi):
    """x limited to [lo, hi]."""
    return max(lo, min(x, hi))


def mean(xs):
    """The arithmetic mean of a non-empty sequence."""
    return sum(xs) / len(xs)
'''

CORE_BASE = CORE_V1 + '''

def median(xs):
    """The median of a non-empty sequence."""
    ordered = sorted(xs)
    return ordered[len(ordered) // 2]
'''

CORE_FIXED = CORE_V1 + f'''

def median(xs):
    """The median of a non-empty sequence."""
    ordered = sorted(xs)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    # {FIX_MARKER}
    return (ordered[middle - 1] + ordered[middle]) / 2
'''

TESTS_V1 = '''\
from minicalc.core import clamp, mean


def test_clamp():
    assert clamp(5, 0, 3) == 3
    assert clamp(-1, 0, 3) == 0
    assert clamp(2, 0, 3) == 2


def test_mean():
    assert mean([1, 2, 3, 6]) == 3
'''

TESTS_BASE = TESTS_V1.replace("import clamp, mean", "import clamp, mean, median") + '''

def test_median_odd():
    assert median([3, 1, 2]) == 2
    assert median([9, 7, 5, 1, 3]) == 5
'''

TESTS_FIXED = TESTS_BASE + '''

def test_median_even():
    assert median([4, 1, 3, 2]) == 2.5
    assert median([10, 20]) == 15
'''

PYPROJECT = '''\
[project]
name = "minicalc"
version = "0.1.0"

[tool.pytest.ini_options]
testpaths = ["tests"]
addopts = "-q"
'''

PROBLEM = ("median() gives the wrong answer for sequences of even length: median([4, 1, 3, 2]) "
           "returns 3, but the median of four numbers is the mean of the two middle ones, 2.5.")

F2P = ["tests/test_core.py::test_median_even"]
P2P = ["tests/test_core.py::test_clamp", "tests/test_core.py::test_mean",
       "tests/test_core.py::test_median_odd"]


@dataclass
class Project:
    """The repository, its bundle, the base and fix commits, and the SWE-bench row."""

    path: Path
    bundle: Path
    base_commit: str
    fix_commit: str
    row: dict[str, Any]


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    full = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "dev@example.org",
            "GIT_COMMITTER_NAME": "Dev", "GIT_COMMITTER_EMAIL": "dev@example.org",
            **(env or {})}
    done = subprocess.run(["git", *args], cwd=cwd, env=full, capture_output=True, text=True)
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout.strip()


def _write(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def _commit(root: Path, message: str, files: dict[str, str | bytes]) -> str:
    _write(root, files)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)
    return git(root, "rev-parse", "HEAD")


def build_project(root: Path) -> Project:
    """The project under root/minicalc (see the module docstring)."""
    repo = root / "minicalc"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    _commit(repo, "Initial helpers", {
        "pyproject.toml": PYPROJECT, "README.md": "# minicalc\n",
        "minicalc/__init__.py": "", "minicalc/core.py": CORE_V1,
        "tests/test_core.py": TESTS_V1, "assets/logo.bin": bytes(range(256)),
    })
    git(repo, "tag", "v0.1")  # a tag before the base: harmless, yet not carried either
    base = _commit(repo, "Add median", {"minicalc/core.py": CORE_BASE,
                                        "tests/test_core.py": TESTS_BASE})
    fix = _commit(repo, "Fix median for even lengths", {"minicalc/core.py": CORE_FIXED,
                                                         "tests/test_core.py": TESTS_FIXED})
    patch = git(repo, "diff", base, fix, "--", "minicalc") + "\n"
    test_patch = git(repo, "diff", base, fix, "--", "tests") + "\n"
    _commit(repo, "Docs", {"README.md": "# minicalc\n\nmedian, mean, clamp.\n"})
    git(repo, "tag", "-a", "v1.0", "-m", LEAK_MARKERS["tag"])
    git(repo, "checkout", "-q", "-b", "experimental")
    _commit(repo, "Experiment", {"NOTES.md": LEAK_MARKERS["branch"] + "\n"})
    git(repo, "checkout", "-q", "main")
    _commit(repo, "Abandoned", {"ABANDONED.md": LEAK_MARKERS["reflog"] + "\n"})
    git(repo, "reset", "-q", "--hard", "HEAD~1")  # only the reflog reaches it now
    _write(repo, {"README.md": LEAK_MARKERS["stash"] + "\n"})
    git(repo, "stash", "push", "-q", "-m", "wip")
    upstream = root / "upstream"
    git(root, "clone", "-q", str(repo), str(upstream))
    _commit(upstream, "Upstream only", {"UPSTREAM.md": LEAK_MARKERS["remote"] + "\n"})
    git(repo, "remote", "add", "origin", str(upstream))
    git(repo, "fetch", "-q", "origin")
    bundle = root / "minicalc.bundle"
    git(repo, "bundle", "create", "-q", str(bundle), "--all")
    row = {
        "instance_id": "minicalc__minicalc-1", "repo": "minicalc/minicalc",
        "base_commit": base, "problem_statement": PROBLEM, "patch": patch,
        "test_patch": test_patch, "FAIL_TO_PASS": F2P, "PASS_TO_PASS": P2P,
        "version": "0.1", "environment_setup_commit": base, "created_at": "2026-11-25",
    }
    return Project(repo, bundle, base, fix, row)


CALC_BUGGY = """from toolz import frequencies


def most_common(items):
    \"\"\"The item seen most often.\"\"\"
    counts = frequencies(items)
    return min(counts, key=counts.get)


def distinct(items):
    return len(frequencies(items))
"""
CALC_TESTS = """from calc import distinct, most_common


def test_most_common():
    assert most_common("abracadabra") == "a"


def test_distinct():
    assert distinct("abracadabra") == 5
"""
INSTALL_TOOLZ = ("tar -xzf /opd-cache/toolz-1.2.0.tar.gz -C /tmp && "
                 "cp -r /tmp/toolz-1.2.0/toolz /usr/local/lib/python3.11/dist-packages/")


def toolz_task(setup: tuple[str, ...]) -> Any:
    """A synthesized repository task whose code imports toolz, which the sandbox image lacks:
    its setup step installs it offline from the pinned sdist setup cached."""
    from opd_gym.tasks import RepoInfo, Task

    return Task(id="calc-most-common", prompt="most_common returns the rarest item.",
                files={"calc.py": CALC_BUGGY}, tests={"tests/test_calc.py": CALC_TESTS},
                repo=RepoInfo(name="calc", fail_to_pass=["tests/test_calc.py::test_most_common"],
                              pass_to_pass=["tests/test_calc.py::test_distinct"],
                              setup=setup, synthesized=True))
