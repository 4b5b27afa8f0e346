"""The Format protocol: what virtualize asks of an input format (docs/architecture.md,
"Adding a format"). A format is one module (or package) of `formats/` defining one
`Format` instance, `FORMAT`, named once in `registry.FORMATS`; another package's format
is the same object named by an entry point of the group `virtualize.formats`
(plugins.py).

Detection, scanning, the scan workers' preload, path expansion (`suffixes`) and every read
of source values (`--inline`, bounds, digests of chunks held by value, the materialize
remedy, the decode check's reference reads) go through this object: nothing else names a
format. A plug-in module must import cheaply (its library imported by `scan` and the
readers, on first use), since detection asks every format.
"""

from __future__ import annotations

import os
from typing import Any

from ..model import FileInventory


class Format:
    """One input format. Subclasses set `name` and `suffixes` and implement `sniff`, `scan`
    and `read_region`; `read_values` and `reader` have defaults in terms of those."""

    name: str = ""  # FileInventory.format's family, the registry's key
    title: str = ""  # what users call it ("netCDF-4 / HDF5"): the help's list of formats read
    # file name endings expanded from a directory (`virtualize check DIR`), lower case
    suffixes: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()  # what a new scan worker imports before its first scan
    # the `FileInventory.format` names its scanner gives (a family's variants)
    inventory_formats: tuple[str, ...] = ()
    # its inventories are reference sets (`FileInventory.reference_set`)
    reference_set: bool = False
    # its reader reads a variable whose blocks lie in another file (an HDF5 external link's
    # target) through the file that links to it, with the format's own library
    reads_linked_data: bool = False

    def sniff(self, head: bytes, f=None) -> bool:
        """Whether a file is of this format. Asked twice per file, every format in registry
        order each time: first with the first 8 bytes only (`f` None), then, when no format
        claimed them, with the open file `f` too (for formats that look further, such as
        HDF5's user block, or that are a last resort, such as JSON references)."""
        raise NotImplementedError

    def sniff_directory(self, path: str) -> bool:
        """Whether a local directory (or a URL, which may name a prefix of objects) is one
        input of this format (kerchunk's parquet reference sets, zarr v2 stores); files
        only by default. Asked of every URL: a format must answer most without a request."""
        return False

    def scan(self, path: str, hint=None) -> FileInventory:
        """The file's inventory, planning data added (`formats._planning.finish`); raises
        for a file that cannot be read at all, returns content problems in it."""
        raise NotImplementedError

    def read_region(self, path: str, name: str,
                    region: tuple[tuple[int, int], ...] | None = None) -> Any:
        """Values of variable `name` decoded with the format's own library: the whole
        variable (`region` None) or the region [a, b) per axis."""
        raise NotImplementedError

    def read_values(self, path: str, name: str) -> Any:
        """The whole variable's values (for inlining)."""
        return self.read_region(path, name)

    def reader(self, path: str) -> "Reader":
        """Reads regions of variables of one file, keeping what it opened across reads
        (`formats.SourceReader`). By default one `read_region` per read."""
        return Reader(self, path)

    def __repr__(self) -> str:
        return f"<format {self.name}>"


class Reader:
    """Regions of one file's variables (a context manager); see `Format.reader`."""

    def __init__(self, fmt: Format, path: str) -> None:
        self.format, self.path = fmt, os.fspath(path)

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *_exc) -> None:
        pass

    def read(self, name: str, region: tuple[tuple[int, int], ...]):
        return self.format.read_region(self.path, name, region)
