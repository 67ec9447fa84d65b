import sys

MOD = 1_000_000_007


def main():
    data = sys.stdin.read().split()
    rows, cols = int(data[0]), int(data[1])
    grid = data[2:2 + rows]
    ways = [0] * cols
    ways[0] = 1 if grid[0][0] == "." else 0
    for r in range(rows):
        line = grid[r]
        for c in range(cols):
            if line[c] == "#":
                ways[c] = 0
            elif c:
                ways[c] = (ways[c] + ways[c - 1]) % MOD
    print(ways[-1])


main()
