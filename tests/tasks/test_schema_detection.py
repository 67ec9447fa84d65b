"""Dataset rows are recognised by their fields, so a HumanEval/MBPP/APPS/CodeContests file loads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from opd_gym.tasks import load_hf_dataset, load_tasks
from opd_gym.tasks.loaders import detect_schema

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SCHEMAS = ["humaneval", "mbpp", "apps", "code_contests"]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_files_load_without_a_schema(schema):
    detected = load_tasks(FIXTURES / f"{schema}.jsonl")
    given = load_tasks(FIXTURES / f"{schema}.jsonl", schema=schema)
    assert [t.id for t in detected] == [t.id for t in given] and detected
    first = json.loads((FIXTURES / f"{schema}.jsonl").read_text().splitlines()[0])
    assert detect_schema(first) == schema


def test_own_format_and_unknown_rows():
    assert detect_schema({"id": "a", "prompt": "p", "tests": {}}) == "opd_gym"
    assert detect_schema({"question": "?"}) is None
    with pytest.raises(ValueError, match="matches no known schema .*--schema"):
        load_tasks([{"question": "?", "answer": 4}])
    # A dataset row with a missing field is named as that dataset's row, not as ours.
    row = json.loads((FIXTURES / "humaneval.jsonl").read_text().splitlines()[0])
    del row["entry_point"]
    with pytest.raises(ValueError, match="field 'entry_point' is missing"):
        load_tasks([row])
    with pytest.raises(ValueError, match="field 'id' is missing"):
        load_tasks([{"prompt": "p", "tests": {"test_a.py": "x"}}])


def test_schema_override_and_hf_detection(tmp_path):
    with pytest.raises(ValueError, match="field 'task_id' is missing"):
        load_tasks(FIXTURES / "apps.jsonl", schema="humaneval")
    shutil.copy(FIXTURES / "humaneval.jsonl", tmp_path / "test.jsonl")
    tasks = load_hf_dataset("json", data_files=str(tmp_path / "test.jsonl"), split="train",
                            cache_dir=str(tmp_path / "cache"))
    assert [t.id for t in tasks] == [t.id for t in load_tasks(FIXTURES / "humaneval.jsonl")]
