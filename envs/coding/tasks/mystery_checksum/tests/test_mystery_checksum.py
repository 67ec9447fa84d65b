from opd_grading import is_file, read_text


def _read():
    return read_text("answer.txt")


def test_answer_file_exists():
    assert is_file("answer.txt")


def test_answer_is_one_integer():
    assert _read().strip().isdigit()
    assert len(_read().strip().splitlines()) == 1


def test_answer_value():
    assert int(_read().strip()) == 767646


def test_script_still_there():
    assert is_file("mystery.py")
