"""A least-recently-used cache."""


class LRUCache:
    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.data = {}
        self.order = []

    def __len__(self):
        return len(self.data)

    def get(self, key, default=None):
        if key in self.data:
            return self.data[key]
        return default

    def put(self, key, value):
        if len(self.data) >= self.capacity:
            oldest = self.order.pop(0)
            del self.data[oldest]
        self.data[key] = value
        self.order.append(key)
