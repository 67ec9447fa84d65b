"""Load SWE-bench-style instances (SWE-bench, SWE-Gym, SWE-rebench, SWE-smith) as repository Tasks.

A row names a repository, a base commit, a problem statement, the gold `patch`, the hidden
`test_patch` and its FAIL_TO_PASS / PASS_TO_PASS test ids (JSON-encoded lists in SWE-bench,
plain lists elsewhere). Hubs are not needed: the caller gives a local checkout or git bundle
per repository name (`repos`), and every row is read from it with the git CLI:

- `files`: the text files of the tree at the base commit (what the agent starts with);
- `tests`: after `test_patch`, the files it changes plus the files holding the listed tests
  and the `conftest.py` files above them (the pristine hidden tests);
- `solution`: the files `patch` changes, after it;
- `pytest_ini`: the project's pytest settings; `repo`: a RepoInfo whose history is the
  checkout or bundle, so the workspace's `.git` holds the base commit's ancestry only.

Each repository may carry its own way of testing, as SWE-bench's per-repository specs do: an
entry of `repos` may be `{"path": history, "setup": [...], "test_cmd": "pytest -rA ...",
"pytest_options": [...], "image": ...}` instead of a bare path, and a row may give the same
keys itself (a row's own keys win). `setup` builds the environment image offline;
`test_cmd` (a pytest command) or `pytest_options` add to the project's `addopts`.
"""

from __future__ import annotations

import json
import os
import tarfile
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from opd_gym.errors import ConfigError, DatasetError
from opd_gym.records.task import RepoInfo, Task
from opd_gym.tasks.pytest_config import (
    command_options,
    options_only,
    read_pytest_config,
    with_addopts,
)
from opd_gym.tasks.repo import (
    FIXED_DATE,
    GitError,
    _is_bundle,
    _unpacked_repository,
    archive_tree,
    git,
    text_files,
)
from opd_gym.tasks.rows import TaskList, _file_rows, _labelled

REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement", "patch", "FAIL_TO_PASS")
IMAGE_FIELDS = ("image_name", "docker_image", "image")  # SWE-smith, SWE-Next, others
# What a repository entry may say beside its path (and a row for itself): how it is tested.
SPEC_KEYS = ("setup", "test_cmd", "pytest_options", "image")
DEFAULT_TIMEOUT = 300.0
Rows = str | os.PathLike[str] | Iterable[Mapping[str, Any]]
# {"owner/name": a clone, bare repository, bundle or tarball}, or a folder holding them
# (an entry may be a mapping: {"path": history, "setup": ..., "test_cmd": ...}, see SPEC_KEYS)
Repos = Mapping[str, str | os.PathLike[str] | Mapping[str, Any]] | str | os.PathLike[str]


def is_swebench_row(row: Any) -> bool:
    """Whether a row is in the SWE-bench instance schema (instance_id and FAIL_TO_PASS)."""
    return isinstance(row, Mapping) and "instance_id" in row and "FAIL_TO_PASS" in row


