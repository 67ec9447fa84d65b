"""Host-held expectations (opd_gym/grading/held.py): which sites are held, how both runs are
rewritten, and how the host judges emitted values. Static; the Docker side is in
tests/security/test_split_collusion.py."""

from __future__ import annotations

from sandbox_module import opd_grading

from opd_gym.grading import held

TESTS = '''\
from calc import add


def test_plain():
    x = add(1, 2)
    assert x == 3
    assert add(2,
               2) == 40, "message"
    assert 5 != add(1, 1)
    assert add(0, 0) is not None


def test_branchy():
    if add(1, 1):
        assert add(1, 1) == 2
    assert add(7, 0) == 7
    return
    assert add(8, 0) == 8


def test_helper():
    def check(candidate):
        assert candidate(3, 4) == 7
        for n in range(2):
            assert candidate(n, 0) == n

    check(add)


def test_nothing_literal():
    expected = add(1, 1)
    assert add(2, 0) == expected
'''


def test_candidates_are_straight_line_literal_comparisons():
    found = held.candidates({"test_calc.py": TESTS}, ["test_calc.py"])
    assert found == {"test_calc.py::test_plain": (1, 2, 3, 4),
                     "test_calc.py::test_branchy": (1,),
                     "test_calc.py::test_helper": (1,)}


def test_both_runs_hide_the_literal_and_differ_nowhere_at_a_held_site():
    canary = TESTS.replace("2) == 40", "2) == 41")
    runs = held.rewrite(({"test_calc.py": TESTS}, {"test_calc.py": canary}),
                        {"test_calc.py::test_plain": (1, 2)}, ((), ()))
    real, other = runs.files[0]["test_calc.py"], runs.files[1]["test_calc.py"]
    assert real == other  # the canary's literal is held on the host, not in the text
    assert "40" not in real and "41" not in real and "== 3\n" not in real
    assert real.count("\n") == TESTS.count("\n")  # line numbers kept
    assert runs.expect[0]["test_calc.py::test_plain"] == {1: ("==", 3), 2: ("==", 40)}
    assert runs.expect[1]["test_calc.py::test_plain"] == {1: ("==", 3), 2: ("==", 41)}
    assert not runs.unheld


def test_a_negated_canary_is_held_as_the_inverse_operator():
    negated = TESTS.replace("assert x == 3", "assert not (x == 3)")
    runs = held.rewrite(({"test_calc.py": TESTS}, {"test_calc.py": negated}),
                        {"test_calc.py::test_plain": (1,)}, ((), ()))
    assert runs.files[0]["test_calc.py"] == runs.files[1]["test_calc.py"]
    assert runs.expect[1]["test_calc.py::test_plain"] == {1: ("!=", 3)}
    assert not runs.unheld


def test_a_site_one_run_cannot_hold_is_held_in_neither_and_its_test_cannot_pass():
    other = TESTS.replace("assert x == 3", "assert x in (3,)")
    runs = held.rewrite(({"test_calc.py": TESTS}, {"test_calc.py": other}),
                        {"test_calc.py::test_plain": (1,)}, ((), ()))
    assert runs.files[0]["test_calc.py"] == TESTS and runs.files[1]["test_calc.py"] == other
    assert runs.unheld == {"test_calc.py::test_plain"}
    assert not held.met([(1, "3", True)], runs.expect[0]["test_calc.py::test_plain"])


def test_probes_keep_the_assertion():
    runs = held.rewrite(({"test_calc.py": TESTS}, {"test_calc.py": TESTS}),
                        {"test_calc.py::test_plain": (1,)}, ((), ()), probe=True)
    assert 'assert __import__("opd_grading").hold(1, (x)) == 3' in runs.files[0]["test_calc.py"]


def test_the_host_compares_as_python_does_on_plain_data():
    assert held.matches(held.read("3.0"), "==", 3)
    assert held.matches(held.read("[True, 2.5]"), "==", [1, 2.5])
    assert held.matches(held.read("{1, 2}"), "==", frozenset({1, 2}))
    assert not held.matches(held.read("1"), "is", True)  # `1 is True` is False
    assert held.matches(held.read("None"), "is", None)
    assert held.matches(held.read("4"), "!=", 3)
    assert not held.matches(held.read(""), "==", "")  # no value: never equal
    assert not held.matches(held.read("__import__('os')"), "==", 0)
    # an emission that is no literal stood for an object, never for a singleton
    assert held.matches(held.read(""), "is not", None)
    assert held.matches(held.read(""), "is not", False)
    assert not held.matches(held.read(""), "is", None)
    assert not held.matches(held.read(""), "is not", 1)  # no singleton named: no verdict
    assert not held.matches(held.read(""), "!=", None)
    assert not held.met([], {1: ("==", 3)})  # not emitted
    assert not held.met([(1, "3", True), (1, "3", True)], {1: ("==", 3)})  # twice
    assert held.unmet([(1, "4", True)], {1: ("==", 3)}) == "the value compared was 4"


