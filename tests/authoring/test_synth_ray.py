"""`tasks synth` in parallel: threads and Ray actors on the session's two-node cluster try
the serial run's mutations in order and keep the same tasks. Apart from test_synth.py so that
only this file runs in the one worker that holds the Ray cluster (tests/conftest.py)."""

from __future__ import annotations

import json

import pytest

from opd_gym.authoring.synth import Progress
from opd_gym.authoring.synth_cli import synth_command


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.ray
def test_parallel_and_ray_synthesis_keep_the_serial_runs_tasks(tmp_path, ray_cluster):
    """`tasks synth` on a pinned library with 1 worker, 2 threads and 2 Ray actors (on the
    two-node cluster): the same manifest tasks; the parallel runs try a superset in order."""
    runs = {"serial": {"workers": 1}, "threads": {"workers": 2},
            "ray": {"workers": 2, "ray": True}}
    manifests, tried = {}, {}
    for name, options in runs.items():
        out = tmp_path / f"{name}.json"
        assert synth_command("inflection", str(out), 3, 0, **options) == 0, name
        manifests[name] = json.loads(out.read_text())
        tried[name] = set(Progress(out.with_name(out.name + ".progress.jsonl")).rows)
    tasks = manifests["serial"]["tasks"]
    assert len(tasks) == 3 and all(t["project"] == "inflection" for t in tasks)
    assert manifests["threads"]["tasks"] == tasks
    assert manifests["ray"]["tasks"] == tasks
    assert tried["serial"] <= tried["threads"] and tried["serial"] <= tried["ray"]
