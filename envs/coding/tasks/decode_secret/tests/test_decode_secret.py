import os

HERE = os.path.dirname(os.path.abspath(__file__))


def _answer():
    with open(os.path.join(HERE, "answer.txt"), encoding="utf-8") as fh:
        return fh.read()


def test_answer_file_exists():
    assert os.path.isfile(os.path.join(HERE, "answer.txt"))


def test_single_line():
    assert len(_answer().strip().splitlines()) == 1


def test_password():
    assert _answer().strip() == "quiet-otter-1729"
