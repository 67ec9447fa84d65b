import pytest
from bank import Account, InsufficientFunds


def test_defaults():
    acct = Account("ann")
    assert acct.owner == "ann"
    assert acct.balance == 0


def test_deposit_and_withdraw():
    acct = Account("bob", 10)
    assert acct.deposit(5) == 15
    assert acct.withdraw(12) == 3
    assert acct.balance == 3


def test_invalid_amounts():
    acct = Account("cy", 10)
    for bad in (0, -1):
        with pytest.raises(ValueError):
            acct.deposit(bad)
        with pytest.raises(ValueError):
            acct.withdraw(bad)
    assert acct.balance == 10


def test_insufficient_funds():
    acct = Account("di", 5)
    with pytest.raises(InsufficientFunds):
        acct.withdraw(6)
    assert acct.balance == 5
    assert issubclass(InsufficientFunds, Exception)


def test_transfer():
    a, b = Account("a", 50), Account("b", 1)
    assert a.transfer(20, b) == 30
    assert b.balance == 21
    with pytest.raises(InsufficientFunds):
        a.transfer(31, b)
    with pytest.raises(ValueError):
        a.transfer(-5, b)
    assert (a.balance, b.balance) == (30, 21)
