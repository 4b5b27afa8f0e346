"""Deprecated: see `virtualize.formats.hdf5`."""

from ..formats.hdf5 import scan_hdf5

__all__ = ["scan_hdf5"]
