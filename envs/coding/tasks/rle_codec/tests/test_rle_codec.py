from codec import decode, encode


def test_encode_basic():
    assert encode("aaabcc") == "3a1b2c"
    assert encode("abc") == "1a1b1c"


def test_decode_basic():
    assert decode("3a1b2c") == "aaabcc"


def test_empty():
    assert encode("") == ""
    assert decode("") == ""


def test_long_runs_use_several_digits():
    assert encode("x" * 12 + "y") == "12x1y"
    assert decode("105z") == "z" * 105


def test_round_trip():
    for text in ["  a  ", "zzzzzzzzzzzzzzzzzzzzzzzzzq", "ab\nba", "!!??!!"]:
        assert decode(encode(text)) == text
