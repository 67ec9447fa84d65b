from opd_grading import run as run_program


def run(stdin):
    proc = run_program(["python3", "main.py"], stdin=stdin, timeout=10)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split("\n")


def lines(stdin):
    return [line.rstrip() for line in run(stdin) if line.strip()]


def test_basic_counts():
    assert lines("b a b\nc b a\n") == ["b 3", "a 2", "c 1"]


def test_case_and_punctuation():
    assert lines("Hello, hello! HELLO? world-wide") == ["hello 3", "wide 1", "world 1"]


def test_digits_split_words():
    assert lines("abc1abc 22 x_y") == ["abc 2", "x 1", "y 1"]


def test_empty_input():
    assert lines("") == []
    assert lines("123 ... !!!\n") == []


def test_large_input():
    text = "alpha beta " * 5000 + "gamma"
    assert lines(text) == ["alpha 5000", "beta 5000", "gamma 1"]