def test_calibration_holds_only_plain_values_meeting_the_literal_once():
    sites = {"test_calc.py::test_plain": (1, 2, 3, 4)}
    probes = {"test_calc.py::test_plain": [(1, "3", True), (2, "40", False), (3, "2", True),
                                           (3, "2", True), (4, "1", True)]}
    kept = held.calibrated(sites, {"test_calc.py": TESTS}, probes, ["test_calc.py::test_plain"])
    assert kept == {"test_calc.py::test_plain": (1, 4)}
    assert held.calibrated(sites, {"test_calc.py": TESTS}, probes, []) == {}



def test_calibration_vouches_for_identity_with_a_singleton_whatever_the_type():
    """`x is not None` is exact on any object: the reference's object (no builtin data: its
    emission is no literal) vouches for the site; `==` on it does not."""
    source = ("import calc\n\n\ndef test_zone():\n    zone = calc.zone()\n"
              "    assert zone is not None\n    assert zone == 3\n")
    sites = held.candidates({"test_z.py": source}, ["test_z.py"])
    assert sites == {"test_z.py::test_zone": (1, 2)}, sites
    probes = {"test_z.py::test_zone": [(1, "", False), (2, "", False)]}
    kept = held.calibrated(sites, {"test_z.py": source}, probes, ["test_z.py::test_zone"])
    assert kept == {"test_z.py::test_zone": (1,)}


class _Folded(str):
    def __eq__(self, other):
        return str.lower(self) == str.lower(other)

    __hash__ = str.__hash__


class _Shouty(int):
    def __repr__(self):
        return "LOUD"


def test_canonical_says_plain_only_where_pythons_own_comparison_sees_the_base_value():
    """Calibration vouches only for plain values: builtin data, or a subclass none of whose
    classes before its builtin base changes comparison, hashing, truth or arithmetic (a
    namedtuple, a str or int Enum, a dict subclass adding attribute access, a repr of its
    own); a class with its own `__eq__` (OrderedDict, Counter, a case-folding str) or no
    builtin base at all (a plain Enum) is not."""
    import collections
    import enum

    canonical = opd_grading()["canonical"]

    class Colour(str, enum.Enum):  # noqa: UP042 - the mixin form suites use
        RED = "red"

    class Level(enum.IntEnum):
        HIGH = 3

    class Plain(enum.Enum):
        A = 1

    class Munch(dict):
        def __getattr__(self, key):
            return self[key]

    pair = collections.namedtuple("Pair", "x y")
    same = [(pair(1, "a"), "(1, 'a')"), (Colour.RED, "'red'"), (Level.HIGH, "3"),
            (Munch(a=[1]), "{'a': [1]}"), (_Shouty(4), "4"), ([pair(1, 2)], "[(1, 2)]"),
            (collections.defaultdict(int, a=1), "{'a': 1}")]
    for value, text in same:
        assert canonical(value) == (text, True), value
        assert eval(text) == value  # noqa: S307 - what the host compares is what Python did
    for value in [_Folded("A"), collections.OrderedDict(a=1), collections.Counter("ab"),
                  {"k": _Folded("x")}, (1, collections.OrderedDict())]:
        assert canonical(value)[1] is False, value
    assert canonical(Plain.A) == ("", False)


TRUTH_TESTS = '''\
import unittest

import calc
from calc import is_even

TABLE = [1, 2]


def test_truth():
    assert is_even(2)
    assert not is_even(3), "odd"
    assert not not calc.is_even(4)
    assert TABLE
    assert is_even(2) and is_even(4)
    assert isinstance(is_even(5), bool)
    assert is_even(6).real
    assert str(is_even(8)).startswith("T")


class TestTruth(unittest.TestCase):
    def test_methods(self):
        self.assertTrue(is_even(6))
        self.assertFalse(is_even(7))
'''


def test_bare_truth_assertions_on_the_solutions_values_are_held_as_their_truth():
    sources = {"test_t.py": TRUTH_TESTS}
    # only where the solution's own answer is the value (a module constant's truth, a type
    # check a wrong answer meets too, a method of a returned value: not held)
    sites = {"test_t.py::test_truth": (0, 1, 2), "test_t.py::TestTruth::test_methods": (0, 1)}
    assert held.candidates(sources, ["test_t.py"], solution=["calc"]) == sites
    assert held.candidates(sources, ["test_t.py"]) == {}  # the solution unknown
    runs = held.rewrite((sources, sources), sites, ((), ()), solution=["calc"])
    text = runs.files[0]["test_t.py"]
    for held_site in ("hold(0, (is_even(2)))\n", "hold(1, (is_even(3)))\n",
                      "hold(2, (calc.is_even(4)))\n", "hold(1, (is_even(7)))\n"):
        assert held_site in text  # the polarity (`not`, assertFalse) leaves the sandbox
    assert "not " not in text and "odd" not in text and "assertFalse" not in text
    assert runs.expect[0]["test_t.py::test_truth"] == {
        0: (held.TRUTHY, None), 1: (held.FALSY, None), 2: (held.TRUTHY, None)}
    assert runs.expect[0]["test_t.py::TestTruth::test_methods"] == {
        0: (held.TRUTHY, None), 1: (held.FALSY, None)}
    for emitted, truth in (("True", True), ("[0]", True), ("''", False), ("0.0", False),
                           ("None", False), ("{1: 2}", True), ("", None)):
        assert held.matches(held.read(emitted), held.TRUTHY, None) is (truth is True)
        assert held.matches(held.read(emitted), held.FALSY, None) is (truth is False)


