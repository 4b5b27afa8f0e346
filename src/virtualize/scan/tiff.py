"""Deprecated: see `virtualize.formats.tiff`."""

from ..formats.tiff import read_tiff_region, read_tiff_values, scan_tiff

__all__ = ["read_tiff_region", "read_tiff_values", "scan_tiff"]
