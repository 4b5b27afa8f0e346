"""Values of a TIFF's images decoded with tifffile (for `--inline`, the materialize
remedy and the decode check's reference reads)."""

from __future__ import annotations

import os

import numpy as np
import tifffile

from ... import storage
from .scan import C, _reopener, _tifffile_warnings, tiff_images


# (tifffile's warnings while reading values are dropped: the scan reported them, once, as
# `tiff-warning` notes; they are not printed beside the report)
@_tifffile_warnings()
def read_tiff_region(path: str, name: str, region: tuple[tuple[int, int], ...]) -> np.ndarray:
    """Decode one region of an image with tifffile, touching only the strips or tiles it
    overlaps (tifffile's `selection`)."""
    sel = tuple(slice(a, b) for a, b in region)
    if storage.is_url(path):  # tifffile reads through the ranged file object
        with storage.open_source(path) as fobj:
            return _read_tiff_region(fobj, name, sel)
    return _read_tiff_region(path, name, sel)


def _read_tiff_region(path, name: str, sel: tuple[slice, ...]) -> np.ndarray:
    if not isinstance(path, (str, os.PathLike)):
        path.seek(0)
    if name.startswith("overview/") and name.endswith("/image"):
        return tifffile.imread(path, level=int(name.split("/")[1]), selection=sel)
    with tifffile.TiffFile(path, is_shaped=False, is_ome=False, is_imagej=False) as tif:
        images = tiff_images(tif, _reopener(path))[0]
        if name not in images:
            raise KeyError(name)
        pages, lead, _dims = images[name]
        if not lead:
            return _page_region(path, pages[0], sel)
        which = np.arange(len(pages)).reshape(lead)[sel[:len(lead)]]
        parts = [_page_region(path, pages[i], sel[len(lead):]) for i in which.reshape(-1)]
        rest = parts[0].shape if parts else ()
        return np.stack(parts).reshape(*which.shape, *rest) if parts else \
            np.zeros((*which.shape, 0), dtype=pages[0].dtype)


def _page_region(path, page, sel: tuple[slice, ...]) -> np.ndarray:
    """One page's region as tifffile's `asarray` reads it. A contiguous uncompressed image
    is read from its first offset whatever its byte counts say (as `asarray` does, and as
    the scanner references it; `selection` would take a zero byte count as a sparse
    strip), through a memory map cut before copying; other pages through `selection`."""
    if page.compression == C.NONE and page.is_contiguous:
        dtype = np.dtype(page.parent.byteorder + page.dtype.char) if page.dtype.itemsize > 1 \
            else np.dtype(page.dtype)
        if not isinstance(path, (str, os.PathLike)):  # a remote file: its rows, one range
            rows = range(page.shape[0])[sel[0] if sel else slice(None)]
            a, b = (rows.start, rows.stop) if len(rows) else (0, 0)
            row = dtype.itemsize * int(np.prod(page.shape[1:]))
            raw = path.pread((b - a) * row, int(page.dataoffsets[0]) + a * row)
            out = np.frombuffer(raw, dtype=dtype).reshape((b - a, *page.shape[1:]))
            return np.array(out[(slice(None), *sel[1:])])
        mm = np.memmap(path, dtype=dtype, mode="r", offset=int(page.dataoffsets[0]),
                       shape=page.shape)
        return np.array(mm[sel])
    if not isinstance(path, (str, os.PathLike)):
        path.seek(0)  # tifffile reads a file object from where it stands
    return tifffile.imread(path, key=page.index, selection=sel)


@_tifffile_warnings()
def read_tiff_values(path: str, name: str) -> np.ndarray:
    """Decode one image (for inlining) with tifffile."""
    if storage.is_url(path):
        with storage.open_source(path) as fobj:
            return read_tiff_values(fobj, name)
    with tifffile.TiffFile(path, is_shaped=False, is_ome=False, is_imagej=False) as tif:
        images = tiff_images(tif, _reopener(path))[0]
        if name in images:
            pages, lead, _dims = images[name]
            data = [p.asarray() for p in pages]
            return np.stack(data).reshape(*lead, *data[0].shape) if lead else data[0]
        if name.startswith("overview/") and name.endswith("/image"):
            k = int(name.split("/")[1])
            return tif.series[0].levels[k].keyframe.asarray()
    raise KeyError(name)
