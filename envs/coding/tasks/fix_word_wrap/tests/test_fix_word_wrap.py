import pytest
from wrap import wrap


def test_simple_wrap():
    assert wrap("the quick brown fox", 12) == ["the quick", "brown fox"]


def test_exact_fit():
    assert wrap("aaa bbb ccc", 7) == ["aaa bbb", "ccc"]
    assert wrap("one two", 7) == ["one two"]


def test_irregular_whitespace():
    assert wrap("  alpha   beta\n\ngamma\tdelta ", 11) == ["alpha beta", "gamma delta"]


def test_long_word_alone():
    assert wrap("a supercalifragilistic b", 5) == ["a", "supercalifragilistic", "b"]


def test_empty_and_invalid():
    assert wrap("", 5) == []
    assert wrap("   \n ", 5) == []
    with pytest.raises(ValueError):
        wrap("x", 0)


def test_lines_never_exceed_width():
    text = " ".join(f"w{i}" * (i % 4 + 1) for i in range(200))
    for width in (10, 17, 40):
        lines = wrap(text, width)
        assert all(len(line) <= width or " " not in line for line in lines)
        assert " ".join(lines).split() == text.split()
        for first, second in zip(lines, lines[1:], strict=False):
            assert len(first) + 1 + len(second.split()[0]) > width
