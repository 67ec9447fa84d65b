"""ATIF in (`opd-gym score-trajectories`): a real run exported to Harbor trajectories and read
back is scored to the run's own OPD records; steps without the student's ids, malformed ATIF
and ids of another tokenizer are refused, writing nothing."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from opd_gym.cli import main
from opd_gym.errors import DatasetError
from opd_gym.records.opd_record import OPDRecord

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

FLOATS = ("teacher_token_logprobs", "teacher_topk_logprobs", "teacher_tail_logprobs",
          "student_logprobs")


@pytest.fixture(scope="module")
def exported(student_run, tmp_path_factory, monkeypatch_module):
    """The shared run (tiny student, tiny teacher, rule judge, top-8) as ATIF, with Harbor's
    venv where score-trajectories looks for it; (folder, run row, scoring flags)."""
    from harbor_check import harbor_python

    monkeypatch_module.setenv("OPD_GYM_HARBOR_VENV", str(harbor_python().parents[1]))
    run, student = student_run
    out = tmp_path_factory.mktemp("atif") / "atif"
    assert main(["export", str(run), "--to", "atif", "--out", str(out)]) == 0
    row = json.loads((run / "trajectories.jsonl").read_text().splitlines()[0])
    flags = ["--teacher", f"hf:{Path(student).parent / 'teacher'}", "--judge", "rule",
             "--topk", "8", "--tokenizer", f"hf:{student}", "--student-temperature", "1.0"]
    return out, row, flags


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def _same(got: dict, stored: dict) -> None:
    """Every field of the run's record, exactly, but the timing and the logprobs (1e-5)."""
    for key, value in stored.items():
        if key == "timing":
            continue
        if key in FLOATS and value is not None:
            a, b = (OPDRecord.from_dict(r) for r in (got, stored))
            left, right = getattr(a, key), getattr(b, key)
            assert left.shape == right.shape, key
            assert all(math.isclose(x, y, abs_tol=1e-5) or (math.isnan(x) and math.isnan(y))
                       or x == y for x, y in zip(left.ravel(), right.ravel(), strict=True)), key
        else:
            assert got[key] == value, key


def test_scoring_the_exported_trajectories_gives_the_runs_own_records(exported, tmp_path,
                                                                        capsys):
    """The folder (Harbor's trial layout) read back: one record per agent step with its
    trajectory and step ids, each equal to the run's (teacher top-K ids exactly, logprobs
    within 1e-5, the rule judge's hint, the exact-or-refused marks); checked with Harbor's
    model. The same from the index and from the Python function."""
    from opd_gym import score_trajectory

    folder, row, flags = exported
    out = tmp_path / "scored.jsonl"
    assert main(["score-trajectories", str(folder), "--out", str(out), *flags]) == 0
    assert "Harbor's Trajectory model" in capsys.readouterr().out
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    (trajectory_file,) = folder.glob("*/agent/trajectory.json")
    trajectory = json.loads(trajectory_file.read_text())
    agent = [s["step_id"] for s in trajectory["steps"] if s["source"] == "agent"]
    assert [line["step_id"] for line in lines] == agent and len(agent) == len(row["opd"]) == 3
    assert {line["trajectory_id"] for line in lines} == {trajectory["trajectory_id"]}
    for line, stored in zip(lines, row["opd"], strict=True):
        _same(line, stored)
    assert all(line["hint"] for line in lines)  # the rule judge's hints, grade's included
    assert "hidden tests failed (test_fizzbuzz)" in lines[-1]["hint"]
    again = tmp_path / "again.jsonl"
    assert main(["score-trajectories", str(folder / "index.jsonl"), "--out", str(again),
                 *flags]) == 0
    assert [json.loads(x)["teacher_topk_ids"] for x in again.read_text().splitlines()] == [
        r["teacher_topk_ids"] for r in row["opd"]]
    records = score_trajectory(trajectory, teacher=flags[1], topk=8,
                               student_tokenizer=flags[7], student_temperature=1.0)
    assert [r.teacher_topk_ids.tolist() for r in records] == [
        r["teacher_topk_ids"] for r in row["opd"]]


