"""Churns a 64-bit linear congruential generator and prints a checksum. Run me."""

MULTIPLIER = 6364136223846793005
INCREMENT = 1442695040888963407


def churn(seed, rounds):
    """Mix `rounds` outputs of the generator started at `seed` into one number."""
    x = seed
    acc = 0
    for i in range(rounds):
        x = (x * MULTIPLIER + INCREMENT) % 2**64
        acc ^= (x >> (i % 29)) & 0xFFFF
        acc = (acc * 31 + i) % 1_000_003
    return acc


if __name__ == "__main__":
    print(churn(20240601, 5000))
