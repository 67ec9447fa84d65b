"""A repository task's workspace: its tree plus a `.git` that holds no way to the fix.

The agent of a repository task works in a git repository (`git status`, `diff`, `log`, `commit`
work), and that repository must never lead to the answer. Built on the host with the git CLI:

- synthesized tasks (`RepoInfo.history` None): one commit of the base tree, fixed author and
  date, one branch, no reflog: no commit, diff, stash or object shows a bug being introduced;
- real tasks (`history`: a git bundle or repository path, `base_commit`): the ancestry of the
  base commit only, fetched into a fresh repository by one ref, so later commits, other
  branches, tags, stashes, reflogs, dangling objects and remotes of the source never enter it.

`workspace_files(task)` returns path -> bytes (the tree, then `.git/...`) for one bulk
`sandbox.write_files`, cached per task content so a reset costs a dictionary lookup.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path

from opd_gym.errors import ConfigError, DatasetError
from opd_gym.records.task import RepoInfo, Task
from opd_gym.sandboxes.env_image import EnvironmentSpec
from opd_gym.sandboxes.image import DEFAULT_IMAGE
from opd_gym.tasks.pytest_config import read_pytest_config

AUTHOR = ("opd-gym", "opd-gym@localhost")
FIXED_DATE = "2000-01-01T00:00:00+0000"  # synthesized commits: no date tells anything
BRANCH = "main"
CACHE_BYTES = 512 << 20  # workspaces kept in memory (least recently used dropped first)
# What git on the host may not read from this machine's configs (hooks, signing, aliases...).
_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_AUTHOR_NAME": AUTHOR[0],
    "GIT_AUTHOR_EMAIL": AUTHOR[1],
    "GIT_COMMITTER_NAME": AUTHOR[0],
    "GIT_COMMITTER_EMAIL": AUTHOR[1],
    "LC_ALL": "C",
}
# .git files a fresh repository does not need and that would only tell a story.
# (`shallow` stays: a shallow source's grafts are what keep the copy consistent.)
_DROPPED_GIT = ("logs", "hooks", "FETCH_HEAD", "ORIG_HEAD", "description", "info/exclude",
                "COMMIT_EDITMSG")


class GitError(ConfigError):
    """A git command on the host failed (its words are in the message)."""


def git(args: Sequence[str], cwd: str | os.PathLike[str] | None = None, *,
        input: bytes | None = None, env: Mapping[str, str] | None = None,
        ok: Sequence[int] = ()) -> bytes:
    """Run the git CLI with a clean configuration; its stdout, or GitError naming the command
    (exit codes in `ok` besides 0 are answers, not failures)."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}  # GIT_DIR...
    full_env = {**inherited, **_GIT_ENV, **(env or {})}
    try:
        done = subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True,
                              env=full_env, check=False, timeout=600)
    except FileNotFoundError:
        raise GitError("repository tasks need the git command-line tool on this host") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {' '.join(args[:3])} did not finish within 600 s") from None
    if done.returncode != 0 and done.returncode not in ok:
        words = done.stderr.decode("utf-8", "replace").strip()[-800:]
        raise GitError(f"git {' '.join(args[:3])} failed (exit {done.returncode}): {words}")
    return done.stdout


def environment(task: Task, cache_dir: Path | None = None) -> str | EnvironmentSpec | None:
    """Where `task` runs: None for the sandbox image, an existing image's name, or the
    `EnvironmentSpec` of an image to build (its setup steps on the sandbox image, or on the
    task's `image` when it names both). `cache_dir` is the setup cache the steps install from
    (default: the pinned sdists `scripts/setup.sh` keeps)."""
    info = task.repo
    if info is None or (not info.image and not info.setup):
        return None
    if not info.setup:
        return info.image
    if cache_dir is None:
        from opd_gym.tasks.libraries import sdist_cache

        cache_dir = sdist_cache()
    return EnvironmentSpec(setup=info.setup, base=info.image or DEFAULT_IMAGE,
                           cache_dir=cache_dir)


def workspace_files(task: Task) -> dict[str, bytes]:
    """The repository task's workspace: its tree and `.git`, path -> bytes (cached).

    The tree is `task.files` and the binary `task.assets` (for a real history, plus the base
    tree's files that are not text, so `git status` starts clean); `.git` is built as the
    module docstring says.
    """
    info = task.repo
    if info is None:
        raise ConfigError(f"task {task.id!r} is not a repository task")
    key = _cache_key(task, info)
    with _LOCK:
        building = _BUILDING.setdefault(key, threading.Lock())
    with building:  # episodes of one task resetting at once build it once
        with _LOCK:
            if key in _CACHE:
                _CACHE.move_to_end(key)
                return dict(_CACHE[key])
        files = _build(task, info)
        _remember(key, files)
    return dict(files)