def load_swebench(source: Rows, repos: Repos, *,
                  skip_invalid: bool = False, ignore_images: bool = False,
                  timeout: float = DEFAULT_TIMEOUT) -> TaskList:
    """Repository Tasks from SWE-bench-style rows (a .jsonl/.json file or an iterable).

    `repos` maps each row's `repo` ("owner/name") to a local checkout, git bundle or tarball
    holding its base commits, or is a folder holding them (`owner/name`, `owner__name` or
    `name`, as is or with .git, .bundle, .tar.gz, .tgz or .tar). A bad row raises
    DatasetError naming the row (1-based; "line N" in a JSONL file) and the field, or with
    `skip_invalid` is noted in `.skipped`. Rows naming an environment image (`image_name`...)
    keep it in `RepoInfo.image`: episodes run in that image, which must be on this machine;
    `ignore_images=True` drops it (you vouch that the sandbox image runs the tests). An
    optional `setup` field (a command or a list) holds steps that build the task's image
    offline on the sandbox image (or on the named image), see `opd_gym.sandboxes.env_image`.
    """
    label_source = ""
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"no SWE-bench instance file {str(source)!r}")
        rows: Any = _file_rows(path)
        label_source = path.name
    else:
        rows = source
    out, seen = TaskList(), set()
    with _Readers(repos) as readers:
        for where, row in _labelled(rows):
            label = f"{label_source + ': ' if label_source else ''}{where}"
            try:
                if isinstance(row, Exception):
                    raise row
                if not isinstance(row, Mapping):
                    raise DatasetError(f"expected a mapping, got {type(row).__name__}")
                if isinstance(row.get("instance_id"), str):
                    label += f" (instance_id {row['instance_id']!r})"
                task = _task(row, readers, ignore_images=ignore_images, timeout=timeout)
                if task.id in seen:
                    raise DatasetError(f"duplicate instance_id {task.id!r}")
            except (ValueError, TypeError) as exc:
                message = f"{label}: {exc}"
                if not skip_invalid:
                    raise DatasetError(message) from exc
                out.skipped.append(message)
                continue
            seen.add(task.id)
            out.append(task)
    return out


def swebench_task(row: Mapping[str, Any], repos: Repos, *,
                  ignore_images: bool = False, timeout: float = DEFAULT_TIMEOUT) -> Task:
    """One SWE-bench-style row as a repository Task (see `load_swebench`)."""
    with _Readers(repos) as readers:
        return _task(row, readers, ignore_images=ignore_images, timeout=timeout)


# -- one row --------------------------------------------------------------------------------
def _text(row: Mapping[str, Any], name: str, required: bool = True) -> str:
    value = row.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise DatasetError(f"field {name!r} must be a non-empty string")
    return value


def _ids(row: Mapping[str, Any], name: str) -> tuple[str, ...]:
    """A test-id list, plain or JSON-encoded; each must be a pytest node id of a .py file."""
    value = row.get(name)
    if value is None and name == "PASS_TO_PASS":
        return ()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise DatasetError(f"field {name!r} is a string but not a JSON list") from None
    if not isinstance(value, list | tuple) or not all(isinstance(i, str) for i in value):
        raise DatasetError(f"field {name!r} must be a list of test ids")
    for test_id in value:
        path, sep, rest = test_id.partition("::")
        if not sep or not rest or not path.endswith(".py") or path.startswith("/"):
            raise DatasetError(f"field {name!r}: {test_id!r} is not a pytest node id "
                               "('path/to/test_file.py::test_name'); only pytest suites run")
    return tuple(value)