# -- parametrize expectations: held per case -------------------------------------------------
PARAM_TESTS = '''\
import pytest

from calc import add, name

PAIRS = (
    (1, "one"),
    (2, "two"),
)

LOOSE = [(1, 2), (3, 4)]


@pytest.mark.parametrize(("n", "word"), PAIRS)
def test_name(n, word):
    assert name(n) == word


@pytest.mark.parametrize(("n", "word"), PAIRS)
def test_name_again(n, word):
    assert word != name(n + 10)


@pytest.mark.parametrize("a,b,total", [(1, 2, 3), (2, 2, 4)])
@pytest.mark.parametrize("scale", [1, 10])
def test_stacked(a, b, total, scale):
    x = add(a * scale, b * scale) // scale
    assert x == total


@pytest.mark.parametrize("x", ["secret-a", "secret-b"])
def test_single(x):
    assert x == name(0)


@pytest.mark.parametrize("text,upper", [("malmö", "MALMÖ"), ("a\\tb", "A\\tB"), ("\\251", "©"),
                                        ("", "")])
def test_escaped(text, upper):
    assert text.upper() == upper


@pytest.mark.parametrize("text,upper", [("é", "É"), ("o", "O")], ids=["Índia", "tab\tid"])
def test_explicit_ids(text, upper):
    assert text.upper() == upper


@pytest.mark.parametrize("a,b", LOOSE)
def test_loose(a, b):
    assert add(a, 0) == b


def test_reads_loose():
    assert LOOSE


@pytest.mark.parametrize("a,b", [(1, 1), (2, 2)])
def test_twice(a, b):
    assert add(a, 0) == b
    assert b > 0


@pytest.mark.parametrize("a,b", [(1, 1), (2, 2)], ids=str)
def test_callable_ids(a, b):
    assert add(a, 0) == b


@pytest.mark.parametrize("a,b", [(1, 1), (2, 2)], indirect=["a"])
def test_indirect(a, b):
    assert add(a, 0) == b


@pytest.mark.parametrize("a,b", [pytest.param(1, 1), (2, 2)])
def test_param_rows(a, b):
    assert add(a, 0) == b


@pytest.mark.parametrize("a,b", [(1, 5), (1, 5)])
def test_duplicate_ids(a, b):
    assert add(a, 4) == b


@pytest.mark.parametrize("a,b", [(1, 5), (2, 6)])
def test_fixture(a, b, tmp_path):
    assert add(a, 4) == b
'''
PARAM_HELD = {"test_p.py::test_name", "test_p.py::test_name_again", "test_p.py::test_stacked",
              "test_p.py::test_single", "test_p.py::test_escaped",
              "test_p.py::test_explicit_ids",  # explicit ids escaped as pytest does
              "test_p.py::test_param_rows"}  # pytest.param rows of literal cells too


def test_parametrize_columns_read_once_from_literal_tables_are_candidates():
    sources = {"test_p.py": PARAM_TESTS}
    found = held.candidates(sources, ["test_p.py"])
    assert held.parametrized(sources, ["test_p.py"]) == PARAM_HELD
    assert found["test_p.py::test_stacked"] == (1,)
    # a table another test reads, a column read twice, callable ids, indirect, ids pytest
    # would make unique, a fixture argument: not held per case
    assert not {t for t in found if t not in PARAM_HELD}


def test_a_table_is_held_only_where_every_reader_holds_the_same_columns():
    text = PARAM_TESTS.replace("    assert word != name(n + 10)",
                               "    assert word != name(n + 10) or word")  # reads `word` twice
    found = held.candidates({"test_p.py": text}, ["test_p.py"])
    assert "test_p.py::test_name" not in found and "test_p.py::test_name_again" not in found
    runs = held.rewrite(({"test_p.py": PARAM_TESTS}, {"test_p.py": PARAM_TESTS}),
                        {"test_p.py::test_name": (0,)}, ((), ()))
    # the other reader of PAIRS is not held in this grade: neither is test_name's column
    assert runs.unheld == {"test_p.py::test_name"} and not runs.ids
    assert '"one"' in runs.files[0]["test_p.py"]


