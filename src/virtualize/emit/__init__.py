"""Deprecated: the writers moved to `virtualize.outputs` (one package per output kind).
This package only re-exports the old names."""

from ..outputs.cube.writer import write_cube
from ..outputs.kerchunk.writer import kerchunk_refs, write_kerchunk

__all__ = ["kerchunk_refs", "write_cube", "write_kerchunk"]
