def spiral_order(matrix):
    rows = [list(row) for row in matrix if row]
    out = []
    while rows:
        out.extend(rows.pop(0))
        rows = [list(col) for col in zip(*rows, strict=True)][::-1]
    return out
