"""Real libraries with their own test suites: pinned sdists, cached by setup, unpacked offline.

Each `Library` pins one sdist by version and sha256 and says which of its files are the test
suite (`test_dirs`, every file under them, `__init__.py` and helpers included) and how pytest
runs it (`ini`: the project's own pytest settings as ini text, minus options of plugins the
sandbox image does not carry, plus `testpaths` so plain pytest collects exactly the suite).
`scripts/setup.sh` downloads them (`python -m opd_gym.tasks.libraries`); afterwards `unpack`
works offline. The grading-fidelity test grades each unmodified library against its suite;
repository tasks reuse the same records.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import MappingProxyType

from opd_gym.errors import DatasetError


@dataclass(frozen=True)
class Library:
    """One pinned sdist and where its test suite lives inside it."""

    name: str
    version: str
    sha256: str
    test_dirs: tuple[str, ...]  # directories or single files, relative to the project root
    ini: str | None  # None: the project's own configuration, read and adapted by check-suite
    note: str = ""  # how `ini` differs from the project's own configuration, and why

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class LibrarySource:
    """An unpacked sdist split into the suite (`tests`, text) and the rest (`workspace`)."""

    library: Library
    workspace: Mapping[str, bytes]
    tests: Mapping[str, str]

    @property
    def ini(self) -> str:
        """The curated ini, else the project's own settings (any file pytest reads them from)."""
        if self.library.ini is not None:
            return self.library.ini
        from opd_gym.tasks.pytest_config import read_pytest_config

        return read_pytest_config({**self.workspace, **self.tests}).ini


