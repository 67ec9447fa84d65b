"""A project a repository task is made from: a pinned library, an sdist or a local folder that
ships its pytest suite, read into workspace files (bytes), suite text and the ini it runs with.

Loading the `repo` suite and a synthesis manifest rebuilds each project from its `source`
record (`project_from_source`); task authoring (`opd_gym.authoring.synth`) mutates them.
"""

from __future__ import annotations

import hashlib
import re
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from opd_gym.errors import DatasetError
from opd_gym.tasks.libraries import PINNED, Library, unpack
from opd_gym.tasks.pytest_config import read_pytest_config, runs_uninstalled


@dataclass(frozen=True)
class Project:
    """A tree to mutate: workspace files (bytes), the pytest suite (text) and its ini.

    `source` says how to get the same tree again: {"kind": "library", "name": ...},
    {"kind": "sdist", "path": ..., "sha256": ...} or {"kind": "dir", "path": ...}.
    """

    name: str
    version: str
    workspace: Mapping[str, bytes]
    tests: Mapping[str, str]
    ini: str
    source: Mapping[str, str]

    def text_files(self) -> tuple[dict[str, str], list[str]]:
        """The workspace as text, and the paths left out of it because they are not UTF-8 text
        (binary files: a task carries them as its assets)."""
        text: dict[str, str] = {}
        binary: list[str] = []
        for path, data in sorted(self.workspace.items()):
            try:
                text[path] = data.decode("utf-8")
            except UnicodeDecodeError:
                binary.append(path)
        return text, binary


def project_from_library(lib: Library) -> Project:
    """A pinned library from the sdist cache (DatasetError says to run setup when missing)."""
    src = unpack(lib)
    ini = src.ini
    if lib.ini is None:  # the project's own settings, run uninstalled as check-suite runs them
        ini = runs_uninstalled(read_pytest_config({**src.workspace, **src.tests}),
                               src.workspace).ini
    return Project(lib.name, lib.version, src.workspace, src.tests, ini,
                   {"kind": "library", "name": lib.name})


_TEST_DIRS = ("tests", "test", "testing")


def _split_suite(name: str, files: Mapping[str, bytes],
                 ) -> tuple[dict[str, bytes], dict[str, str], tuple[str, ...]]:
    """Split a project's files into (workspace, suite text, test roots) by the usual layout."""
    roots = [d for d in _TEST_DIRS if any(p.startswith(d + "/") for p in files)]
    if not roots:
        roots = sorted(p for p in files if "/" not in p and re.fullmatch(r"test_.*\.py", p))
    if not roots:
        roots = sorted({str(PurePosixPath(p).parent) for p in files
                        if PurePosixPath(p).name.startswith("test_") and p.endswith(".py")
                        and PurePosixPath(p).parent.name in _TEST_DIRS})
    if not roots:
        raise DatasetError(f"{name}: no test suite found (a tests/ or test/ folder, or "
                           "test_*.py files at the top)")
    workspace: dict[str, bytes] = {}
    tests: dict[str, str] = {}
    for path, data in files.items():
        if path == "conftest.py" or any(path == r or path.startswith(r + "/") for r in roots):
            try:
                tests[path] = data.decode("utf-8")
            except UnicodeDecodeError:
                workspace[path] = data
        else:
            workspace[path] = data
    return workspace, tests, tuple(roots)


def _ini_for(files: Mapping[str, bytes], roots: Sequence[str]) -> str:
    """The project's own pytest.ini when it has one, else `testpaths` = the suite's roots."""
    own = files.get("pytest.ini")
    if own is not None:
        return own.decode("utf-8", "replace")
    return "[pytest]\ntestpaths = " + " ".join(roots) + "\n"


_SKIP = {".git", "__pycache__", ".pytest_cache", ".tox", ".venv", "venv", "build", "dist",
         ".mypy_cache", ".ruff_cache", "node_modules"}


def project_from_dir(root: Path) -> Project:
    """A local project folder (its files, minus VCS and build folders)."""
    files: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if _SKIP.intersection(rel.parts) or not path.is_file() or path.suffix == ".pyc":
            continue
        files[rel.as_posix()] = path.read_bytes()
    workspace, tests, roots = _split_suite(root.name, files)
    workspace.pop("pytest.ini", None)
    return Project(root.name, "local", workspace, tests, _ini_for(files, roots),
                   {"kind": "dir", "path": str(root.resolve())})


def project_from_sdist(path: Path) -> Project:
    """An sdist (.tar.gz) holding its test suite."""
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar.getmembers():
                parts = PurePosixPath(member.name).parts
                if not member.isfile() or len(parts) < 2 or ".." in parts:
                    continue
                handle = tar.extractfile(member)
                if handle is not None:
                    files[PurePosixPath(*parts[1:]).as_posix()] = handle.read()
    except (tarfile.TarError, OSError) as exc:
        raise DatasetError(f"{path.name}: not a readable sdist ({exc})") from None
    stem = path.name.removesuffix(".tar.gz")
    name, _, version = stem.rpartition("-")
    workspace, tests, roots = _split_suite(stem, files)
    workspace.pop("pytest.ini", None)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return Project(name or stem, version or "unknown", workspace, tests, _ini_for(files, roots),
                   {"kind": "sdist", "path": str(path.resolve()), "sha256": sha})


def resolve_project(source: str) -> Project:
    """An sdist path, a library name from libraries.py, or a local project folder."""
    for lib in PINNED:
        if lib.name == source:
            return project_from_library(lib)
    path = Path(source)
    if path.is_dir():
        return project_from_dir(path)
    if path.is_file() and path.name.endswith(".tar.gz"):
        return project_from_sdist(path)
    known = ", ".join(lib.name for lib in PINNED)
    raise DatasetError(f"{source!r} is neither an sdist (.tar.gz), a project folder, nor a "
                       f"known library ({known})")


def project_from_source(source: Mapping[str, str]) -> Project:
    """The project a manifest's `source` record names (checked against its hash if any)."""
    kind = source.get("kind")
    if kind == "library":
        for lib in PINNED:
            if lib.name == source.get("name"):
                return project_from_library(lib)
        raise DatasetError(f"unknown library {source.get('name')!r} in a manifest")
    if kind == "sdist":
        project = project_from_sdist(Path(source["path"]))
        if source.get("sha256") and project.source["sha256"] != source["sha256"]:
            raise DatasetError(f"{source['path']}: sha256 differs from the manifest's")
        return project
    if kind == "dir":
        if not Path(source["path"]).is_dir():
            raise DatasetError(f"the project folder {source['path']!r} does not exist")
        return project_from_dir(Path(source["path"]))
    raise DatasetError(f"unknown project source {dict(source)!r} in a manifest")
