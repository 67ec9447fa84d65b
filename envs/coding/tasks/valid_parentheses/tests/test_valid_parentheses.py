from solution import valid_parentheses


def test_simple_pairs():
    assert valid_parentheses("()") is True
    assert valid_parentheses("()[]{}") is True


def test_nested():
    assert valid_parentheses("{[()()]}") is True
    assert valid_parentheses("([)]") is False


def test_unbalanced():
    assert valid_parentheses("(") is False
    assert valid_parentheses("())") is False
    assert valid_parentheses("]") is False


def test_other_characters_ignored():
    assert valid_parentheses("def f(x): return [x, {1: 2}]") is True
    assert valid_parentheses("a(b]c") is False


def test_empty():
    assert valid_parentheses("") is True
    assert valid_parentheses("no brackets") is True
