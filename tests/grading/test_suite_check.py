"""`opd-gym tasks check-suite SDIST`: a user's own project, graded against its own suite and
compared id by id with plain pytest, in real Docker.

The project is built here as a real sdist with the shapes real projects ship: a src layout run
uninstalled, doctests in package modules, a package module named like the stdlib (`time.py`),
relative imports, conftest fixtures, a test that writes a cache file in its working directory,
and settings in pytest 9's native `[tool.pytest]` table with a plugin option (`--cov`) the
image's pytest lacks.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from opd_gym.cli import main
from opd_gym.grading.suite_check import hidden_files, is_test_module, prepare
from opd_gym.sandboxes.image import DEFAULT_IMAGE
from opd_gym.tasks.pytest_config import read_pytest_config

PROJECT = {
    "pyproject.toml": '[project]\nname = "demo"\nversion = "1.0"\n\n[tool.pytest]\n'
                      'addopts = ["--doctest-modules", "--cov=demo", "-ra"]\n'
                      'testpaths = ["src", "tests"]\n',
    "src/demo/__init__.py": '"""Demo package."""\nfrom .core import add, clock\n',
    "src/demo/core.py": (
        '"""Arithmetic.\n\n>>> add(1, 1)\n2\n"""\n'
        "from . import time as _time\n\n\n"
        "def add(a, b):\n"
        '    """Add two numbers.\n\n    >>> add(2, 3)\n    5\n    >>> add(-1, 1)\n    0\n    """\n'
        "    return a + b\n\n\n"
        "def clock():\n"
        '    """The package\'s own clock.\n\n    >>> clock()\n    42\n    """\n'
        "    return _time.now()\n\n\n"
        # a doctest expecting a plain assert's own message: pytest would rewrite the module's
        # asserts (adding its explanation) were the module an argument of the run
        "def half(n):\n"
        '    """Half an even number.\n\n    >>> half(3)\n    Traceback (most recent call last):'
        '\n    ...\n    AssertionError: odd\n    """\n'
        '    assert n % 2 == 0, "odd"\n    return n // 2\n\n\n'
        # named like a test: plain pytest collects no test function from a package module
        "def test_shaped_helper():\n    return half(4)\n"
    ),
    "src/demo/time.py": "import time as _stdlib_time\n\n\ndef now():\n    return 42\n",
    "tests/conftest.py": "import pytest\n\n\n@pytest.fixture\ndef pair():\n    return (4, 5)\n",
    "tests/test_core.py": (
        "import json\nimport pathlib\n\nfrom demo import add, clock\n\n\n"
        "def test_add(pair):\n    assert add(*pair) == 9\n\n\n"
        "def test_clock():\n    assert clock() == 42\n\n\n"
        "def test_cache_in_cwd():\n"
        "    pathlib.Path('cache.json').write_text(json.dumps({'sum': add(2, 2)}))\n"
        "    assert json.loads(pathlib.Path('cache.json').read_text()) == {'sum': 4}\n"
    ),
}


def make_sdist(folder: Path, files: dict[str, str | bytes], name: str = "demo-1.0") -> Path:
    path = folder / f"{name}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for rel, text in sorted(files.items()):
            data = text if isinstance(text, bytes) else text.encode()
            info = tarfile.TarInfo(f"{name}/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def agreeing_row(tmp_path: Path, capsys, files: dict[str, str | bytes], name: str,
                 *options: str) -> str:
    """check-suite on `files` as the sdist `name`: it must agree with plain pytest; its row."""
    sdist = make_sdist(tmp_path, files, name=name)
    assert main(["tasks", "check-suite", str(sdist), "--timeout", "60", *options]) == 0
    out = capsys.readouterr().out
    assert "1 of 1 suites agree with plain pytest" in out, out
    return next(line for line in out.splitlines() if line.startswith(f"{name} "))


