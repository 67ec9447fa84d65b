"""Adapters are collision-proof: any name a dataset holds, the generated tests still grade right."""

from __future__ import annotations

import json

import pytest

from opd_gym.tasks import from_apps, from_code_contests, from_humaneval, from_mbpp

# Entry points named like the generated module's own names, modules, pytest hooks, builtins.
HUMANEVAL_NAMES = [
    "solution", "check", "test_check", "test_entry_point_defined", "pytest", "importlib",
    "ENTRY_POINT", "CHECK_SOURCE", "_dataset_check", "_NAMESPACE", "math", "sum", "list",
    "candidate", "METADATA", "conftest", "opd_grading", "run", "exec", "compile", "main",
]


def humaneval_row(entry: str) -> dict:
    prompt = (
        "import math\nfrom typing import List\n\n\n"
        "def test_helper_in_prompt(x):\n    return x\n\n\n"
        f"def {entry}(values: List[int]) -> int:\n"
        '    """Return the sum of the values plus one."""\n'
    )
    test = (
        "import math\n\nMETADATA = {'entry': 'x'}\nsolution = None\npytest = 'shadowed'\n"
        "importlib = None\nENTRY_POINT = 'nothing'\n\n\n"
        "def test_helper(candidate):\n    return candidate([1, 2]) == 4\n\n\n"
        "def check(candidate):\n    assert test_helper(candidate)\n"
        "    assert candidate([]) == 1\n    assert math.isclose(candidate([2]), 3)\n"
    )
    return {
        "task_id": f"Adversarial/{entry}", "prompt": prompt, "entry_point": entry,
        "canonical_solution": "    total = 1\n    for value in values:\n        total += value\n"
        "    return total\n",
        "test": test,
    }


MBPP_NAMES = [
    "_run", "_namespace", "ASSERTS", "PRELUDE", "_NAMESPACE", "importlib", "test_assert_0",
    "pytest", "math", "solution", "check", "sum", "exec", "main",
]


def mbpp_row(name: str) -> dict:
    code = (
        "import math\n\n\n"
        f"def {name}(n):\n    return helper(n) * 2\n\n\n"
        "def helper(n):\n    return int(n // 1) + 1\n"
    )
    return {
        "task_id": f"adv_{name}", "text": f"Write {name}(n) returning 2 * (floor(n) + 1).",
        "code": code,
        "test_setup_code": "_run = 'setup shadows'\nASSERTS = []\nimportlib = None",
        "test_list": [f"assert {name}(1.5) == 4",
                      f"assert math.isclose({name}(0), 2)" if name != "math" else "assert 1",
                      f"assert {name}(-1) == 0"],
        "test_imports": ["import math"],
    }


STDIO_IDS = ["main", "it's \"quoted\"", "{braces}\n{0}", "'''triple'''", "test_case", "CASES"]


def apps_row(pid: str) -> dict:
    cases = {"inputs": ["1 2\n", "'''\n{x}\n"], "outputs": ["3\n", "'''\n{x}\n"]}
    reference = (
        "import sys\nfirst = sys.stdin.readline()\ntry:\n    a, b = map(int, first.split())\n"
        "    print(a + b)\nexcept ValueError:\n    sys.stdout.write(first + sys.stdin.read())\n"
    )
    return {"problem_id": pid, "question": "Add or echo {0} '''", "difficulty": "interview",
            "input_output": json.dumps(cases), "solutions": json.dumps([reference])}


def code_contests_row(name: str) -> dict:
    row = apps_row(name)
    io = json.loads(row["input_output"])
    return {
        "name": name, "description": row["question"],
        "public_tests": {"input": io["inputs"][:1], "output": io["outputs"][:1]},
        "private_tests": {"input": io["inputs"][1:], "output": io["outputs"][1:]},
        "solutions": {"language": [3], "solution": json.loads(row["solutions"])},
    }


TASKS = (
    [from_humaneval(humaneval_row(n)) for n in HUMANEVAL_NAMES]
    + [from_mbpp(mbpp_row(n)) for n in MBPP_NAMES]
    + [from_apps(apps_row(i)) for i in STDIO_IDS]
    + [from_code_contests(code_contests_row(i)) for i in STDIO_IDS]
)


@pytest.fixture(scope="module")
def verdicts(grade_many):
    jobs = [(task, task.solution) for task in TASKS] + [(task, None) for task in TASKS]
    results = grade_many(jobs)
    return results[: len(TASKS)], results[len(TASKS):]


@pytest.mark.parametrize("index", range(len(TASKS)), ids=[t.id for t in TASKS])
def test_canonical_solution_passes_and_starter_fails(verdicts, index):
    reference, starter = verdicts[0][index], verdicts[1][index]
    assert reference.returncode == 0, reference.stdout[-2000:]
    assert starter.returncode != 0


def test_humaneval_wrong_solution_named_solution_fails_with_the_assert(grade):
    task = from_humaneval(humaneval_row("solution"))
    proc = grade(task, {"solution.py": task.files["solution.py"] + "    return 0\n"})
    assert proc.returncode == 1 and "1 failed in" in proc.stdout


def test_mbpp_failing_assert_names_its_source(grade):
    task = from_mbpp(mbpp_row("check"))
    wrong = task.solution["solution.py"].replace("* 2", "* 3")
    proc = grade(task, {"solution.py": wrong})
    assert proc.returncode == 1 and "2 failed, 1 passed" in proc.stdout
    assert "check(1.5) == 4" in proc.stdout
