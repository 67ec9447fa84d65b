import pytest
from roman import from_roman, to_roman


def test_to_roman_unchanged():
    assert to_roman(1994) == "MCMXCIV"
    assert to_roman(3888) == "MMMDCCCLXXXVIII"
    with pytest.raises(ValueError):
        to_roman(0)


def test_additive_numerals():
    assert from_roman("III") == 3
    assert from_roman("MDCLXVI") == 1666


def test_subtractive_numerals():
    assert from_roman("IV") == 4
    assert from_roman("XC") == 90
    assert from_roman("MCMXCIV") == 1994


def test_round_trip():
    for n in range(1, 4000):
        assert from_roman(to_roman(n)) == n


def test_lower_case():
    assert from_roman("xlii") == 42


@pytest.mark.parametrize("bad", ["", "ABC", "X I", "12"])
def test_invalid(bad):
    with pytest.raises(ValueError):
        from_roman(bad)
