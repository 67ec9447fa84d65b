"""The grading harness (`sandbox/grade_harness.py`, request/verdict version 2), run for real.

Most tests run it as a local process on a temp workspace through `run_harness_here` (one uid,
no sandbox); the `docker` tests run it in a real Docker sandbox, where it is root and each
variant's pytest runs under the agent's uid.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from opd_gym.grading.launch import agent_uid, harness_request, run_harness, run_harness_here
from opd_gym.sandboxes import SandboxError
from opd_gym.sandboxes.environment import suite_environment


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def harness(tmp_path: Path, workspace: dict[str, str], variants: list[dict[str, str]], *,
            ini: str | None = None, args: tuple[str, ...] = ("tests",),
            timeout: float = 30.0) -> list[dict]:
    """Write the workspace, run the harness on it, return the verdict's variants."""
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    write(ws, workspace)
    raw = run_harness_here(ws, variants, ini=ini, args=args, timeout=timeout)
    verdict = json.loads(raw.splitlines()[-1])
    assert verdict["version"] == 2 and len(verdict["variants"]) == len(variants)
    return verdict["variants"]


def outcomes(variant: dict) -> dict[str, str]:
    """{node id: outcome}; failures' messages go to the log to explain a failed assertion."""
    for t in variant["tests"]:
        if t["outcome"] not in ("passed", "skipped"):
            print(t["id"], t["outcome"], t["message"])
    return {t["id"]: t["outcome"] for t in variant["tests"]}


OUTCOME_TESTS = '''
import pytest


@pytest.fixture
def broken():
    raise RuntimeError("setup broke")


@pytest.fixture
def bad_teardown():
    yield
    raise RuntimeError("teardown broke")


def test_pass():
    assert 1 + 1 == 2


def test_fail():
    assert [1, 2] == [1, 3]


def test_setup_error(broken):
    pass


def test_teardown_error_after_pass(bad_teardown):
    pass


def test_fail_and_teardown_error(bad_teardown):
    assert False


def test_skip():
    pytest.skip("not today")


@pytest.mark.skip(reason="marked")
def test_skip_mark():
    pass


@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False


@pytest.mark.xfail(reason="fixed")
def test_xpass():
    pass


@pytest.mark.xfail(strict=True, reason="strict")
def test_xpass_strict():
    pass


@pytest.mark.xfail(run=False, reason="not run")
def test_xfail_not_run():
    assert False


@pytest.mark.parametrize("text", ["a b", "two  spaces", "\u00e9t\u00e9", "x::y", "[z]"])
def test_param(text):
    assert text != "x::y"


class TestGroup:
    def test_method(self):
        pass
'''


def test_every_outcome_follows_pytest_rules(tmp_path):
    [variant] = harness(tmp_path, {}, [{"tests/test_o.py": OUTCOME_TESTS}])
    got = outcomes(variant)
    base = "tests/test_o.py::"
    expected = {
        "test_pass": "passed", "test_fail": "failed", "test_setup_error": "error",
        "test_teardown_error_after_pass": "error", "test_fail_and_teardown_error": "failed",
        "test_skip": "skipped", "test_skip_mark": "skipped", "test_xfail": "xfailed",
        "test_xpass": "xpassed", "test_xpass_strict": "failed",
        "test_xfail_not_run": "xfailed", "TestGroup::test_method": "passed",
    }
    for name, outcome in expected.items():
        assert got.pop(base + name) == outcome, name
    params = {k[len(base):]: v for k, v in got.items()}
    assert len(params) == 5 and set(params.values()) == {"passed", "failed"}
    assert params["test_param[a b]"] == "passed"
    assert params["test_param[two  spaces]"] == "passed"
    assert params["test_param[x::y]"] == "failed"
    assert params["test_param[\\xe9t\\xe9]"] == "passed"  # pytest's own escaping of "été"
    assert params["test_param[[z]]"] == "passed"
    messages = {t["id"][len(base):]: t["message"] for t in variant["tests"]}
    assert "assert [1, 2] == [1, 3]" in messages["test_fail"]
    assert "setup broke" in messages["test_setup_error"]
    assert "teardown broke" in messages["test_teardown_error_after_pass"]
    assert "not today" in messages["test_skip"] and messages["test_xfail"] == "known"
    assert variant["exit"] == 1 and variant["timed_out"] is False
    assert variant["collect_errors"] == []
    assert "failed" in variant["output"]


def test_variants_run_apart_with_the_same_ids(tmp_path):
    solution = {"calc.py": "def add(a, b):\n    return a + b\n"}
    real = "from calc import add\n\ndef test_add():\n    assert add(2, 2) == 4\n"
    canary = real.replace("== 4", "== 5")
    first, second = harness(tmp_path, solution, [{"tests/test_c.py": real},
                                                  {"tests/test_c.py": canary}])
    assert outcomes(first) == {"tests/test_c.py::test_add": "passed"}
    assert outcomes(second) == {"tests/test_c.py::test_add": "failed"}
    assert first["exit"] == 0 and second["exit"] == 1


