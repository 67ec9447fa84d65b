"""Synthesized bugs: mutations replay byte for byte, statements leak nothing, validation keeps
only bugs the suite catches (real pytest in the sandbox image), and `tasks synth` works end to
end on a small real project folder."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from opd_gym.authoring.synth import (
    GREPPABLE,
    Mutation,
    Progress,
    baseline,
    build_task,
    check_statement,
    difficulty,
    find_mutations,
    kind_group,
    load_manifest,
    project_from_dir,
    project_from_library,
    resolve_project,
    schedule,
    split_tests,
    statement_leaks,
    validate_mutation,
    write_statement,
)
from opd_gym.authoring.synth_cli import synth_command
from opd_gym.errors import DatasetError

CODE = '''\
"""A tiny library to mutate."""


def clamp(x, low, high):
    """Keep x within [low, high]."""
    if x < low:
        return low
    if x > high:
        return high
    return x


def total(items, start=0):
    result = start
    for item in items:
        result = result + item
    return result


def window(seq, size):
    return [seq[i:i + size] for i in range(len(seq) - size + 1)]


def both(a, b):
    return a and b


def log(message):
    print(message)


def describe(x):
    log("describing")
    return "small" if x < 10 else "big"


def power(base, exp):
    return pow(base, exp)


def _private(x):
    return x + 1


def unused(x):
    return x * 2
'''

TESTS = '''\
from minicalc import both, clamp, describe, power, total, window


def test_clamp_low():
    assert clamp(-5, 0, 10) == 0


def test_clamp_high():
    assert 10 == clamp(50, 0, 10)


def test_clamp_mid():
    assert clamp(5, 0, 10) == 5


def test_total():
    assert total([1, 2, 3]) == 6


def test_window():
    assert window([1, 2, 3], 2) == [[1, 2], [2, 3]]


def test_both():
    assert both(True, False) is False


def test_describe():
    assert describe(3) == "small"


def test_power():
    assert power(2, 5) == 32
'''


@pytest.fixture
def project_dir(tmp_path: Path) -> Path:
    root = tmp_path / "minicalc"
    (root / "minicalc").mkdir(parents=True)
    (root / "minicalc" / "__init__.py").write_text(CODE)
    (root / "tests").mkdir()
    (root / "tests" / "test_minicalc.py").write_text(TESTS)
    (root / "README.md").write_text("minicalc\n")
    return root


def pick(mutations: list[Mutation], function: str, kind: str, original: str) -> Mutation:
    found = [m for m in mutations if m.function == function and m.kind == kind
             and m.original.strip() == original]
    assert len(found) == 1, [(m.kind, m.original, m.replacement) for m in found]
    return found[0]


def test_a_local_project_splits_into_code_and_suite(project_dir):
    project = project_from_dir(project_dir)
    assert set(project.tests) == {"tests/test_minicalc.py"}
    assert set(project.workspace) == {"minicalc/__init__.py", "README.md"}
    assert project.ini == "[pytest]\ntestpaths = tests\n"


def test_mutations_cover_every_kind_and_only_functions_the_suite_names(project_dir):
    mutations = find_mutations(project_from_dir(project_dir))
    kinds = {m.kind for m in mutations}
    assert {kind_group(k) for k in kinds} == {
        "binop", "boundary", "boolop", "negate", "remove_branch", "remove_call", "off_by_one",
        "swap_args", "return_value", "range_bound", "wrong_variable", "wrong_default",
        "swap_branch", "missing_case", "coordinated"}
    functions = {m.function for m in mutations}
    assert "_private" not in functions and "unused" not in functions and "log" not in functions
    assert {"clamp", "total", "window", "both", "describe", "power"} <= functions
    assert len({m.key for m in mutations}) == len(mutations)


def test_every_mutation_replays_to_the_same_bytes_and_parses(project_dir):
    project = project_from_dir(project_dir)
    text = CODE
    for mutation in find_mutations(project):
        once = mutation.apply(text)
        assert once != text and once == mutation.apply(text)
        ast.parse(once)
        # A manifest round trip (JSON) replays the very same change.
        again = Mutation(**json.loads(json.dumps(mutation.__dict__)))
        assert again == mutation and again.key == mutation.key
        assert Mutation(**json.loads(json.dumps(mutation.record()))) == mutation
        assert again.apply(text) == once
        # Only the span changed: the text before and after it is untouched.
        before_lines = text.splitlines()[: mutation.line - 1]
        assert once.splitlines()[: mutation.line - 1] == before_lines


def test_known_mutations_are_the_expected_edits(project_dir):
    mutations = find_mutations(project_from_dir(project_dir))
    binop = pick(mutations, "total", "binop", "+")
    assert binop.replacement.strip() == "-"
    assert "result = result - item" in binop.apply(CODE)
    swap = pick(mutations, "power", "swap_args", "base, exp")
    assert "pow(exp, base)" in swap.apply(CODE)
    branch = [m for m in mutations if m.function == "clamp" and m.kind == "remove_branch"]
    assert len(branch) == 2 and all(m.replacement == "pass" for m in branch)
    assert "if x < low" not in branch[0].apply(CODE)


BRANCHY = '''\
def sign(x, zero=0, strict=False, label="n"):
    if x > 0:
        return 1
    elif x < 0:
        return -1
    elif strict:
        raise ValueError(label)
    else:
        return zero


def pick_one(flag, a, b):
    if flag:
        out = a
    else:
        out = b
    return out


def first(items, n):
    return items[:n - 1]
'''


@pytest.fixture
def branchy(tmp_path: Path) -> Path:
    root = tmp_path / "branchy"
    (root / "branchy").mkdir(parents=True)
    (root / "branchy" / "__init__.py").write_text(BRANCHY)
    (root / "tests").mkdir()
    (root / "tests" / "test_branchy.py").write_text(
        "from branchy import first, pick_one, sign\n\n\ndef test_sign():\n"
        "    assert sign(2) == 1 and pick_one(True, 1, 2) == 1 and first([1, 2], 2) == [1]\n")
    return root


def test_subtle_kinds_are_the_expected_edits(branchy):
    """boundary, wrong_variable, wrong_default, swap_branch, missing_case and coordinated are
    real rewrites of the function: each parses and leaves no greppable footprint."""
    mutations = find_mutations(project_from_dir(branchy))
    by_kind: dict[str, list[Mutation]] = {}
    for m in mutations:
        by_kind.setdefault(kind_group(m.kind), []).append(m)
    apply = {m: m.apply(BRANCHY) for m in mutations}
    for text in apply.values():
        ast.parse(text)
    assert "if x >= 0:" in {apply[m].splitlines()[1].strip() for m in by_kind["boundary"]}
    assert {m.replacement for m in by_kind["wrong_default"]} >= {"1", "True", '""'}
    swapped = [apply[m] for m in by_kind["swap_branch"]]
    assert any("    if flag:\n        out = b\n    else:\n        out = a\n" in t for t in swapped)
    missing = [apply[m] for m in by_kind["missing_case"]]
    assert all(m.replacement == "" for m in by_kind["missing_case"])
    assert any("x < 0" not in t and "elif strict:" in t for t in missing)  # an elif gone
    assert any("elif strict:" not in t and "else:\n        return zero" in t for t in missing)
    wrong = [m for m in by_kind["wrong_variable"] if m.function == "pick_one"]
    assert wrong and {m.original for m in wrong} <= {"flag", "a", "b", "out"}
    assert all(m.replacement in {"flag", "a", "b", "out"} - {m.original} for m in wrong)
    slice_bound = [m for m in by_kind["boundary"] if m.function == "first"]
    assert {m.replacement for m in slice_bound} == {"(n - 1) + 1", "(n - 1) - 1"}
    pairs = by_kind["coordinated"]
    assert pairs and all(len(m.spans()) == 2 and len(m.kinds) == 2 for m in pairs)
    for m in pairs:
        (line, *_), (other, *_) = m.spans()
        assert line != other and m.lines_changed == 2 and not set(m.kinds) & GREPPABLE


def test_a_coordinated_mutation_replays_and_an_old_record_keeps_its_key(branchy):
    mutations = find_mutations(project_from_dir(branchy))
    pair = next(m for m in mutations if m.more)
    record = json.loads(json.dumps(pair.record()))
    assert Mutation(**record) == pair
    both = pair.apply(BRANCHY)
    assert Mutation(**record).apply(BRANCHY) == both
    one = Mutation(**{**record, "more": []})
    assert one.apply(BRANCHY) != both and "more" not in one.record()
    # A record written before `more` existed is the same JSON, so it keeps its key.
    single = next(m for m in mutations if not m.more)
    assert set(single.record()) == {"path", "function", "kind", "line", "col", "end_line",
                                    "end_col", "original", "replacement"}
    with pytest.raises(DatasetError, match="does not match"):
        pair.apply(both)
    before, after = pair.lines(BRANCHY)
    assert before.count("\n") == after.count("\n") >= 1


def test_greppable_kinds_come_last_and_difficulty_is_recorded(branchy):
    mutations = find_mutations(project_from_dir(branchy))
    order = schedule(mutations, 0)
    grep = [i for i, m in enumerate(order) if m.kind in GREPPABLE]
    assert grep and min(grep) == len(order) - len(grep)
    pair = next(m for m in mutations if m.more)
    assert difficulty(pair, ["a", "b"], 5) == {"kinds": list(pair.kinds), "lines_changed": 2,
                                               "fail_to_pass": 2, "tests_failing": 5}


def test_every_passing_test_guards():
    """PASS_TO_PASS is every id still passing; failing ids beyond the FAIL_TO_PASS cap are in
    neither list."""
    failing = [f"t.py::f{i:02}" for i in range(30)]
    passing = [f"t.py::p{i:03}" for i in range(500)]
    f2p, p2p = split_tests(failing, passing, frozenset({"t.py::f29"}), 0)
    assert f2p[0] == "t.py::f29" and len(f2p) == 20
    assert p2p == passing and not set(p2p) & set(failing)


def test_a_mutation_refuses_a_file_it_was_not_made_from(project_dir):
    mutation = find_mutations(project_from_dir(project_dir))[0]
    with pytest.raises(DatasetError, match="does not match"):
        mutation.apply("import os\n" + CODE)  # every line moved down by one


def test_the_schedule_is_seeded_and_visits_every_function_first(project_dir):
    mutations = find_mutations(project_from_dir(project_dir))
    first = schedule(mutations, 1)
    assert first == schedule(mutations, 1) and first != schedule(mutations, 2)
    assert sorted(first, key=lambda m: m.key) == sorted(mutations, key=lambda m: m.key)
    functions = {m.function for m in mutations}
    assert {m.function for m in first[: len(functions)]} == functions


def test_statements_read_like_a_report_and_leak_nothing(project_dir):
    project = project_from_dir(project_dir)
    mutations = find_mutations(project)
    mutation = pick(mutations, "clamp", "boundary", ">")
    ids = ["tests/test_minicalc.py::test_clamp_high"]
    # pytest's message for `assert 10 == clamp(50, 0, 10)` when clamp returns 50:
    messages = ["@/workspace/tests/test_minicalc.py:9|/workspace/tests/test_minicalc.py:9\n"
                "AssertionError: assert 10 == 50\n +  where 50 = clamp(50, 0, 10)"]
    statement = write_statement(project, mutation, messages, ids)
    assert "```python\nfrom minicalc import clamp\n\nclamp(50, 0, 10)\n```" in statement
    assert "It returns `50`" in statement.split("```")[2].splitlines()[2]  # observed: the call
    assert "It returns `10`" in statement.split("```")[2].splitlines()[3]
    assert check_statement(project, mutation, statement, ids) == []
    assert statement_leaks(project, mutation, statement, ids) == []
    # A message quoting the test's name keeps only the exception's type.
    bad = ["@/workspace/tests/test_minicalc.py:9|/workspace/tests/test_minicalc.py:9\n"
           "TypeError: test_clamp_high() broke"]
    assert "test_clamp_high" not in write_statement(project, mutation, bad, ids)
    # An exception is reported as such.
    boom = ["@/workspace/minicalc/__init__.py:5|/workspace/tests/test_minicalc.py:9|"
            "/workspace/minicalc/__init__.py:5\nTypeError: unsupported operand"]
    assert "`TypeError: unsupported operand` is raised" in write_statement(
        project, mutation, boom, ids)


def test_statement_leaks_catches_the_mutated_line_and_test_names(project_dir):
    project = project_from_dir(project_dir)
    mutation = pick(find_mutations(project), "total", "binop", "+")
    ids = ["tests/test_minicalc.py::test_total"]
    assert statement_leaks(project, mutation, "see result = result + item", ids)
    assert statement_leaks(project, mutation, "test_total fails", ids)
    assert statement_leaks(project, mutation, "tests/test_minicalc.py::test_total", ids)


def test_build_task_replays_the_record(project_dir):
    project = project_from_dir(project_dir)
    mutation = pick(find_mutations(project), "total", "binop", "+")
    record = {"mutation": mutation.__dict__, "statement": "total is broken",
              "fail_to_pass": ["tests/test_minicalc.py::test_total"],
              "pass_to_pass": ["tests/test_minicalc.py::test_clamp_mid"]}
    task = build_task(project, record)
    assert task.files["minicalc/__init__.py"] == mutation.apply(CODE)
    assert task.solution == {"minicalc/__init__.py": CODE}
    assert task.tests == {"tests/test_minicalc.py": TESTS}
    assert task.repo is not None and task.repo.synthesized
    assert task.test_ids == ("tests/test_minicalc.py::test_total",
                             "tests/test_minicalc.py::test_clamp_mid")
    assert task.pytest_ini == project.ini


def test_resolve_refuses_what_it_cannot_use(tmp_path):
    with pytest.raises(DatasetError, match="neither an sdist"):
        resolve_project(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "code.py").write_text("x = 1\n")
    with pytest.raises(DatasetError, match="no test suite found"):
        resolve_project(str(tmp_path / "empty"))


def test_synth_command_refuses_bad_input_in_one_line(tmp_path, capsys):
    assert synth_command(str(tmp_path / "nope.tar.gz"), None, 3, 0) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nope.tar.gz" in err
    assert synth_command("inflection", None, 0, 0) == 2
    assert "--max" in capsys.readouterr().err


def test_pinned_libraries_give_mutations_in_their_public_functions():
    project = project_from_library(__import__("opd_gym.tasks.libraries",
                                              fromlist=["library"]).library("inflection"))
    mutations = find_mutations(project)
    assert len(mutations) > 50
    assert {m.path for m in mutations} == {"inflection/__init__.py"}
    assert not any(m.function.startswith("_") for m in mutations)


# -- in the sandbox image ------------------------------------------------------------------
@pytest.fixture(scope="module")
def pool():
    from opd_gym.sandboxes import make_pool

    pool = make_pool("docker", size=1)
    yield pool
    pool.close()


@pytest.mark.docker
@pytest.mark.slow
def test_validation_keeps_caught_bugs_and_drops_survivors(tmp_path, project_dir, pool):
    project = project_from_dir(project_dir)
    base = baseline(project, pool)
    assert len(base.passing) == 8 and not base.unstable
    assert "tests/test_minicalc.py::test_total" in base.canaried
    mutations = find_mutations(project)

    caught = validate_mutation(project, base, pick(mutations, "total", "binop", "+"), pool)
    assert caught.kept, caught.reason
    assert caught.fail_to_pass == ("tests/test_minicalc.py::test_total",)
    assert set(caught.pass_to_pass) == set(base.passing) - {"tests/test_minicalc.py::test_total"}
    assert caught.canaried == 1 and caught.flaky == ()
    assert "total([1, 2, 3])\n```" in caught.statement
    assert "It returns `-6`" in caught.statement and "It returns `6`" in caught.statement
    assert check_statement(project, caught.mutation, caught.statement,
                           caught.fail_to_pass + caught.pass_to_pass) == []
    assert statement_leaks(project, caught.mutation, caught.statement,
                           caught.fail_to_pass + caught.pass_to_pass) == []

    # x <= low instead of x < low: no test tells them apart, so it is no task.
    survivor = validate_mutation(project, base, pick(mutations, "clamp", "boundary", "<"), pool)
    assert not survivor.kept and survivor.reason == "no test fails"


@pytest.mark.docker
@pytest.mark.slow
def test_synth_command_writes_a_replayable_manifest(tmp_path, project_dir, capsys):
    out = tmp_path / "mini.json"
    rc = synth_command(str(project_dir), str(out), 2, 0, workers=1)
    assert rc == 0, capsys.readouterr()
    data = json.loads(out.read_text())
    assert len(data["tasks"]) == 2
    assert data["projects"]["minicalc"]["tried"] >= 2
    tasks = load_manifest(out)
    assert len(tasks) == 2
    for task in tasks:
        assert task.repo is not None and task.repo.synthesized and task.repo.fail_to_pass
        (path, original), = task.solution.items()
        assert task.files[path] != original and original == CODE
    # Resumable: a second run tries nothing new and writes the same tasks.
    rows = Progress(out.with_name(out.name + ".progress.jsonl")).rows
    assert synth_command(str(project_dir), str(out), 2, 0, workers=1) == 0
    assert Progress(out.with_name(out.name + ".progress.jsonl")).rows == rows
    assert json.loads(out.read_text())["tasks"] == data["tasks"]


@pytest.mark.docker
def test_a_bug_that_removes_a_test_id_is_judged_not_crashed(tmp_path, pool):
    """A mutant can change which tests exist (a parametrize list built by the code): an id
    that passed on the original is then missing from the mutant's run. Validation counts it
    as failing (its FAIL_TO_PASS) instead of raising KeyError, as it once did on
    more-itertools."""
    root = tmp_path / "sizes"
    (root / "sizes").mkdir(parents=True)
    (root / "sizes" / "__init__.py").write_text("def sizes():\n    return [1, 2]\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_sizes.py").write_text(
        "import pytest\n\nfrom sizes import sizes\n\n\n"
        "@pytest.mark.parametrize('n', sizes())\ndef test_positive(n):\n    assert n > 0\n\n\n"
        "def test_two():\n    assert len(sizes()) == 2\n")
    project = project_from_dir(root)
    base = baseline(project, pool)
    assert "tests/test_sizes.py::test_positive[2]" in base.passing
    changed = [m for m in find_mutations(project)
               if m.function == "sizes" and m.original.strip() == "2"]
    assert changed, [(m.kind, m.original, m.replacement) for m in find_mutations(project)]
    verdict = validate_mutation(project, base, changed[0], pool)
    # A missing id has no failure to report, so no statement may be writable either.
    assert verdict.reason.startswith(("kept", "no FAIL_TO_PASS test can earn",
                                      "no statement passes the checker")), verdict
    assert verdict.failures >= 1


def test_compact_manifests_give_back_every_pass_to_pass_list_exactly(tmp_path):
    """Version 2 stores PASS_TO_PASS once per project (`suite`) and per task only the ids
    outside it (`not_passing`): reading gives the full sorted lists back; a version 1
    manifest (full lists) still reads; a compact record whose project has no suite is
    refused, naming the task."""
    from opd_gym.authoring.synth import compact_records, expand_records, read_manifest

    suite = [f"t.py::test_{i}" for i in range(8)]
    records = [{"id": "p-a", "project": "p", "mutation": {}, "fail_to_pass": [suite[0]],
                "pass_to_pass": suite[1:]},
               {"id": "p-b", "project": "p", "mutation": {}, "fail_to_pass": suite[2:4],
                "pass_to_pass": [suite[1]] + suite[5:]}]  # suite[4] failed beyond the cap
    projects, compact = compact_records({"p": {"version": "1"}}, records)
    assert projects["p"]["suite"] == sorted(suite)
    assert [r["not_passing"] for r in compact] == [[suite[0]], [suite[0], *suite[2:5]]]
    assert all("pass_to_pass" not in r for r in compact)
    data = {"version": 2, "projects": projects, "tasks": compact}
    assert expand_records(data)["tasks"] == records
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    assert read_manifest(path)["tasks"] == records
    path.write_text(json.dumps({"version": 1, "projects": {"p": {}}, "tasks": records}))
    assert read_manifest(path)["tasks"] == records
    path.write_text(json.dumps({"version": 2, "projects": {"p": {}}, "tasks": compact}))
    with pytest.raises(DatasetError, match="'p-a' stores its PASS_TO_PASS compactly"):
        read_manifest(path)
    path.write_text(json.dumps({"version": 9, "projects": {}, "tasks": []}))
    with pytest.raises(DatasetError, match="manifest version 9"):
        read_manifest(path)
