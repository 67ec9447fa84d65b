"""Every task source the Python API loads, named from the CLI: a `tasks synth` manifest and
SWE-bench-style rows with their repositories (`--repo`/`--repos`, config key `repos`), for
`tasks list/show`, `sandbox build` and a real `rollout`, whose run exports as SWE-bench
predictions. Real git, real Docker, real runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from repo_project import F2P, P2P, build_project

from opd_gym.authoring.synth import find_mutations, project_from_dir, task_id, write_manifest
from opd_gym.cli import build_parser, main
from opd_gym.runs import RunDirectory
from opd_gym.runs.config import read_config_file

REPO = "minicalc/minicalc"
INSTANCE = "minicalc__minicalc-1"
CALC = '''\
def total(items, start=0):
    """The sum of items, plus start."""
    result = start
    for item in items:
        result = result + item
    return result


def clamp(x, low, high):
    """x limited to [low, high]."""
    if x < low:
        return low
    if x > high:
        return high
    return x
'''
CALC_TESTS = '''\
from calc import clamp, total


def test_total():
    assert total([1, 2, 3]) == 6


def test_clamp():
    assert clamp(5, 0, 3) == 3
    assert clamp(2, 0, 3) == 2
'''


class Sources:
    """A SWE-bench JSONL over a real repository, a folder of repositories, and a manifest."""

    def __init__(self, root: Path) -> None:
        self.project = build_project(root / "swe")
        self.rows = root / "rows.jsonl"
        self.rows.write_text(json.dumps(self.project.row) + "\n")
        self.repos = root / "repos"  # the folder form: owner__name.bundle
        self.repos.mkdir()
        shutil.copy(self.project.bundle, self.repos / "minicalc__minicalc.bundle")
        calc = root / "calc"
        (calc / "calc").mkdir(parents=True)
        (calc / "calc" / "__init__.py").write_text(CALC)
        (calc / "tests").mkdir()
        (calc / "tests" / "test_calc.py").write_text(CALC_TESTS)
        project = project_from_dir(calc)
        mutation = next(m for m in find_mutations(project)
                        if m.function == "total" and m.kind == "binop")
        self.synth_id = task_id(project.name, mutation)
        self.manifest = root / "calc-tasks.json"  # as `opd-gym tasks synth -o` writes it
        write_manifest(self.manifest, project, [{
            "id": self.synth_id, "project": project.name, "mutation": mutation.__dict__,
            "statement": "total() returns negative sums for positive items.",
            "fail_to_pass": ["tests/test_calc.py::test_total"],
            "pass_to_pass": ["tests/test_calc.py::test_clamp"]}])


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Sources:
    return Sources(tmp_path_factory.mktemp("sources"))


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


# -- loading (no sandbox) --------------------------------------------------------------------
def test_a_synth_manifest_loads_by_its_own_fields(sources, capsys):
    rc, out, err = cli(capsys, "tasks", "list", "--tasks", sources.manifest)
    assert rc == 0, err
    assert sources.synth_id in out and out.strip().endswith("1 tasks")
    rc, out, err = cli(capsys, "tasks", "show", sources.synth_id, "--tasks", sources.manifest)
    assert rc == 0 and "hidden tests: tests/test_calc.py" in out
    assert "reference: calc/__init__.py" in out


@pytest.mark.parametrize("how", ["folder", "pairs"])
def test_swebench_rows_load_with_their_repositories(sources, capsys, how):
    flags = (["--repos", sources.repos] if how == "folder"
             else ["--repo", f"{REPO}={sources.project.path}"])
    rc, out, err = cli(capsys, "tasks", "list", "--tasks", sources.rows, *flags)
    assert rc == 0, err
    assert out.startswith(INSTANCE) and out.strip().endswith("1 tasks")
    rc, out, err = cli(capsys, "tasks", "show", INSTANCE, "--tasks", sources.rows, *flags)
    assert rc == 0 and "hidden tests: tests/test_core.py" in out and "hard" in out


def test_rows_without_their_repositories_are_refused_in_one_line(sources, capsys, tmp_path):
    rc, out, err = cli(capsys, "tasks", "list", "--tasks", sources.rows)
    assert rc == 2 and not out and len(err.strip().splitlines()) == 1
    assert "SWE-bench-style" in err and REPO in err
    assert "--repo OWNER/NAME=PATH" in err and "--repos FOLDER" in err
    (tmp_path / "empty").mkdir()
    rc, _, err = cli(capsys, "tasks", "list", "--tasks", sources.rows, "--repos",
                     tmp_path / "empty")
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert f"no repository for {REPO!r}" in err and f"--repo {REPO}=PATH" in err
    rc, _, err = cli(capsys, "tasks", "list", "--tasks", sources.rows, "--repo", "other/x=/nope")
    assert rc == 2 and f"no local checkout or bundle given for {REPO!r}" in err
    rc, _, err = cli(capsys, "tasks", "list", "--tasks", sources.manifest, "--repos",
                     sources.repos)
    assert rc == 2 and "synthesis manifest" in err


def test_a_config_file_names_rows_and_repositories(sources, tmp_path):
    roll = next(a for a in build_parser()._actions if a.dest == "command").choices["rollout"]
    toml = tmp_path / "run.toml"
    toml.write_text(f'tasks = "{sources.rows}"\nrepos = "{sources.repos}"\n')
    assert read_config_file(toml, roll._actions) == {"tasks": str(sources.rows),
                                                     "repos": str(sources.repos)}
    table = tmp_path / "table.toml"
    table.write_text(f'tasks = "{sources.rows}"\n[repo]\n"{REPO}" = "{sources.project.path}"\n')
    assert read_config_file(table, roll._actions)["repo"] == [f"{REPO}={sources.project.path}"]
    # a run's config.json holds the spec as a mapping: it reads back as the same flags
    saved = tmp_path / "config.json"
    saved.write_text(json.dumps({"tasks": {"source": str(sources.rows),
                                           "repos": {REPO: str(sources.project.path)}},
                                 "repo": [f"{REPO}={sources.project.path}"], "repos": None}))
    values = read_config_file(saved, roll._actions)
    assert values["tasks"] == str(sources.rows)
    assert values["repo"] == [f"{REPO}={sources.project.path}"] and values["repos"] is None
    python_form = tmp_path / "python.json"
    python_form.write_text(json.dumps({"tasks": {"swebench": str(sources.rows),
                                                 "repos": str(sources.repos)}}))
    assert read_config_file(python_form, roll._actions) == {
        "tasks": str(sources.rows), "schema": "swebench", "repos": str(sources.repos)}


# -- in Docker ---------------------------------------------------------------------------------
@pytest.mark.docker
def test_sandbox_build_builds_the_images_the_rows_need(sources, capsys, tmp_path):
    row = dict(sources.project.row, setup=["mkdir -p /opt/opd-test && echo ok > /opt/opd-test/m"])
    rows = tmp_path / "setup.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    rc, out, err = cli(capsys, "sandbox", "build", "--tasks", rows, "--repos", sources.repos,
                       "--quiet")
    assert rc == 0, err
    assert "1 task(s): 0 run in the sandbox image, 1 environment image(s) needed" in out
    assert "environment images ready: " in out
    rc, out, err = cli(capsys, "sandbox", "build", "--tasks", sources.manifest, "--quiet")
    assert rc == 0, err
    assert "1 task(s): 1 run in the sandbox image, 0 environment image(s) needed" in out
    rc, _, err = cli(capsys, "sandbox", "build", "--tasks", sources.rows, "--quiet")
    assert rc == 2 and "--repos FOLDER" in err and len(err.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def swe_run(sources, tmp_path_factory) -> Path:
    """A real run over the rows: the reference policy, 2 episodes of the one instance."""
    out = tmp_path_factory.mktemp("runs") / "swe"
    rc = main(["rollout", "--tasks", str(sources.rows), "--repos", str(sources.repos),
               "--policy", "reference", "--no-opd", "--sandbox", "docker", "--episodes", "2",
               "--out", str(out), "--quiet"])
    assert rc == 0
    return out


@pytest.mark.docker
def test_a_rollout_plays_swebench_rows_and_records_diffs_without_build_outputs(swe_run):
    rows = RunDirectory(swe_run).episodes()
    assert [r.task_id for r in rows] == [INSTANCE, INSTANCE] and all(r.passed for r in rows)
    config = json.loads((swe_run / "config.json").read_text())
    assert config["repos"] and config["tasks"]["repos"] == config["repos"]
    assert config["max_turns"] == 15  # no built-in suite: the default limit
    for row in rows:
        text = row.diff["text"]
        assert "diff --git a/minicalc/core.py b/minicalc/core.py" in text
        # the reference policy ran `python3 -m py_compile`, which wrote __pycache__/*.pyc
        assert ".pyc" not in text and "__pycache__" not in text and "diff --git" in text
        assert text.count("diff --git") == 1


@pytest.mark.docker
def test_the_report_marks_fail_to_pass_and_pass_to_pass(swe_run):
    row = RunDirectory(swe_run).episodes()[0]
    kinds = {t["name"]: t["kind"] for t in row.grade["tests"]}
    assert kinds == {"tests.test_core::test_median_even": "FAIL_TO_PASS",
                     **{f"tests.test_core::{i.partition('::')[2]}": "PASS_TO_PASS" for i in P2P}}
    assert len(F2P) == 1
    page = (swe_run / "report.html").read_text(encoding="utf-8")
    assert page.count('class="badge kind f2p"') == 2  # one F2P test in each of 2 episodes
    assert page.count('class="badge kind p2p"') == 2 * len(P2P)


@pytest.mark.docker
def test_the_run_exports_as_swebench_predictions(swe_run, capsys, tmp_path):
    out = tmp_path / "preds.jsonl"
    rc, stdout, err = cli(capsys, "export", swe_run, "--to", "swebench-predictions",
                          "--out", out)
    assert rc == 0, err
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    rows = RunDirectory(swe_run).episodes()
    with_patch = [r for r in rows if r.diff and r.diff.get("text")]
    assert len(with_patch) == 2 and len({r.task_id for r in with_patch}) == 1  # recount
    assert lines == [{"instance_id": INSTANCE, "model_name_or_path": "reference",
                      "model_patch": with_patch[0].diff["text"]}]
    assert "wrote 1 prediction(s)" in stdout
    assert "left out 1 episode(s): 1 another episode of the same instance" in stdout
    rc, stdout, err = cli(capsys, "export", swe_run, "--to", "swebench-predictions",
                          "--out", out, "--model-name", "my-model")
    assert rc == 0 and json.loads(out.read_text())["model_name_or_path"] == "my-model"


@pytest.mark.docker
def test_a_rollout_plays_a_synth_manifest(sources, tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["rollout", "--tasks", str(sources.manifest), "--policy", "reference",
               "--no-opd", "--sandbox", "docker", "--episodes", "1", "--out", str(out),
               "--quiet", "--no-report"])
    assert rc == 0
    (row,) = RunDirectory(out).episodes()
    assert row.task_id == sources.synth_id and row.passed
    assert "\n-        result = result - item\n+        result = result + item\n" in \
        row.diff["text"]
    assert ".pyc" not in row.diff["text"]
    kinds = {t["name"]: t["kind"] for t in row.grade["tests"]}
    assert kinds == {"tests.test_calc::test_total": "FAIL_TO_PASS",
                     "tests.test_calc::test_clamp": "PASS_TO_PASS"}


def test_rollout_uses_a_built_in_suites_own_turn_limit():
    import gymnasium as gym

    from opd_gym.cli import _suite_max_turns

    assert _suite_max_turns("repo") == gym.spec("opd_gym/Repo-v0").kwargs["max_turns"] == 30
    assert _suite_max_turns("coding") == gym.spec("opd_gym/Coding-v0").kwargs["max_turns"]
    assert _suite_max_turns({"source": "rows.jsonl", "repos": "x"}) == 15
