"""The pinned library sdists: verified by sha256, split into suite and workspace, offline."""

from __future__ import annotations

import shutil
from pathlib import PurePosixPath

import pytest

from opd_gym.errors import DatasetError
from opd_gym.tasks.libraries import PINNED, library, sdist_cache, sdist_path, unpack
from opd_gym.tasks.pytest_config import read_pytest_config


@pytest.mark.parametrize("name", [lib.name for lib in PINNED])
def test_unpack_splits_the_suite_from_the_code(name):
    lib = library(name)
    source = unpack(lib)
    assert source.ini.startswith("[pytest]\n")
    if lib.ini is not None:  # curated: the given ini, with the suite's testpaths
        assert source.ini == lib.ini and "testpaths" in source.ini
    else:  # the project's own settings, from whichever file holds them
        assert source.ini == read_pytest_config({**source.workspace, **{
            p: t.encode() for p, t in source.tests.items()}}).ini
    test_modules = [p for p in source.tests if PurePosixPath(p).name.startswith("test_")]
    assert test_modules, "the sdist ships its tests"
    assert not set(source.tests) & set(source.workspace)
    for path, data in source.workspace.items():  # of the suite, only binary data is left
        if any(path == d or path.startswith(d + "/") for d in lib.test_dirs):  # in the code
            with pytest.raises(UnicodeDecodeError):
                data.decode("utf-8")
    assert any(p.endswith(".py") for p in source.workspace), "the code under test is there"


def test_a_tampered_sdist_is_refused(tmp_path):
    lib = library("inflection")
    good = sdist_path(lib)
    shutil.copy(good, tmp_path / good.name)
    assert sdist_path(lib, tmp_path) == tmp_path / good.name
    (tmp_path / good.name).write_bytes(good.read_bytes() + b"\0")
    with pytest.raises(DatasetError, match="not in .*setup.sh"):
        unpack(lib, tmp_path)


def test_unknown_library_names_the_known_ones():
    with pytest.raises(DatasetError, match="known libraries are toolz"):
        library("left-pad")


def test_cache_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("OPD_GYM_SDISTS", str(tmp_path))
    assert sdist_cache() == tmp_path
    monkeypatch.delenv("OPD_GYM_SDISTS")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert sdist_cache() == tmp_path / "opd_gym" / "sdists"
