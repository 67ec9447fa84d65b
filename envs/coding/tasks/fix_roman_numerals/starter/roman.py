"""Roman numeral conversion."""

NUMERALS = [
    (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
    (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),
]
SYMBOLS = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def to_roman(n):
    """Return the Roman numeral for 1 <= n <= 3999."""
    if not 0 < n < 4000:
        raise ValueError(f"out of range: {n}")
    out = []
    for value, numeral in NUMERALS:
        count, n = divmod(n, value)
        out.append(numeral * count)
    return "".join(out)


def from_roman(s):
    """Return the integer value of the Roman numeral s."""
    total = 0
    for ch in s:
        total += SYMBOLS[ch]
    return total
