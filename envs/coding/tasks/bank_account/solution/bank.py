class InsufficientFunds(Exception):
    """Raised when a withdrawal exceeds the balance."""


class Account:
    def __init__(self, owner, balance=0):
        self.owner = owner
        self.balance = balance

    def deposit(self, amount):
        if amount <= 0:
            raise ValueError("amount must be positive")
        self.balance += amount
        return self.balance

    def withdraw(self, amount):
        if amount <= 0:
            raise ValueError("amount must be positive")
        if amount > self.balance:
            raise InsufficientFunds(f"balance {self.balance} < {amount}")
        self.balance -= amount
        return self.balance

    def transfer(self, amount, other):
        self.withdraw(amount)
        other.deposit(amount)
        return self.balance
