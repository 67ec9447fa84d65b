import pytest
from textstats import average_word_length, top_words, word_counts, words

TEXT = "The cat and the hat. The CAT sat; a hat, a mat!"


def test_tokenizer_untouched():
    assert words("Don't stop, 'quoted' x2!") == ["don't", "stop", "quoted", "x2"]


def test_word_counts():
    counts = word_counts(TEXT)
    assert counts["the"] == 3
    assert counts["cat"] == 2
    assert counts["mat"] == 1
    assert sum(counts.values()) == len(words(TEXT))


def test_top_words_ordering():
    assert top_words(TEXT, 3) == [("the", 3), ("a", 2), ("cat", 2)]


def test_top_words_more_than_available():
    assert top_words("b a b", 10) == [("b", 2), ("a", 1)]


def test_average_word_length():
    assert average_word_length("ab abcd") == pytest.approx(3.0)
    assert average_word_length("...") == 0.0


def test_module_path():
    import textstats.counts

    assert textstats.counts.word_counts is word_counts
