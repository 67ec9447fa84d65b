"""KVCachePool (LRU under a token budget) and BatchScheduler (leader/follower batching) on
their own, with real DynamicCache objects and real threads."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from opd_gym.errors import ConfigError
from opd_gym.opd.teachers.batching import BatchScheduler
from opd_gym.opd.teachers.kv_cache import KVCachePool, common_prefix


def _cache(n: int):
    from transformers import DynamicCache

    cache = DynamicCache()
    cache.update(torch.zeros(1, 1, n, 2), torch.zeros(1, 1, n, 2), 0)
    return cache


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([], [1]) == 0 and common_prefix([5], [6]) == 0


def test_pool_picks_longest_prefix_crops_and_evicts_lru():
    pool = KVCachePool(budget_tokens=10)
    pool.put([1, 2, 3, 4], _cache(4))
    pool.put([1, 2, 9], _cache(3))
    entry, n = pool.best([1, 2, 3, 7, 7], usable=4)
    assert entry is not None and entry.ids == [1, 2, 3, 4] and n == 3
    _, capped = pool.best([1, 2, 3, 7, 7], usable=2)
    assert capped == 2
    got = pool.checkout(entry, n)
    assert got is not None and got.ids == [1, 2, 3] and got.cache.get_seq_length() == 3
    assert len(pool) == 1 and pool.hits == 1 and pool.reused_tokens == 3
    pool.put([1, 2, 3, 7, 7], _cache(5))
    pool.put([4, 4, 4], _cache(3))  # 3 + 5 + 3 = 11 > 10: the oldest ([1, 2, 9]) goes
    pool.evict()
    assert pool.evictions == 1 and pool.tokens == 8
    assert pool.best([1, 2, 9], usable=3)[0].ids == [1, 2, 3, 7, 7]  # only the shared [1, 2]
    pool.put(list(range(11)), _cache(11))  # larger than the whole budget: not kept
    assert pool.tokens == 8
    assert pool.checkout(None, 0) is None and pool.misses == 1
    pool.clear()
    assert len(pool) == 0
    with pytest.raises(ConfigError):
        KVCachePool(-1)


def test_scheduler_batches_concurrent_submissions_and_propagates_errors():
    calls: list[list[int]] = []

    def run(items: list[int]) -> list[int]:
        calls.append(list(items))
        time.sleep(0.02)  # long enough for the other threads to queue behind the leader
        if -1 in items:
            raise ValueError("bad item")
        return [x * 10 for x in items]

    sched: BatchScheduler[int, int] = BatchScheduler(run, window_s=0.05)
    results: dict[int, list[int]] = {}
    barrier = threading.Barrier(6)

    def work(i: int) -> None:
        barrier.wait()
        results[i] = sched.submit([i, i + 100])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results == {i: [i * 10, (i + 100) * 10] for i in range(6)}
    assert sched.batches < 6 and sum(len(c) for c in calls) == 12

    with pytest.raises(ValueError, match="bad item"):
        sched.submit([-1])
    assert sched.submit([3]) == [30]  # the scheduler recovers after a failed batch

    single: BatchScheduler[int, int] = BatchScheduler(run, enabled=False)
    calls.clear()
    out: dict[int, list[int]] = {}
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, single.submit([i])))
               for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert out == {i: [i * 10] for i in range(4)} and all(len(c) == 1 for c in calls)
    with pytest.raises(ConfigError):
        BatchScheduler(run, window_s=-1)
