import re
from collections import Counter

_LINE = re.compile(
    r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} (DEBUG|INFO|WARNING|ERROR) \[([^\]\s]+)\](?: .*)?"
)


def _entries(path):
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            match = _LINE.fullmatch(line.rstrip("\r\n"))
            if match:
                yield match.group(1), match.group(2)


def count_levels(path):
    return dict(Counter(level for level, _ in _entries(path)))


def busiest_component(path):
    errors = Counter(comp for level, comp in _entries(path) if level == "ERROR")
    if not errors:
        return None
    return min(errors, key=lambda comp: (-errors[comp], comp))
