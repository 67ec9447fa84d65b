import pytest
from lru import LRUCache


def test_basic_put_get():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    assert cache.get("missing", "d") == "d"
    assert len(cache) == 2


def test_evicts_oldest_without_use():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("c", 3)
    assert cache.get("a") is None
    assert (cache.get("b"), cache.get("c")) == (2, 3)


def test_get_refreshes_recency():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.get("a")
    cache.put("c", 3)
    assert cache.get("b") is None
    assert cache.get("a") == 1


def test_update_does_not_evict():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    assert len(cache) == 2
    assert cache.get("b") == 2
    assert cache.get("a") == 10


def test_update_refreshes_recency_and_many_ops():
    cache = LRUCache(3)
    for i in range(10):
        cache.put(i % 4, i)
        cache.put(0, -i)
    assert len(cache) == 3
    assert cache.get(0) == -9


def test_capacity_validation():
    with pytest.raises(ValueError):
        LRUCache(0)
