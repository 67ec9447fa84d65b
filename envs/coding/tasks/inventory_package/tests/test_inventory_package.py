import dataclasses

import pytest
from inventory import Inventory, Item


def _store():
    inv = Inventory()
    inv.add(Item("A1", "bolt", 0.25, 100))
    inv.add(Item("B2", "nut", 0.1, 5))
    inv.add(Item("C3", "gear", 12.5))
    return inv


def test_package_layout():
    from inventory.models import Item as ModelItem
    from inventory.store import Inventory as StoreInventory

    assert ModelItem is Item and StoreInventory is Inventory
    assert dataclasses.is_dataclass(Item)


def test_item_value():
    assert Item("X", "x", 2.5, 4).total_value == 10.0
    assert Item("Y", "y", 3.0).quantity == 0


def test_add_remove_len():
    inv = _store()
    assert len(inv) == 3
    with pytest.raises(KeyError):
        inv.add(Item("A1", "dup", 1.0))
    removed = inv.remove("B2")
    assert removed.name == "nut"
    assert len(inv) == 2
    with pytest.raises(KeyError):
        inv.remove("B2")


def test_restock_and_totals():
    inv = _store()
    assert inv.total_value() == pytest.approx(25.5)
    inv.restock("C3", 2)
    assert inv.total_value() == pytest.approx(50.5)
    with pytest.raises(ValueError):
        inv.restock("C3", 0)
    with pytest.raises(KeyError):
        inv.restock("ZZ", 1)


def test_low_stock():
    inv = _store()
    assert inv.low_stock(10) == ["B2", "C3"]
    assert inv.low_stock(0) == []