LIBRARIES: tuple[Library, ...] = (
    Library(
        "toolz",
        "1.2.0",
        "9667a038e9d6ecba37995e26cb2f59ec6420b6ad8dd9677de59db9b956b08490",
        ("toolz/tests", "toolz/sandbox/tests"),
        "[pytest]\n"
        "minversion = 6.0\n"
        "testpaths = toolz\n"
        "xfail_strict = true\n"
        "addopts = --strict-config --strict-markers -ra\n"
        "log_cli_level = info\n"
        "filterwarnings =\n"
        "    error\n"
        "    ignore:The toolz.compatibility module is no longer needed:DeprecationWarning:\n",
        "pyproject's [tool.pytest.ini_options], verbatim",
    ),
    Library(
        "more-itertools",
        "11.2.1",
        "cbf08fd0af284dc69718b9b76a8e6203df624d70209ea511e4219d350c856f63",
        ("tests",),
        "[pytest]\n"
        "testpaths = tests\n"
        "addopts =\n"
        "    --deselect tests/test_recipes.py::PrimeFunctionTests::test_primes\n"
        "    --deselect tests/test_recipes.py::PrimeFunctionTests::test_nth_prime_approximate\n"
        "    --deselect tests/test_recipes.py::PolynomialFromRootsTests::test_large\n"
        "    --deselect tests/test_more.py::DiscreteFourierTransformTests::test_roundtrip\n"
        "    --deselect tests/test_more.py::TestConcurrentTee::test_concurrent_consumers\n"
        "    --deselect tests/test_more.py::TestSerialize::test_concurrent_calls\n"
        "    --deselect tests/test_more.py::ExtractTests::test_all_orderings\n"
        "    --deselect tests/test_more.py::TestRandomOrderedRange::test_lcg_mitigation\n",
        "no pytest configuration upstream (tox runs unittest); testpaths added; the 8 tests "
        "that take seconds each (primes, FFT round trips, thread races) deselected to keep "
        "the CI run short",
    ),
    Library(
        "parse",
        "1.22.4",
        "706d458feed5a81b02768d3156e8070baf6cee7d150a3a3c0cd43101a875c3b5",
        ("tests",),
        "[pytest]\naddopts = --doctest-modules --doctest-glob=README.rst\ntestpaths = tests\n",
        "pyproject's addopts without the pytest-cov options (--cov*); testpaths added",
    ),
    Library(
        "inflection",
        "0.5.1",
        "1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417",
        ("test_inflection.py",),
        "[pytest]\ntestpaths = test_inflection.py\n",
        "no pytest configuration upstream; testpaths added",
    ),
    Library(
        "six",
        "1.17.0",
        "ff70335d468e7eb6ec65b95b99d3a2836546063f63acc5171de367e834932a81",
        ("test_six.py",),
        "[pytest]\nminversion = 2.2.0\ntestpaths = test_six.py\n",
        "setup.cfg's [tool:pytest]; testpaths added",
    ),
    Library(
        "cachetools",
        "8.0.2",
        "30ac523adfc118b51d2b2e7bad8a0ddb31370dfe2700c7f10ca224f36ccf81e0",
        ("tests",),
        "[pytest]\npythonpath = src\ntestpaths = tests\n",
        "no pytest configuration upstream (tox adds --cov); pythonpath = src stands in for "
        "installing the src-layout package; testpaths added",
    ),
    # The libraries below were added for suite shapes the six above lack (issue 29 point 3);
    # their settings are the project's own (ini None), read and adapted as check-suite does,
    # unless the project keeps them only in tox's command line (then given here, noted).
    Library(
        "boltons",
        "26.2.0",
        "d39cfd15c1a1c3bd4d705c82252fa9edb8e4f5e8cc039f8e39afac7b1b47e92c",
        ("tests",),
        "[pytest]\n"
        "addopts = --doctest-modules\n"
        "testpaths = boltons tests\n"
        "doctest_optionflags =\n"
        "    ALLOW_UNICODE\n    ELLIPSIS\n    IGNORE_EXCEPTION_DETAIL\n    NORMALIZE_WHITESPACE\n",
        "doctests in its package modules: tox runs `pytest --doctest-modules boltons tests`; "
        "pyproject's [tool.pytest.ini_options] (doctest_optionflags) with that addopts",
    ),
    Library(
        "tabulate",
        "0.10.0",
        "e2cfde8f79420f6deeffdeda9aaec3b6bc5abce947655d17ac662b126e48a60d",
        ("test",),
        "[pytest]\naddopts = --doctest-modules --ignore benchmark\ntestpaths = tabulate test\n",
        "doctests in a package __init__: tox runs `pytest --doctest-modules --ignore "
        "benchmark`; testpaths added",
    ),
    Library(
        "semver",
        "3.1.2",
        "bea193552413194252d33ff26ce0962b76669bd1c6fb17e8e203ac37f072feaf",
        ("tests", "docs"),
        None,
        "src layout, `.pytest.ini` with --import-mode=importlib, pythonpath = src tests, "
        "text doctests in docs/*.rst, conftest doctest_namespace fixtures; pytest-cov "
        "options dropped",
    ),
    Library(
        "isodate",
        "0.7.2",
        "4cd1aa0f43ca76f4a6c6c0292a85f40b35ec2e43e315b59f06e6d32171a953e6",
        ("tests",),
        None,
        "src layout uninstalled (pythonpath = src added), filterwarnings = error",
    ),
    Library(
        "pyflakes",
        "4.1.0",
        "592beb57058eb82eb190fb7514f2081c555c51000b029ff71286a681e6cf2f83",
        ("pyflakes/test",),
        None,
        "tests inside the package (pyflakes/test, a helper module beside them); no pytest "
        "configuration upstream",
    ),
    Library(
        "sqlparse",
        "0.6.1",
        "ca722573f848ff2d30e40ea30f53a104b7dea7635ea9285891263eb2c58fb6e7",
        ("tests",),
        None,
        "conftest fixtures reading data files from the tests folder",
    ),
    Library(
        "pluggy",
        "1.7.0",
        "d1eaa46ebb595891b860ab086b4d09c8588af65ebd4361b8e8f4bb8920b90ba8",
        ("testing",),
        None,
        "a library pytest itself imports (the suite tests the image's copy, so no test "
        "earns); src layout, tox.ini's [pytest]; its tests call pluggy's internals, which "
        "the grading harness must leave alone",
    ),
)