def _param_runs(canary: str | None = None, probe: bool = False) -> held.HeldRuns:
    sites = held.candidates({"test_p.py": PARAM_TESTS}, ["test_p.py"])
    sites = {t: s for t, s in sites.items() if t in PARAM_HELD}
    return held.rewrite(({"test_p.py": PARAM_TESTS}, {"test_p.py": canary or PARAM_TESTS}),
                        sites, ((), ()), probe=probe)


def test_no_expected_value_or_original_id_enters_the_sandbox():
    # the canary run: test_single's table perturbed, with pytest's own ids kept (canary.py)
    canary = PARAM_TESTS.replace('["secret-a", "secret-b"])',
                                 '["secret-a", "secreT-b"], ids=[\'secret-a\', \'secret-b\'])')
    runs = _param_runs(canary)
    real, other = runs.files[0]["test_p.py"], runs.files[1]["test_p.py"]
    assert real == other  # the canary's values are held on the host too
    assert real.count("\n") == PARAM_TESTS.count("\n")
    for leak in ('"one"', '"two"', "secret", "secreT", "one-", "1-one", "3-1", "4-10"):
        assert leak not in real, leak
    assert "(1, 2, None)" in real and "(2, 2, None)" in real  # inputs stay, the column goes
    assert "ids=['h0', 'h1']" in real
    assert runs.ids["test_p.py::test_single[h1]"] == "test_p.py::test_single[secret-b]"
    assert runs.expect[0]["test_p.py::test_single[secret-b]"] == {0: ("==", "secret-b")}
    assert runs.expect[1]["test_p.py::test_single[secret-b]"] == {0: ("==", "secreT-b")}
    assert runs.expect[0]["test_p.py::test_name_again[2-two]"] == {0: ("!=", "two")}
    assert runs.expect[0]["test_p.py::test_single"] == {-2: ("never", None)}
    assert not runs.unheld


def test_stacked_decorators_map_every_case_to_pytests_own_id():
    runs = _param_runs()
    stacked = {k: v for k, v in runs.ids.items() if "test_stacked" in k}
    # pytest joins the ids of the decorator nearest the `def` first
    assert stacked == {"test_p.py::test_stacked[1-h0]": "test_p.py::test_stacked[1-1-2-3]",
                       "test_p.py::test_stacked[10-h0]": "test_p.py::test_stacked[10-1-2-3]",
                       "test_p.py::test_stacked[1-h1]": "test_p.py::test_stacked[1-2-2-4]",
                       "test_p.py::test_stacked[10-h1]": "test_p.py::test_stacked[10-2-2-4]"}
    assert runs.expect[0]["test_p.py::test_stacked[10-2-2-4]"] == {1: ("==", 4)}


def test_the_ids_are_plain_pytests_before_and_after_the_rewrite(tmp_path):
    """What the host maps is what pytest collects: the pristine file's ids are the original
    ids, the rewritten file's are the opaque ones."""
    import subprocess
    import sys

    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a + b\n\n\n"
                                      "def name(n):\n    return str(n)\n")

    def collected(text: str) -> set[str]:
        (tmp_path / "test_p.py").write_text(text)
        out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                              "-p", "no:cacheprovider", "test_p.py"], cwd=tmp_path,
                             capture_output=True, text=True, check=False).stdout
        return {line for line in out.splitlines() if "::" in line}

    runs = _param_runs()
    pristine, rewritten = collected(PARAM_TESTS), collected(runs.files[0]["test_p.py"])
    assert set(runs.ids.values()) <= pristine
    assert set(runs.ids) <= rewritten
    assert {runs.ids.get(i, i) for i in rewritten} == pristine


def test_probes_keep_the_table_and_its_ids():
    runs = _param_runs(probe=True)
    text = runs.files[0]["test_p.py"]
    assert '(1, "one")' in text and text.count("ids=") == 2 and not runs.ids  # their own
    assert 'assert __import__("opd_grading").hold(0, (name(n))) == word' in text


def test_calibration_vouches_for_each_case():
    sources = {"test_p.py": PARAM_TESTS}
    sites = {t: s for t, s in held.candidates(sources, ["test_p.py"]).items()
             if t in PARAM_HELD}
    probes = {"test_p.py::test_single[secret-a]": [(0, "'secret-a'", True)],
              "test_p.py::test_single[secret-b]": [(0, "'secret-b'", True)],
              "test_p.py::test_name[1-one]": [(0, "'one'", True)],
              "test_p.py::test_name[2-two]": [(0, "'two'", True)],
              "test_p.py::test_name_again[1-one]": [(0, "'x'", True)],
              "test_p.py::test_name_again[2-two]": [(0, "'y'", True)]}
    passed = list(probes)
    kept = held.calibrated(sites, sources, probes, passed)
    assert kept == {"test_p.py::test_single": (0,), "test_p.py::test_name": (0,),
                    "test_p.py::test_name_again": (0,)}
    # one case's value is another case's: not vouched for, and the table's other reader
    # loses its column too
    wrong = {**probes, "test_p.py::test_name_again[2-two]": [(0, "'two'", True)]}
    kept = held.calibrated(sites, sources, wrong, passed)
    assert kept == {"test_p.py::test_single": (0,)}
    # a node id pytest gave that the host does not know: the test is not held per case
    kept = held.calibrated(sites, sources, probes, passed,
                           [*passed, "test_p.py::test_single[secret-c]"])
    assert "test_p.py::test_single" not in kept