def _write(trajectory: dict, path: Path) -> Path:
    path.write_text(json.dumps(trajectory))
    return path


def test_refusals_write_nothing_and_reconstruct_marks_the_records(exported, tmp_path,
                                                                   capsys):
    """Steps without the student's ids: exit 2, one line naming the field and how to get
    it, no file; --reconstruct scores them marked retokenized (no completion ids) or
    reconstructed (no prompt ids). Malformed ATIF (Harbor's model; our structural checks),
    another tokenizer's ids (a student tokenizer that is not the teacher's, ids past the
    teacher's vocabulary) and ids with no tokenizer to check them: refused."""
    from opd_gym.exports.atif_check import check_structure

    folder, row, flags = exported
    (source,) = folder.glob("*/agent/trajectory.json")
    original = json.loads(source.read_text())
    stripped = copy.deepcopy(original)
    agent = [s for s in stripped["steps"] if s["source"] == "agent"]
    for key in ("completion_token_ids", "prompt_token_ids", "logprobs"):
        del agent[0]["metrics"][key]
    del agent[1]["metrics"]["prompt_token_ids"]
    path = _write(stripped, tmp_path / "stripped.json")
    out = tmp_path / "out.jsonl"

    def refused(argv: list[str], *phrases: str) -> None:
        capsys.readouterr()
        assert main(["score-trajectories", *argv, "--out", str(out), *flags]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and all(p in err for p in phrases), err
        assert not out.exists() and not list(tmp_path.glob(".out.jsonl*"))

    refused([str(path)], "2 of 3 agent steps", "completion_token_ids", "collect_rollout_details",
            "--reconstruct")
    assert main(["score-trajectories", str(path), "--out", str(out), "--reconstruct",
                 *flags]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [x["retokenized"] for x in lines] == [True, False, False]
    assert [x["reconstructed"] for x in lines] == [False, True, False]
    assert lines[0]["student_logprobs"] is None  # none recorded, none made up
    assert lines[1]["token_ids"] == row["opd"][1]["token_ids"]  # the sampled ids stay
    assert lines[2]["extends_previous"] is None  # the step before it has no prompt ids
    _same(lines[2], {**row["opd"][2], "extends_previous": None})
    out.unlink()

    bad = copy.deepcopy(original)
    bad["steps"][0]["metrics"] = {"prompt_tokens": 1}  # metrics on the system step
    refused([str(_write(bad, tmp_path / "bad.json"))],
            "step 1: metrics only belong on agent steps")  # ours, before Harbor's
    bad = copy.deepcopy(original)
    bad["steps"][1]["tokens"] = [1]  # a key ATIF does not have: only Harbor's model knows
    check_structure(bad, "bad.json")
    refused([str(_write(bad, tmp_path / "bad.json"))],
            "not a valid ATIF trajectory under Harbor's model", "Extra inputs")
    with pytest.raises(DatasetError, match="2 logprobs for 3 completion token ids"):
        broken = copy.deepcopy(original)
        step = next(s for s in broken["steps"] if s["source"] == "agent")
        step["metrics"]["completion_token_ids"] = [1, 2, 3]
        step["metrics"]["logprobs"] = [-1.0, -2.0]
        check_structure(broken, "broken.json")

    foreign = copy.deepcopy(original)
    next(s for s in foreign["steps"] if s["source"] == "agent")[
        "metrics"]["completion_token_ids"][0] = 10 ** 6
    refused([str(_write(foreign, tmp_path / "foreign.json"))], "token id 1000000",
            "outside the teacher's vocabulary")
    capsys.readouterr()
    other = [*flags[:7], "smollm2", *flags[8:]]  # the student's tokenizer is not the teacher's
    assert main(["score-trajectories", str(source), "--out", str(out), *other]) == 2
    assert capsys.readouterr().err.startswith("opd-gym: error: tokenizers differ")
    assert not out.exists()
    no_tokenizer = [f for i, f in enumerate(flags) if i not in (6, 7)]
    assert main(["score-trajectories", str(source), "--out", str(out), *no_tokenizer]) == 2
    assert "--tokenizer unchecked" in capsys.readouterr().err and not out.exists()
