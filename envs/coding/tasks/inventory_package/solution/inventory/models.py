from dataclasses import dataclass


@dataclass
class Item:
    sku: str
    name: str
    price: float
    quantity: int = 0

    @property
    def total_value(self):
        return self.price * self.quantity