def test_a_variant_deselects_the_base_ids_it_skips(tmp_path):
    """A test that runs once (opd_gym/grading/once.py) is deselected in the other variant,
    every parametrized case of it; the rest run in both, and `select` still applies."""
    tests = ("import pytest\n\n"
             "def test_a():\n    pass\n\n"
             "@pytest.mark.parametrize('x', [1, 2])\n"
             "def test_b(x):\n    assert x\n\n"
             "class TestC:\n    def test_c(self):\n        pass\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    raw = run_harness_here(ws, [{"tests/test_t.py": tests}] * 2, args=("tests",),
                           skip=[["tests/test_t.py::test_b"], ["tests/test_t.py::TestC::test_c",
                                                               "tests/test_t.py::test_a"]])
    first, second = json.loads(raw.splitlines()[-1])["variants"]
    assert set(outcomes(first)) == {"tests/test_t.py::test_a", "tests/test_t.py::TestC::test_c"}
    assert set(outcomes(second)) == {"tests/test_t.py::test_b[1]", "tests/test_t.py::test_b[2]"}
    raw = run_harness_here(ws, [{"tests/test_t.py": tests}] * 2, args=("tests",),
                           select=["tests/test_t.py::test_a", "tests/test_t.py::test_b[1]"],
                           skip=[["tests/test_t.py::test_a"], []])
    first, second = json.loads(raw.splitlines()[-1])["variants"]
    assert set(outcomes(first)) == {"tests/test_t.py::test_b[1]"}
    assert set(outcomes(second)) == {"tests/test_t.py::test_a", "tests/test_t.py::test_b[1]"}


def test_objects_of_the_solution_are_native(tmp_path):
    # one process: isinstance, subclasses, dataclasses and callables work as in plain pytest
    solution = {"shapes.py": (
        "import dataclasses, enum\n"
        "class Color(str, enum.Enum):\n    RED = 'red'\n"
        "class Items(list):\n    pass\n"
        "@dataclasses.dataclass\nclass Point:\n    x: int\n    y: int\n"
        "def make():\n    return Items([3, 1, 2])\n"
        "def apply(fn, it):\n    return [fn(v) for v in it]\n")}
    tests = (
        "import dataclasses\nfrom shapes import Color, Items, Point, apply, make\n\n"
        "def test_native():\n"
        "    assert isinstance(make(), Items) and make()[1:] == [1, 2]\n"
        "    assert isinstance(Color.RED, str) and Color('red') is Color.RED\n"
        "    assert dataclasses.asdict(Point(1, 2)) == {'x': 1, 'y': 2}\n"
        "    assert apply(lambda v: v * 2, iter([1, 2])) == [2, 4]\n")
    [variant] = harness(tmp_path, solution, [{"tests/test_n.py": tests}])
    assert outcomes(variant) == {"tests/test_n.py::test_native": "passed"}


def test_a_collection_error_leaves_the_other_files_running(tmp_path):
    variants = [{"tests/test_ok.py": "def test_ok():\n    pass\n",
                 "tests/test_broken.py": "from missing_module import x\n\ndef test_b():\n"
                                         "    pass\n"}]
    [variant] = harness(tmp_path, {}, variants)
    assert outcomes(variant) == {"tests/test_ok.py::test_ok": "passed"}
    [(where, message)] = variant["collect_errors"]
    assert where == "tests/test_broken.py" and "missing_module" in message
    assert variant["exit"] == 1


def test_a_timeout_keeps_what_finished_and_marks_the_variant(tmp_path):
    tests = ("import time\n\ndef test_a_first():\n    pass\n\n"
             "def test_b_hangs():\n    time.sleep(120)\n\ndef test_c_after():\n    pass\n")
    started = time.monotonic()
    quick, hung = harness(tmp_path, {}, [{"tests/test_t.py": "def test_a_first():\n    pass\n"},
                                         {"tests/test_t.py": tests}], timeout=3.0)
    assert time.monotonic() - started < 30
    assert quick["timed_out"] is False and outcomes(quick) == {
        "tests/test_t.py::test_a_first": "passed"}
    assert hung["timed_out"] is True and hung["exit"] == -1
    assert outcomes(hung) == {"tests/test_t.py::test_a_first": "passed"}
    assert hung["running"] == ["tests/test_t.py::test_b_hangs"] and quick["running"] == []


def test_an_early_exit_loses_the_tests_it_skipped(tmp_path):
    tests = ("import os\n\ndef test_a():\n    pass\n\ndef test_b_exits():\n"
             "    os._exit(0)\n\ndef test_c():\n    pass\n")
    [variant] = harness(tmp_path, {}, [{"tests/test_e.py": tests}])
    assert outcomes(variant) == {"tests/test_e.py::test_a": "passed"}
    assert variant["exit"] == -1 and variant["timed_out"] is False


