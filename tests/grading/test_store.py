"""The calibration store (opd_gym/grading/store.py): its secret, its refusals, its entries."""

from __future__ import annotations

import os
import pickle
import stat

import pytest

from opd_gym.errors import ConfigError
from opd_gym.grading.grader import Grader, stored_name, task_key, with_own_bodies
from opd_gym.grading.store import SECRET_BYTES, SECRET_NAME, CalibrationStore, make_grader
from opd_gym.tasks import load_suite


def _task():
    return next(t for t in load_suite("coding") if t.id == "fizzbuzz")


def test_secret_is_made_private_once_and_reused(tmp_path):
    folder = tmp_path / "cal" / "store"
    store = CalibrationStore.open(folder)
    secret = folder / SECRET_NAME
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert len(store.secret) == SECRET_BYTES and store.secret == secret.read_bytes()
    assert not [p for p in folder.iterdir() if p.name != SECRET_NAME]  # no partial file left
    again = CalibrationStore.open(folder)
    assert again.secret == store.secret  # a later run draws the same canaries
    assert CalibrationStore.open(tmp_path / "other").secret != store.secret


def test_grader_uses_the_store_and_its_secret(tmp_path):
    store = CalibrationStore.open(tmp_path / "cal")
    grader = make_grader(object(), tmp_path / "cal")
    assert grader._secret == store.secret and grader._store == store.path
    plain = make_grader(object())
    assert plain._store is None and plain._secret != store.secret
    task = _task()
    key = task_key(with_own_bodies(task))
    assert store.entry(task) == store.path / f"{stored_name(store.secret, key, True)}.pickle"
    assert store.entry(task, hold=False) != store.entry(task)
    assert not store.calibrated(task) and store.count([task]) == 0
    store.entry(task).write_bytes(b"not a pickle")  # unreadable: the Grader calibrates again
    assert not store.calibrated(task)
    store.entry(task).write_bytes(pickle.dumps({"a": "calibration"}))
    assert store.calibrated(task) and store.count([task, task]) == 2
    assert not store.calibrated(task, hold=False)
    assert isinstance(store.grader(object(), hold=False), Grader)


def test_readable_secret_or_open_folder_is_refused(tmp_path):
    folder = tmp_path / "cal"
    CalibrationStore.open(folder)
    os.chmod(folder / SECRET_NAME, 0o644)
    with pytest.raises(ConfigError, match=r"may be read by others \(mode 644\)"):
        CalibrationStore.open(folder)
    with pytest.raises(ConfigError, match="may be read by others"):
        make_grader(object(), folder)
    os.chmod(folder / SECRET_NAME, 0o600)
    (folder / SECRET_NAME).write_bytes(b"short")
    with pytest.raises(ConfigError, match="holds 5 bytes, not 32"):
        CalibrationStore.open(folder)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    with pytest.raises(ConfigError, match=r"others may open the folder \(mode 755\).*chmod 700"):
        CalibrationStore.open(shared)
    assert not (shared / SECRET_NAME).exists()  # refused before a secret was made
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="cannot make or open the folder"):
        CalibrationStore.open(tmp_path / "file")


def test_the_runs_up_front_line_counts_its_tasks(tmp_path):
    """What a rollout says before its first episode: the store's share of the tasks it plays."""
    from opd_gym.runs.verify import calibrated_line

    tasks = load_suite("coding")
    store = CalibrationStore.open(tmp_path / "cal")
    store.entry(_task()).write_bytes(pickle.dumps({"a": "calibration"}))
    line = calibrated_line(str(store.path), tasks, ["fizzbuzz", "flatten"])
    assert line.startswith(f"1 of 2 tasks calibrated in {store.path}; the others calibrate")
    assert calibrated_line(str(store.path), tasks, ["fizzbuzz"]) == \
        f"1 of 1 tasks calibrated in {store.path}"