def test_restored_ids_are_pytests_own_and_unknown_ones_stay():
    runs = _param_runs()
    data = {"variants": [{"tests": [{"id": "test_p.py::test_single[h0]", "outcome": "passed"},
                                    {"id": "test_p.py::test_single[h7]", "outcome": "passed"}],
                          "running": ["test_p.py::test_single[h1]"]}]}
    restored = held.restore_ids(data, runs.ids)["variants"][0]
    assert [e["id"] for e in restored["tests"]] == ["test_p.py::test_single[secret-a]",
                                                    "test_p.py::test_single[h7]"]
    assert restored["running"] == ["test_p.py::test_single[secret-b]"]
    expect = runs.expect[0]
    assert held.met([(0, "'secret-a'", True)], expect["test_p.py::test_single[secret-a]"])
    assert not held.met([(0, "'secret-b'", True)], expect["test_p.py::test_single[secret-a]"])
    assert held.unmet([(0, "'secret-a'", True)], expect["test_p.py::test_single"]) == \
        "a case of the test the host holds no value for"


# -- literal data read by name: loop tables and module constants --------------------------
DATA_TESTS = '''\
import sys

from calc import add, name

CASES = [(1, "one"), (4, "four"), (9, "nine")]
WORDS = {2: "two", 5: "five"}
NS = [3, 6]
WANTS = ["three", "six"]
EXPECTED = "seven"
SHARED = [(1, "uno")]
GROWN = [(1, "eins")]
GROWN.append((2, "zwei"))
BIG = [(i, str(i)) for i in range(3)]
SHORT = [1, 2]
LONG = ["x", "y", "z"]
NAMED = [(1, "un")]
SHADOW = "zwanzig"


def test_table():
    for n, want in CASES:
        got = name(n)
        assert got == want, n


def test_inline():
    for n, want in [(10, "ten"),
                    (11, "eleven")]:
        assert name(n) == want


def test_items():
    for n, want in WORDS.items():
        assert name(n) == want


def test_zip():
    for n, want in zip(NS, WANTS):
        assert name(n) == want


def test_constant():
    assert name(7) == EXPECTED


def test_shared_a():
    for n, want in SHARED:
        assert name(n) == want


def test_shared_b():
    for n, want in SHARED:
        assert name(n) == want


def test_mutated():
    for n, want in GROWN:
        assert name(n) == want


def test_computed():
    for n, want in BIG:
        assert name(n) == want


def test_unequal_zip():
    for n, want in zip(SHORT, LONG):
        assert name(n) == want


def test_read_by_text():
    for n, want in NAMED:
        assert name(n) == want
    assert getattr(sys.modules[__name__], "NAMED")


def test_branch_first():
    for n, want in [(12, "twelve")]:
        if n > 100:
            continue
        assert name(n) == want


def test_break_after():
    for n, want in [(13, "thirteen"), (14, "fourteen")]:
        assert name(n) == want
        break


def test_message_reads_it():
    for n, want in [(15, "fifteen")]:
        assert name(n) == want, f"{n}: {want}"


def test_nested():
    for n, want in [(16, "sixteen")]:
        for _ in range(2):
            pass
        assert name(n) == want


def test_in_with():
    for n, want in [(17, "seventeen")]:
        with open(__file__):
            assert name(n) == want


def test_literal_in_loop():
    for n in [18, 19]:
        assert add(n, 0) == 18


def test_shadowed(SHADOW):
    assert name(20) == SHADOW


def test_local():
    expected = ["twenty", "one"]
    assert name(21) == expected


def test_local_rebound():
    expected = "a"
    expected = "b"
    assert name(22) == expected


def test_local_in_a_closure():
    expected = "c"

    def check():
        assert name(23) == expected

    check()


def test_local_table():
    pairs = ((30, "thirty"), (31, "thirty-one"))
    for n, want in pairs:
        got = name(n)
        assert want == got


def test_local_items():
    words = {33: "thirty-three"}
    for n, want in words.items():
        assert name(n) == want


def test_local_table_read_twice():
    pairs = [(32, "thirty-two")]
    for n, want in pairs:
        assert name(n) == want
    assert pairs


def test_expression_inputs():
    rows = [(int("36"), "thirty-six"), (6 * 6 + 1, "thirty-seven")]
    for n, want in rows:
        assert name(n) == want


def test_expression_expected():
    rows = [(38, "thirty-" + "eight")]
    for n, want in rows:
        assert name(n) == want


def test_call_expected():
    rows = [(39, str("thirty-nine"))]
    for n, want in rows:
        assert name(n) == want


def test_local_table_rebound():
    pairs = [(34, "thirty-four")]
    pairs = [(35, "thirty-five")]
    for n, want in pairs:
        assert name(n) == want


def test_local_pairs():
    actual = name(40)
    expected = "forty"
    assert actual == expected
    actual = name(41)
    expected = ["forty-one"]
    assert [actual] == expected


def test_local_unpacked():
    given, expected = 45, "forty-five"
    assert name(given) == expected


def test_local_pairs_alike():
    expected = "forty-two"
    assert name(42) == expected
    expected = "forty-two"
    assert name(42) == expected


def test_local_pairs_read_twice():
    expected = "forty-three"
    assert name(43) == expected
    expected = "forty-four"
    assert name(44) == expected
    assert expected
'''
DATA_HELD = {"test_d.py::test_table": (2,), "test_d.py::test_inline": (1,),
             "test_d.py::test_items": (1,), "test_d.py::test_zip": (1,),
             "test_d.py::test_constant": (0,), "test_d.py::test_local": (1,),
             "test_d.py::test_local_table": (3,), "test_d.py::test_local_items": (2,),
             "test_d.py::test_expression_inputs": (2,), "test_d.py::test_local_pairs": (2, 5),
             "test_d.py::test_expression_expected": (2,), "test_d.py::test_local_unpacked": (1,)}
