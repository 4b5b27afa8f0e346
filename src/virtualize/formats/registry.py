"""The input formats: the one list. Detection (`formats.detect`), scanning
(`formats.scan`), reading (`formats.read_values`, `formats.SourceReader`), the scan
workers' preload (`run/workers.py`) and directory expansion (`api/steps.py` DATA_SUFFIXES) loop
over it. Order is sniff order: the built-ins (`FORMATS`), then the formats other packages
add by the entry-point group `virtualize.formats` (plugins.py), loaded on first use.

Adding a format:
1. a module (or package) `formats/NAME.py` that imports cheaply (its library on first
   use) and defines `FORMAT`, an instance of a `base.Format` subclass: `name`,
   `suffixes`, `modules` (what a new worker preloads), `sniff(head, f)`, `scan(path,
   hint)` (its scanner's `FileInventory`, passed through `_planning.finish`), and
   `read_region(path, name, region)` (values by the format's own library: `--inline`,
   bounds, the materialize remedy, the decode check); `reader(path)` when keeping the
   file open across reads pays;
2. its module name in `FORMATS` below, before any format whose `sniff` would also claim
   its files (a format of another package: one entry point, `virtualize.formats`);
3. its tests (fixtures by the format's own writer; round trips compared with its library)
   and a docs/NAME.md.
"""

from __future__ import annotations

import functools
import importlib

from .. import plugins
from .base import Format

# the modules defining each format's `FORMAT`, in the order their `sniff` is asked
FORMATS = (
    "hdf5",      # HDF5, netCDF-4
    "netcdf3",   # netCDF classic (CDF-1, CDF-2, CDF-5)
    "tiff",      # TIFF, BigTIFF, GeoTIFF, OME-TIFF
    "fits",      # FITS images (astropy: the optional extra [fits])
    "grib",      # GRIB 1 and 2 messages (ecCodes: the optional extra [grib])
    "kerchunk",  # kerchunk reference sets (JSON, parquet), reading their data files
    "zarr2",     # zarr v2 directory stores, referencing their chunk files
    "hdf4",      # HDF4 SD datasets (pyhdf: the optional extra [hdf4])
)


@functools.cache
def builtins() -> tuple[Format, ...]:
    """The built-in formats' plug-in objects, in registry order."""
    return tuple(importlib.import_module(f"{__package__}.{m}").FORMAT for m in FORMATS)


@functools.cache
def formats() -> tuple[Format, ...]:
    """Every format's plug-in object, in registry order: the built-ins, then those of the
    entry points (a broken one reported and left out)."""
    builtin = builtins()
    return builtin + tuple(plugins.load(plugins.FORMATS, Format, [f.name for f in builtin]))


def _first(claims) -> Format | None:
    """The first format in registry order that `claims`: the entry points are read (a
    tenth of a second: every installed distribution's) only when no built-in does, which
    is the same answer (the built-ins come first) for less."""
    hit = next((fmt for fmt in builtins() if claims(fmt)), None)
    if hit is None:
        hit = next((fmt for fmt in formats()[len(builtins()):] if claims(fmt)), None)
    return hit


def by_name(name: str) -> Format:
    """The format called `name` (KeyError for none)."""
    fmt = _first(lambda f: f.name == name)
    if fmt is None:
        raise KeyError(name)
    return fmt


def of_inventory(fmt: str) -> Format | None:
    """The format whose scanner names its inventories `fmt` (`FileInventory.format`), or
    None."""
    return _first(lambda f: fmt in f.inventory_formats)


def titles() -> list[str]:
    """Every format by the name users know it by (its `title`, else its `name`), in
    registry order: what the command line's help lists as read."""
    return [fmt.title or fmt.name for fmt in formats()]


@functools.cache
def suffixes() -> tuple[str, ...]:
    """Every format's file name endings (what a directory is expanded to)."""
    return tuple(s for fmt in formats() for s in fmt.suffixes)


def sniff(head: bytes, f=None) -> Format | None:
    """The format that claims a file from its first bytes `head` (and, given, its open
    file `f`: see `Format.sniff`), or None."""
    return _first(lambda fmt: fmt.sniff(head, f))