def test_forged_and_malformed_lines_never_add_or_flip_a_passed_test(tmp_path):
    # the solution shares the process and may write to fd 3: garbage is ignored, and several
    # reports of one id give the worst of them (as several items under one id do), so a forged
    # line only ever makes its test worse (canaries catch the rest)
    solution = {"forge.py": (
        "import json, os\n"
        "def line(test, outcome):\n"
        "    os.write(3, json.dumps({'id': 'tests/test_f.py::' + test, 'outcome': outcome,"
        " 'message': ''}).encode() + b'\\n')\n"
        "def forge():\n"
        "    os.write(3, b'not json\\n[1]\\n{\"id\": 5}\\n')\n"
        "    line('test_real', 'failed')\n"
        "def forge_pass(test):\n"
        "    line(test, 'passed')\n")}
    tests = ("import pytest\nfrom forge import forge, forge_pass\n\n"
             "def test_real():\n    forge()\n\n"
             "def test_fails():\n    forge_pass('test_fails')\n    assert False\n\n"
             "def test_skips():\n    forge_pass('test_skips')\n    pytest.skip('no')\n")
    [variant] = harness(tmp_path, solution, [{"tests/test_f.py": tests}])
    assert outcomes(variant) == {"tests/test_f.py::test_real": "failed",
                                 "tests/test_f.py::test_fails": "failed",
                                 "tests/test_f.py::test_skips": "skipped"}


STEERING = {
    "conftest.py": "raise SystemExit('workspace conftest ran')\n",
    "tests/conftest.py": "import pytest\n@pytest.fixture\ndef value():\n    return 'forged'\n",
    "sitecustomize.py": "raise SystemExit('sitecustomize ran')\n",
    "usercustomize.py": "raise SystemExit('usercustomize ran')\n",
    "evil.pth": "import sys; sys.exit(3)\n",
    "tests/__init__.py": "raise SystemExit('package init ran')\n",
    "pkg/__init__.py": "VALUE = 'kept'\n",
    "pkg/__pycache__/x.pyc": "junk",
    "pytest.ini": "[pytest]\naddopts = --no-such-option\npython_functions = nothing_*\n",
    "tox.ini": "[pytest]\naddopts = --no-such-option\n",
    "setup.cfg": "[tool:pytest]\naddopts = --no-such-option\n",
    "pyproject.toml": "[tool.pytest.ini_options]\naddopts = '--no-such-option'\n",
}


def test_workspace_files_that_steer_collection_are_dropped(tmp_path):
    tests = (
        "import os, sys\nimport opd_grading\nfrom pkg import VALUE\n\n"
        "def test_tree():\n"
        "    for name in ('conftest.py', 'sitecustomize.py', 'usercustomize.py', 'evil.pth',\n"
        "                 'tests/__init__.py', 'pkg/__pycache__'):\n"
        "        assert not os.path.exists(name), name\n"
        "    assert os.path.isfile('pytest.ini') and VALUE == 'kept'\n"
        "    assert os.getcwd() == opd_grading.WORKSPACE and not hasattr(opd_grading, 'FORGED')\n"
        "    harness_dir = os.path.dirname(opd_grading.__file__)\n"
        "    assert sys.path.index(harness_dir) < sys.path.index(os.getcwd())\n"
        "    assert sys.path.index(os.getcwd()) < sys.path.index(os.path.dirname(os.__file__))\n\n"
        "def test_task_conftest_wins(value):\n    assert value == 'task'\n")
    task_conftest = "import pytest\n@pytest.fixture\ndef value():\n    return 'task'\n"
    [variant] = harness(tmp_path, {**STEERING, "opd_grading.py": "FORGED = 1\n"},
                        [{"tests/test_s.py": tests, "tests/conftest.py": task_conftest}])
    assert outcomes(variant) == {"tests/test_s.py::test_tree": "passed",
                                 "tests/test_s.py::test_task_conftest_wins": "passed"}


def test_the_task_ini_is_honoured_and_the_workspace_ini_ignored(tmp_path):
    ini = "[pytest]\npython_functions = check_*\nmarkers =\n    slowish: a marker\n" \
          "addopts = --strict-markers\n"
    tests = ("import pytest\n\ndef check_collected():\n    pass\n\n"
             "@pytest.mark.slowish\ndef check_marked():\n    pass\n\n"
             "def test_not_collected():\n    pass\n")
    [variant] = harness(tmp_path, {"pytest.ini": STEERING["pytest.ini"]},
                        [{"tests/test_i.py": tests}], ini=ini)
    assert outcomes(variant) == {"tests/test_i.py::check_collected": "passed",
                                 "tests/test_i.py::check_marked": "passed"}


