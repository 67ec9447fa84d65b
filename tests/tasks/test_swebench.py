"""The SWE-bench instance loader on a real local repository with multi-commit history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repo_project import CORE_FIXED, F2P, P2P, PROBLEM, TESTS_BASE, TESTS_FIXED, build_project

from opd_gym.errors import DatasetError
from opd_gym.tasks import load_tasks
from opd_gym.tasks.repo import archive_tree
from opd_gym.tasks.swebench import _hidden_tests, is_swebench_row, load_swebench, swebench_task

REPO = "minicalc/minicalc"


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return build_project(tmp_path_factory.mktemp("swe"))


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.parametrize("source", ["path", "bundle"])
def test_round_trip_from_a_jsonl_file(project, tmp_path, source):
    row = dict(project.row, FAIL_TO_PASS=json.dumps(F2P), PASS_TO_PASS=json.dumps(P2P))
    assert is_swebench_row(row)
    history = project.path if source == "path" else project.bundle
    tasks = load_swebench(write_jsonl(tmp_path / "rows.jsonl", [row]), {REPO: history})
    assert len(tasks) == 1 and not tasks.skipped
    task = tasks[0]
    assert task.id == "minicalc__minicalc-1" and task.prompt.startswith(PROBLEM)
    assert project.base_commit[:12] in task.prompt
    base = archive_tree(project.path, project.base_commit)
    fixed = archive_tree(project.path, project.fix_commit)
    # files: the base tree's text files (the binary asset is counted, not carried as text)
    assert dict(task.files) == {p: d.decode() for p, d in base.items() if p != "assets/logo.bin"}
    assert task.files["tests/test_core.py"] == TESTS_BASE
    assert task.metadata["binary_files"] == 1 and task.metadata["version"] == "0.1"
    # ... and carried as an asset: the calibration runs' trees hold it, as the workspace does
    assert dict(task.assets) == {"assets/logo.bin": base["assets/logo.bin"]}
    # tests: after the test patch; solution: after the gold patch, only what it changes
    assert dict(task.tests) == {"tests/test_core.py": TESTS_FIXED}
    assert dict(task.solution) == {"minicalc/core.py": CORE_FIXED}
    assert fixed["minicalc/core.py"].decode() == CORE_FIXED
    assert task.test_ids == (*F2P, *P2P)
    assert task.repo.fail_to_pass == tuple(F2P) and task.repo.pass_to_pass == tuple(P2P)
    assert task.repo.base_commit == project.base_commit
    assert task.repo.history == str(history.resolve())
    assert task.repo.image is None and not task.repo.synthesized
    assert task.pytest_ini == "[pytest]\ntestpaths = tests\naddopts = -q\n"


def test_plain_lists_and_json_lists_give_the_same_task(project):
    plain = swebench_task(project.row, {REPO: project.bundle})
    encoded = swebench_task(dict(project.row, FAIL_TO_PASS=json.dumps(F2P)),
                            {REPO: project.bundle})
    assert plain == encoded


@pytest.mark.parametrize(("change", "message"), [
    ({"patch": None}, "row 2.*field 'patch' is missing"),
    ({"FAIL_TO_PASS": "[not json"}, "row 2.*'FAIL_TO_PASS' is a string but not a JSON list"),
    ({"FAIL_TO_PASS": ["test_median_even (tests.TestCore)"]}, "row 2.*not a pytest node id"),
    ({"PASS_TO_PASS": ["test_clamp"]}, "row 2.*'PASS_TO_PASS'.*not a pytest node id"),
    ({"FAIL_TO_PASS": []}, "row 2.*'FAIL_TO_PASS' is empty"),
    ({"FAIL_TO_PASS": ["tests/test_gone.py::test_x"]}, "row 2.*names no file"),
    ({"repo": "other/repo"}, "row 2.*field 'repo': no local checkout"),
    ({"base_commit": "f" * 40}, "row 2.*field 'base_commit'"),
    ({"patch": "--- a/nothing.py\n+++ b/nothing.py\n@@ -1 +1 @@\n-x\n+y\n"},
     "row 2.*field 'patch' does not apply"),
    ({"base_commit": None}, "row 2.*'base_commit' is missing.*SWE-smith"),
])
def test_bad_rows_name_the_row_and_the_field(project, change, message):
    bad = {**project.row, **change}
    if change.get("patch", "") is None or change.get("base_commit", "") is None:
        bad = {k: v for k, v in bad.items() if v is not None}
    good = dict(project.row, instance_id="other-id")
    with pytest.raises(DatasetError, match=message):
        load_swebench([good, bad], {REPO: project.path})
    skipping = load_swebench([good, bad], {REPO: project.path}, skip_invalid=True)
    assert [t.id for t in skipping] == ["other-id"]
    assert len(skipping.skipped) == 1 and skipping.skipped[0].startswith("row 2")


def test_jsonl_errors_name_the_line(project, tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(project.row) + "\n\n{oops\n")
    with pytest.raises(DatasetError, match=r"rows.jsonl: line 3: invalid JSON"):
        load_swebench(path, {REPO: project.path})


def test_duplicate_ids_and_missing_repositories_are_refused(project, tmp_path):
    with pytest.raises(DatasetError, match="row 2.*duplicate instance_id"):
        load_swebench([project.row, project.row], {REPO: project.path})
    with pytest.raises(DatasetError, match="neither a git repository nor a bundle"):
        load_swebench([project.row], {REPO: tmp_path})
    with pytest.raises(FileNotFoundError, match="no SWE-bench instance file"):
        load_swebench(tmp_path / "missing.jsonl", {REPO: project.path})


def test_environment_images_are_kept_or_dropped_on_request(project):
    row = dict(project.row, image_name="swesmith.x86_64.minicalc")
    assert swebench_task(row, {REPO: project.path}).repo.image == "swesmith.x86_64.minicalc"
    kept = swebench_task(row, {REPO: project.path}, ignore_images=True)
    assert kept.repo.image is None


def test_setup_steps_are_read_and_bad_ones_refused(project):
    from opd_gym.sandboxes.env_image import EnvironmentSpec
    from opd_gym.tasks.repo import environment

    one = swebench_task(dict(project.row, setup="echo one"), {REPO: project.path})
    assert one.repo.setup == ("echo one",)
    both = swebench_task(dict(project.row, setup=["a", "b"], image_name="base:1"),
                         {REPO: project.path})
    spec = environment(both)
    assert isinstance(spec, EnvironmentSpec) and spec.setup == ("a", "b")
    assert spec.base == "base:1"  # the steps run on the row's own image
    assert environment(swebench_task(project.row, {REPO: project.path})) is None
    with pytest.raises(DatasetError, match="field 'setup'"):
        swebench_task(dict(project.row, setup=["ok", 3]), {REPO: project.path})


def test_the_generic_loader_points_to_the_swebench_loader(project, tmp_path):
    path = write_jsonl(tmp_path / "swe.jsonl", [project.row])
    with pytest.raises(DatasetError, match="SWE-bench-style instance.*load_swebench"):
        load_tasks(path)


def test_hidden_tests_carry_the_conftests_above_them():
    tree = {"conftest.py": b"# root\n", "tests/conftest.py": b"# tests\n",
            "tests/unit/test_a.py": b"def test_a(): pass\n", "tests/unit/data.txt": b"d\n",
            "other/conftest.py": b"# unrelated\n"}
    tests = _hidden_tests(tree, {"tests/unit/data.txt": b"d\n"},
                          ["tests/unit/test_a.py::test_a"])
    assert sorted(tests) == ["conftest.py", "tests/conftest.py", "tests/unit/data.txt",
                             "tests/unit/test_a.py"]


def test_a_task_spec_mapping_loads_swebench_rows(project, tmp_path):
    from opd_gym.tasks.resolve import resolve_tasks

    path = write_jsonl(tmp_path / "swe.jsonl", [project.row])
    tasks = resolve_tasks({"swebench": str(path), "repos": {REPO: str(project.bundle)},
                           "ids": ["minicalc__minicalc-1"]})
    assert [t.id for t in tasks] == ["minicalc__minicalc-1"]
    assert tasks[0].repo.history == str(project.bundle)


def test_repositories_may_be_a_folder_of_clones_bundles_or_tarballs(project, tmp_path):
    import shutil
    import tarfile

    rows = write_jsonl(tmp_path / "rows.jsonl", [project.row])
    for layout in ("owner/name", "owner__name.bundle", "name.tar.gz"):
        folder = tmp_path / layout.replace("/", "-")
        folder.mkdir()
        if layout == "owner/name":
            (folder / "minicalc").mkdir()
            shutil.copytree(project.path, folder / "minicalc" / "minicalc")
        elif layout.endswith(".bundle"):
            shutil.copy(project.bundle, folder / "minicalc__minicalc.bundle")
        else:
            with tarfile.open(folder / "minicalc.tar.gz", "w:gz") as tar:
                tar.add(project.path, arcname="minicalc")
        (task,) = load_tasks(rows, repos=folder)  # the generic loader, given the folder
        assert task.id == "minicalc__minicalc-1" and task.tests["tests/test_core.py"]
        assert Path(task.repo.history).parent == folder.resolve() or layout == "owner/name"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DatasetError, match="no repository for 'minicalc/minicalc' in .*"
                       "looked for minicalc/minicalc/minicalc__minicalc/minicalc"):
        load_swebench(rows, empty)
    with pytest.raises(DatasetError, match="repos applies to SWE-bench-style rows"):
        load_tasks("coding", repos=empty)


def test_a_repository_entry_or_a_row_carries_its_own_way_of_testing(project):
    """SWE-bench's per-repository specs: a `repos` entry may give setup steps, a pytest
    command and options beside the path; a row's own keys win over its repository's."""
    entry = {"path": str(project.bundle), "setup": ["pip install --no-index x"],
             "test_cmd": "PYTHONWARNINGS=ignore pytest -rA --tb=no -p no:cacheprovider tests/"}
    task = swebench_task(project.row, {REPO: entry})
    assert task.repo.setup == ("pip install --no-index x",)
    assert "addopts = -q -rA --tb=no -p no:cacheprovider\n" in task.pytest_ini  # paths left out
    own = swebench_task(dict(project.row, pytest_options=["--import-mode=importlib"]),
                        {REPO: entry})
    assert "addopts = -q --import-mode=importlib\n" in own.pytest_ini
    assert own.repo.setup == task.repo.setup  # only the keys the row gives are its own
    for bad, message in [({"test_cmd": "tox -e py311"}, "does not run pytest"),
                         ({"test_cmd": "pytest -x"}, "'-x' would leave tests without an outcome"),
                         ({"pytest_options": "-k median"}, "'-k' would leave"),
                         ({"colour": "red"}, "unknown key.*colour")]:
        with pytest.raises(DatasetError, match=message):
            swebench_task(project.row, {REPO: {"path": str(project.bundle), **bad}})
    with pytest.raises(DatasetError, match="field 'test_cmd'.*does not run pytest"):
        swebench_task(dict(project.row, test_cmd="make test"), {REPO: project.bundle})


DOCTEST_CORE = '''\
def median(xs):
    """The median of a non-empty sequence.

    >>> median([4, 1, 3, 2])
    2.5
    """
    ordered = sorted(xs)
    return ordered[len(ordered) // 2]
'''


FIXED_BODY = ("    mid = len(ordered) // 2\n    if len(ordered) % 2:\n        return ordered[mid]\n"
              "    return (ordered[mid - 1] + ordered[mid]) / 2\n")


def doctest_row(repo: Path, name: str, core: str, fixed: str) -> dict:
    """A repository at `repo` whose base has `name/core.py` = `core` and a test of odd
    medians, and the SWE row of its fix (`fixed`, a test of even medians): FAIL_TO_PASS the
    module's median doctest and the even test, run with `pytest --doctest-modules`."""
    from repo_project import _commit, git

    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    odd = (f"from {name}.core import median\n\n\n"
           "def test_odd():\n    assert median([3, 1, 2]) == 2\n")
    even = "\n\ndef test_even():\n    assert median([10, 20]) == 15\n"
    base = _commit(repo, "median", {f"{name}/__init__.py": "", f"{name}/core.py": core,
                                    "tests/test_core.py": odd})
    fix = _commit(repo, "fix median", {f"{name}/core.py": fixed,
                                       "tests/test_core.py": odd + even})
    return {"instance_id": f"{name}-1", "repo": f"me/{name}", "base_commit": base,
            "problem_statement": "median([4, 1, 3, 2]) returns 3; it should be 2.5.",
            "patch": git(repo, "diff", base, fix, "--", name) + "\n",
            "test_patch": git(repo, "diff", base, fix, "--", "tests") + "\n",
            "FAIL_TO_PASS": [f"{name}/core.py::{name}.core.median",
                             "tests/test_core.py::test_even"],
            "PASS_TO_PASS": ["tests/test_core.py::test_odd"],
            "test_cmd": "pytest --doctest-modules -p no:cacheprovider"}


