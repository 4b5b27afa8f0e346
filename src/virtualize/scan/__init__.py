"""Deprecated: the scanners moved to `virtualize.formats` (one plug-in per format). This
package re-exports the public names; `virtualize.scan(path)` (the API function's name
before 0.2) still works, with a DeprecationWarning: use `virtualize.inventory(path)`."""

from __future__ import annotations

import os
import sys

from ..conventions import ScanHint
from ..formats import SourceReader, detect_format, read_values, scan
from ..model import FileInventory

__all__ = ["ScanHint", "SourceReader", "detect_format", "read_values", "scan"]


class _CallableModule(type(os)):
    """`virtualize.scan(path)`, deprecated; `virtualize.scan.hdf5` and the other old
    scanner modules stay importable (shims of `virtualize.formats`'s)."""

    def __call__(self, path: str | os.PathLike) -> FileInventory:
        import warnings

        warnings.warn("virtualize.scan(path) is deprecated: use virtualize.inventory(path)",
                      DeprecationWarning, stacklevel=2)
        return scan(path)

    def __getattr__(self, name: str):
        if name in ("hdf5", "netcdf3", "tiff", "kerchunk"):  # (as once imported by a scan)
            import importlib
            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


sys.modules[__name__].__class__ = _CallableModule