DATA_VALUES = ('"one"', '"four"', '"nine"', '"two"', '"five"', '"three"', '"six"', '"seven"',
               '"ten"', '"eleven"', '"twenty"', '"thirty"', '"thirty-one"', '"thirty-three"',
               '"thirty-six"', '"thirty-seven"', '"forty"', '"forty-one"', '"thirty-"', '"eight"',
               '"forty-five"')


def test_loop_columns_and_constants_read_once_from_literal_data_are_candidates():
    sources = {"test_d.py": DATA_TESTS}
    # a table two tests read, one mutated, one computed, zip of unequal lengths, a table
    # read by its text, a branch or a nested loop before the site, a `break`, a message
    # reading the column, a `with` around the site, a literal in a loop, an argument
    # shadowing a module constant, a local bound twice before one read, read in a closure,
    # bound twice to one value or read twice after a binding, a table of the test's own read
    # twice or bound twice, a column with a call in it: not held (a table read once by its
    # loop is, its input cells may be expressions, its expected ones arithmetic on literals;
    # a local bound again before each of its reads is, at each)
    assert held.candidates(sources, ["test_d.py"]) == DATA_HELD
    assert held.parametrized(sources, ["test_d.py"]) == set(DATA_HELD)  # never cloned
    # `globals()` (or `vars`, `exec`, a frame's globals) anywhere in the module: no module
    # data held (a local or inline table still is); `locals()` (or a frame's locals): none
    reads = DATA_TESTS + "\n\ndef test_globals():\n    assert globals()\n"
    assert held.candidates({"test_d.py": reads}, ["test_d.py"]) == {
        t: s for t, s in DATA_HELD.items() if "_local" in t or "expression" in t
        or "inline" in t}
    # `vars(obj)` reads an object's attributes, not a frame's locals: locals stay held
    reads = DATA_TESTS + "\n\ndef test_vars():\n    assert vars(sys)\n"
    assert held.candidates({"test_d.py": reads}, ["test_d.py"]) == {
        t: s for t, s in DATA_HELD.items() if "_local" in t or "expression" in t
        or "inline" in t}
    for frame in ("locals()", "vars()"):
        reads = DATA_TESTS + f"\n\ndef test_locals():\n    assert not {frame}\n"
        assert not held.candidates({"test_d.py": reads}, ["test_d.py"]), frame


