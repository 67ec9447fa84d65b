from search import binary_search


class CountingList(list):
    reads = 0

    def __getitem__(self, index):
        CountingList.reads += 1
        return super().__getitem__(index)


def test_middle_values():
    items = [1, 3, 5, 7, 9, 11]
    assert binary_search(items, 5) == 2
    assert binary_search(items, 7) == 3


def test_ends():
    items = [1, 3, 5, 7, 9, 11]
    assert binary_search(items, 1) == 0
    assert binary_search(items, 11) == 5


def test_single_and_empty():
    assert binary_search([4], 4) == 0
    assert binary_search([4], 5) == -1
    assert binary_search([], 1) == -1


def test_every_value_found():
    items = list(range(0, 200, 3))
    for index, value in enumerate(items):
        assert binary_search(items, value) == index
    assert binary_search(items, 2) == -1
    assert binary_search(items, 500) == -1


def test_logarithmic():
    items = CountingList(range(1_000_000))
    CountingList.reads = 0
    assert binary_search(items, 765_432) == 765_432
    assert CountingList.reads <= 60
