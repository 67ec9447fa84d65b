from solution import top_k_frequent


def test_basic():
    assert top_k_frequent([1, 1, 1, 2, 2, 3], 2) == [1, 2]


def test_ties_smaller_first():
    assert top_k_frequent([5, 3, 5, 3, 9, 9, 1], 2) == [3, 5]
    assert top_k_frequent([4, 4, -1, -1, 2], 3) == [-1, 4, 2]


def test_k_larger_than_distinct():
    assert top_k_frequent([7, 7, 8], 5) == [7, 8]


def test_empty_and_zero():
    assert top_k_frequent([], 3) == []
    assert top_k_frequent([1, 2], 0) == []


def test_many_values():
    items = [i % 10 for i in range(1000)] + [3] * 5
    assert top_k_frequent(items, 3) == [3, 0, 1]
