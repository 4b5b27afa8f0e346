"""Emitters: write a plan as a cube directory or as a kerchunk reference export."""

from .cube import write_cube
from .kerchunk import kerchunk_refs, write_kerchunk

__all__ = ["kerchunk_refs", "write_cube", "write_kerchunk"]