def test_the_suite_is_what_plain_pytest_collects_less_the_package_doctests():
    files = {p: t.encode() for p, t in PROJECT.items()}
    config = read_pytest_config(files)
    assert config.source == "pyproject.toml [tool.pytest]"
    assert is_test_module("tests/test_core.py", config)
    assert not is_test_module("src/demo/core.py", config)
    project = type("P", (), {"config": config, "files": files})
    ids = ["tests/test_core.py::test_add", "src/demo/core.py::demo.core.add"]
    # the package's modules stay the agent's: only the tests folder and conftest are hidden
    assert set(hidden_files(project, ids)) == {"tests/conftest.py", "tests/test_core.py"}


@pytest.mark.docker
@pytest.mark.slow
def test_check_suite_agrees_on_a_src_layout_with_doctests(tmp_path, capsys):
    sdist = make_sdist(tmp_path, PROJECT)
    assert main(["tasks", "check-suite", str(sdist), "--timeout", "60"]) == 0
    out = capsys.readouterr().out
    assert "1 of 1 suites agree with plain pytest" in out
    row = next(line for line in out.splitlines() if line.startswith("demo-1.0 "))
    assert "(100.0%)" in row
    for shape in ("doctest-modules", "src layout", "stdlib-named modules (time)", "conftest"):
        assert shape in row, row
    assert "addopts without --cov=demo" in out  # the plugin option the image lacks, noted
    assert "pythonpath = src" in out


@pytest.mark.docker
def test_the_adapted_config_drops_only_what_the_image_refuses():
    files = {p: t.encode() for p, t in PROJECT.items()}
    project = prepare("demo", files, DEFAULT_IMAGE)
    assert project.config.addopts == ["--doctest-modules", "-ra"]
    assert project.config.options["pythonpath"] == "src"
    assert not any("pytest itself imports" in n for n in project.notes)
    # a project pytest itself depends on: its suite runs against the image's copy, noted
    shadow = {"src/pluggy/__init__.py": "VERSION = 'mine'\n",
              "tests/test_version.py": "import pluggy\n\n\ndef test_version():\n"
                                       "    assert pluggy.VERSION == 'mine'\n"}
    notes = prepare("pluggy", {p: t.encode() for p, t in shadow.items()}, DEFAULT_IMAGE).notes
    assert any("pytest itself imports the image's pluggy" in n for n in notes), notes


