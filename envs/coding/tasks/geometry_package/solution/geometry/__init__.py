from geometry.polygon import perimeter, polygon_area
from geometry.vector import Vector

__all__ = ["Vector", "perimeter", "polygon_area"]
