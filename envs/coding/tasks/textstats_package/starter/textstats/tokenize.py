"""Split text into lower-case words."""

import re

_WORD = re.compile(r"[a-z0-9']+")


def words(text):
    """Return the words of `text`, lower-cased, apostrophes kept, other punctuation dropped."""
    return [w.strip("'") for w in _WORD.findall(text.lower()) if w.strip("'")]