def test_opd_grading_runs_programs_and_reads_files_of_the_tree(tmp_path):
    workspace = {
        "main.py": "import sys\nprint(sys.stdin.read().upper(), end='')\n",
        "hang.py": "import time\ntime.sleep(60)\n",
        "answer.txt": "42\n",
        "data/info.txt": "x",
    }
    tests = (
        "import os\nimport pytest\nfrom opd_grading import (GradingAbort, exists, is_file,\n"
        "    read_bytes, read_text, run, scratch_dir)\n\n"
        "def test_run():\n"
        "    proc = run(['python3', 'main.py'], stdin='hi', timeout=20)\n"
        "    assert (proc.returncode, proc.stdout, proc.stderr) == (0, 'HI', '')\n"
        "    assert run(['python3', 'main.py'], stdin=b'x', text=False).stdout == b'X'\n\n"
        "def test_run_timeout():\n"
        "    with pytest.raises(GradingAbort):\n"
        "        run(['python3', 'hang.py'], timeout=0.5)\n\n"
        "def test_files():\n"
        "    assert read_text('answer.txt') == '42\\n' and read_bytes('data/info.txt') == b'x'\n"
        "    assert is_file('answer.txt') and not is_file('data') and exists('data')\n"
        "    assert not is_file('missing.txt') and not exists('../etc/passwd')\n"
        "    with pytest.raises(PermissionError):\n"
        "        read_text('/etc/passwd')\n"
        "    folder = scratch_dir()\n"
        "    (folder / 'f.txt').write_text('ok')\n"
        "    assert not str(folder).startswith(os.getcwd())\n")
    [variant] = harness(tmp_path, workspace, [{"tests/test_g.py": tests}])
    assert set(outcomes(variant).values()) == {"passed"} and len(variant["tests"]) == 3


def test_the_tree_is_writable_per_variant_and_the_ini_is_not(tmp_path):
    tests = (
        "import os, pytest, tempfile\n\n"
        "def test_write(request, tmp_path):\n"
        "    (tmp_path / 'x').write_text('ok')\n"
        "    with tempfile.NamedTemporaryFile() as fh:\n"
        "        fh.write(b'ok')\n"
        "    assert os.environ['HOME'] != os.getcwd() and os.access(os.environ['HOME'], os.W_OK)\n"
        "    with open('new_file.txt', 'w') as fh:  # the tree is the variant's project folder\n"
        "        fh.write('mine')\n"
        "    os.makedirs('out/deep', mode=0o700)\n"
        "    open('out/deep/f.txt', 'w').write('x')\n"
        "    open('solution.py', 'a').write('# touched\\n')\n"
        "    if os.geteuid() != 0:  # root ignores modes here; the Docker test covers it\n"
        "        with pytest.raises(PermissionError):\n"
        "            open(str(request.config.inipath), 'a')\n"
        "    assert 'PYTHONPATH' not in os.environ and os.environ['LANG'] == 'C.UTF-8'\n")
    variants = harness(tmp_path, {"solution.py": "x = 1\n"},
                       [{"tests/test_r.py": tests}, {"tests/test_r.py": tests}])
    for variant in variants:  # the second variant's tree is a fresh copy: open(..., 'x') works
        assert outcomes(variant) == {"tests/test_r.py::test_write": "passed"}
    assert (tmp_path / "ws" / "solution.py").read_text() == "x = 1\n"
    assert sorted(p.name for p in (tmp_path / "ws").iterdir()) == ["solution.py"]


CWD_SOLUTION = """\
import json, os


def remember(key, value):
    data = {}
    if os.path.exists("cache.json"):
        with open("cache.json") as fh:
            data = json.load(fh)
    data[key] = value
    with open("cache.json", "w") as fh:
        json.dump(data, fh)
    return data
"""

CWD_TESTS = """\
import os

from memo import remember


def test_cache_in_cwd():
    assert not os.path.exists("marker-from-the-other-variant")
    assert remember("a", 1) == {"a": 1}  # nothing left by the variant before
    assert remember("b", 2) == {"a": 1, "b": 2}
    open("marker-from-the-other-variant", "w").close()
"""


def test_a_solution_writing_in_its_cwd_passes_in_both_variants(tmp_path):
    variants = harness(tmp_path, {"memo.py": CWD_SOLUTION},
                       [{"tests/test_m.py": CWD_TESTS}, {"tests/test_m.py": CWD_TESTS}])
    for variant in variants:
        assert outcomes(variant) == {"tests/test_m.py::test_cache_in_cwd": "passed"}, \
            variant["output"]
    assert not (tmp_path / "ws" / "cache.json").exists()