def test_a_file_that_is_no_sdist_is_one_line(tmp_path, capsys):
    bad = tmp_path / "nothing-1.0.tar.gz"
    bad.write_bytes(b"not an archive")
    assert main(["tasks", "check-suite", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a readable sdist" in err[0]


NEEDS_TOOLZ = {
    "setup.cfg": "[metadata]\nname = bag\n",  # no pytest settings: tox passes them
    "bag/__init__.py": "",
    "bag/count.py": (
        "from toolz import frequencies\n\n\n"
        "def most_common(items):\n"
        '    """The item seen most often.\n\n    >>> most_common("abca")\n    \'a\'\n    """\n'
        "    counts = frequencies(items)\n    return max(counts, key=counts.get)\n"
    ),
    "tests/test_count.py": "from bag.count import most_common\n\n\n"
                           "def test_most_common():\n    assert most_common([1, 2, 2]) == 2\n",
}
INSTALL_TOOLZ = ("tar -xzf /opd-cache/toolz-1.2.0.tar.gz -C /tmp && "
                 "cp -r /tmp/toolz-1.2.0/toolz /usr/local/lib/python3.11/dist-packages/")


@pytest.mark.docker
@pytest.mark.slow
def test_check_suite_installs_what_the_suite_needs_and_takes_outside_options(tmp_path, capsys):
    """A suite needing a third-party package the image lacks gets no verdict, and says so;
    `--setup` installs it (offline, from the setup cache) for both runs, and
    `--pytest-options` adds what the project passes outside its config (its doctests)."""
    sdist = make_sdist(tmp_path, NEEDS_TOOLZ, name="bag-0.1")
    assert main(["tasks", "check-suite", str(sdist), "--timeout", "60"]) == 1
    out = capsys.readouterr().out
    assert "1 of 1 suites fail the check" in out and "bag-0.1: no verdict" in out, out
    assert "toolz" in out  # the missing module is named
    assert main(["tasks", "check-suite", str(sdist), "--timeout", "60", "--setup",
                 INSTALL_TOOLZ, "--pytest-options=--doctest-modules"]) == 0
    out = capsys.readouterr().out
    assert "environment image opd-gym-env:" in out
    assert "1 of 1 suites agree with plain pytest" in out
    row = next(line for line in out.splitlines() if line.startswith("bag-0.1 "))
    assert "2/2" in row or " 2 " in row, row  # the test and the package doctest
    assert "doctest-modules" in row, row
    assert main(["tasks", "check-suite", str(sdist), "--pytest-options=-x"]) == 2
    assert "would leave tests without an outcome" in capsys.readouterr().err


ROOT_TESTS = {  # a single root `tests.py`, no pytest config (jsonpointer ships so)
    "setup.py": "from setuptools import setup\nsetup(name='pointer')\n",
    "pointer.py": "def resolve(doc, path):\n    for part in path.strip('/').split('/'):\n"
                  "        doc = doc[part]\n    return doc\n",
    "tests.py": "import unittest\n\nfrom pointer import resolve\n\n\n"
                "class ResolveTest(unittest.TestCase):\n    def test_nested(self):\n"
                "        self.assertEqual(resolve({'a': {'b': 3}}, '/a/b'), 3)\n",
}


@pytest.mark.docker
def test_a_suite_pytest_does_not_find_is_named_and_an_ini_override_finds_it(tmp_path, capsys):
    """No test file matches pytest's default python_files: no verdict, saying pytest collects
    no tests and how to name them; `-o python_files=...` given as a pytest option becomes that
    ini setting (pytest reads no override from addopts) and the suite agrees."""
    sdist = make_sdist(tmp_path, ROOT_TESTS, name="pointer-1.0")
    assert main(["tasks", "check-suite", str(sdist), "--timeout", "60"]) == 1
    out = capsys.readouterr().out
    assert "it collects no tests" in out and "python_files" in out, out
    row = agreeing_row(tmp_path, capsys, ROOT_TESTS, "pointer-1.0",
                       "--pytest-options=-o python_files=tests.py")
    assert " 1 " in row and "(100.0%)" in row, row


LEAKY = {  # context managers restoring process state after `yield`, without try/finally
    "setup.py": "from setuptools import setup\nsetup(name='leaky')\n",
    "leaky/__init__.py": "",
    "leaky/core.py": "import os\n\n\ndef platform_name():\n"
                     "    return 'windows' if os.name == 'nt' else 'posix'\n\n\n"
                     "def mode():\n    return os.environ.get('LEAKY_MODE', 'off')\n",
    "tests/__init__.py": "",
    "tests/utils.py": (
        "import contextlib\nimport os\n\n\n@contextlib.contextmanager\ndef osname(name):\n"
        "    old, os.name = os.name, name\n    yield\n    os.name = old\n\n\n"
        "@contextlib.contextmanager\ndef env(value):\n    os.environ['LEAKY_MODE'] = value\n"
        "    yield\n    del os.environ['LEAKY_MODE']\n"
    ),
    "tests/test_leaky.py": (
        "import unittest\n\nfrom leaky.core import mode, platform_name\n\n"
        "from .utils import env, osname\n\n\n"
        "class PlatformTest(unittest.TestCase):\n"
        "    def test_a_windows(self):\n        with osname('nt'):\n"
        "            self.assertEqual(platform_name(), 'windows')\n\n"
        "    def test_b_posix(self):\n        self.assertEqual(platform_name(), 'posix')\n\n\n"
        "def test_c_mode_on():\n    with env('on'):\n        assert mode() == 'on'\n\n\n"
        "def test_d_mode_off():\n    assert mode() == 'off'\n"
    ),
}


@pytest.mark.docker
def test_a_failing_canary_leaks_no_process_state_into_later_tests(tmp_path, capsys):
    """A canary fails inside a context manager that restores os.name or os.environ only after
    its `yield` (colorama's test utils): plain pytest never fails there, so nothing leaks; in
    the grade the failing test's state is put back before pytest reports it, so pytest's own
    report does not break (os.name 'nt': no path) and later tests see what plain pytest's see."""
    row = agreeing_row(tmp_path, capsys, LEAKY, "leaky-1.0")
    assert "4 (100.0%)" in row, row


BINARY_SAMPLES = {  # tests generated from a data folder holding a file that is no UTF-8 text
    "setup.py": "from setuptools import setup\nsetup(name='codec')\n",
    "codec.py": "def decode(data):\n    return data.decode('utf-8')\n",
    "tests/conftest.py": (
        "import pathlib\n\n\ndef pytest_generate_tests(metafunc):\n"
        "    if 'sample' in metafunc.fixturenames:\n"
        "        folder = pathlib.Path(__file__).parent / 'samples'\n"
        "        metafunc.parametrize('sample', sorted(p.name for p in folder.iterdir()))\n"
    ),
    "tests/test_codec.py": (
        "import pathlib\n\nfrom codec import decode\n\n"
        "SAMPLES = pathlib.Path(__file__).parent / 'samples'\n\n\n"
        "def test_decodes(sample):\n    data = (SAMPLES / sample).read_bytes()\n    try:\n"
        "        decode(data)\n    except UnicodeDecodeError:\n"
        "        assert sample.startswith('bad')\n    else:\n"
        "        assert not sample.startswith('bad')\n\n\n"
        "def test_ascii():\n    assert decode(b'abc') == 'abc'\n"
    ),
    "tests/samples/good.txt": "hello\n",
    "tests/samples/bad-utf8.bin": b"\xff\xfe\x00bad",
}


@pytest.mark.docker
def test_binary_files_that_make_tests_are_in_every_calibration_run(tmp_path, capsys):
    """A suite generating a test per data file, one of them no UTF-8 text (tomlkit's invalid
    encodings): the binary file is one of the task's assets, in the calibration runs as in
    the grade's workspace, so every id plain pytest reports runs (before: no verdict)."""
    row = agreeing_row(tmp_path, capsys, BINARY_SAMPLES, "codec-1.0")
    assert "3 (100.0%)" in row, row


DOCTESTS_ONLY = {  # jaraco.classes' shape: a namespace package, its only tests its doctests
    "pytest.ini": "[pytest]\naddopts = --doctest-modules\n",
    "ns/shapes/area.py": ('"""Areas.\n\n>>> square(3)\n9\n"""\n\n\n'
                          'def square(n):\n    """>>> square(2)\n    4\n    """\n'
                          "    return n * n\n"),
    "ns/shapes/__init__.py": "",
}


@pytest.mark.docker
def test_a_suite_of_package_doctests_alone_gets_a_verdict_and_says_none_earns(tmp_path,
                                                                              capsys):
    """No test module at all: the doctests of the package modules are the whole suite, and
    plain pytest's verdicts are met id by id. No doctest example has a canary yet, so no test
    of this suite could earn: check-suite says so and exits 1 instead of printing "agree" over
    a suite every answer of which would score 0 (issue 55, point 4)."""
    sdist = make_sdist(tmp_path, DOCTESTS_ONLY, name="shapes-1.0")
    assert main(["tasks", "check-suite", str(sdist), "--timeout", "60"]) == 1
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("shapes-1.0 "))
    assert " 2 " in row and "(100.0%)" in row and "doctest-modules" in row, row
    assert "shapes-1.0: no test could earn" in out and "no-expectation 1" in out, out


BROKEN_HOOK = {  # python-dateutil's shape: a conftest marking items with a plugin's marker
    "pytest.ini": "[pytest]\nfilterwarnings = error\n",
    "calc.py": "def add(a, b):\n    return a + b\n",
    "tests/conftest.py": ("import pytest\n\n\ndef pytest_collection_modifyitems(items):\n"
                          "    for item in items:\n"
                          "        item.add_marker(pytest.mark.no_cover)\n"),
    "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
}


@pytest.mark.docker
def test_a_suite_pytest_stops_on_says_what_pytest_said(tmp_path, capsys):
    sdist = make_sdist(tmp_path, BROKEN_HOOK, name="hooked-1.0")
    assert main(["tasks", "check-suite", str(sdist), "--timeout", "60"]) == 1
    out = capsys.readouterr().out
    assert "no verdict" in out and "Unknown pytest.mark.no_cover" in out, out


def test_a_serialised_collection_error_reads_as_its_crash_line():
    from opd_gym.grading.plain import outcomes_from_reportlog

    chain = {"reprcrash": None, "chain": [[{"reprentries": []}, {
        "path": "/x/nodes.py", "lineno": 271,
        "message": "PytestCollectionWarning: cannot collect test class 'TestSuite'"}, None]]}
    lines = ['{"$report_type": "CollectReport", "nodeid": "tests/test_a.py", '
             '"outcome": "failed", "longrepr": ' + __import__("json").dumps(chain) + "}"]
    _, errors = outcomes_from_reportlog(lines)
    assert errors == {"tests/test_a.py": "/x/nodes.py:271: PytestCollectionWarning: cannot "
                                         "collect test class 'TestSuite'"}


METADATA = {  # click's shape: the suite asks importlib.metadata for the uninstalled project
    "PKG-INFO": "Metadata-Version: 2.1\nName: meta-demo\nVersion: 2.5\n",
    "src/meta_demo/__init__.py": ("import importlib.metadata\n\n"
                                  "__version__ = importlib.metadata.version('meta-demo')\n"),
    "tests/test_version.py": ("import meta_demo\n\n\ndef test_version():\n"
                              "    assert meta_demo.__version__ == '2.5'\n"),
}


@pytest.mark.docker
def test_a_suite_reading_the_projects_installed_metadata_agrees(tmp_path, capsys):
    row = agreeing_row(tmp_path, capsys, METADATA, "meta-demo-2.5")
    assert " 1 " in row and "(100.0%)" in row, row


@pytest.mark.docker
def test_a_conftest_needing_a_missing_module_names_it(tmp_path, capsys):
    """pytest stops before its report log (a conftest import error is a usage error)."""
    files = {"tests/conftest.py": "import not_in_the_image_xyz\n",
             "tests/test_a.py": "def test_a():\n    assert True\n"}
    sdist = make_sdist(tmp_path, files, name="needs-1.0")
    assert main(["tasks", "check-suite", str(sdist), "--timeout", "60"]) == 1
    out = capsys.readouterr().out
    assert "missing module(s) not_in_the_image_xyz" in out and "Traceback" not in out, out


SHARED_IDS = {  # a custom collector yielding several items under one node id, one failing
    "pytest.ini": "[pytest]\ntestpaths = tests\n",
    "calc.py": "def double(n):\n    return n * 2 if n != 3 else 7\n\n\n"
               "def add(a, b):\n    return a + b\n",
    "tests/conftest.py": (
        "import pytest\n\n\nclass Case(pytest.Item):\n"
        "    def __init__(self, *, value, **kwargs):\n"
        "        super().__init__(**kwargs)\n        self.value = value\n\n"
        "    def runtest(self):\n        from calc import double\n"
        "        assert double(self.value) == self.value + self.value\n\n\n"
        "class Cases(pytest.File):\n    def collect(self):\n"
        "        for word in self.path.read_text().split():\n"
        "            yield Case.from_parent(self, name='case', value=int(word))\n\n\n"
        "def pytest_collect_file(parent, file_path):\n"
        "    if file_path.suffix == '.cases':\n"
        "        return Cases.from_parent(parent, path=file_path)\n"),
    "tests/doubles.cases": "1\n2\n3\n4\n",
    "tests/evens.cases": "2\n4\n",
    "tests/test_add.py": "from calc import add\n\n\n"
                         "def test_add():\n    assert add(2, 2) == 4\n\n\n"
                         "def test_neg():\n    assert add(-2, -2) == -4\n\n\n"
                         "def test_zero():\n    assert add(0, 0) == 0\n",
}


@pytest.mark.docker
def test_several_items_under_one_id_get_plain_pytests_verdict(tmp_path, capsys):
    """Items a custom collector yields under one node id: the id FAILED when one of them did
    (a run of pytest shows it so), in the plain run and in the grade alike; the other ids
    agree and the unmodified code still scores 1.0. `--json` writes every id's verdicts."""
    sdist = make_sdist(tmp_path, SHARED_IDS, name="shared-1.0")
    report = tmp_path / "verdicts.json"
    assert main(["tasks", "check-suite", str(sdist), "--timeout", "60", "--json",
                 str(report)]) == 0
    out = capsys.readouterr().out
    assert "1 of 1 suites agree with plain pytest" in out, out
    import json

    [suite] = json.loads(report.read_text())["suites"]
    tests = {t["id"]: t for t in suite["tests"]}
    assert tests["tests/doubles.cases::case"]["plain"] == "failed"
    assert tests["tests/doubles.cases::case"]["grader"] == "failed"
    assert tests["tests/evens.cases::case"]["plain"] == "passed"
    assert tests["tests/doubles.cases::case"]["role"] == "neutral"
    assert suite["score"] == 1.0 and suite["earning"] >= 3 and suite["ok"] is True
    assert all(t["agree"] and t["rule"] for t in suite["tests"])
    assert "custom collector" in suite["shapes"] and "text doctests" not in suite["shapes"]


def test_a_custom_collectors_files_are_not_called_text_doctests():
    """Non-Python test files are doctest text by suffix or the suite's --doctest-glob;
    anything else is a custom collector's (the shape check-suite prints)."""
    from opd_gym.grading.suite_check import _text_doctest

    assert _text_doctest("README.rst", ["test*.txt"])
    assert _text_doctest("docs/guide.doctest", ["test*.txt"])
    assert _text_doctest("tests/test_usage.txt", ["test*.txt"])
    assert _text_doctest("tests/usage.example", ["*.example"])
    assert not _text_doctest("tests/doubles.cases", ["test*.txt"])
    assert not _text_doctest("tests/cases.yaml", ["test*.txt"])


ROOT_PACKAGE = {  # a root __init__.py, unittest setUp/tearDown, a cwd-relative data file
    "setup.py": "from setuptools import setup\nsetup(name='rooted', version='1.0')\n",
    "__init__.py": "",
    "mylib/__init__.py": ("def load(path):\n    with open(path) as fh:\n"
                          "        return fh.read().strip()\n\n\n"
                          "def add(a, b):\n    return a + b\n"),
    "tests/__init__.py": "",
    "tests/data/greeting.txt": "hello\n",
    "tests/test_lib.py": (
        "import os\nimport tempfile\nimport unittest\n\nfrom mylib import add, load\n\n\n"
        "class LibTest(unittest.TestCase):\n    def setUp(self):\n"
        "        self.tmp = tempfile.mkdtemp()\n\n    def tearDown(self):\n"
        "        os.rmdir(self.tmp)\n\n    def test_add(self):\n"
        "        self.assertEqual(add(2, 3), 5)\n\n    def test_neg(self):\n"
        "        self.assertEqual(add(-2, -3), -5)\n\n    def test_load(self):\n"
        "        self.assertEqual(load(os.path.join('tests', 'data', 'greeting.txt')), 'hello')\n"),
}


@pytest.mark.docker
def test_a_project_with_a_root_init_agrees_and_earns(tmp_path, capsys):
    """A root `__init__.py` makes pytest import the tests from the folder above the project
    (`workspace.tests.test_lib`): each variant's tree has a folder of its own it may list, so
    every grade imports them as plain pytest does, and the unmodified code scores 1.0 (before:
    every test a collection error, "No module named '<the tree's name>'")."""
    for _ in range(2):  # the same in every grade
        row = agreeing_row(tmp_path, capsys, ROOT_PACKAGE, "rooted-1.0")
        assert "3 (100.0%)  1.000  3 " in row, row