def _task(row: Mapping[str, Any], readers: _Readers, *, ignore_images: bool,
          timeout: float) -> Task:
    for name in REQUIRED:
        if name not in row or row[name] in (None, ""):
            hint = (" (SWE-smith rows: add the commit of the instance's buggy branch)"
                    if name == "base_commit" else "")
            raise DatasetError(f"field {name!r} is missing{hint}")
    instance_id, repo_name = _text(row, "instance_id"), _text(row, "repo")
    base = _text(row, "base_commit")
    statement, patch = _text(row, "problem_statement"), _text(row, "patch")
    test_patch = _text(row, "test_patch", required=False)
    f2p, p2p = _ids(row, "FAIL_TO_PASS"), _ids(row, "PASS_TO_PASS")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise DatasetError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if not f2p:
        raise DatasetError("field 'FAIL_TO_PASS' is empty: nothing would earn the grade")
    source, reader = readers.get(repo_name)
    spec = readers.spec(repo_name)
    image = None
    for name in IMAGE_FIELDS:
        if isinstance(row.get(name), str) and row[name].strip() and not ignore_images:
            image = row[name].strip()
    if image is None and spec.get("image") and not ignore_images:
        image = str(spec["image"]).strip()
    setup = row["setup"] if "setup" in row else spec.get("setup", ())
    if isinstance(setup, str):
        setup = [setup] if setup.strip() else []
    if not isinstance(setup, list | tuple) or not all(isinstance(s, str) and s.strip()
                                                     for s in setup):
        raise DatasetError("field 'setup': give shell commands (a string or a list of them) "
                           "that build the environment offline")
    options = _test_options(row if {"test_cmd", "pytest_options"} & set(row) else spec)
    try:
        tree = archive_tree(reader, base)
    except GitError as exc:
        raise DatasetError(f"field 'base_commit': {base!r} cannot be read from {repo_name!r} "
                           f"in {str(source)!r} ({exc})") from None
    base_text, binary = text_files(tree)
    tested, test_changes = _apply(tree, test_patch, "test_patch") if test_patch else (tree, {})
    fixed, gold_changes = _apply(tree, patch, "patch")
    deleted = sorted(path for path, data in gold_changes.items() if data is None)
    if deleted:
        raise DatasetError(f"field 'patch' deletes {deleted[:3]}, which a task's solution "
                           "cannot express")
    tests = _hidden_tests(tested, test_changes, (*f2p, *p2p))
    solution = {path: _decode(data, "patch", path) for path, data in gold_changes.items()
                if data is not None}
    tested_text = {**base_text, **tests}
    try:
        config = with_addopts(read_pytest_config(tested_text), options)
        ini = config.ini if config.source else None
    except DatasetError as exc:
        raise DatasetError(f"the project's pytest settings: {exc}") from None
    prompt = (f"{statement.rstrip()}\n\n(The repository {repo_name} is checked out in the "
              f"workspace at commit {base[:12]}, with its git history up to that commit.)")
    info = RepoInfo(name=repo_name, fail_to_pass=f2p, pass_to_pass=p2p, base_commit=base,
                    history=str(source), image=image, setup=tuple(setup))
    metadata = {"source": "swebench", "repo": repo_name, "base_commit": base,
                "binary_files": len(binary)}
    for name in ("version", "environment_setup_commit", "created_at"):
        if isinstance(row.get(name), str | int | float):
            metadata[name] = row[name]
    return Task(id=instance_id, prompt=prompt, files=base_text, tests=tests, solution=solution,
                timeout=timeout, difficulty="hard", tags=("repository", "swebench"),
                metadata=metadata, pytest_ini=ini, repo=info,
                assets={path: tree[path] for path in binary})  # calibration runs hold them too


def _test_options(where: Mapping[str, Any]) -> list[str]:
    """The pytest options a row or repository entry gives: `test_cmd` (a pytest command) and
    `pytest_options` (a string or a list of words), test paths left out."""
    options: list[str] = []
    command = where.get("test_cmd")
    if command is not None:
        if not isinstance(command, str | list) or not command:
            raise DatasetError("field 'test_cmd' must be a pytest command (a string)")
        options += command_options(command, "field 'test_cmd'")
    extra = where.get("pytest_options")
    if extra is not None:
        if isinstance(extra, str):
            import shlex

            try:
                extra = shlex.split(extra)
            except ValueError as exc:
                raise DatasetError(f"field 'pytest_options': {exc}") from None
        if not isinstance(extra, list | tuple) or not all(isinstance(w, str) for w in extra):
            raise DatasetError("field 'pytest_options' must be a string or a list of words")
        options += options_only(list(extra), "field 'pytest_options'")
    return options


