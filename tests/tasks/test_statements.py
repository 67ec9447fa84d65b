"""Bug-report statements of synthesized bugs (issue 30, point 3): the writer turns a failing
test's own call and pytest's failure into a snippet with observed and expected behaviour, the
checker rejects every leak class, and every statement of the committed `repo` manifest passes
it (no Docker: the failures were captured once, the statements are committed)."""

from __future__ import annotations

import pytest

from opd_gym.tasks.repo_suite import _project, manifest_path
from opd_gym.tasks.statements import (
    EXPECTED_LABELS,
    OBSERVED_LABELS,
    calls_changed_function,
    find_repro,
    parse_failure,
    statement_problems,
)
from opd_gym.tasks.synth import Mutation, check_statement, read_manifest, write_statement

PATH = "more_itertools/more.py"
FUNCTION = "windowed_complete"
TEST = "tests/test_more.py::WindowedCompleteTests::test_basic"
GOOD = """Wrong result: [] instead of [(1,)]

After upgrading to more-itertools 11.2.1, this snippet misbehaves:

```python
import more_itertools as mi

list(mi.windowed_complete([1, 2, 3], 1))
```

Observed: It returns `[]`
Expected: It returns `[((), (1,), (2, 3))]`
"""


def problems(statement: str, lines: tuple[str, ...] = ("return ()",)) -> list[str]:
    """The checker on the sample statement's bug."""
    return statement_problems(statement, path=PATH, function=FUNCTION, mutated_lines=lines,
                              test_ids=[TEST])


def test_a_report_with_a_public_call_in_its_snippet_passes():
    assert problems(GOOD) == []
    assert calls_changed_function(GOOD, FUNCTION)  # allowed in the snippet, counted


@pytest.mark.parametrize(("change", "caught"), [
    # the changed file: its path, or its basename as a file name
    (lambda s: s + "\nThe bug is in more_itertools/more.py.", "changed file"),
    (lambda s: s + "\nSee more.py.", "basename"),
    (lambda s: s + "\nmore_itertools.more looks wrong.", "changed module"),
    # the changed function blamed in prose, in any spelling
    (lambda s: s.replace("Wrong result", "`windowed_complete` is broken"), "changed function"),
    (lambda s: s + "\nwindowed_complete() drops windows.", "changed function"),
    (lambda s: s + "\nmi.windowed_complete looks wrong.", "changed function"),
    (lambda s: s + "\nwindowed_complete is broken.", "changed function"),
    # the mutated line, anywhere (the snippet too)
    (lambda s: s.replace("list(mi", "return ()\nlist(mi"), "mutated line"),
    # a test's name or id, anywhere
    (lambda s: s + "\nFound by WindowedCompleteTests.", "names the test"),
    (lambda s: s + "\ntest_basic fails.", "names the test"),
    (lambda s: s + f"\n{TEST}", "test id"),
    # the three parts a report needs
    (lambda s: s.replace("Observed:", "Got:"), "no observed"),
    (lambda s: s.replace("Expected:", "Wanted:"), "no expected"),
    (lambda s: s.split("```")[0] + s.split("```")[2], "no reproduction snippet"),
])
def test_the_checker_rejects_each_leak_class(change, caught):
    found = problems(change(GOOD))
    assert any(caught in p for p in found), found


def test_plain_words_equal_to_a_function_name_are_not_blame():
    """`first` or `merge` as English words are fine; as code they are blame."""
    text = GOOD.replace("this snippet", "the first call")
    assert statement_problems(text, path="toolz/itertoolz.py", function="first",
                              mutated_lines=(), test_ids=[]) == []
    assert statement_problems(text + "\n`first` is wrong", path="toolz/itertoolz.py",
                              function="first", mutated_lines=(), test_ids=[])


def test_failure_messages_keep_their_test_frames():
    failure = parse_failure("@/usr/lib/python3.11/re/_parser.py:435|/workspace/t.py:9|"
                            "/workspace/pkg/m.py:3\nre.error: bad")
    assert failure.crash == ("/usr/lib/python3.11/re/_parser.py", 435)
    assert failure.frames == (("t.py", 9), ("pkg/m.py", 3)) and failure.text == "re.error: bad"
    old = parse_failure("@/workspace/t.py:9\nAssertionError: assert 1 == 2")  # older logs
    assert old.crash == ("t.py", 9) and old.frames == ()


