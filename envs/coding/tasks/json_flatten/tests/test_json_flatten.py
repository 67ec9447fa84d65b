from solution import flatten_json


def test_example():
    data = {"a": {"b": 1, "c": [10, {"d": None}]}}
    assert flatten_json(data) == {"a.b": 1, "a.c.0": 10, "a.c.1.d": None}


def test_flat_is_unchanged():
    assert flatten_json({"x": 1, "y": "two", "z": True}) == {"x": 1, "y": "two", "z": True}
    assert flatten_json({}) == {}


def test_empty_containers_are_leaves():
    assert flatten_json({"a": {}, "b": [], "c": {"d": []}}) == {"a": {}, "b": [], "c.d": []}


def test_nested_lists():
    assert flatten_json({"m": [[1, 2], [3]]}) == {"m.0.0": 1, "m.0.1": 2, "m.1.0": 3}


def test_does_not_mutate():
    data = {"a": {"b": [1]}}
    flatten_json(data)
    assert data == {"a": {"b": [1]}}
