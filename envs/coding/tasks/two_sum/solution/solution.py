def two_sum(nums, target):
    seen = {}
    for j, value in enumerate(nums):
        if target - value in seen:
            return [seen[target - value], j]
        seen.setdefault(value, j)
    raise ValueError("no pair sums to target")
