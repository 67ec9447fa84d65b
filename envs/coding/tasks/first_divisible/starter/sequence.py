"""An obscure integer sequence."""


def weird(n):
    """Term n (n >= 1) of a sequence with no closed form worth knowing."""
    a, b = 1, n
    for k in range(1, n % 17 + 3):
        a, b = b, (a * k + b * b + n) % 1_000_003
    return a + b
