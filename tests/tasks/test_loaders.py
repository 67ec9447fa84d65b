"""load_tasks and friends: every source kind, clear errors for bad rows, skip_invalid counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opd_gym import resources
from opd_gym.resources import data_path
from opd_gym.tasks import Task, TaskList, load_suite, load_task_dir, load_tasks

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
ONE_TEST = "from solution import one\n\n\ndef test_one():\n    assert one() == 1\n"


def _row(task_id: str = "t1", **overrides):
    row = {
        "id": task_id,
        "prompt": "Write `solution.py` with `one()` returning 1.",
        "tests": {"test_one.py": ONE_TEST},
        "solution": {"solution.py": "def one():\n    return 1\n"},
    }
    row.update(overrides)
    return row


def test_builtin_suite_by_name():
    tasks = load_tasks("coding")
    assert isinstance(tasks, TaskList) and tasks.skipped == []
    assert [t.id for t in tasks] == [t.id for t in load_suite("coding")]


def test_suite_directory_layouts():
    env_dir = data_path("envs", "coding")
    ids = [t.id for t in load_suite("coding")]
    assert [t.id for t in load_tasks(env_dir)] == ids
    assert [t.id for t in load_tasks(str(env_dir / "tasks"))] == ids
    single = load_tasks(env_dir / "tasks" / "fizzbuzz")
    assert [t.id for t in single] == ["fizzbuzz"]
    assert single[0] == load_task_dir(env_dir / "tasks" / "fizzbuzz")


def test_unknown_builtin_suite():
    with pytest.raises(ValueError, match="unknown built-in suite 'nope'"):
        load_suite("nope")
    with pytest.raises(FileNotFoundError, match="no task file, folder or built-in suite"):
        load_tasks("nope")


@pytest.mark.parametrize("name", ["tasks.yaml", "tasks.toml"])
def test_own_format_files(name, grade):
    tasks = load_tasks(FIXTURES / name)
    assert len(tasks) == 2
    for task in tasks:
        assert grade(task, task.solution).returncode == 0
        assert grade(task).returncode != 0


def test_own_format_fields():
    yaml_tasks = {t.id: t for t in load_tasks(FIXTURES / "tasks.yaml")}
    greeting = yaml_tasks["yaml_fix_greeting"]
    assert "greet.py" in greeting.files and greeting.metadata["origin"] == "fixture"
    assert yaml_tasks["yaml_add"].timeout == 30.0
    assert yaml_tasks["yaml_add"].tags == ("function", "fixture")
    toml_tasks = {t.id: t for t in load_tasks(FIXTURES / "tasks.toml")}
    assert toml_tasks["toml_pkg_version"].timeout == 45.0
    assert "mypkg/__init__.py" in toml_tasks["toml_pkg_version"].solution


def test_jsonl_and_json_files(tmp_path):
    rows = [_row("a"), _row("b", difficulty="hard", tags=["x"])]
    jsonl = tmp_path / "tasks.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    assert [t.id for t in load_tasks(jsonl)] == ["a", "b"]
    as_json = tmp_path / "tasks.json"
    as_json.write_text(json.dumps({"tasks": rows}))
    tasks = load_tasks(str(as_json))
    assert tasks[1].difficulty == "hard" and tasks[1].tags == ("x",)


def test_rows_and_task_objects():
    task = Task(id="obj", prompt="p", tests={"test_x.py": "def test_x():\n    pass\n"})
    tasks = load_tasks([task, _row("dict")])
    assert [t.id for t in tasks] == ["obj", "dict"]
    assert tasks[0] is task


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (_row(prompt=None), "row 1 (id 't1'): field 'prompt' is missing"),
        ({"prompt": "p", "tests": {"test_a.py": ""}}, "row 1: field 'id' is missing"),
        (_row(test={"x": "y"}), "unknown field(s) ['test']"),
        (_row(files={"../escape.py": ""}), "field 'files': path '../escape.py' must stay inside"),
        (_row(files={"/abs.py": ""}), "path '/abs.py' must stay inside"),
        (_row(tests=["test_a.py"]), "field 'tests' must map file paths to text"),
        (_row(timeout=-1), "field 'timeout' must be a positive number"),
        (_row(tags="a,b"), "field 'tags' must be a list of strings"),
        ("not a row", "row 1: expected a mapping or Task, got str"),
    ],
)
def test_bad_rows_name_the_field(row, message):
    with pytest.raises(ValueError) as info:
        load_tasks([row])
    assert message in str(info.value)


def test_duplicate_ids_and_skip_invalid(tmp_path):
    path = tmp_path / "mixed.jsonl"
    # a blank line first: errors give the line an editor shows (1-based, blanks counted)
    lines = ["", json.dumps(_row("a")), json.dumps(_row("a")), "{broken", json.dumps(_row("b"))]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError,
                       match=r"mixed.jsonl: line 3 \(id 'a'\): duplicate task id 'a'"):
        load_tasks(path)
    tasks = load_tasks(path, skip_invalid=True)
    assert [t.id for t in tasks] == ["a", "b"]
    assert len(tasks.skipped) == 2
    assert "line 4: invalid JSON" in tasks.skipped[1]


def test_file_level_errors(tmp_path):
    odd = tmp_path / "tasks.csv"
    odd.write_text("id,prompt\n")
    with pytest.raises(ValueError, match="unsupported task file type '.csv'"):
        load_tasks(odd)
    not_a_list = tmp_path / "tasks.json"
    not_a_list.write_text('{"rows": []}')
    with pytest.raises(ValueError, match="expected a list of tasks"):
        load_tasks(not_a_list)
    with pytest.raises(ValueError, match="unknown schema 'nope'"):
        load_tasks([_row()], schema="nope")
    with pytest.raises(ValueError, match="schema applies to row files"):
        load_tasks(data_path("envs", "coding"), schema="mbpp")


def test_task_dir_rejects_unknown_keys(tmp_path):
    (tmp_path / "t" / "tests").mkdir(parents=True)
    (tmp_path / "t" / "tests" / "test_t.py").write_text("def test_t():\n    pass\n")
    (tmp_path / "t" / "task.toml").write_text('prompt = "p"\nprompts = "typo"\n')
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['prompts'\]"):
        load_task_dir(tmp_path / "t")


def test_data_path_prefers_wheel_data(tmp_path, monkeypatch):
    assert data_path("envs", "coding", "env.toml").is_file()
    package = tmp_path / "site" / "opd_gym"
    (package / "_data" / "envs" / "x").mkdir(parents=True)
    (tmp_path / "site" / "envs" / "x").mkdir(parents=True)
    monkeypatch.setattr(resources, "_PACKAGE_DIR", package)
    assert data_path("envs", "x") == package / "_data" / "envs" / "x"
    (tmp_path / "site" / "envs" / "only_in_repo").mkdir()
    assert data_path("envs", "only_in_repo") == tmp_path / "site" / "envs" / "only_in_repo"
    with pytest.raises(FileNotFoundError, match="shipped data 'envs/missing' not found"):
        data_path("envs", "missing")


def test_loading_suites_and_manifests_imports_no_authoring_tool(tmp_path):
    """Loading the `repo` suite and a synthesis manifest rebuilds tasks from their records;
    the synthesis, statement and validation code (opd_gym.authoring) stays unimported."""
    import subprocess
    import sys

    from opd_gym.tasks.repo_suite import manifest_path

    data = json.loads(manifest_path().read_text(encoding="utf-8"))
    first = data["tasks"][0]
    manifest = tmp_path / "one.json"
    manifest.write_text(json.dumps({**data, "tasks": [first]}), encoding="utf-8")
    code = ("import sys\nfrom opd_gym.tasks import load_suite, load_tasks\n"
            "suite = load_suite('repo')\none = load_tasks(sys.argv[1])\n"
            "print(len(suite), len(one))\n"
            "print(sorted(m for m in sys.modules if m.startswith('opd_gym.authoring')))\n")
    out = subprocess.run([sys.executable, "-c", code, str(manifest)], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    count, single = map(int, out[0].split())
    assert count >= 1000 and single == 1, out
    assert out[1] == "[]"
