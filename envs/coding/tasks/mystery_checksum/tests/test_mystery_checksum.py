import os

HERE = os.path.dirname(os.path.abspath(__file__))
ANSWER = os.path.join(HERE, "answer.txt")


def _read():
    with open(ANSWER, encoding="utf-8") as fh:
        return fh.read()


def test_answer_file_exists():
    assert os.path.isfile(ANSWER)


def test_answer_is_one_integer():
    assert _read().strip().isdigit()
    assert len(_read().strip().splitlines()) == 1


def test_answer_value():
    assert int(_read().strip()) == 767646


def test_script_still_there():
    assert os.path.isfile(os.path.join(HERE, "mystery.py"))