def test_detached_processes_are_killed_at_the_end(tmp_path):
    pidfile = tmp_path / "pid"
    tests = (
        "import subprocess\n\ndef test_spawn():\n"
        "    proc = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        f"    open({str(pidfile)!r}, 'w').write(str(proc.pid))\n")
    [variant] = harness(tmp_path, {}, [{"tests/test_d.py": tests}])
    assert outcomes(variant) == {"tests/test_d.py::test_spawn": "passed"}
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_huge_output_is_cut_to_its_tail(tmp_path):
    tests = "def test_loud():\n    print('x' * 5_000_000)\n    assert False\n"
    [variant] = harness(tmp_path, {}, [{"tests/test_l.py": tests}])
    assert outcomes(variant) == {"tests/test_l.py::test_loud": "failed"}
    assert 0 < len(variant["output"]) <= 8000


def test_the_request_builder_shapes_version_3():
    request = harness_request("/workspace", 1000, 7, [{"tests/t.py": "x"}, {"tests/t.py": "y"}],
                              None, ["tests/t.py"])
    assert request == {
        "version": 3, "workspace": "/workspace", "agent_uid": 1000, "timeout": 7.0,
        "ini": None, "args": ["tests/t.py"], "select": None, "doctests": {},
        "variants": [{"files": {"tests/t.py": "x"}}, {"files": {"tests/t.py": "y"}}],
        "env": suite_environment(),  # the agent's terminal's (sandboxes.environment)
    }
    with_doctests = harness_request("/w", None, 7, [{}], None, ["pkg/m.py"],
                                    ["pkg/m.py::pkg.m.f"], {"pkg/m.py": "def f(): pass\n"})
    assert with_doctests["doctests"] == {"pkg/m.py": "def f(): pass\n"}
    skipping = harness_request("/w", None, 7, [{}, {}], None, [],
                               skip=[set(), {"t.py::b", "t.py::a"}])
    assert skipping["variants"] == [{"files": {}}, {"files": {}, "skip": ["t.py::a", "t.py::b"]}]


def test_a_selection_runs_exactly_those_ids(tmp_path):
    tests = ("import pytest\n\ndef test_a():\n    pass\n\ndef test_b():\n    pass\n\n"
             "@pytest.mark.parametrize('text', ['x::y', '[z]', 'plain'])\n"
             "def test_p(text):\n    pass\n")
    select = ["tests/test_s.py::test_b", "tests/test_s.py::test_p[x::y]",
              "tests/test_s.py::test_p[[z]]", "tests/test_s.py::test_gone"]
    ws = tmp_path / "ws"
    ws.mkdir()
    raw = run_harness_here(ws, [{"tests/test_s.py": tests}], args=("tests",), timeout=30,
                           select=select)
    [variant] = json.loads(raw.splitlines()[-1])["variants"]
    assert outcomes(variant) == {i: "passed" for i in select[:3]}
    assert variant["collect_errors"] == [] and variant["running"] == []


@pytest.mark.filterwarnings("ignore:opd_gym local sandbox")
def test_through_the_sandbox_shell(local_sandbox):
    local_sandbox.write_file("calc.py", "def add(a, b):\n    return a + b\n")
    tests = "from calc import add\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    request = harness_request(local_sandbox.workspace, agent_uid(local_sandbox), 30,
                              [{"tests/test_c.py": tests}], None, ["tests"])
    verdict = json.loads(run_harness(local_sandbox, request, 60).splitlines()[-1])
    assert outcomes(verdict["variants"][0]) == {"tests/test_c.py::test_add": "passed"}


# -- Docker: the harness is root, the tests and the solution run as the agent's uid --------
@pytest.fixture
def docker_box():
    from opd_gym.sandboxes import sandbox_factory

    sb = sandbox_factory({"backend": "docker"})()
    sb.start()
    yield sb
    sb.close()


SEPARATION_TESTS = '''
import os, signal, subprocess

import pytest


def harness_pid():
    zygote = os.getppid()
    with open(f"/proc/{zygote}/stat") as fh:
        return int(fh.read().rpartition(")")[2].split()[1])


def test_runs_as_a_variant_uid(request):
    uid = os.getuid()
    assert uid in (1001, 1002)
    assert (os.geteuid(), os.getgid(), os.getgroups()) == (uid, uid, [])
    with open("/proc/self/status") as fh:
        assert "CapEff:\\t0000000000000000" in fh.read()
    ini = str(request.config.inipath)
    assert os.path.dirname(ini) == os.getcwd()  # ini paths resolve against the tree's root
    with pytest.raises(PermissionError):
        open(ini, "a")
    with pytest.raises(PermissionError):  # nor replaced: the tree's root is root's, sticky
        os.unlink(ini)
    import opd_grading
    with pytest.raises(PermissionError):
        open(opd_grading.__file__, "a")
    # the tree's own folder lists only the tree (pytest's import of a project with a root
    # __init__.py reads it), and may not be written; the grading folder above stays unlistable
    parent = os.path.dirname(os.getcwd())
    assert os.listdir(parent) == ["workspace"] and os.path.basename(os.getcwd()) == "workspace"
    with pytest.raises(PermissionError):
        open(os.path.join(parent, "planted"), "x")
    with pytest.raises(PermissionError):
        os.listdir(os.path.dirname(parent))
    root = os.stat(".")
    assert (root.st_uid, root.st_gid, root.st_mode & 0o7777) == (0, uid, 0o1770)
    # the rest of the tree is this variant's own copy, as a project folder is plain pytest's
    assert os.stat("tests/test_sep.py").st_uid == uid and os.stat("calc.py").st_uid == uid
    assert not os.path.exists("planted.txt")  # nothing of the other variant's tree
    open("planted.txt", "w").write("mine")
    open("calc.py", "a").write("# touched\\n")
    os.makedirs("closed/inner", mode=0o700)
    open("closed/inner/f.txt", "w").write("x")
    os.chmod("closed", 0)
    with pytest.raises(PermissionError):  # the agent's workspace is closed while grading
        os.listdir("/workspace")


def test_cannot_signal_the_harness():
    for pid in (os.getppid(), harness_pid()):
        with pytest.raises(PermissionError):
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(PermissionError):
            os.listdir(f"/proc/{pid}/fd")


def test_leaves_a_detached_process():
    subprocess.Popen(["setsid", "sleep", "300"], start_new_session=True)
'''


