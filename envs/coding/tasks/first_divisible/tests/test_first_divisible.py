from opd_grading import read_text


def _lines():
    return [line.strip() for line in read_text("answer.txt").strip().splitlines()]


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
