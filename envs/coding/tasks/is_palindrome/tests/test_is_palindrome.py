from solution import is_palindrome


def test_simple():
    assert is_palindrome("racecar") is True
    assert is_palindrome("hello") is False


def test_ignores_case_and_punctuation():
    assert is_palindrome("A man, a plan, a canal: Panama") is True
    assert is_palindrome("No 'x' in Nixon") is True
    assert is_palindrome("Was it a car or a cat I saw?") is True


def test_digits_count():
    assert is_palindrome("12321") is True
    assert is_palindrome("1a2") is False
    assert is_palindrome("0P") is False


def test_empty_and_symbols_only():
    assert is_palindrome("") is True
    assert is_palindrome(" .,!") is True


def test_single_char():
    assert is_palindrome("x") is True