def _remember(key: str, files: dict[str, bytes]) -> None:
    global _CACHED_BYTES
    with _LOCK:
        _CACHE[key] = files
        _CACHED_BYTES += sum(len(v) for v in files.values())
        while _CACHED_BYTES > CACHE_BYTES and len(_CACHE) > 1:
            old, dropped = _CACHE.popitem(last=False)
            _BUILDING.pop(old, None)
            _CACHED_BYTES -= sum(len(v) for v in dropped.values())


_LOCK = threading.Lock()
_CACHE: OrderedDict[str, dict[str, bytes]] = OrderedDict()
_BUILDING: dict[str, threading.Lock] = {}
_CACHED_BYTES = 0


def _cache_key(task: Task, info: RepoInfo) -> str:
    source = ""
    if info.history is not None:
        path = Path(info.history)
        try:
            stat = path.stat()
        except OSError as exc:
            raise ConfigError(f"task {task.id!r}: its history {info.history!r} cannot be read "
                              f"({exc.strerror})") from None
        # a commit id fixes its ancestry; a bundle file may be replaced, so its stat counts
        source = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}" if path.is_file() \
            else str(path.resolve())
    assets = sorted((p, hashlib.sha256(d).hexdigest()) for p, d in task.assets.items())
    blob = json.dumps([sorted(task.files.items()), assets, source, info.base_commit],
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _build(task: Task, info: RepoInfo) -> dict[str, bytes]:
    with tempfile.TemporaryDirectory(prefix="opd-repo-") as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        git(["init", "-q", "-b", BRANCH], work)
        if info.history is None:  # the files, and the binary ones beside them (assets)
            tree = {**task.assets, **{path: text.encode() for path, text in task.files.items()}}
            _commit_tree(work, tree)
        else:
            tree = _fetch_base(work, Path(tmp) / "staging", info, task.id)
            tree.update({path: text.encode() for path, text in task.files.items()})
        _tidy(work)
        files = dict(tree)
        files.update(_git_dir_files(work / ".git"))
        return files


def _commit_tree(work: Path, tree: Mapping[str, bytes]) -> None:
    """One commit holding `tree`, dated FIXED_DATE, on BRANCH."""
    for path, data in tree.items():
        target = work / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    git(["add", "-A", "-f", "--", "."], work)  # exactly the tree, .gitignore or not
    dated = {"GIT_AUTHOR_DATE": FIXED_DATE, "GIT_COMMITTER_DATE": FIXED_DATE}
    git(["commit", "-q", "--allow-empty", "--no-verify", "-m", "Base tree"], work, env=dated)


def _fetch_base(work: Path, staging: Path, info: RepoInfo, task_id: str) -> dict[str, bytes]:
    """Fetch the ancestry of `info.base_commit` from the history into `work` (index at the
    base), and return the base tree's regular files (path -> bytes; symlinks and submodules
    are not carried)."""
    source = Path(info.history or "")
    if not source.exists():
        raise ConfigError(f"task {task_id!r}: its history {str(source)!r} does not exist")
    commit = info.base_commit
    if not commit:
        raise DatasetError(f"task {task_id!r}: a history needs its base_commit")
    if source.is_file() and not _is_bundle(source) and tarfile.is_tarfile(source):
        source = _unpacked_repository(source, staging.parent / "unpacked", task_id)
    # A throwaway clone of the source (a bundle or a repository) names the base commit by one
    # ref; the fresh repository fetches that ref alone, so only its ancestry travels.
    git(["clone", "-q", "--bare", str(source.resolve()), str(staging)])
    try:
        full = git(["rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"],
                   staging).decode().strip()
    except GitError:
        raise ConfigError(f"task {task_id!r}: base commit {commit!r} is not in its history "
                          f"{str(source)!r}") from None
    git(["update-ref", "refs/opd/base", full], staging)
    git(["fetch", "-q", "--no-tags", "--update-head-ok", "--update-shallow", str(staging),
         f"refs/opd/base:refs/heads/{BRANCH}"], work)
    fetched = git(["rev-parse", "--verify", "--quiet", f"refs/heads/{BRANCH}"], work, ok=(1,))
    if fetched.decode().strip() != full:
        raise GitError(f"task {task_id!r}: fetching base commit {commit!r} from "
                       f"{str(source)!r} gave no branch")
    git(["read-tree", BRANCH], work)  # the index; the tree itself goes to the sandbox only
    return archive_tree(work, BRANCH)


def _is_bundle(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(16).startswith((b"# v2 git bundle", b"# v3 git bundle"))


def _unpacked_repository(archive: Path, target: Path, task_id: str) -> Path:
    """The git repository a tarball holds (a clone with `.git`, or a bare repository, at its
    top or in its single top folder), unpacked under `target` with tar's `data` filter (no
    absolute paths, links out or device files)."""
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(target, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise ConfigError(f"task {task_id!r}: its history {str(archive)!r} cannot be "
                          f"unpacked ({exc})") from None
    entries = [p for p in target.iterdir()]
    for root in [target, *(entries if len(entries) == 1 and entries[0].is_dir() else [])]:
        if (root / ".git").exists() or ((root / "HEAD").is_file() and (root / "objects").is_dir()):
            return root
    raise ConfigError(f"task {task_id!r}: its history {str(archive)!r} holds no git repository "
                      "(a clone with .git, or a bare repository, at its top or in one folder)")


def _tidy(work: Path) -> None:
    """Leave one branch, its objects, an index, and a config that lets the agent commit."""
    for key, value in (("user.name", AUTHOR[0]), ("user.email", AUTHOR[1]),
                       ("core.fileMode", "false"), ("core.logAllRefUpdates", "false"),
                       ("gc.auto", "0")):
        git(["config", key, value], work)
    git(["reflog", "expire", "--expire=now", "--all"], work)
    git(["repack", "-a", "-d", "-q", "-n"], work)
    git(["prune", "--expire=now"], work)
    refs = git(["for-each-ref", "--format=%(refname)"], work).decode().split()
    if refs != [f"refs/heads/{BRANCH}"]:
        raise GitError(f"the workspace repository holds unexpected refs: {refs}")
    gitdir = work / ".git"
    for name in _DROPPED_GIT:
        target = gitdir / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()


def _git_dir_files(gitdir: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for path in sorted(gitdir.rglob("*")):
        if path.is_file() and not path.is_symlink():
            files[f".git/{path.relative_to(gitdir).as_posix()}"] = path.read_bytes()
    return files


# -- reading a project ----------------------------------------------------------------------
def archive_tree(repository: str | os.PathLike[str], commit: str) -> dict[str, bytes]:
    """The regular files of `commit`'s tree in a repository, path -> bytes, exactly as stored
    (unlike `git archive`, no export-ignore or export-subst attribute changes them)."""
    listing = git(["ls-tree", "-r", "-z", "--full-tree", f"{commit}^{{tree}}"], repository)
    entries: list[tuple[str, str]] = []
    for entry in listing.split(b"\0"):
        meta, _, name = entry.partition(b"\t")
        fields = meta.split()
        if len(fields) == 3 and fields[0] in (b"100644", b"100755") and fields[1] == b"blob":
            entries.append((name.decode("utf-8", "surrogateescape"), fields[2].decode()))
    if not entries:
        return {}
    batch = git(["cat-file", "--batch"], repository,
                input="".join(f"{sha}\n" for _, sha in entries).encode())
    files: dict[str, bytes] = {}
    offset = 0
    for path, sha in entries:
        header_end = batch.index(b"\n", offset)
        got_sha, kind, size = batch[offset:header_end].decode().split()
        if got_sha != sha or kind != "blob":
            raise GitError(f"git cat-file answered {got_sha} {kind} for {path!r}")
        start = header_end + 1
        files[path] = batch[start:start + int(size)]
        offset = start + int(size) + 1  # the content is followed by a newline
    return files


def text_files(tree: Mapping[str, bytes]) -> tuple[dict[str, str], list[str]]:
    """The files that are UTF-8 text (what a Task holds) and the paths that are not."""
    text: dict[str, str] = {}
    binary: list[str] = []
    for path, data in tree.items():
        try:
            decoded = data.decode("utf-8")
        except UnicodeDecodeError:
            binary.append(path)
            continue
        if "\0" in decoded:
            binary.append(path)
        else:
            text[path] = decoded
    return text, sorted(binary)


def project_pytest_ini(files: Mapping[str, str]) -> str | None:
    """The project's pytest settings as `[pytest]` ini text, from whichever file pytest reads
    them (pytest.toml, pytest.ini, pyproject's [tool.pytest] or [tool.pytest.ini_options],
    tox.ini, setup.cfg: `opd_gym.tasks.pytest_config`); None when the project has none."""
    config = read_pytest_config(files)
    return config.ini if config.source else None


__all__ = [
    "AUTHOR",
    "FIXED_DATE",
    "GitError",
    "archive_tree",
    "environment",
    "git",
    "project_pytest_ini",
    "text_files",
    "workspace_files",
]