@pytest.mark.docker
def test_a_row_whose_tests_need_its_pytest_command_grades_with_it(tmp_path, docker_grader):
    """One failing test is a doctest in a package module, collected only under the project's
    `pytest --doctest-modules`: with the row's test_cmd, gold earns 1.0 and the base 0;
    without it, the reference's run lacks that test and the task is refused, not misgraded."""
    repo = tmp_path / "docmed"
    fixed = DOCTEST_CORE.replace("    return ordered[len(ordered) // 2]\n", FIXED_BODY)
    row = doctest_row(repo, "docmed", DOCTEST_CORE, fixed)
    task = swebench_task(row, {"me/docmed": repo})
    assert "--doctest-modules" in task.pytest_ini
    workspace = {path: text.encode() for path, text in task.files.items()}
    gold = docker_grader.grade(task, {**workspace, "docmed/core.py": fixed.encode()})
    assert gold.score == 1.0, (gold.reason, gold.output[-600:])
    doctest = next(t for t in gold.tests if "median" in t.name and "test_" not in t.name)
    assert doctest.outcome == "passed"  # it ran, from the pristine docstring
    base_grade = docker_grader.grade(task, workspace)
    assert base_grade.score == 0.0 and not base_grade.infra_error, base_grade.reason
    without = swebench_task({k: v for k, v in row.items() if k != "test_cmd"},
                            {"me/docmed": repo})
    refused = docker_grader.grade(without, {**workspace, "docmed/core.py": fixed.encode()})
    assert refused.score == 0.0 and refused.infra_error, refused.reason
    assert "docmed.core.median" in refused.reason