def _decode(data: bytes, field: str, path: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = "\0"
    if "\0" in text:
        raise DatasetError(f"field {field!r}: {path!r} is not UTF-8 text")
    return text


def _apply(tree: Mapping[str, bytes], patch: str, field: str
           ) -> tuple[dict[str, bytes], dict[str, bytes | None]]:
    """`patch` applied to `tree`: the whole new tree, and path -> new bytes (None: deleted)."""
    with tempfile.TemporaryDirectory(prefix="opd-swe-") as tmp:
        root = Path(tmp)
        for path, data in tree.items():
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        git(["init", "-q"], root)
        git(["add", "-A", "-f"], root)
        dated = {"GIT_AUTHOR_DATE": FIXED_DATE, "GIT_COMMITTER_DATE": FIXED_DATE}
        git(["commit", "-q", "--allow-empty", "--no-verify", "-m", "base"], root, env=dated)
        text = patch if patch.endswith("\n") else patch + "\n"
        try:
            git(["apply", "--index", "--whitespace=nowarn", "-"], root, input=text.encode())
        except GitError as exc:
            raise DatasetError(f"field {field!r} does not apply at base_commit: {exc}") from None
        listing = git(["diff", "--cached", "--name-status", "--no-renames", "-z", "HEAD"], root)
        parts = [p.decode("utf-8", "surrogateescape") for p in listing.split(b"\0") if p]
        changes: dict[str, bytes | None] = {}
        for status, path in zip(parts[::2], parts[1::2], strict=True):
            changes[path] = None if status == "D" else (root / path).read_bytes()
    new = {p: d for p, d in tree.items() if p not in changes}
    new.update({p: d for p, d in changes.items() if d is not None})
    return new, changes


def _hidden_tests(tree: Mapping[str, bytes], changes: Mapping[str, bytes | None],
                  ids: Iterable[str]) -> dict[str, str]:
    """The test patch's files, the files holding the ids, and the conftest.py files above."""
    wanted = {path for path, data in changes.items() if data is not None}
    for test_id in ids:
        path = test_id.partition("::")[0]
        if path not in tree:
            field = "FAIL_TO_PASS/PASS_TO_PASS"
            raise DatasetError(f"field {field!r}: {test_id!r} names no file of the repository "
                               "at base_commit with test_patch applied")
        wanted.add(path)
    for path in list(wanted):
        for parent in [*PurePosixPath(path).parents][::-1]:
            conftest = "conftest.py" if str(parent) == "." else f"{parent}/conftest.py"
            if conftest in tree:
                wanted.add(conftest)
    return {path: _decode(tree[path], "test_patch", path) for path in sorted(wanted)}


# How a repository named "owner/name" may be found in a folder given as `repos`.
FOLDER_NAMES = ("{owner}/{name}", "{owner}__{name}", "{name}")
FOLDER_SUFFIXES = ("", ".git", ".bundle", ".tar.gz", ".tgz", ".tar")


def find_in_folder(folder: Path, repo_name: str) -> Path | None:
    """The history of `repo_name` ("owner/name") in `folder`: the first of owner/name,
    owner__name and name that is a repository (a clone or bare) or a file (a bundle or a
    tarball), as is or with .git, .bundle, .tar.gz, .tgz or .tar."""
    owner, _, name = repo_name.rpartition("/")
    for pattern in FOLDER_NAMES if owner else ("{name}",):
        stem = pattern.format(owner=owner, name=name)
        for suffix in FOLDER_SUFFIXES:
            candidate = folder / f"{stem}{suffix}"
            if candidate.is_file() or (candidate / ".git").exists() \
                    or (candidate / "HEAD").is_file():
                return candidate
    return None


def _entry(name: str, entry: Any) -> tuple[str | os.PathLike[str], Mapping[str, Any]]:
    """(history path, spec) of one `repos` entry: a path, or a mapping with `path` and any of
    SPEC_KEYS; DatasetError naming the entry for anything else."""
    if isinstance(entry, str | os.PathLike):
        return entry, {}
    if not isinstance(entry, Mapping) or not isinstance(entry.get("path"), str | os.PathLike):
        raise DatasetError(f"repos[{name!r}]: give the repository's path, or a mapping with "
                           f"'path' and any of {', '.join(SPEC_KEYS)}")
    unknown = sorted(set(entry) - {"path", *SPEC_KEYS})
    if unknown:
        raise DatasetError(f"repos[{name!r}]: unknown key(s) {', '.join(unknown)} (known: "
                           f"path, {', '.join(SPEC_KEYS)})")
    spec = {k: v for k, v in entry.items() if k != "path"}
    _test_options(spec)  # refused here, once, rather than on every row
    return entry["path"], spec


class _Readers:
    """A readable repository per repo name: a checkout as is, a bundle cloned once (temp), a
    tarball unpacked once (temp). `repos` maps names to histories, or is a folder of them."""

    def __init__(self, repos: Repos) -> None:
        self.folder: Path | None = None
        self.repos: dict[str, str | os.PathLike[str]] = {}
        self.specs: dict[str, Mapping[str, Any]] = {}
        if isinstance(repos, str | os.PathLike):
            self.folder = Path(repos)
            if not self.folder.is_dir():
                raise DatasetError(f"repos: {str(repos)!r} is not a folder (give a folder "
                                   "holding one repository per name, or a mapping)")
        elif isinstance(repos, Mapping):
            for name, entry in repos.items():
                self.repos[name], self.specs[name] = _entry(name, entry)
        else:
            raise DatasetError(f"repos must map 'owner/name' to a repository path, or be a "
                               f"folder of them; got {type(repos).__name__}")
        self._clones: dict[str, tuple[Path, Path]] = {}
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def spec(self, name: str) -> Mapping[str, Any]:
        """What the repository's entry says beside its path (SPEC_KEYS), or nothing."""
        return self.specs.get(name, {})

    def _scratch(self) -> Path:
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="opd-swe-bundles-")
        return Path(self._tmp.name) / str(len(self._clones))

    def __enter__(self) -> _Readers:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()

    def get(self, name: str) -> tuple[Path, Path]:
        """(the history to record, a repository to read it from)."""
        if name in self._clones:
            return self._clones[name]
        if self.folder is not None:
            found = find_in_folder(self.folder, name)
            if found is None:
                owner, _, short = name.rpartition("/")
                tried = "/".join(p.format(owner=owner, name=short) for p in FOLDER_NAMES)
                raise DatasetError(f"field 'repo': no repository for {name!r} in "
                                   f"{str(self.folder)!r} (looked for {tried}, as a clone, "
                                   "bare repository, .bundle or .tar.gz); put it there or "
                                   f"name it: repos={{{name!r}: path}} / --repo {name}=PATH")
            source = found.resolve()
        elif name not in self.repos:
            known = ", ".join(sorted(self.repos)[:10]) or "none"
            raise DatasetError(f"field 'repo': no local checkout or bundle given for {name!r} "
                               f"(repos= names: {known}); add repos={{{name!r}: path}} "
                               f"(--repo {name}=PATH, or --repos FOLDER)")
        else:
            source = Path(self.repos[name]).resolve()
        if source.is_file() and not _is_bundle(source) and tarfile.is_tarfile(source):
            reader = self._scratch()  # a tarball of a clone or bare repository: unpack once
            try:
                reader = _unpacked_repository(source, reader, name)
            except ConfigError as exc:
                raise DatasetError(f"field 'repo': {exc}") from None
        elif source.is_file():  # a bundle: clone it once for reading
            reader = self._scratch()
            try:
                git(["clone", "-q", "--bare", str(source), str(reader)])
            except GitError as exc:
                raise DatasetError(f"field 'repo': {str(source)!r} is not a git bundle: "
                                   f"{exc}") from None
        elif (source / ".git").exists() or (source / "HEAD").is_file():
            reader = source
        else:
            raise DatasetError(f"field 'repo': {str(source)!r} (for {name!r}) is neither a git "
                               "repository nor a bundle")
        self._clones[name] = (source, reader)
        return source, reader


__all__ = ["DEFAULT_TIMEOUT", "find_in_folder", "is_swebench_row", "load_swebench",
           "swebench_task"]
