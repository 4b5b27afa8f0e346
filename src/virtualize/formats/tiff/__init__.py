"""TIFF, BigTIFF, GeoTIFF and OME-TIFF files: the plug-in (`FORMAT`). `scan.py` reads the
tags and strip/tile tables with tifffile (never pixel data); `read.py` decodes images. Both
are imported (with tifffile) on first use."""

from __future__ import annotations

from .._planning import finish
from ..base import Format

MAGIC = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")  # TIFF, BigTIFF; either byte order


class Tiff(Format):
    name = "tiff"
    title = "TIFF / GeoTIFF"
    suffixes = (".tif", ".tiff", ".gtiff")
    inventory_formats = ("tiff", "bigtiff", "geotiff", "geobigtiff")
    modules = (f"{__name__}.scan", f"{__name__}.read")

    def sniff(self, head: bytes, f=None) -> bool:
        return head[:4] in MAGIC

    def scan(self, path: str, hint=None):
        from .scan import scan_tiff

        return finish(scan_tiff(path), hint)

    def read_region(self, path: str, name: str, region=None):
        if region is None:
            return self.read_values(path, name)
        from .read import read_tiff_region  # only the strips / tiles the region touches

        return read_tiff_region(path, name, region)

    def read_values(self, path: str, name: str):
        from .read import read_tiff_values

        return read_tiff_values(path, name)


FORMAT = Tiff()
