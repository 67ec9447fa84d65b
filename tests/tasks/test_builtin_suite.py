"""The built-in suite is sound: each reference passes all hidden tests, each starter fails some."""

from __future__ import annotations

import pytest

from opd_gym.tasks import load_env_spec, load_suite

HERMES_IDS = {
    "fizzbuzz", "is_palindrome", "two_sum", "flatten", "longest_common_prefix",
    "group_anagrams", "valid_parentheses", "merge_intervals",
}
SUITE = load_suite("coding")


def _report(proc) -> str:
    return (proc.stdout + proc.stderr)[-3000:]


def test_suite_shape():
    ids = [task.id for task in SUITE]
    assert len(ids) >= 24
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert HERMES_IDS <= set(ids)


@pytest.mark.parametrize("task", SUITE, ids=lambda t: t.id)
def test_task_is_well_formed(task):
    assert task.prompt.strip()
    assert task.solution, "every built-in task ships a reference solution"
    assert task.difficulty in {"easy", "medium", "hard"}
    assert all(name.rsplit("/", 1)[-1].startswith("test_") for name in task.tests)
    assert not set(task.tests) & (set(task.files) | set(task.solution))


@pytest.fixture(scope="module")
def graded(grade_many):
    """{(task id, "reference" | "starter"): CompletedProcess}, graded concurrently up front."""
    keys = [(t.id, kind) for t in SUITE for kind in ("reference", "starter")]
    jobs = [(t, t.solution if kind == "reference" else None) for t in SUITE for kind in
            ("reference", "starter")]
    return dict(zip(keys, grade_many(jobs), strict=True))


@pytest.mark.parametrize("task", SUITE, ids=lambda t: t.id)
def test_reference_solution_passes(task, graded):
    proc = graded[task.id, "reference"]
    assert proc.returncode == 0, _report(proc)
    assert " passed" in proc.stdout and "failed" not in proc.stdout


@pytest.mark.parametrize("task", SUITE, ids=lambda t: t.id)
def test_untouched_starter_fails(task, graded):
    proc = graded[task.id, "starter"]
    assert proc.returncode != 0, _report(proc)


def test_env_spec():
    spec = load_env_spec("coding")
    assert spec["name"] == "coding"
    assert spec["tools"] == ["terminal", "read_file", "write_file", "edit_file", "submit"]
    assert spec["max_turns"] == 15
    assert spec["reward"] == {"correctness": 0.7, "efficiency": 0.15, "tool_use": 0.15}
