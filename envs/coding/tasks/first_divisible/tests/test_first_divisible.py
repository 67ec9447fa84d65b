import os

HERE = os.path.dirname(os.path.abspath(__file__))


def _lines():
    with open(os.path.join(HERE, "answer.txt"), encoding="utf-8") as fh:
        return [line.strip() for line in fh.read().strip().splitlines()]


def test_answer_has_two_integer_lines():
    lines = _lines()
    assert len(lines) == 2
    assert all(line.isdigit() for line in lines)


def test_smallest_n():
    assert int(_lines()[0]) == 12489


def test_value():
    assert int(_lines()[1]) == 1436112


def test_value_is_divisible():
    assert int(_lines()[1]) % 9973 == 0
