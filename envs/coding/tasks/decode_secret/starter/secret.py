"""Decode the password hidden in DATA with a rolling XOR key, and print it."""

DATA = [43, 212, 82, 138, 103, 193, 90, 185, 32, 9, 143, 87, 156, 96, 243, 3]


def decode(data, key=0x5A):
    """Each byte is XORed with a key that evolves with the bytes seen so far."""
    out = []
    for byte in data:
        out.append(chr(byte ^ key))
        key = (key * 7 + byte) % 256
    return "".join(out)


if __name__ == "__main__":
    print(decode(DATA))
