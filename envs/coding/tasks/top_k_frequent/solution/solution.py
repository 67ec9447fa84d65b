from collections import Counter


def top_k_frequent(items, k):
    counts = Counter(items)
    return sorted(counts, key=lambda v: (-counts[v], v))[:max(k, 0)]
