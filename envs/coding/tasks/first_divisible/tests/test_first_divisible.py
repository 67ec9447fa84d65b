from opd_grading import read_text


def _lines():
    lines = [line.strip() for line in read_text("answer.txt").strip().splitlines()]
    assert len(lines) == 2 and all(line.isdigit() for line in lines), lines
    return lines


def test_smallest_n():
    assert int(_lines()[0]) == 12489


def test_value():
    value = int(_lines()[1])
    assert value == 1436112
    assert value % 9973 == 0