def test_no_expected_value_of_a_held_loop_or_constant_enters_the_sandbox():
    from opd_gym.grading.canary import apply_edits, make_canaries

    sources = {"test_d.py": DATA_TESTS}
    canaries = make_canaries(sources, ["test_d.py"], 7, solution_modules=["calc"])
    canary = canaries.canaries["test_d.py::test_table"]
    assert canary.kind == "data" and canary.earns  # a row's expected value changed
    other = apply_edits(sources, {"test_d.py": list(canary.edits)})
    runs = held.rewrite((sources, other), DATA_HELD, ((), ()))
    real = runs.files[0]["test_d.py"]
    assert real == runs.files[1]["test_d.py"]  # the canary's row is held on the host too
    assert real.count("\n") == DATA_TESTS.count("\n")
    for leak in DATA_VALUES:
        assert leak not in real, leak
    assert "CASES = [(1, None), (4, None), (9, None)]" in real  # inputs stay, the column goes
    assert "EXPECTED = None" in real and "WORDS = {2: None, 5: None}" in real
    assert "    expected = None\n" in real
    assert "pairs = ((30, None), (31, None))" in real and "words = {33: None}" in real
    assert 'rows = [(int("36"), None), (6 * 6 + 1, None)]' in real
    assert "rows = [(38, None)]" in real
    assert runs.expect[0]["test_d.py::test_expression_expected"] == {
        2: (held.ROWS, (("==", "thirty-eight"),))}
    assert "hold(2, (got))" in real and "    for n, want in CASES:" in real
    rows = [("==", "one"), ("==", "four"), ("==", "nine")]
    assert runs.expect[0]["test_d.py::test_table"] == {2: (held.ROWS, tuple(rows))}
    changed = runs.expect[1]["test_d.py::test_table"][2][1]
    assert [r for r in changed if r not in rows] == [("==", canary.replacement.strip('"'))]
    assert runs.expect[0]["test_d.py::test_constant"] == {0: ("==", "seven")}
    assert runs.expect[0]["test_d.py::test_local"] == {1: ("==", ["twenty", "one"])}
    # a local bound again before each check: each check holds the value it reads
    assert runs.expect[0]["test_d.py::test_local_pairs"] == {2: ("==", "forty"),
                                                             5: ("==", ["forty-one"])}
    assert real.count("    expected = None\n") == 3
    assert "    given, expected = 45, None\n" in real  # an unpacked binding: its value only
    assert runs.expect[0]["test_d.py::test_local_unpacked"] == {1: ("==", "forty-five")}
    assert runs.expect[0]["test_d.py::test_zip"] == {
        1: (held.ROWS, (("==", "three"), ("==", "six")))}
    assert not runs.unheld


HARNESS = '''\
from calc import name

SETUP = "def helper(n):\\n    return n\\n"


def _namespace():
    namespace = {}
    exec(compile(SETUP, "<setup>", "exec"), namespace)
    return namespace


def test_check():
    def check(candidate):
        for n, want in zip([1, 2], ["one", "two"]):
            assert candidate(n) == want
        expected = "three"
        assert candidate(3) == expected

    _namespace()
    check(name)
'''


def test_exec_in_a_namespace_of_its_own_reads_no_inline_rows_or_locals():
    # a dataset harness running its prompt's setup code through `exec(code, namespace)`:
    # the check's inline rows and its local constant are held
    sources = {"test_h.py": HARNESS}
    assert held.candidates(sources, ["test_h.py"]) == {"test_h.py::test_check": (2, 4)}
    # plain `exec(code)` runs in the caller's frame; a string naming a frame reader may be
    # the code run: nothing of the check's data is held
    for edit in (("exec(compile(SETUP, \"<setup>\", \"exec\"), namespace)",
                  "exec(compile(SETUP, \"<setup>\", \"exec\"))"),
                 ("return n", "return __import__(\'sys\')._getframe(1)")):
        assert held.candidates({"test_h.py": HARNESS.replace(*edit)}, ["test_h.py"]) == {}


def test_a_loop_site_must_emit_each_rows_value_once_in_row_order():
    runs = held.rewrite(({"test_d.py": DATA_TESTS}, {"test_d.py": DATA_TESTS}),
                        DATA_HELD, ((), ()))
    expect = runs.expect[0]["test_d.py::test_table"]
    right = [(2, "'one'", True), (2, "'four'", True), (2, "'nine'", True)]
    assert held.met(right, expect)
    assert held.unmet(right[:2], expect) == "an assertion in a loop over 3 rows ran 2 times"
    assert not held.met([*right, (2, "'nine'", True)], expect)  # a row too many
    assert not held.met([right[1], right[0], right[2]], expect)  # out of order
    assert held.unmet([right[0], (2, "'for'", True), right[2]], expect) == \
        "the value compared in row 2 was 'for'"
    assert not held.met([(2, "None", True)] * 3, expect)  # the placeholder is no answer


def test_calibration_vouches_for_every_row_of_a_loop():
    sources = {"test_d.py": DATA_TESTS}
    probes = {"test_d.py::test_table": [(2, "'one'", True), (2, "'four'", True),
                                        (2, "'nine'", True)],
              "test_d.py::test_inline": [(1, "'ten'", True)],  # a row short
              "test_d.py::test_items": [(1, "'two'", True), (1, "'five'", False)],  # not plain
              "test_d.py::test_zip": [(1, "'six'", True), (1, "'three'", True)],  # reordered
              "test_d.py::test_constant": [(0, "'seven'", True)],
              "test_d.py::test_local": [(1, "['twenty', 'one']", True)]}
    kept = held.calibrated(DATA_HELD, sources, probes, list(probes))
    assert kept == {"test_d.py::test_table": (2,), "test_d.py::test_constant": (0,),
                    "test_d.py::test_local": (1,)}


