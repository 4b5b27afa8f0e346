"""The input formats (one plug-in each, `registry.FORMATS`) and their public entry points:
`scan` a file into a `FileInventory` without reading its data (only headers, block
indexes, and small coordinate variables), `read_values` / `SourceReader` to read its
values with the format's own library, `detect_format`. Each loops over the registry."""

from __future__ import annotations

import os
import stat

from .. import storage
from ..conventions import ScanHint
from ..model import FileInventory, Location, Problem, VirtualizeError
from . import registry
from ._fingerprint import add_fingerprints, hint_of  # noqa: F401 (staleness: the hint of a scan)
from ._io import system_location, system_locations  # noqa: F401 (open.py's confinement too)
from ._planning import _check_extent  # noqa: F401 (tests call it here)
from .base import Format


def detect(path: str) -> Format | None:
    """The format of `path` (a file, or a directory or URL prefix a format takes as one
    input, such as a kerchunk parquet reference set or a zarr v2 store), or None."""
    if storage.is_url(path) or os.path.isdir(path):  # (a URL: a zarr store's prefix)
        fmt = next((fmt for fmt in registry.formats() if fmt.sniff_directory(path)), None)
        if fmt is not None:
            return fmt
    with storage.open_source(path) as f:
        head = f.read(8)
        return registry.sniff(head) or registry.sniff(head, f)


def is_input_directory(path: str) -> bool:
    """Whether a local directory is one input of a format (a kerchunk parquet reference
    set), not a directory of inputs."""
    return any(fmt.sniff_directory(path) for fmt in registry.formats())


def detect_format(path: str) -> str | None:
    """The name of the format of `path` ('hdf5', 'netcdf3', 'tiff', 'kerchunk': a
    reference set, JSON or a kerchunk parquet directory) or None."""
    fmt = detect(path)
    return fmt.name if fmt is not None else None


def scan(path: str | os.PathLike, hint: ScanHint | None = None) -> FileInventory:
    """`_scan_file` (below), with the file's fingerprint added (formats/_fingerprint.py)."""
    return add_fingerprints(_scan_file(path, hint), hint)


def _scan_file(path: str | os.PathLike, hint: ScanHint | None = None) -> FileInventory:
    """Scan one file (HDF5, netCDF-4, netCDF classic, TIFF) or kerchunk reference set
    (whose block tables point into the data files it names) into its inventory.
    `hint`: how the caller will plan it (which variables to digest for comparing across
    files; formats/_planning.py).

    Raises `VirtualizeError` (carrying one located problem) when the file cannot be read
    at all: missing, unknown format, truncated or corrupt.
    """
    path = storage.normalize(path)
    storage.forget()  # what an earlier scan saw of any object is not trusted
    _refuse_special(path)
    try:
        fmt = detect(path)
    except VirtualizeError:
        raise
    except OSError as e:
        raise VirtualizeError([Problem(Location(path), "unreadable", str(e.strerror or e))],
                              f"{path}: cannot be read") from None
    try:
        if fmt is not None:
            return fmt.scan(path, hint)
    except VirtualizeError:
        raise
    except Exception as e:  # a library's own error: name the file and what it said
        raise VirtualizeError([Problem(Location(path), "corrupt", f"{type(e).__name__}: {e}")],
                              f"{path}: cannot be scanned") from None
    what = ("an empty file (0 bytes)" if storage.stat(path).st_size == 0 else
            "not an HDF5, netCDF-4, netCDF classic, HDF4, TIFF, FITS or GRIB file, nor a kerchunk "
            "reference set")
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
        if is_input_directory(path):
            return
    what = next((name for test, name in _SPECIAL if test(mode)), "not a regular file")
    raise VirtualizeError([Problem(Location(path), "unreadable",
                                   f"not a regular file: {what}; nothing was read from it")],
                          f"{path}: not a regular file")


def read_values(path: str, variable: str):
    """Decode one variable's full data with the format's own library (for inlining)."""
    fmt = detect(path)
    if fmt is None:
        raise ValueError(f"{path}: cannot read {variable}")
    return fmt.read_values(path, variable)


class SourceReader:
    """Reads regions of variables from one source with the format's own library, keeping
    the file open across reads (for the materialize remedy)."""

    def __init__(self, path: str):
        self.path = path
        fmt = detect(path)
        self.fmt = fmt.name if fmt is not None else None
        self._reader = fmt.reader(path) if fmt is not None else None

    def __enter__(self) -> "SourceReader":
        if self._reader is not None:
            self._reader.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._reader is not None:
            self._reader.__exit__(*exc)

    def read(self, variable: str, region: tuple[tuple[int, int], ...]):
        if self._reader is None:
            raise ValueError(f"{self.path}: cannot read regions of {self.fmt} files")
        return self._reader.read(variable, region)
