"""Small text statistics helpers."""

from textstats.counts import average_word_length, top_words, word_counts
from textstats.tokenize import words

__all__ = ["average_word_length", "top_words", "word_counts", "words"]