@pytest.mark.docker
def test_docker_variants_run_under_their_own_uids_and_leave_nothing_behind(docker_box):
    docker_box.write_file("calc.py", "def add(a, b):\n    return a + b\n")
    uid = agent_uid(docker_box)
    assert uid == 1000
    request = harness_request(docker_box.workspace, uid, 60,
                              [{"tests/test_sep.py": SEPARATION_TESTS},
                               {"tests/test_sep.py": SEPARATION_TESTS}], None, ["tests"])
    verdict = json.loads(run_harness(docker_box, request, 90).splitlines()[-1])
    for variant in verdict["variants"]:
        assert outcomes(variant) == {
            "tests/test_sep.py::test_runs_as_a_variant_uid": "passed",
            "tests/test_sep.py::test_cannot_signal_the_harness": "passed",
            "tests/test_sep.py::test_leaves_a_detached_process": "passed",
        }, variant["output"]
    left = docker_box.run("ps -eo uid=,args= | awk '$1 > 1000' | grep -c '[s]leep 300'; "
                          "find /tmp /dev/shm /dev/mqueue -uid 1001 -o -uid 1002 2>/dev/null "
                          "| wc -l; stat -c %a /workspace; cat /workspace/calc.py").output
    assert left.split() == ["0", "0", "755", "def", "add(a,", "b):", "return", "a", "+", "b"]
    assert docker_box.run("ls /tmp | grep -c 'opd-grade\\|opd-variant'").output.strip() == "0"


APART_TESTS = '''
import ctypes, os, signal, socket, subprocess, time

import pytest

ME = os.getuid()
OTHER = 2003 - ME  # the variants run as 1001 and 1002
PORT = {1001: 47001, 1002: 47002}
libc = ctypes.CDLL(None, use_errno=True)


def processes_of(uid):
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/status") as fh:
                if any(line.split()[:2] == ["Uid:", str(uid)] for line in fh):
                    found.append(int(name))
        except (OSError, ValueError):
            pass
    return found


def test_leave_traces_for_the_other_variant():
    for place in ("/tmp", "/dev/shm"):
        path = f"{place}/opd-channel-{ME}"
        with open(path, "w") as fh:
            fh.write("hello")
        os.chmod(path, 0o666)
    os.mkdir(f"/tmp/opd-dir-{ME}", 0o777)
    with pytest.raises(PermissionError):
        open(f"/workspace/opd-channel-{ME}", "w")
    assert libc.shmget(ME, 4096, 0o1000 | 0o666) >= 0  # IPC_CREAT
    server = subprocess.Popen(["python3", "-c", (
        "import socket, time\\n"
        f"s = socket.create_server(('127.0.0.1', {PORT[ME]}))\\n"
        "time.sleep(300)\\n")], start_new_session=True)
    time.sleep(0.5)
    assert server.poll() is None


def test_no_trace_of_the_other_variant():
    assert processes_of(OTHER) == []  # never side by side
    for place in ("/tmp", "/dev/shm"):
        assert not os.path.lexists(f"{place}/opd-channel-{OTHER}")
    assert not os.path.lexists(f"/tmp/opd-dir-{OTHER}")
    assert libc.shmget(OTHER, 0, 0) == -1  # its segment is gone
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", PORT[OTHER]), timeout=2)


def test_processes_of_another_uid_are_out_of_reach():
    agent = processes_of(1000)
    assert agent, "the docker test starts a process of the agent's uid"
    for pid in agent:
        with pytest.raises(PermissionError):
            os.kill(pid, signal.SIGTERM)
        for name in ("environ", "cwd", "root", "fd"):
            with pytest.raises(PermissionError):
                os.listdir(f"/proc/{pid}/{name}") if name == "fd" else (
                    open(f"/proc/{pid}/environ").read() if name == "environ"
                    else os.readlink(f"/proc/{pid}/{name}"))
'''


@pytest.mark.docker
def test_docker_variants_cannot_reach_each_other(docker_box):
    docker_box.run("setsid sleep 600 > /dev/null 2>&1 < /dev/null &")
    request = harness_request(docker_box.workspace, agent_uid(docker_box), 60,
                              [{"tests/test_apart.py": APART_TESTS},
                               {"tests/test_apart.py": APART_TESTS}], None, ["tests"])
    verdict = json.loads(run_harness(docker_box, request, 90).splitlines()[-1])
    for variant in verdict["variants"]:
        assert set(outcomes(variant).values()) == {"passed"}, variant["output"]
        assert len(variant["tests"]) == 3
    left = docker_box.run("ls -a /tmp /dev/shm | grep -c opd-; ipcs -m | grep -c 0x || true")
    assert left.output.split()[0] == "0"