# More pure-Python libraries pinned for growing the `repo` suite at scale (issue 30 point 5):
# each suite runs under the sandbox image's plain pytest with no extra dependency, and
# `opd-gym tasks check-suite` agreed with plain pytest on every id when it was pinned (the
# counts in each note). Each ini is what check-suite adapts the project's own settings to
# (`grading.suite_check.prepare`: pythonpath = src for an uninstalled src layout, pytest-cov
# options dropped) plus testpaths, so synthesis runs it as is. They are left out of the
# per-commit fidelity test (tests/grading/test_library_agreement.py iterates `LIBRARIES`) to
# keep CI time: CI covers them only through a fixed sample of tasks generated from them.
_TESTS = "[pytest]\ntestpaths = tests\n"
_SRC_TESTS = "[pytest]\npythonpath = src\ntestpaths = tests\n"
SCALE_LIBRARIES: tuple[Library, ...] = (
    Library("h11", "0.16.0",
            "4e35b956cf45792e4caa5885e69fba00bdbc6ffafbfa020300e549b208ee5ff1",
            ("h11/tests",), "[pytest]\ntestpaths = h11/tests\n",
            "tests inside the package; no pytest configuration upstream; check-suite 78/78"),
    Library("hyperframe", "6.1.0",
            "f630908a00854a7adeabd6382b43923a4c4cd4b821fcb527e6ab9e15382a3b08",
            ("tests",), _SRC_TESTS, "src layout; check-suite 109/109"),
    Library("rfc3986", "2.0.0",
            "97aacf9dbd4bfd829baad6e6309fa6573aaf1be3f6fa735c8ab05e46cecb261c",
            ("tests",), _SRC_TESTS,
            "src layout, parametrized conftest fixtures; check-suite 2836/2836"),
    Library("xmltodict", "0.14.2",
            "201e7c28bb210e374999d1dde6382923ab0ed1a8a5faeece48ab525b7810a553",
            ("tests",), _TESTS, "one module, unittest-style classes; check-suite 60/60"),
    Library("termcolor", "3.1.0",
            "6a6dd7fbee581909eeec6a756cff1d7f7c376063b14e4a298dc4980309e55970",
            ("tests",), _SRC_TESTS,
            "src layout, pyproject's settings, monkeypatched environment; check-suite 84/84"),
    Library("munch", "4.0.0",
            "542cb151461263216a4e37c3fd9afc425feeaf38aaa3025cd2a981fadb422235",
            ("tests",), _TESTS, "setup.cfg's [tool:pytest], conftest fixtures; "
            "check-suite 108/108"),
    Library("webcolors", "24.11.1",
            "ecb3d768f32202af770477b8b65f318fa4f566c22948673a977b00d589dd80f6",
            ("tests",), _SRC_TESTS, "src layout, unittest classes; check-suite 38/38"),
    Library("uritemplate", "4.1.1",
            "4346edfc5c3b79f694bccd6d6099a322bbeb628dbf2cd86eea55a456ce5124f0",
            ("tests",), _TESTS, "JSON fixture files read by the tests; check-suite 61/61"),
    Library("wcwidth", "0.2.13",
            "72ea0c06399eb286d978fdedb6923a9eb47e1c486ce63e9b4e64fc18303972b5",
            ("tests",),
            "[pytest]\nnorecursedirs = .git .tox build\n"
            "addopts = --disable-pytest-warnings --ignore=setup.py --ignore=.tox\n"
            "filterwarnings = error\njunit_family = xunit1\ntestpaths = tests\n",
            "tox.ini's [pytest] without the pytest-cov options and --color=yes; data files "
            "beside the tests; check-suite 39/39"),
    Library("tinydb", "4.8.2",
            "f7dfc39b8d7fda7a1ca62a8dbb449ffd340a117c1206b68c50b1a481fb95181d",
            ("tests",), _TESTS, "conftest fixtures over temporary files; check-suite 204/204"),
    Library("mistune", "3.1.3",
            "a7035c21782b2becb6be62f8f25d3df81ccb4d6fa477a6525b15af06539f02a0",
            ("tests",), None, "src layout, pyproject's settings (pythonpath = src .), tests "
            "generated from text fixtures; check-suite 948/948"),
)
PINNED: tuple[Library, ...] = LIBRARIES + SCALE_LIBRARIES  # what setup downloads


