"""The input formats: the one list. Detection, scanning and reading loop over it; adding a
format is one module (or package) beside this one defining `FORMAT` (a `base.Format`) and
one line here. Order is sniff order."""

from __future__ import annotations

import functools
import importlib

from .base import Format

# the modules defining each format's `FORMAT`, in the order their `sniff` is asked
FORMATS = (
    "hdf5",      # HDF5, netCDF-4
    "netcdf3",   # netCDF classic (CDF-1, CDF-2, CDF-5)
    "tiff",      # TIFF, BigTIFF, GeoTIFF, OME-TIFF
    "kerchunk",  # kerchunk reference sets (JSON, parquet), reading their data files
)


@functools.cache
def formats() -> tuple[Format, ...]:
    """Every format's plug-in object, in registry order."""
    return tuple(importlib.import_module(f"{__package__}.{m}").FORMAT for m in FORMATS)


def by_name(name: str) -> Format:
    """The format called `name` (KeyError for none)."""
    for fmt in formats():
        if fmt.name == name:
            return fmt
    raise KeyError(name)


def suffixes() -> tuple[str, ...]:
    """Every format's file name endings (what a directory is expanded to)."""
    return tuple(s for fmt in formats() for s in fmt.suffixes)


def sniff(head: bytes, f=None) -> Format | None:
    """The format that claims a file from its first bytes `head` (and, given, its open
    file `f`: see `Format.sniff`), or None."""
    return next((fmt for fmt in formats() if fmt.sniff(head, f)), None)
