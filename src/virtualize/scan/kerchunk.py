"""Deprecated: see `virtualize.formats.kerchunk`."""

from ..formats.kerchunk import read_kerchunk_values, scan_kerchunk

__all__ = ["read_kerchunk_values", "scan_kerchunk"]
