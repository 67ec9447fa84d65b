import math


def polygon_area(points):
    if len(points) < 3:
        return 0.0
    twice = 0
    for (x1, y1), (x2, y2) in zip(points, points[1:] + points[:1], strict=True):
        twice += x1 * y2 - x2 * y1
    return abs(twice) / 2


def perimeter(points):
    if len(points) < 2:
        return 0.0
    return sum(math.dist(a, b) for a, b in zip(points, points[1:] + points[:1], strict=True))