def library(name: str) -> Library:
    """The pinned library called `name`; DatasetError names the known ones otherwise."""
    for lib in PINNED:
        if lib.name == name:
            return lib
    known = ", ".join(lib.name for lib in PINNED)
    raise DatasetError(f"unknown library {name!r}: known libraries are {known}")


def sdist_cache() -> Path:
    """Where setup keeps the sdists: `$OPD_GYM_SDISTS`, else `$XDG_CACHE_HOME/opd_gym/sdists`."""
    override = os.environ.get("OPD_GYM_SDISTS")
    if override:
        return Path(override)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "opd_gym" / "sdists"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cached(lib: Library, cache: Path) -> Path | None:
    """The cached sdist of `lib` whose sha256 matches its pin, if any."""
    for path in sorted(cache.glob("*.tar.gz")):
        stem = path.name[: -len(".tar.gz")]
        name, _, version = stem.rpartition("-")
        if version == lib.version and name.replace("_", "-").lower() == lib.name:
            if _sha256(path) == lib.sha256:
                return path
    return None


def sdist_path(lib: Library, cache: Path | None = None) -> Path:
    """The verified cached sdist of `lib`; DatasetError says how to fetch it when missing."""
    cache = cache or sdist_cache()
    path = _cached(lib, cache)
    if path is None:
        raise DatasetError(
            f"the sdist of {lib.requirement} (sha256 {lib.sha256[:12]}...) is not in {cache}: "
            "run scripts/setup.sh (or `python -m opd_gym.tasks.libraries`) to download it"
        )
    return path


def fetch(lib: Library, cache: Path | None = None) -> Path:
    """Download `lib`'s sdist with pip into the cache unless a verified copy is there."""
    cache = cache or sdist_cache()
    found = _cached(lib, cache)
    if found is not None:
        return found
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary",
               ":all:", lib.requirement, "-d", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise DatasetError(f"pip could not download {lib.requirement}: {done.stderr[-800:]}")
        got = [p for p in Path(tmp).iterdir() if p.name.endswith(".tar.gz")]
        if len(got) != 1 or _sha256(got[0]) != lib.sha256:
            raise DatasetError(f"the downloaded sdist of {lib.requirement} does not match its "
                               f"pinned sha256 {lib.sha256}")
        target = cache / got[0].name
        os.replace(got[0], target)
    return target


def _in_suite(lib: Library, path: str) -> bool:
    pure = PurePosixPath(path)
    if pure.parent == PurePosixPath(".") and pure.name == "conftest.py":
        return True  # a root conftest configures the suite
    return any(path == d or pure.is_relative_to(d) for d in lib.test_dirs)


def unpack(lib: Library, cache: Path | None = None) -> LibrarySource:
    """Read `lib`'s cached sdist (offline): suite files as text, every other file as bytes."""
    archive = sdist_path(lib, cache)
    workspace: dict[str, bytes] = {}
    tests: dict[str, str] = {}
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            parts = PurePosixPath(member.name).parts
            if len(parts) < 2 or ".." in parts:
                raise DatasetError(f"{archive.name}: unexpected member {member.name!r}")
            rel = PurePosixPath(*parts[1:]).as_posix()
            handle = tar.extractfile(member)
            assert handle is not None  # isfile() members always have data
            data = handle.read()
            try:
                text = data.decode("utf-8") if _in_suite(lib, rel) else None
            except UnicodeDecodeError:
                text = None  # binary data of the suite (an inventory, an image): read, never
                # run, so it stays in the workspace beside the code
            if text is not None:
                tests[rel] = text
            else:
                workspace[rel] = data
    if not tests:
        raise DatasetError(f"{archive.name}: nothing under {', '.join(lib.test_dirs)}")
    return LibrarySource(lib, MappingProxyType(workspace), MappingProxyType(tests))


def main() -> int:
    """Fetch every pinned sdist into the cache (what scripts/setup.sh runs)."""
    cache = sdist_cache()
    for lib in PINNED:
        fetch(lib, cache)
    names = ", ".join(lib.requirement for lib in PINNED)
    print(f"[libraries] {len(PINNED)} sdists verified in {cache}: {names}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
