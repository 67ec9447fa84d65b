"""Task records cross process pools and Ray workers by pickle, read-only mappings and all."""

from __future__ import annotations

import pickle
from pathlib import Path
from types import MappingProxyType

import pytest

from opd_gym.errors import DatasetError
from opd_gym.records.task import RepoInfo, Task
from opd_gym.tasks import load_harbor_task, load_suite

HARBOR = Path(__file__).resolve().parent.parent / "fixtures" / "harbor" / "edit-greeting"


def _tasks() -> list[Task]:
    builtin = load_suite("coding")[0]
    repo = Task(id="repo/x", prompt="fix it", files={"m.py": "x = 1\n"},
                tests={"tests/test_m.py": "def test_a():\n    pass\n"},
                assets={"data.bin": b"\x00\xff"}, metadata={"k": [1, 2]},
                repo=RepoInfo(name="demo", fail_to_pass=("tests/test_m.py::test_a",)))
    return [builtin, repo, load_harbor_task(HARBOR)]


@pytest.mark.parametrize("task", _tasks(), ids=lambda t: t.id)
def test_a_task_pickles_to_an_equal_frozen_task(task):
    back = pickle.loads(pickle.dumps(task))
    assert back == task and type(back) is Task
    for name in ("files", "tests", "solution", "metadata", "assets"):
        assert isinstance(getattr(back, name), MappingProxyType), name
    if back.harbor is not None:
        assert back.harbor == task.harbor
        assert isinstance(back.harbor.verifier_env, MappingProxyType)


def test_unpickling_runs_the_records_checks_again():
    """A pickle is rebuilt through the constructor, so a tampered state is refused."""
    task = _tasks()[0]
    rebuild, (cls, state) = task.__reduce__()
    with pytest.raises(DatasetError, match="prompt"):
        rebuild(cls, {**state, "prompt": ""})
