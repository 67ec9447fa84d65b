class Inventory:
    def __init__(self):
        self._items = {}

    def __len__(self):
        return len(self._items)

    def add(self, item):
        if item.sku in self._items:
            raise KeyError(f"duplicate sku {item.sku!r}")
        self._items[item.sku] = item

    def remove(self, sku):
        return self._items.pop(sku)

    def restock(self, sku, amount):
        if amount <= 0:
            raise ValueError("amount must be positive")
        self._items[sku].quantity += amount

    def total_value(self):
        return sum(item.total_value for item in self._items.values())

    def low_stock(self, threshold):
        return sorted(sku for sku, item in self._items.items() if item.quantity < threshold)
