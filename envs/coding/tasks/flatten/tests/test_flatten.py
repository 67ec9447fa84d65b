from solution import flatten


def test_already_flat():
    assert flatten([1, 2, 3]) == [1, 2, 3]


def test_nested():
    assert flatten([1, [2, [3, [4]], 5], [[6]]]) == [1, 2, 3, 4, 5, 6]


def test_empty_lists():
    assert flatten([]) == []
    assert flatten([[], [[]], [[], [1]]]) == [1]


def test_other_values_are_items():
    assert flatten(["ab", (1, 2), [None, ["cd"]]]) == ["ab", (1, 2), None, "cd"]


def test_input_unchanged():
    data = [1, [2, [3]]]
    flatten(data)
    assert data == [1, [2, [3]]]


def test_deep_nesting():
    data = [0]
    for i in range(1, 300):
        data = [data, i]
    assert flatten(data) == list(range(300))
