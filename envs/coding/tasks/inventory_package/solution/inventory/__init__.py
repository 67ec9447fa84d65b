"""A tiny inventory package."""

from inventory.models import Item
from inventory.store import Inventory

__all__ = ["Inventory", "Item"]