@pytest.mark.docker
def test_docker_timeout_kills_the_variant_and_its_programs(docker_box):
    docker_box.write_file("main.py", "import time\ntime.sleep(300)\n")
    tests = ("from opd_grading import run\n\ndef test_a():\n    pass\n\n"
             "def test_b():\n    run(['python3', 'main.py'], timeout=300)\n")
    request = harness_request(docker_box.workspace, agent_uid(docker_box), 3,
                              [{"tests/test_t.py": tests}], None, ["tests"])
    started = time.monotonic()
    verdict = json.loads(run_harness(docker_box, request, 60).splitlines()[-1])
    assert time.monotonic() - started < 30
    [variant] = verdict["variants"]
    assert variant["timed_out"] is True
    assert outcomes(variant) == {"tests/test_t.py::test_a": "passed"}
    left = docker_box.run("ps -eo uid=,args= | awk '$1 == 1000' | grep -c '[m]ain.py'").output
    assert left.strip() == "0"


@pytest.mark.docker
def test_a_harness_started_before_the_files_grades_the_files_written_after(docker_box):
    # the Grader starts the harness on acquiring its sandbox and copies the agent's files in
    # while pytest is imported: what it grades is the workspace as it is at the request
    from opd_gym.grading.launch import StartedHarness

    tests = "from calc import add\n\ndef test_add():\n    assert add(2, 2) == 4\n"
    with StartedHarness(docker_box) as harness:
        time.sleep(1.0)  # long enough for its start-up (pytest imported, the zygote forked)
        docker_box.write_file("calc.py", "def add(a, b):\n    return a + b\n")
        request = harness_request(docker_box.workspace, agent_uid(docker_box), 60,
                                  [{"tests/test_t.py": tests}], None, ["tests"])
        verdict = json.loads(harness.run(request, 90).splitlines()[-1])
        with pytest.raises(SandboxError, match="had its request"):
            harness.run(request, 90)  # one request per start
    assert outcomes(verdict["variants"][0]) == {"tests/test_t.py::test_add": "passed"}
    # one started and dropped unused exits on the EOF it reads, leaving no process behind
    dropped = StartedHarness(docker_box)
    time.sleep(0.5)
    assert docker_box.run("ps -eo args= | grep -c '[o]pd_gym grading harness'").output.strip() \
        != "0"  # it runs, waiting for its request
    dropped.close()
    deadline = time.monotonic() + 20
    while True:
        left = docker_box.run("ps -eo args= | grep -c '[o]pd_gym grading harness'").output
        if left.strip() == "0" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert left.strip() == "0"



# -- doctests of package modules (--doctest-modules), src layout ---------------------------
SRC_INI = "[pytest]\npythonpath = src\naddopts = --doctest-modules\ntestpaths = tests src\n"
SRC_PROJECT = {
    "src/pkg/__init__.py": '"""The package.\n\n>>> from pkg import add\n>>> add(1, 1)\n2\n"""\n'
                           "from .core import Box, add\nfrom . import time as clock\n",
    # a package module named like the stdlib: importing `time` must still give the stdlib
    "src/pkg/time.py": 'def now():\n    """\n    >>> now()\n    42\n    """\n    return 42\n',
    "src/pkg/core.py": '''\
import time

from .time import now


def add(a, b):
    """Add two numbers.

    >>> add(2, 3)
    5
    """
    return a + b


class Box:
    """A box.

    >>> Box(3).size + now()
    45
    """

    def __init__(self, size):
        self.size = size

    def double(self):
        """
        >>> Box(2).double()
        4
        """
        return self.size * 2

    @property
    def twice(self):
        """
        >>> Box(5).twice
        10
        """
        return self.size * 2

    @twice.setter
    def twice(self, value):
        self.size = value // 2


def stamp():
    return time.monotonic()
''',
}
SRC_TESTS = {"tests/test_core.py": "import time\n\nfrom pkg import add, clock\n\n\n"
                                   "def test_add():\n    assert add(1, 2) == 3\n\n\n"
                                   "def test_clock():\n    assert clock.now() == 42 "
                                   "and time.time() > 0\n"}
DOCTEST_SOURCES = ("src/pkg/__init__.py", "src/pkg/core.py", "src/pkg/time.py")


def plain_pytest(project: dict[str, str], ini: str, root: Path) -> dict[str, str]:
    """What plain `python -m pytest` says per node id in a copy of the project (`-rA`)."""
    import subprocess
    import sys

    write(root, {**project, "pytest.ini": ini})
    done = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider"],
                          cwd=root, capture_output=True, text=True, timeout=120,
                          env={"PATH": os.environ["PATH"], "PYTHONDONTWRITEBYTECODE": "1"})
    found = {}
    for line in done.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR"):
            found[rest.split(" - ")[0]] = {"PASSED": "passed", "FAILED": "failed",
                                          "ERROR": "error"}[word]
    assert found, done.stdout[-3000:]
    return found


def grade_src_project(tmp_path: Path, workspace: dict[str, str], ids: list[str]) -> list[dict]:
    """The src-layout project's hidden tests and doctests through the harness, two variants."""
    pristine = {p: SRC_PROJECT[p] for p in DOCTEST_SOURCES}
    ws = tmp_path / "ws"
    ws.mkdir()
    write(ws, workspace)
    raw = run_harness_here(ws, [SRC_TESTS, SRC_TESTS], ini=SRC_INI,
                           args=["tests/test_core.py", *DOCTEST_SOURCES], timeout=60,
                           select=ids, doctests=pristine)
    return json.loads(raw.splitlines()[-1])["variants"]


