import re

import pytest
from calc import evaluate
from opd_grading import read_text


def test_precedence_and_associativity():
    assert evaluate("1 + 2 * 3") == 7
    assert evaluate("10 - 4 - 3") == 3
    assert evaluate("2 * 3 + 4 * 5") == 26


def test_parentheses_and_unary():
    assert evaluate("(1 + 2) * 3") == 9
    assert evaluate("-(2 + 3) * 2") == -10
    assert evaluate("2 * -3") == -6
    assert evaluate("--4") == 4
    assert evaluate("+5") == 5


def test_types():
    assert isinstance(evaluate("6 * 7"), int)
    assert evaluate("7 / 2") == 3.5
    assert isinstance(evaluate("8 / 4"), float)
    assert evaluate("1.5 + 1.5") == 3.0


def test_spaces():
    assert evaluate("  12*(  3+4 )  ") == 84


def test_errors():
    """Malformed input raises ValueError; dividing by zero raises ZeroDivisionError."""
    for bad in ["", "1 +", "(2", "2 3", "2 )", "* 4", "1..2", "3 $ 4"]:
        with pytest.raises(ValueError):
            evaluate(bad)
    with pytest.raises(ZeroDivisionError):
        evaluate("1 / (2 - 2)")


def test_no_eval():
    source = read_text("calc.py")
    assert not re.search(r"(?<!\w)(eval|exec)\s*\(", source)
    assert not re.search(r"^\s*(import|from)\s+ast\b", source, re.M)
