"""`grading.earning`: the one question suites ask grading before any sandbox runs (which
tests can earn, which the host can hold), its rule, and its on-disk cache."""

from __future__ import annotations

import json

from opd_gym.grading.canary import MIN_UNHELD_EARNING
from opd_gym.grading.earning import Earning, _earning, earning_tests

SUITE = {"test_calc.py": (
    "import json\n\nfrom calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n\n\n"
    "def test_table():\n    for a, b, want in TABLE:\n        assert add(a, b) == want\n\n\n"
    "def test_file():\n    assert add(1, 2) == json.load(open('want.json'))\n\n\n"
    "TABLE = [(1, 1, 2)]\n")}


def test_a_literal_comparison_earns_and_is_held_and_an_answer_read_from_a_file_only_gates():
    found = earning_tests(SUITE, {"calc"})
    assert "test_calc.py::test_add" in found.earning & found.holding
    assert "test_calc.py::test_file" not in found.earning
    assert found.can_verify(["test_calc.py::test_add"])
    assert not found.can_verify(["test_calc.py::test_file"])
    assert not found.can_verify([])


def test_unheld_earning_tests_pay_only_in_numbers():
    """Without a held site, at least MIN_UNHELD_EARNING earning tests must fail (a forgery
    passing each on a coin would be paid otherwise); parametrized ids count by their base."""
    ids = [f"t.py::test_{n}" for n in range(MIN_UNHELD_EARNING)]
    rule = Earning(earning=frozenset(ids), holding=frozenset())
    assert rule.can_verify(ids)
    assert not rule.can_verify(ids[:-1])
    assert not rule.can_verify([f"{ids[0]}[{n}]" for n in range(MIN_UNHELD_EARNING)])
    assert Earning(frozenset(ids), frozenset(ids[:1])).can_verify([f"{ids[0]}[case-1]"])


def test_the_answer_is_kept_on_disk_and_recomputed_when_unreadable(tmp_path):
    """A second process reads the stored answer; a damaged file is computed again and
    replaced."""
    _earning.cache_clear()
    try:
        first = earning_tests(SUITE, {"calc"}, cache=tmp_path)
        (stored,) = tmp_path.glob("*.json")
        assert json.loads(stored.read_text()) == [sorted(first.earning), sorted(first.holding)]
        _earning.cache_clear()
        stored.write_text(json.dumps([["test_calc.py::test_forged"], []]))
        assert earning_tests(SUITE, {"calc"}, cache=tmp_path) == Earning(
            frozenset({"test_calc.py::test_forged"}), frozenset())
        for damaged in ("{not json", json.dumps(["test_calc.py::test_add"])):
            _earning.cache_clear()
            stored.write_text(damaged)
            assert earning_tests(SUITE, {"calc"}, cache=tmp_path) == first
            assert json.loads(stored.read_text()) == [sorted(first.earning),
                                                      sorted(first.holding)]
    finally:
        _earning.cache_clear()


def test_another_solution_module_is_another_key(tmp_path):
    earning_tests(SUITE, {"calc"}, cache=tmp_path)
    earning_tests(SUITE, {"calc", "other"}, cache=tmp_path)
    assert len(list(tmp_path.glob("*.json"))) == 2
