from solution import merge_intervals


def _norm(result):
    return [list(pair) for pair in result]


def test_overlapping():
    result = merge_intervals([[1, 3], [2, 6], [8, 10], [15, 18]])
    assert _norm(result) == [[1, 6], [8, 10], [15, 18]]


def test_touching_merge():
    assert _norm(merge_intervals([[1, 4], [4, 5]])) == [[1, 5]]


def test_unsorted_and_contained():
    assert _norm(merge_intervals([[5, 7], [1, 10], [2, 3], [12, 12]])) == [[1, 10], [12, 12]]


def test_empty_and_single():
    assert _norm(merge_intervals([])) == []
    assert _norm(merge_intervals([[3, 4]])) == [[3, 4]]


def test_input_unchanged():
    data = [[4, 5], [1, 4]]
    merge_intervals(data)
    assert data == [[4, 5], [1, 4]]
