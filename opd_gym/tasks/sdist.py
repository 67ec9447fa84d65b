"""Read a source distribution (.tar.gz or .zip) into a project tree: relative path -> bytes.

The top folder every sdist wraps its files in is removed; links, devices and members that climb
out of the tree are left out. Its name and version come from the file name, as pip names them.
"""

from __future__ import annotations

import hashlib
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from opd_gym.errors import DatasetError

SUFFIXES = (".tar.gz", ".tgz", ".zip")


@dataclass(frozen=True)
class Sdist:
    """An unpacked sdist: its project's name and version, files and the archive's sha256."""

    name: str
    version: str
    files: dict[str, bytes]
    sha256: str
    path: Path


def _relative(member: str) -> str | None:
    parts = PurePosixPath(member).parts
    if len(parts) < 2 or ".." in parts or parts[0] in ("/", ""):
        return None
    return PurePosixPath(*parts[1:]).as_posix()


def read_sdist(path: Path | str) -> Sdist:
    """The files of the sdist at `path`; DatasetError when it is not a readable archive."""
    path = Path(path)
    files: dict[str, bytes] = {}
    try:
        if path.name.endswith(".zip"):
            with zipfile.ZipFile(path) as archive:
                for info in archive.infolist():
                    rel = _relative(info.filename)
                    if rel is not None and not info.is_dir():
                        files[rel] = archive.read(info)
        else:
            with tarfile.open(path, "r:*") as tar:
                for member in tar.getmembers():
                    rel = _relative(member.name)
                    handle = tar.extractfile(member) if member.isfile() else None
                    if rel is not None and handle is not None:
                        files[rel] = handle.read()
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
        reason = str(exc).splitlines()[0].rstrip(":") if str(exc) else type(exc).__name__
        raise DatasetError(f"{path.name}: not a readable sdist ({reason})") from None
    if not files:
        raise DatasetError(f"{path.name}: the archive holds no project files")
    stem = path.name
    for suffix in SUFFIXES:
        stem = stem.removesuffix(suffix)
    name, _, version = stem.rpartition("-")
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return Sdist(name or stem, version or "unknown", files, sha, path)


__all__ = ["SUFFIXES", "Sdist", "read_sdist"]
