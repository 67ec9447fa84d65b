from opd_grading import is_file, read_text


def test_answer_value():
    """The one earning test: one integer on one line, the right one, the script left in place."""
    assert is_file("answer.txt")
    lines = read_text("answer.txt").strip().splitlines()
    assert len(lines) == 1 and lines[0].strip().isdigit()
    assert int(lines[0]) == 767646
    assert is_file("mystery.py")
