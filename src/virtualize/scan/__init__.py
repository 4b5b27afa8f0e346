"""Scanners: one module per format, each turning a file into a `FileInventory` without
reading its data (only headers, block indexes, and small coordinate variables)."""

from __future__ import annotations

import os
import stat
import sys

import numpy as np

from .. import storage
from ..model import FileInventory, Location, Problem, VirtualizeError
from ._fingerprint import add_fingerprints
from ._io import find_hdf5_signature, sniff
from ._planning import ScanHint, add_planning_data


def detect_format(path: str) -> str | None:
    """'hdf5', 'netcdf3', 'tiff', 'kerchunk' (a reference set: a file starting with '{',
    i.e. JSON, or a kerchunk parquet directory) or None."""
    from .kerchunk import is_parquet_references, looks_like_json

    if not storage.is_url(path) and os.path.isdir(path) and is_parquet_references(path):
        return "kerchunk"
    with storage.open_source(path) as f:
        head = f.read(8)
        fmt = sniff(head)
        if fmt is None and find_hdf5_signature(f):
            fmt = "hdf5"
        if fmt is None and looks_like_json(head):
            fmt = "kerchunk"
    return fmt


def scan(path: str | os.PathLike, hint: ScanHint | None = None) -> FileInventory:
    """`_scan_file` (below), with the file's fingerprint added (scan/_fingerprint.py)."""
    return add_fingerprints(_scan_file(path, hint), hint)


def _scan_file(path: str | os.PathLike, hint: ScanHint | None = None) -> FileInventory:
    """Scan one file (HDF5, netCDF-4, netCDF classic, TIFF) or kerchunk reference set
    (whose block tables point into the data files it names) into its inventory.
    `hint`: how the caller will plan it (which variables to digest for comparing across
    files; scan/_planning.py).

    Raises `VirtualizeError` (carrying one located problem) when the file cannot be read
    at all: missing, unknown format, truncated or corrupt.
    """
    path = storage.normalize(path)
    storage.forget()  # what an earlier scan saw of any object is not trusted
    _refuse_special(path)
    try:
        fmt = detect_format(path)
    except VirtualizeError:
        raise
    except OSError as e:
        raise VirtualizeError([Problem(Location(path), "unreadable", str(e.strerror or e))],
                              f"{path}: cannot be read") from None
    try:
        if fmt == "hdf5":
            from .hdf5 import scan_hdf5
            # planning data added while the scanner's file is open (`read`: its values)
            return scan_hdf5(path, lambda inv, read: add_planning_data(_check_extent(inv), read,
                                                                        hint))
        if fmt == "netcdf3":
            from .netcdf3 import scan_netcdf3
            return add_planning_data(_check_extent(scan_netcdf3(path)), hint=hint)
        if fmt == "tiff":
            from .tiff import scan_tiff
            return add_planning_data(_check_extent(scan_tiff(path)), hint=hint)
        if fmt == "kerchunk":  # its blocks are in other files: it checks their extents
            from .kerchunk import scan_kerchunk
            return add_planning_data(scan_kerchunk(path), hint=hint)
    except VirtualizeError:
        raise
    except Exception as e:  # a library's own error: name the file and what it said
        raise VirtualizeError([Problem(Location(path), "corrupt", f"{type(e).__name__}: {e}")],
                              f"{path}: cannot be scanned") from None
    what = ("an empty file (0 bytes)" if storage.stat(path).st_size == 0 else
            "not an HDF5, netCDF-4, netCDF classic or TIFF file, nor a kerchunk reference set")
    raise VirtualizeError([Problem(Location(path), "unknown-format", what)], f"{path}: {what}")


# what a path that is not a regular file is (opening a FIFO blocks until a writer comes;
# reading a device never ends)
_SPECIAL = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
            (stat.S_ISDIR, "a directory"))


def _refuse_special(path: str) -> None:
    """A local path that is not a regular file (a FIFO, device, socket, or a directory that
    is no kerchunk parquet reference set) is `unreadable`, before anything opens it."""
    if storage.is_url(path):
        return
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # (missing, permissions: said by the open that follows)
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        from .kerchunk import is_parquet_references
        if is_parquet_references(path):
            return
    what = next((name for test, name in _SPECIAL if test(mode)), "not a regular file")
    raise VirtualizeError([Problem(Location(path), "unreadable",
                                   f"not a regular file: {what}; nothing was read from it")],
                          f"{path}: not a regular file")


