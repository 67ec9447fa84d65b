"""A project's pytest settings in every file pytest reads them from, as one ini text.

The reference is pytest itself (this venv's, pytest 9, which reads every form including the
native `[tool.pytest]` table): a conftest prints what `config.getini` returns for each option,
once with the project's own file and once with our ini passed as `-c`; both must agree.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from opd_gym.errors import DatasetError
from opd_gym.tasks.pytest_config import adapt_ini, read_pytest_config, with_pythonpath
from opd_gym.tasks.repo import project_pytest_ini

KEYS = ("addopts", "testpaths", "python_files", "filterwarnings", "markers", "pythonpath",
        "doctest_optionflags", "xfail_strict", "minversion", "norecursedirs")

PROBE = """
import json, os
KEYS = KEYS_REPR
def pytest_configure(config):
    seen = {}
    for key in KEYS:
        try:
            value = config.getini(key)
        except ValueError:
            continue
        seen[key] = [str(v) for v in value] if isinstance(value, list) else str(value)
    with open(os.environ["PROBE_OUT"], "w") as fh:
        json.dump(seen, fh)
""".replace("KEYS_REPR", repr(KEYS))

FORMS = {
    "pytest.ini": ("pytest.ini", "[pytest]\naddopts = -ra --strict-markers -k 'not slow'\n"
                   "testpaths = tests\nmarkers =\n    slow: slow ones\n    net: network\n"
                   "filterwarnings =\n    error\n    ignore::DeprecationWarning\n"),
    ".pytest.ini": (".pytest.ini", "[pytest]\nnorecursedirs = .git build\n"
                    "pythonpath = src tests\naddopts =\n    --import-mode=importlib\n"
                    "    --doctest-modules\n"),
    "tox.ini": ("tox.ini", "[tox]\nenvlist = py311\n\n[pytest]\nxfail_strict = true\n"
                "python_files = check_*.py tests.py\n"),
    "setup.cfg": ("setup.cfg", "[metadata]\nname = x\n\n[tool:pytest]\n"
                  "doctest_optionflags = ELLIPSIS NORMALIZE_WHITESPACE\ntestpaths = t\n"),
    "pyproject ini_options": ("pyproject.toml", '[project]\nname = "x"\n\n'
                              '[tool.pytest.ini_options]\naddopts = "-ra -q"\n'
                              'testpaths = ["tests", "src"]\nxfail_strict = true\n'
                              'filterwarnings = ["error", "ignore:a b:UserWarning"]\n'),
    "pyproject native (pytest 9)": (
        "pyproject.toml", '[tool.pytest]\naddopts = ["--doctest-modules", "-k", "not slow"]\n'
        'minversion = "9.0"\ntestpaths = ["src", "tests"]\nxfail_strict = true\n'
        'filterwarnings = ["error", "ignore:Python 3.16 is not:RuntimeWarning"]\n'),
    "pytest.toml": ("pytest.toml", '[pytest]\ntestpaths = ["tests"]\n'
                    'markers = ["slow: slow ones"]\naddopts = ["-ra"]\n'),
}


def _seen(root: Path, args: list[str]) -> dict:
    out = root / "probe.json"
    env = {"PROBE_OUT": str(out), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                    "no:cacheprovider", "-p", "probe", *args], cwd=root, env={
                        **env, "PYTHONPATH": str(root / "plugin")},
                   capture_output=True, timeout=120)
    return json.loads(out.read_text())


@pytest.mark.parametrize("form", list(FORMS))
def test_every_form_reads_as_pytest_reads_it(tmp_path, form):
    name, text = FORMS[form]
    project = tmp_path / "project"
    (project / "plugin").mkdir(parents=True)
    (project / "plugin" / "probe.py").write_text(PROBE)
    (project / name).write_text(text)
    for folder in ("tests", "src", "t"):  # testpaths that exist (else a config warning)
        (project / folder).mkdir()
        (project / folder / "test_x.py").write_text("def test_x():\n    pass\n")
    own = _seen(project, [])

    config = read_pytest_config({name: text.encode()})
    assert config.source.startswith(name)
    ours = project / "ours.ini"
    ours.write_text(config.ini)
    (project / name).unlink()
    given = _seen(project, ["-c", str(ours), "--rootdir", str(project)])
    # paths pytest resolves against the config file's folder (the same folder here)
    assert given == own, (config.ini, own, given)


def test_pytest_looks_in_its_own_order():
    both = {"setup.cfg": b"[tool:pytest]\ntestpaths = a\n", "tox.ini": b"[pytest]\ntestpaths = b\n"}
    assert read_pytest_config(both).options["testpaths"] == "b"
    with_ini = {**both, "pytest.ini": b"[pytest]\ntestpaths = c\n"}
    assert read_pytest_config(with_ini).options["testpaths"] == "c"
    # a pyproject without a pytest table does not count; tox.ini then does
    assert read_pytest_config({**both, "pyproject.toml": b"[project]\nname='x'\n"}).source \
        == "tox.ini [pytest]"
    assert read_pytest_config({"pytest.ini": b""}).ini == "[pytest]\n"
    assert read_pytest_config({"README": b"x"}).source == ""
    # the old entry point of repository rows reads the same (pytest 9's table included)
    assert project_pytest_ini({"pyproject.toml": '[tool.pytest]\ntestpaths = ["t"]\n'}) \
        == "[pytest]\ntestpaths = t\n"
    assert project_pytest_ini({"README": "x"}) is None


def test_unreadable_config_is_a_dataset_error():
    with pytest.raises(DatasetError, match="pyproject.toml"):
        read_pytest_config({"pyproject.toml": b"[tool.pytest\n"})
    with pytest.raises(DatasetError, match="pytest option 'addopts'"):
        read_pytest_config({"pytest.toml": b"[pytest]\naddopts = {a = 1}\n"})


def test_what_the_installed_pytest_refuses_is_dropped_with_a_note(tmp_path):
    config = read_pytest_config({".pytest.ini": b"[pytest]\nminversion = 99.0\naddopts =\n"
                                 b"    --no-cov-on-fail\n    --cov=semver\n"
                                 b"    --doctest-modules\n"})
    project = tmp_path / "p"
    project.mkdir()
    (project / "pytest.ini").write_text(config.ini)
    notes = []
    for _ in range(4):
        done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                               "no:cacheprovider", "-p", "no:cov"], cwd=project,
                              capture_output=True, text=True, timeout=120)
        adapted = adapt_ini(config, done.stdout + done.stderr)
        if adapted is None:
            break
        config, note = adapted
        notes.append(note)
        (project / "pytest.ini").write_text(config.ini)
    assert done.returncode == 5, done.stdout + done.stderr  # runs now (no tests)
    assert config.addopts == ["--doctest-modules"]
    assert "minversion" not in config.options
    assert len(notes) == 2 and any("--cov=semver" in n for n in notes)
    assert with_pythonpath(config, "src").options["pythonpath"] == "src"


def test_ini_overrides_among_options_become_ini_settings():
    """pytest reads `-o NAME=VALUE` from its command line only, never from `addopts`: given
    among a row's or check-suite's options, an override becomes the ini setting itself."""
    from opd_gym.tasks.pytest_config import with_addopts

    config = read_pytest_config({"setup.py": b""})
    for extra in (["-o", "python_files=tests.py"], ["-opython_files=tests.py"],
                  ["--override-ini=python_files=tests.py"],
                  ["--override-ini", "python_files=tests.py"]):
        adapted = with_addopts(config, [*extra, "-ra"])
        assert adapted.options["python_files"] == "tests.py", extra
        assert adapted.addopts == ["-ra"]
        assert "python_files = tests.py" in adapted.ini
    with pytest.raises(DatasetError, match="NAME=VALUE"):
        with_addopts(config, ["-o", "python_files"])
