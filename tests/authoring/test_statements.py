"""Bug-report statements of synthesized bugs (issue 30, point 3): the writer turns a failing
test's own call and pytest's failure into a snippet with observed and expected behaviour, the
checker rejects every leak class, and every statement of the committed `repo` manifest passes
it (no Docker: the failures were captured once, the statements are committed)."""

from __future__ import annotations

import pytest

from opd_gym.authoring.statements import (
    EXPECTED_LABELS,
    OBSERVED_LABELS,
    calls_changed_function,
    find_repro,
    parse_failure,
    statement_problems,
)
from opd_gym.authoring.synth import Mutation, check_statement, read_manifest, write_statement
from opd_gym.tasks.repo_suite import _project, manifest_path

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


IN_PACKAGE = {"pkg/tests/test_y.py": '''\
from ..core import Box
from . import helpers


def test_setattr():
    b = Box(foo='bar')
    b.values = 'uh oh'
    assert b.values == 'uh oh'


def test_item():
    b = Box()
    b['k'] += helpers.one()
'''}


def test_a_failing_store_is_shown_whole_and_imports_are_absolute():
    """An exception from an assignment's store (`__setattr__`, `__setitem__`) is reproduced by
    the assignment, never by its bare value (`'uh oh'` alone runs fine); a test module's
    relative imports become absolute (a snippet runs outside the package)."""
    repro = find_repro(IN_PACKAGE, "pkg/tests/test_y.py::test_setattr",
                       "@/workspace/pkg/core.py:9|/workspace/pkg/tests/test_y.py:7|"
                       "/workspace/pkg/core.py:9\nTypeError: attribute name must be string")
    assert repro is not None and repro.kind == "raises"
    assert repro.snippet == "from pkg.core import Box\n\nb = Box(foo='bar')\n\nb.values = 'uh oh'"
    augmented = find_repro(IN_PACKAGE, "pkg/tests/test_y.py::test_item",
                           "@/workspace/pkg/core.py:9|/workspace/pkg/tests/test_y.py:13|"
                           "/workspace/pkg/core.py:9\nKeyError: 'k'")
    assert augmented is not None
    assert augmented.snippet.splitlines()[-1] == "b['k'] += helpers.one()"
    assert "from pkg.tests import helpers" in augmented.snippet


STATEFUL = {"tests/test_w.py": '''\
from lib import Writer, normalize, extend, once


def test_writer():
    w = Writer(5)
    assert w.write(b"123") == b"123"
    unrelated = Writer(1)
    assert w.write(b"45") == b"45"


def test_rebinding():
    headers = normalize([("a", "1")])
    headers = extend(headers, "b")
    assert len(headers) == 2


def test_branch():
    w = Writer(5)
    if OLD:
        assert old_write(w) == b""
    else:
        assert w.write(b"123456") == b""


def test_compare():
    d = normalize([])
    assert d == {"a": 1}


def test_counter():
    count = 0

    @once
    def get():
        nonlocal count
        count += 1
        return 42

    assert get() == 42
'''}


def test_what_the_test_did_with_an_object_before_the_failure_is_in_the_snippet():
    """A writer that fails on its second write needs its first (its state); a name rebound
    from itself (`headers = extend(headers, ...)`) needs its earlier binding too. Without
    them the snippet would not fail, or would not run."""
    repro = find_repro(STATEFUL, "tests/test_w.py::test_writer",
                       "@/workspace/lib.py:9|/workspace/tests/test_w.py:8|/workspace/lib.py:9\n"
                       "ValueError: too much data")
    assert repro is not None
    assert repro.snippet == ("from lib import Writer\n\nw = Writer(5)\n"
                             "assert w.write(b'123') == b'123'\n\nw.write(b'45')")
    rebound = find_repro(STATEFUL, "tests/test_w.py::test_rebinding",
                         "@/workspace/tests/test_w.py:14\nAssertionError: assert 1 == 2")
    assert rebound is not None and rebound.snippet.endswith(
        "headers = normalize([('a', '1')])\nheaders = extend(headers, 'b')\n\nlen(headers)")
    branch = find_repro(STATEFUL, "tests/test_w.py::test_branch",  # the `if` never ran
                        "@/workspace/lib.py:9|/workspace/tests/test_w.py:22|/workspace/lib.py:9"
                        "\nValueError: too much data")
    assert branch is not None
    assert branch.snippet == "from lib import Writer\n\nw = Writer(5)\n\nw.write(b'123456')"


def test_an_error_from_a_comparison_shows_the_comparison():
    """`assert d == {...}` raising: a bare name cannot raise, the comparison (`__eq__`) did."""
    repro = find_repro(STATEFUL, "tests/test_w.py::test_compare",
                       "@/workspace/lib.py:9|/workspace/tests/test_w.py:27|/workspace/lib.py:9"
                       "\nIndexError: list index out of range")
    assert repro is not None and repro.snippet.splitlines()[-1] == "d == {'a': 1}"
    assert repro.expected == "it runs without an error"


def test_a_local_def_with_nonlocal_becomes_a_snippet_that_compiles():
    """A test's local def hoisted to the snippet's top level: `nonlocal` is `global` there
    (a module-level `nonlocal` parses but does not compile), and the name is defined."""
    repro = find_repro(STATEFUL, "tests/test_w.py::test_counter",
                       "@/workspace/tests/test_w.py:39\nAssertionError: assert <object object> "
                       "== 42")
    assert repro is not None
    compile(repro.snippet, "snippet", "exec")
    assert "global count" in repro.snippet and "count = 0" in repro.snippet


@pytest.mark.parametrize(("snippet", "caught"), [
    ("from more_itertools import first\n\n'uh oh'", "reaches no code"),
    ("import more_itertools as mi\n\nx = {'a': [1]}", "reaches no code"),
    ("from .more import first\n\nfirst([])", "imports relatively"),
    ("first([)", "not valid Python"),
])
def test_the_checker_rejects_a_snippet_that_cannot_reproduce(snippet, caught):
    statement = GOOD.replace(GOOD.split("```")[1].partition("\n")[2], snippet + "\n")
    assert statement != GOOD
    assert any(caught in p for p in problems(statement)), problems(statement)


def test_the_checker_rejects_a_memory_address_even_cut_short():
    """pytest cuts a long repr in its middle (`<built-in me...7f66a8694fc0>`): the address
    that is left would make the statement differ from run to run."""
    for shown in ("<object at 0x7f66a8694fc0>", "[<built-in me...7f66a8694fc0>]"):
        found = problems(GOOD.replace("It returns `[]`", f"It returns `{shown}`"))
        assert any("memory address" in p for p in found), found


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
