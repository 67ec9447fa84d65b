"""Word statistics built on textstats.tokenize."""

from collections import Counter

from textstats.tokenize import words


def word_counts(text):
    return dict(Counter(words(text)))


def top_words(text, n):
    counts = word_counts(text)
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


def average_word_length(text):
    found = words(text)
    return sum(map(len, found)) / len(found) if found else 0.0