def test_probes_keep_the_data_and_the_assertion():
    runs = held.rewrite(({"test_d.py": DATA_TESTS}, {"test_d.py": DATA_TESTS}), DATA_HELD,
                        ((), ()), probe=True)
    text = runs.files[0]["test_d.py"]
    assert all(value in text for value in DATA_VALUES)
    assert 'assert __import__("opd_grading").hold(2, (got)) == want, n' in text


def test_a_test_holds_at_most_max_held_values():
    rows = ", ".join(f"({i}, {i + 1})" for i in range(held.MAX_HELD))
    text = ("from calc import add\n\n\ndef test_many():\n    assert add(0, 0) == 0\n"
            f"    for n, want in [{rows}]:\n        assert add(n, 1) == want\n\n\n"
            f"def test_fits():\n    for n, want in [{rows}]:\n        assert add(n, 1) == want\n")
    found = held.candidates({"test_m.py": text}, ["test_m.py"])
    # 1 + 64 values would pass the harness's limit: the loop is left as it is
    assert found == {"test_m.py::test_many": (0,), "test_m.py::test_fits": (1,)}
    over = text.replace("[(0, 1), ", "[(-1, 0), (0, 1), ")
    assert "test_m.py::test_fits" not in held.candidates({"test_m.py": over}, ["test_m.py"])


def test_the_host_and_the_harness_keep_as_many_held_values_per_test():
    import re

    from opd_gym.grading import verdict
    from opd_gym.resources import data_path

    harness = data_path("sandbox", "grade_harness.py").read_text()
    assert re.search(rf"^MAX_HELD = {held.MAX_HELD}\b", harness, re.M)
    assert verdict.MAX_HELD == held.MAX_HELD


SUBTEST_TESTS = '''\
import unittest

from calc import name

ROWS = [(1, "one"), (2, "two")]


class TestName(unittest.TestCase):
    def test_rows(self):
        for n, expected in ROWS:
            with self.subTest(n=n):
                got = name(n)
                self.assertEqual(got, expected)

    def test_typed(self):
        for n, expected in [(3, ("three",))]:
            with self.subTest(n=n):
                self.assertTupleEqual((name(n),), expected)

    def test_message_reads_it(self):
        for n, expected in [(4, "four")]:
            with self.subTest(n=n, expected=expected):
                self.assertEqual(name(n), expected)

    def test_branch_first(self):
        for n, expected in [(5, "five")]:
            with self.subTest(n=n):
                if n > 100:
                    continue
                self.assertEqual(name(n), expected)

    def test_other_with(self):
        for n, expected in [(6, "six")]:
            with open(__file__):
                self.assertEqual(name(n), expected)


def test_pytest_subtests(subtests):
    for n, expected in [(7, "seven")]:
        with subtests.test(n=n):
            assert name(n) == expected
'''


def test_subtest_blocks_in_a_loop_over_literal_rows_are_held_per_row():
    """A subTest block (unittest's `self.subTest`, pytest's `subtests.test`) runs its body
    once per row, so its site is held like one in the loop's own body; a block that reads the
    column elsewhere, branches before the site, or another `with` is not. A column the
    subTest call only labels its reports with is held too (its label shows the placeholder)."""
    from opd_gym.grading.canary import apply_edits, make_canaries

    sources = {"test_s.py": SUBTEST_TESTS}
    found = held.candidates(sources, ["test_s.py"])
    assert found == {"test_s.py::TestName::test_rows": (3,),
                     "test_s.py::TestName::test_typed": (2,),
                     "test_s.py::TestName::test_message_reads_it": (2,),
                     "test_s.py::test_pytest_subtests": (2,)}
    canaries = make_canaries(sources, ["test_s.py"], 5, solution_modules=["calc"])
    canary = canaries.canaries["test_s.py::TestName::test_rows"]
    assert canary.kind == "data" and canary.earns
    other = apply_edits(sources, {"test_s.py": list(canary.edits)})
    runs = held.rewrite((sources, other), found, ((), ()))
    real = runs.files[0]["test_s.py"]
    assert real == runs.files[1]["test_s.py"] and real.count("\n") == SUBTEST_TESTS.count("\n")
    for leak in ('"one"', '"two"', '"three"', '"four"', '"seven"'):
        assert leak not in real, leak
    assert "with self.subTest(n=n, expected=expected):" in real  # the label reads None
    assert "            with self.subTest(n=n):\n                got = name(n)\n" \
           '                __import__("opd_grading").hold(3, (got))\n' in real
    assert runs.expect[0]["test_s.py::TestName::test_rows"] == {
        3: (held.ROWS, (("==", "one"), ("==", "two")))}
    assert runs.expect[0]["test_s.py::TestName::test_typed"] == {
        2: (held.ROWS, (("==", ("three",)),))}