TESTS = {"tests/test_x.py": '''\
import doctest
import pytest
import lib
from lib import f

CASES = [("a", "A"), ("b", "B")]


@pytest.mark.parametrize(("given", "wanted"), CASES)
def test_param(given, wanted):
    assert wanted == lib.upper(given)


def test_local():
    data = [3, 1, 2]
    result = f(data, key=None)
    assert result == [1, 2, 3]


def test_raises():
    with pytest.raises(ValueError):
        f(-1)


def test_docs():
    assert doctest.testmod(lib).failed == 0
'''}


def test_the_writer_takes_the_call_and_never_inverts():
    """`assert expected == call(...)`: observed is the call's side, whatever its position."""
    repro = find_repro(TESTS, "tests/test_x.py::test_param[b-B]",
                       "@/workspace/tests/test_x.py:11\nAssertionError: assert 'B' == 'b'")
    assert repro is not None and repro.kind == "value"
    assert repro.snippet == "import lib\n\nlib.upper('b')"  # the parametrize row, inlined
    assert repro.observed == "it returns `'b'`" and repro.expected == "it returns `'B'`"


def test_the_writer_inlines_locals_and_reports_exceptions_and_missing_errors():
    repro = find_repro(TESTS, "tests/test_x.py::test_local",
                       "@/workspace/lib.py:4|/workspace/tests/test_x.py:16|/workspace/lib.py:4\n"
                       "TypeError: 'NoneType' object is not callable")
    assert repro is not None and repro.kind == "raises"
    assert repro.snippet == "from lib import f\n\ndata = [3, 1, 2]\n\nf(data, key=None)"
    assert repro.observed == "`TypeError: 'NoneType' object is not callable` is raised"
    missing = find_repro(TESTS, "tests/test_x.py::test_raises",
                         "@/workspace/tests/test_x.py:21\nFailed: DID NOT RAISE "
                         "<class 'ValueError'>")
    assert missing is not None and missing.kind == "no_raise"
    assert missing.snippet.endswith("f(-1)") and missing.expected == "`ValueError` is raised"


def test_a_doctest_counter_is_never_evidence_but_a_doctest_example_is():
    assert find_repro(TESTS, "tests/test_x.py::test_docs",
                      "@/workspace/tests/test_x.py:25\nAssertionError: assert 3 == 0") is None
    report = ("057     >>> double(2)\nExpected:\n    4\nGot:\n    5\n\n"
              "/workspace/lib.py:57: DocTestFailure")
    repro = find_repro(TESTS, "lib.py::lib.double", report)
    assert repro is not None and repro.kind == "doctest"
    assert (repro.snippet, repro.observed, repro.expected) == (">>> double(2)", "5", "4")


ORDINAL_NEGATED = {  # a real mutant of inflection 0.5.1 (an earlier suite's 3e7e9416df)
    "col": 7, "end_col": 35, "end_line": 226, "function": "ordinal", "kind": "negate",
    "line": 226, "original": "number % 100 in (11, 12, 13)", "path": "inflection/__init__.py",
    "replacement": "not (number % 100 in (11, 12, 13))"}


def test_a_real_mutant_gets_a_report_with_all_three_parts():
    """A real inflection mutant, with the failure its validation run recorded: `ordinal`
    gives '-1th' for -1."""
    project = _project("inflection")
    mutation = Mutation(**ORDINAL_NEGATED)
    f2p = ["test_inflection.py::test_ordinal[-1--1st]",
           "test_inflection.py::test_ordinal[-101--101st]"]
    message = ("@/workspace/test_inflection.py:416|/workspace/test_inflection.py:416\n"
               "AssertionError: assert '-1st' == '-1th'\n  \n  - -1th\n  ?    -\n"
               "  + -1st\n  ?   +")  # `assert ordinal == number + inflection.ordinal(number)`
    statement = write_statement(project, mutation, [message] * len(f2p), f2p)
    assert "```python\nimport inflection\n\n'-1' + inflection.ordinal('-1')\n```" in statement
    assert any(f"{label} It returns `'-1th'`" in statement for label in OBSERVED_LABELS)
    assert any(f"{label} It returns `'-1st'`" in statement for label in EXPECTED_LABELS)
    assert check_statement(project, mutation, statement, f2p) == []
    assert write_statement(project, mutation, [message] * len(f2p), f2p) == statement  # seeded


def test_every_manifest_statement_passes_the_checker():
    records = read_manifest(manifest_path())["tasks"]
    assert len(records) >= 125
    for record in records:
        mutation = Mutation(**record["mutation"])
        found = check_statement(_project(record["project"]), mutation, record["statement"],
                                record["fail_to_pass"] + record["pass_to_pass"])
        assert found == [], f"{record['id']}: {found}"