def test_src_layout_doctests_match_plain_pytest(tmp_path):
    plain = plain_pytest({**SRC_PROJECT, **SRC_TESTS}, SRC_INI, tmp_path / "plain")
    assert "src/pkg/core.py::pkg.core.Box.twice" in plain and len(plain) == 8, plain
    planted = {"tests/__init__.py": "", "src/pkg/conftest.py": "raise SystemExit(3)\n"}
    for variant in grade_src_project(tmp_path, {**SRC_PROJECT, **planted}, sorted(plain)):
        assert outcomes(variant) == plain, variant["output"]
        assert variant["collect_errors"] == []


def test_doctests_come_from_the_pristine_docstrings(tmp_path):
    ids = sorted(plain_pytest({**SRC_PROJECT, **SRC_TESTS}, SRC_INI, tmp_path / "plain"))
    core = SRC_PROJECT["src/pkg/core.py"]
    buggy = core.replace("return a + b", "return a - b")
    # the agent makes the docstring agree with its bug, and adds a doctest of its own
    lying = buggy.replace(">>> add(2, 3)\n    5", ">>> add(2, 3)\n    -1") + (
        '\n\ndef extra():\n    """\n    >>> extra()\n    1\n    """\n    return 1\n')
    deleted = core.replace('        """\n        >>> Box(2).double()\n        4\n        """\n', "")
    assert deleted != core and lying != buggy
    broken_double = deleted.replace("return self.size * 2\n\n    @property",
                                    "return self.size * 3\n\n    @property")
    cases = {
        "lying": (lying, {"src/pkg/core.py::pkg.core.add": "failed"}),
        "fixed": (core, {}),
        "deleted": (deleted, {}),
        "deleted-and-broken": (broken_double, {"src/pkg/core.py::pkg.core.Box.double": "failed"}),
    }
    for name, (text, failing) in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        for variant in grade_src_project(folder, {**SRC_PROJECT, "src/pkg/core.py": text}, ids):
            got = outcomes(variant)
            assert sorted(got) == ids, (name, variant["output"])  # nothing missing or added
            want = {i: failing.get(i, "passed") for i in ids}
            if name == "lying":  # the package's doctest and the test call add() too
                want["tests/test_core.py::test_add"] = "failed"
                want["src/pkg/__init__.py::pkg"] = "failed"
            assert got == want, name


def test_the_suites_libraries_are_left_as_they_are(tmp_path):
    """pluggy's own suite calls `pluggy._hooks.varnames` with keywords: the harness once put a
    one-argument cache there, and those tests failed under grading only."""
    tests = ("import pluggy._hooks\n\n\ndef test_varnames_is_pluggys():\n"
             "    assert pluggy._hooks.varnames.__module__.startswith('pluggy.')\n")
    [variant] = harness(tmp_path, {}, [{"tests/test_p.py": tests}])
    assert outcomes(variant) == {"tests/test_p.py::test_varnames_is_pluggys": "passed"}


def test_many_failures_keep_their_message_without_the_terminals_traceback_section(tmp_path):
    """Past 50 failures the terminal's section of failure tracebacks is skipped (a canary
    variant fails thousands of tests and pytest builds it in quadratic time); each message
    still comes back. A few failures keep the section (the agent's `opd-grade` shows it)."""
    tests = "".join(f"def test_{i}():\n    assert {i} == -1, 'wrong {i}'\n\n" for i in range(60))
    [variant] = harness(tmp_path, {}, [{"tests/test_f.py": tests}])
    assert len(variant["tests"]) == 60 and set(outcomes(variant).values()) == {"failed"}
    assert all(f"wrong {t['id'].rpartition('_')[2]}" in t["message"] for t in variant["tests"])
    assert "Traceback" not in variant["output"] and "FAILED tests/test_f.py" in variant["output"]
    # past 50 failures none is shown, so none is built (--tb=no's report: its crash line);
    # an error in a fixture still shows its traceback in the errors section
    erring = tests + ("import pytest\n\n\n@pytest.fixture\ndef broken():\n"
                      "    raise RuntimeError('fixture down')\n\n\n"
                      "def test_z_needs_it(broken):\n    pass\n")
    [variant] = harness(tmp_path, {}, [{"tests/test_e.py": erring}])
    assert outcomes(variant)["tests/test_e.py::test_z_needs_it"] == "error"
    assert "fixture down" in next(t["message"] for t in variant["tests"]
                                  if t["id"].endswith("test_z_needs_it"))
    assert "in broken\n    raise RuntimeError('fixture down')" in variant["output"]
    assert all(f"wrong {t['id'].rpartition('_')[2]}" in t["message"]
               for t in variant["tests"] if not t["id"].endswith("test_z_needs_it"))
    few = "".join(f"def test_{i}():\n    assert {i} == -1, 'wrong {i}'\n\n" for i in range(3))
    [variant] = harness(tmp_path, {}, [{"tests/test_g.py": few}])
    assert "Traceback" in variant["output"] and "assert 2 == -1" in variant["output"]