@pytest.mark.docker
def test_a_gold_patch_that_adds_doctest_examples_grades_them_as_the_fix_has_them(
        tmp_path, docker_grader):
    """The gold patch edits a module `--doctest-modules` collects, adding the example its
    FAIL_TO_PASS doctest needs: the doctest's examples come from the fix's docstring (the
    module's code stays the agent's), so the untouched base fails it and the gold passes it;
    before, the base's docstring was the doctest and the starter passed it (a gate)."""
    from opd_gym.grading.expected import doctest_sources

    repo = tmp_path / "docadd"
    core = DOCTEST_CORE.replace("    >>> median([4, 1, 3, 2])\n    2.5\n",
                                "    >>> median([3, 1, 2])\n    2\n")
    fixed = core.replace("    >>> median([3, 1, 2])\n    2\n",
                         "    >>> median([3, 1, 2])\n    2\n    >>> median([4, 1, 3, 2])\n"
                         "    2.5\n").replace("    return ordered[len(ordered) // 2]\n",
                                              FIXED_BODY)
    row = doctest_row(repo, "docadd", core, fixed)
    task = swebench_task(row, {"me/docadd": repo})
    assert doctest_sources(task) == {"docadd/core.py": fixed}
    workspace = {path: text.encode() for path, text in task.files.items()}
    gold = docker_grader.grade(task, {**workspace, "docadd/core.py": fixed.encode()})
    assert gold.score == 1.0, (gold.reason, gold.output[-600:])
    doctest = next(t for t in gold.tests if t.name.endswith("docadd.core.median"))
    assert doctest.outcome == "passed" and doctest.rule != "starter-passes", doctest
    base_grade = docker_grader.grade(task, workspace)
    assert base_grade.score == 0.0 and not base_grade.infra_error, base_grade.reason
    failed = next(t for t in base_grade.tests if t.name.endswith("docadd.core.median"))
    assert failed.outcome == "failed"  # the fix's example, run on the base's code
