from opd_grading import is_file, read_text


def test_password():
    """The one earning test: the file, its single line and the password it holds."""
    assert is_file("answer.txt")
    lines = read_text("answer.txt").strip().splitlines()
    assert len(lines) == 1
    assert lines[0].strip() == "quiet-otter-1729"
