import math

import pytest
from geometry import Vector, perimeter, polygon_area


def test_modules_exist():
    from geometry.polygon import polygon_area as pa
    from geometry.vector import Vector as V

    assert V is Vector and pa is polygon_area


def xy(v):
    """A vector's coordinates as plain data: what the results are compared by."""
    return (v.x, v.y)


def test_vector_arithmetic():
    a, b = Vector(1, 2), Vector(3, -1)
    assert xy(a + b) == (4, 1)
    assert xy(a - b) == (-2, 3)
    assert xy(a * 3) == (3, 6)
    assert xy(2 * a) == (2, 4)
    assert xy(a) == (1, 2)


def test_vector_equality():
    assert Vector(1, 2) + Vector(3, -1) == Vector(4, 1)
    assert not (Vector(1, 2) == Vector(2, 1))
    assert Vector(1, 2) != Vector(1, 3)


def test_vector_products():
    a, b = Vector(3, 4), Vector(-4, 3)
    assert a.length() == 5
    assert a.dot(b) == 0
    assert a.cross(b) == 25
    assert b.cross(a) == -25


def test_vector_is_immutable():
    v = Vector(1, 1)
    with pytest.raises(AttributeError):
        v.x = 5


def test_area_both_windings():
    square = [(0, 0), (4, 0), (4, 4), (0, 4)]
    assert polygon_area(square) == 16
    assert polygon_area(square[::-1]) == 16
    assert polygon_area([(0, 0), (4, 0), (0, 3)]) == 6
    assert polygon_area([(0, 0), (1, 1)]) == 0.0


def test_perimeter():
    assert perimeter([(0, 0), (4, 0), (0, 3)]) == pytest.approx(12)
    assert perimeter([(0, 0)]) == 0.0
    assert perimeter([(0, 0), (1, 1)]) == pytest.approx(2 * math.sqrt(2))
