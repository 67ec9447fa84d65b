from opd_grading import is_file, read_text


def _answer():
    return read_text("answer.txt")


def test_answer_file_exists():
    assert is_file("answer.txt")


def test_single_line():
    assert len(_answer().strip().splitlines()) == 1


def test_password():
    assert _answer().strip() == "quiet-otter-1729"
