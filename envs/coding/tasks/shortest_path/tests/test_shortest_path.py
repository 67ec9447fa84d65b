import math

from solution import shortest_path

GRAPH = {
    "A": {"B": 4, "C": 1},
    "C": {"B": 2, "D": 7},
    "B": {"D": 1},
    "D": {"E": 3},
}


def test_cheapest_path():
    assert shortest_path(GRAPH, "A", "D") == (4, ["A", "C", "B", "D"])


def test_to_sink_node():
    cost, path = shortest_path(GRAPH, "A", "E")
    assert cost == 7
    assert path == ["A", "C", "B", "D", "E"]


def test_unreachable():
    cost, path = shortest_path(GRAPH, "E", "A")
    assert math.isinf(cost) and path == []


def test_same_node():
    assert shortest_path(GRAPH, "B", "B") == (0, ["B"])


def test_directed_edges_and_zero_weights():
    graph = {1: {2: 0, 3: 5}, 2: {3: 0}, 3: {1: 0}}
    assert shortest_path(graph, 1, 3) == (0, [1, 2, 3])


def test_larger_grid():
    n = 40
    graph = {}
    for r in range(n):
        for c in range(n):
            edges = {}
            if r + 1 < n:
                edges[(r + 1, c)] = 1
            if c + 1 < n:
                edges[(r, c + 1)] = 2
            graph[(r, c)] = edges
    cost, path = shortest_path(graph, (0, 0), (n - 1, n - 1))
    assert cost == 3 * (n - 1)
    assert len(path) == 2 * n - 1
