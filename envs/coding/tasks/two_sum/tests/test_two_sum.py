import random

from solution import two_sum


def _check(nums, target):
    result = list(two_sum(nums, target))
    assert len(result) == 2
    i, j = result
    assert 0 <= i < j < len(nums)
    assert nums[i] + nums[j] == target


def test_basic():
    assert list(two_sum([2, 7, 11, 15], 9)) == [0, 1]


def test_not_adjacent():
    assert list(two_sum([3, 2, 4], 6)) == [1, 2]


def test_duplicates():
    assert list(two_sum([3, 3], 6)) == [0, 1]


def test_negatives():
    _check([-4, 10, 1, -7, 8], 1)


def test_large_input_is_fast():
    rng = random.Random(7)
    nums = rng.sample(range(0, 10_000_000, 2), 50_000)
    nums[123], nums[45_678] = 1, 10_000_000  # the only odd number + its partner
    assert list(two_sum(nums, 10_000_001)) == [123, 45_678]
