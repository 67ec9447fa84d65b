"""Dataset adapters: references pass, starters fail, bad rows give clear errors, HF path works."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from opd_gym.tasks import (
    from_apps,
    from_code_contests,
    from_humaneval,
    from_mbpp,
    load_hf_dataset,
    load_tasks,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SCHEMAS = ["humaneval", "mbpp", "apps", "code_contests"]


def _rows(schema: str) -> list[dict]:
    lines = (FIXTURES / f"{schema}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


ALL_TASKS = [task for schema in SCHEMAS for task in load_tasks(FIXTURES / f"{schema}.jsonl",
                                                               schema=schema)]


def test_fixture_counts():
    assert [len(_rows(s)) for s in SCHEMAS] == [3, 3, 2, 2]
    assert len(ALL_TASKS) == 10


@pytest.mark.parametrize("task", ALL_TASKS, ids=lambda t: t.id)
def test_reference_passes_and_starter_fails(task, grade):
    passed = grade(task, task.solution)
    assert passed.returncode == 0, passed.stdout[-3000:]
    assert grade(task).returncode != 0


def test_humaneval_shape():
    task = from_humaneval(_rows("humaneval")[0])
    assert task.id == "FixtureEval/0"
    assert task.files["solution.py"] == _rows("humaneval")[0]["prompt"]
    assert "`count_vowels`" in task.prompt and "`solution.py`" in task.prompt
    assert "def test_check" in task.tests["test_solution.py"]


def test_humaneval_wrong_answer_fails(grade):
    task = from_humaneval(_rows("humaneval")[1])
    wrong = {"solution.py": "def rotate_left(items, k):\n    return list(items)\n"}
    proc = grade(task, wrong)
    assert proc.returncode == 1 and "1 failed in" in proc.stdout
    assert "assert [1, 2, 3, 4] == [2, 3, 4, 1]" in proc.stdout  # the dataset's own assert


def test_mbpp_one_test_per_assert_and_imports():
    rows = _rows("mbpp")
    tasks = [from_mbpp(row) for row in rows]
    for row, task in zip(rows, tasks, strict=True):
        assert task.tests["test_solution.py"].count("def test_assert_") == len(row["test_list"])
        assert not task.files
    assert "`sector_area`" in tasks[1].prompt
    assert "import math" in tasks[1].tests["test_solution.py"]
    assert "`total_area` and `Rect`" in tasks[2].prompt


def test_mbpp_partial_credit(grade):
    task = from_mbpp(_rows("mbpp")[0])
    almost = {"solution.py": "def second_largest(nums):\n    return sorted(set(nums))[-2]\n"}
    proc = grade(task, almost)
    assert proc.returncode == 1 and "1 failed, 2 passed" in proc.stdout


def test_mbpp_sanitized_schema(grade):
    row = {
        "source_file": "fixture", "task_id": 77, "prompt": "Write a function to cube a number.",
        "code": "def cube(x):\n    return x ** 3", "test_imports": ["import math"],
        "test_list": ["assert cube(3) == 27", "assert math.isclose(cube(0.5), 0.125)"],
    }
    task = from_mbpp(row)
    assert task.id == "mbpp/77" and task.prompt.startswith("Write a function to cube")
    assert grade(task, task.solution).returncode == 0


def test_stdio_tasks():
    apps, contest = from_apps(_rows("apps")[0]), from_code_contests(_rows("code_contests")[0])
    assert apps.id == "apps/90001" and apps.difficulty == "easy"
    assert "main.py" in apps.prompt and "main.py" in apps.solution
    assert contest.metadata["cases"] == 4  # 1 public + 3 private
    assert apps.metadata["cases"] == 3
    assert "#include" not in contest.solution["main.py"]  # the Python 3 solution was picked
    assert contest.difficulty == "easy"
    with_generated = from_code_contests(_rows("code_contests")[0], include_generated=True)
    assert with_generated.metadata["cases"] == 5


def test_stdio_whitespace_tolerant_but_strict_on_values(grade):
    task = from_apps(_rows("apps")[1])
    sloppy = (
        "t = int(input())\nfor _ in range(t):\n    w = input().strip()\n"
        "    ok = all(a != b for a, b in zip(w, w[1:]))\n"
        "    print('YES' if ok else 'NO', '  ')\n    print()\n"
    )
    assert grade(task, {"main.py": sloppy}).returncode == 0
    wrong = {"main.py": "import sys\nfor _ in sys.stdin.read().split()[1:]:\n    print('YES')\n"}
    proc = grade(task, wrong)
    assert proc.returncode == 1 and "2 failed" in proc.stdout


def test_stdio_expectations_are_literals_the_host_holds():
    """Each case compares with its expected output normalised on the host, exactly as the
    test's own `_normalise` would: a literal list, so held.py can keep it out of the sandbox
    (a program reading the test file for its answer finds a placeholder)."""
    from opd_gym.grading import held
    from opd_gym.tasks.adapters import normalised

    task = from_code_contests(_rows("code_contests")[0])
    [(path, text)] = task.tests.items()
    namespace: dict = {}
    exec(text.split("from opd_grading import run")[1].split("def _output")[0], namespace)
    for sample in ("8\n", "  a   b \n\n c\t d  \r\n", "", "\n \n", "x" * 3 + "\n y"):
        assert namespace["_normalise"](sample) == normalised(sample)
    sites = held.candidates(task.tests, [path])
    assert len(sites) == task.metadata["cases"] and all(sites.values())
    runs = held.rewrite((dict(task.tests), dict(task.tests)), sites, ((), ()))
    outputs = [v for test in runs.expect[0].values() for _, v in test.values()]
    assert len(outputs) == task.metadata["cases"] and all(isinstance(o, list) for o in outputs)
    for run in runs.files:
        for lines in outputs:
            for line in lines:
                assert repr(line) not in run[path], line


def test_code_contests_without_python_solution():
    row = dict(_rows("code_contests")[0], solutions={"language": [2], "solution": ["int main(){}"]})
    assert dict(from_code_contests(row).solution) == {}


@pytest.mark.parametrize(
    ("adapter", "change", "message"),
    [
        (from_humaneval, {"entry_point": None}, "field 'entry_point' is missing"),
        (from_humaneval, {"test": "assert True"}, "does not define check(candidate)"),
        (from_humaneval, {"canonical_solution": "    return (\n"}, "is not valid Python"),
        (from_mbpp, {"test_list": []}, "field 'test_list' is empty"),
        (from_mbpp, {"test_list": ["assert foo(1) == 1"]}, "no assert uses a function defined"),
        (from_mbpp, {"code": 5}, "field 'code' is a int, expected str"),
        (from_apps, {"input_output": '{"fn_name": "f", "inputs": [[1]], "outputs": [1]}'},
         "call-based problems (fn_name) are not supported"),
        (from_apps, {"input_output": '{"inputs": ["1"], "outputs": []}'}, "1 inputs but 0 outputs"),
        (from_apps, {"input_output": "{nope"}, "field 'input_output' is not valid JSON"),
        (from_code_contests, {"public_tests": {"input": [], "output": []},
                              "private_tests": None}, "hold no test cases"),
        (from_code_contests, {"description": ""}, "field 'description' is empty"),
    ],
)
def test_adapter_errors(adapter, change, message):
    schema = {from_humaneval: "humaneval", from_mbpp: "mbpp", from_apps: "apps",
              from_code_contests: "code_contests"}[adapter]
    row = dict(_rows(schema)[0], **change)
    with pytest.raises(ValueError) as info:
        adapter(row)
    assert message in str(info.value)


def test_bad_rows_file_names_line_and_field():
    """JSONL errors give the 1-based line an editor shows."""
    path = FIXTURES / "humaneval_bad.jsonl"
    with pytest.raises(ValueError) as info:
        load_tasks(path, schema="humaneval")
    assert str(info.value) == (
        "humaneval_bad.jsonl: line 2 (id 'Bad/1'): field 'entry_point' is missing"
    )
    tasks = load_tasks(path, schema="humaneval", skip_invalid=True)
    assert [t.id for t in tasks] == ["Bad/0"]
    assert len(tasks.skipped) == 3
    assert "line 3 (id 'Bad/2'): field 'prompt' does not define the entry point" in tasks.skipped[1]
    assert "line 4: invalid JSON" in tasks.skipped[2]


def test_rows_in_memory_with_schema():
    tasks = load_tasks(_rows("mbpp"), schema="mbpp")
    assert [t.id for t in tasks] == ["mbpp/9001", "mbpp/9002", "mbpp/9003"]


def test_hf_loader_without_datasets(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ImportError, match=r"pip install 'opd_gym\[datasets\]'"):
        load_hf_dataset("openai_humaneval", "humaneval")


def test_hf_loader_with_real_datasets(tmp_path):
    """The real `datasets` library (the `datasets` extra, installed in CI) on a local JSONL."""
    tasks = load_hf_dataset(
        "json", "mbpp", split="train", data_files=str(FIXTURES / "mbpp.jsonl"),
        cache_dir=str(tmp_path), limit=2,
    )
    assert [t.id for t in tasks] == ["mbpp/9001", "mbpp/9002"]
    with pytest.raises(ValueError, match="unknown schema"):
        load_hf_dataset("x", "nope")


@pytest.mark.parametrize("task", ALL_TASKS, ids=lambda t: t.id)
def test_generated_tests_carry_the_dataset_asserts_as_canary_targets(task):
    from opd_gym.grading import make_canaries, test_paths

    source = next(iter(task.tests.values()))
    assert "from solution import *" not in source and "test_entry_point_defined" not in source
    canaries = make_canaries(task.tests, test_paths(task), seed=5)
    assert canaries.tests and not canaries.uncanaried  # every test has a canary
    kinds = {c.kind for c in canaries.canaries.values()}
    assert kinds <= {"literal", "operator"}, kinds
    for canary in canaries.canaries.values():
        assert canary.original in source and canary.replacement != canary.original


def test_solution_exports_never_reach_the_dataset_check(grade):
    task = from_humaneval(_rows("humaneval")[0])
    shadowing = (
        "import builtins\nbuiltins.sum = lambda *a, **k: 3\n"
        "__all__ = ['count_vowels', 'sum', 'len', 'candidate', 'check']\n"
        "def sum(*a, **k):\n    return 3\n\ndef len(x):\n    return 3\n\n"
        "def check(candidate):\n    pass\n\n"
        "def count_vowels(text):\n    return 3\n"
    )
    proc = grade(task, {"solution.py": shadowing})
    assert proc.returncode == 1 and "1 failed in" in proc.stdout
    assert "assert 3 == 0" in proc.stdout  # the dataset's own assert, on the honest value


TABLE_ROWS = [  # HumanEval-schema rows whose check() loops over a literal table
    {"task_id": "Loop/items", "entry_point": "square",
     "prompt": "def square(n: int) -> int:\n    \"\"\"Return n squared.\"\"\"\n",
     "canonical_solution": "    return n * n\n",
     "test": "\nMETADATA = {'author': 'x'}\nTABLE = {0: 0, 1: 1, 2: 4, 3: 9, 10: 100}\n\n\n"
             "def check(candidate):\n    for n, expected in TABLE.items():\n"
             "        got = candidate(n)\n        assert got == expected\n"},
    {"task_id": "Loop/cases", "entry_point": "add",
     "prompt": "def add(a: int, b: int) -> int:\n    \"\"\"Return a + b.\"\"\"\n",
     "canonical_solution": "    return a + b\n",
     "test": "\nCASES = [\n    ((1, 2), 3),\n    ((0, 0), 0),\n    ((-1, 5), 4),\n]\n\n\n"
             "def check(candidate):\n    for args, want in CASES:\n"
             "        assert candidate(*args) == want\n"},
    {"task_id": "Loop/zip", "entry_point": "double",
     "prompt": "def double(n: int) -> int:\n    \"\"\"Return 2n.\"\"\"\n",
     "canonical_solution": "    return 2 * n\n",
     "test": "\nINPUTS = [0, 1, 5, 7]\nOUTPUTS = [0, 2, 10, 14]\n\n\n"
             "def check(candidate):\n    for x, y in zip(INPUTS, OUTPUTS):\n"
             "        assert candidate(x) == y\n"},
]


@pytest.mark.parametrize("row", TABLE_ROWS, ids=lambda r: r["task_id"])
def test_a_check_looping_over_a_literal_table_pays_the_reference(row, local_pool):
    """The dataset's top-level literal tables become the test's own (closure cells of its
    check): the grader holds their expected column on the host, so the reference earns 1.0,
    while a wrong answer, an always-equal object and a reader of the test's frames earn 0."""
    from opd_gym.grading import Grader

    task = from_humaneval(row, boundary=False)  # in one process: held on the host
    assert "def test_check():\n    " in task.tests["test_solution.py"]
    grader = Grader(local_pool)
    entry, prompt = row["entry_point"], row["prompt"]
    reference = grader.grade(task, {"solution.py": (prompt + row["canonical_solution"]).encode()})
    assert reference.score == 1.0 and [t.rule for t in reference.tests] == ["held"], reference
    forgeries = {
        "wrong": f"def {entry}(*args):\n    return 1\n",
        "always-equal": ("class _E:\n    def __eq__(self, other):\n        return True\n"
                         "    def __ne__(self, other):\n        return False\n\n\n"
                         f"def {entry}(*args):\n    return _E()\n"),
        "frame-reader": ("import sys\n\n\n"
                         f"def {entry}(*args):\n    frame = sys._getframe(1)\n"
                         "    while frame is not None:\n"
                         "        for name in ('expected', 'want', 'y'):\n"
                         "            if name in frame.f_locals:\n"
                         "                return frame.f_locals[name]\n"
                         "        frame = frame.f_back\n    return 0\n"),
    }
    for name, code in forgeries.items():
        report = grader.grade(task, {"solution.py": code.encode()})
        assert report.score == 0.0 and not report.infra_error, (name, report)