def _check_extent(inv: FileInventory) -> FileInventory:
    """Every referenced block must lie inside the file: a block past its end (a truncated
    file) is a located problem here, not an error at read time."""
    told = {p.loc.variable for p in inv.problems if p.kind == "truncated"}
    # blocks in the inventory's data files (an HDF5 external link's target) against theirs
    sizes = np.array([s.size for s in inv.sources()] + [0], dtype=np.uint64)
    for name, v in inv.variables.items():
        if v.blocks is None or name in told:
            continue
        refs = v.blocks.refs.reshape(-1)
        end = refs["offset"] + refs["length"]
        size = sizes[np.minimum(refs["path"], len(sizes) - 1)]
        bad = (refs["length"] > 0) & (refs["path"] < len(sizes) - 1) & (end > size)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            block = tuple(int(b) for b in np.unravel_index(i, v.blocks.refs.shape))
            inv.problems.append(Problem(
                Location(inv.path, name, None, block), "truncated",
                f"{int(bad.sum())} block(s) end past the end of the file ({inv.size} bytes), "
                f"the first at byte {int(end[i])}"))
    return inv


def read_values(path: str, variable: str):
    """Decode one variable's full data with the format's own library (for inlining)."""
    fmt = detect_format(path)
    if fmt == "hdf5":
        from .hdf5 import h5py  # with hdf5plugin's filters registered
        if not storage.is_url(path):
            with h5py.File(path, "r") as f:
                return f[variable][()]
        with storage.open_source(path) as fobj, h5py.File(fobj, "r") as f:
            return f[variable][()]
    if fmt == "netcdf3":
        from .netcdf3 import read_netcdf3_values
        return read_netcdf3_values(path, variable)
    if fmt == "tiff":
        from .tiff import read_tiff_values
        return read_tiff_values(path, variable)
    if fmt == "kerchunk":  # zarr over the references, reading the data files
        from .kerchunk import read_kerchunk_values
        return read_kerchunk_values(path, variable)
    raise ValueError(f"{path}: cannot read {variable}")


class SourceReader:
    """Reads regions of variables from one source with the format's own library, keeping
    the file open across reads (for the materialize remedy)."""

    def __init__(self, path: str):
        self.path = path
        self.fmt = detect_format(path)
        self._h5 = None
        self._fobj = None

    def __enter__(self) -> "SourceReader":
        if self.fmt == "hdf5":
            from .hdf5 import h5py  # with hdf5plugin's filters registered
            if storage.is_url(self.path):
                self._fobj = storage.open_source(self.path)
            self._h5 = h5py.File(self._fobj or self.path, "r")
        return self

    def __exit__(self, *_exc) -> None:
        if self._h5 is not None:
            self._h5.close()
        if self._fobj is not None:
            self._fobj.close()

    def read(self, variable: str, region: tuple[tuple[int, int], ...]):
        slices = tuple(slice(a, b) for a, b in region)
        if self._h5 is not None:
            return self._h5[variable][slices]
        if self.fmt == "tiff":  # only the strips / tiles the region touches
            from .tiff import read_tiff_region
            return read_tiff_region(self.path, variable, region)
        if self.fmt == "netcdf3":  # a strided view of the mapped file, cut before copying
            from .netcdf3 import read_netcdf3_values
            return read_netcdf3_values(self.path, variable, region)
        if self.fmt == "kerchunk":  # zarr decodes the referenced chunks
            from .kerchunk import read_kerchunk_values
            return read_kerchunk_values(self.path, variable, region)
        raise ValueError(f"{self.path}: cannot read regions of {self.fmt} files")


class _CallableModule(type(os)):
    """`virtualize.scan(path)` (the API function's name before 0.2) still works, with a
    DeprecationWarning: the name is this subpackage, so `import virtualize.scan.hdf5`
    works too. Use `virtualize.inventory(path)`."""

    def __call__(self, path: str | os.PathLike) -> FileInventory:
        import warnings

        warnings.warn("virtualize.scan(path) is deprecated: use virtualize.inventory(path)",
                      DeprecationWarning, stacklevel=2)
        return scan(path)


sys.modules[__name__].__class__ = _CallableModule
