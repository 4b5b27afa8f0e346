"""TIFF, BigTIFF, GeoTIFF and COG files: block tables from strip / tile offsets (tifffile).

A file becomes:
- `image`: the main image; dims (y, x), (y, x, band) for pixel-interleaved samples,
  (band, y, x) for planar-separate ones, with a leading `page` axis when the file holds
  several pages that agree (shape, type, blocks, compression), or the leading axes of
  tifffile's ImageJ / shaped / OME series 0 (page_t, page_z, page_c, ...: `series.py`);
- `series/<k>/image`: tifffile's further series (several OME images, shaped series);
- for GeoTIFFs, `x` / `y` coordinates (pixel centres, as GDAL and rioxarray compute them)
  and a `spatial_ref` grid-mapping variable (`crs_wkt` when pyproj is installed, EPSG
  code, `GeoTransform`), and `GDAL_NODATA` as the fill value when it fits the type;
- each overview level (COG reduced pages, SubIFDs) as `overview/<k>/image` with its own
  coordinates, and a `multiscales` attribute on the root listing the levels.

Strips are stored at their true length (the last one short), tiles padded to full size.
Only the offset/bytecount tables and tags are read, never pixel data.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import re
import struct
from typing import Any

import numpy as np
import tifffile

from ... import storage
from ...model import (
    BlockTable,
    FileInventory,
    Location,
    Problem,
    Variable,
    VirtualizeError,
    empty_refs,
)
from .._values import bytes_codec
from .series import _pages, _reopener, _signature, tiff_images  # noqa: F401 (read.py, tests)

C = tifffile.COMPRESSION
# TIFF compressions whose segments a registered zarr codec decodes exactly. The numcodecs
# names resolve to numcodecs' implementations; imagecodecs_* to imagecodecs' (registered
# by `imagecodecs.zarr.register_codecs()`, which `virtualize.open` calls).
BYTES_CODECS = {
    C.NONE: None,
    C.ADOBE_DEFLATE: lambda: {"name": "numcodecs.zlib", "configuration": {"level": 1}},
    C.DEFLATE: lambda: {"name": "numcodecs.zlib", "configuration": {"level": 1}},
    C.LZW: lambda: {"name": "imagecodecs_lzw"},
    C.PACKBITS: lambda: {"name": "imagecodecs_packbits"},
    C.ZSTD: lambda: {"name": "numcodecs.zstd", "configuration": {"level": 0}},
    C.LZMA: lambda: {"name": "numcodecs.lzma", "configuration": {}},
}
IMAGE_CODECS = {C.JPEG, C.WEBP, C.LERC}


def scan_tiff(path: str) -> FileInventory:
    st = storage.stat(path)
    with storage.open_source(path, st.st_size) as fh, _tifffile_warnings() as warnings:
        check_ifd_chain(fh, path, st.st_size)
        fh.seek(0)  # tifffile starts reading where the handle is
        with tifffile.TiffFile(fh, is_shaped=False, is_ome=False, is_imagej=False) as tif:
            scanner = _TiffScanner(path, tif, st.st_size, _reopener(fh))
            scanner.source = fh
            inv = scanner.run(st.st_mtime_ns)
        inv.bytes_read, inv.requests, inv.etag = fh.bytes_read, fh.requests, st.etag
    # what tifffile only logged (a damaged tag it skipped, ...) belongs in the report, once
    # (tifffile reads a page's tags again when it builds its series)
    inv.problems += [_warning_problem(path, w) for w in dict.fromkeys(warnings)]
    return inv


def check_ifd_chain(fh, path: str, size: int) -> int:
    """Follow the chain of IFDs (each one's next-IFD offset) before tifffile does, and
    refuse a chain that loops: tifffile walks it page by page while we iterate and only
    looks for a loop when it indexes all pages at once, so a next-IFD offset pointing back
    to an earlier IFD made the scan run forever, its memory growing with every page.
    Returns the number of IFDs; each offset is checked against the file size first.
    """
    fh.seek(0)
    head = fh.read(16)
    order = "<" if head[:2] == b"II" else ">"
    big = int.from_bytes(head[2:4], "little" if order == "<" else "big") == 43
    off_fmt, off_size = (order + "Q", 8) if big else (order + "I", 4)
    cnt_fmt, cnt_size, tag_size = (order + "Q", 8, 20) if big else (order + "H", 2, 12)
    need = 16 if big else 8
    if len(head) < need:
        raise VirtualizeError([Problem(Location(path), "truncated",
                                       f"the file is truncated inside its TIFF header: {size} "
                                       f"byte(s), a {'BigTIFF' if big else 'TIFF'} header has "
                                       f"{need}")],
                              f"{path}: truncated TIFF header")
    offset = struct.unpack_from(off_fmt, head, 8 if big else 4)[0]
    if offset + cnt_size > size:
        raise VirtualizeError([Problem(Location(path), "truncated",
                                       f"the file is truncated: its first image directory (IFD) "
                                       f"is at byte {offset}, past the end of the file "
                                       f"({size} bytes)")],
                              f"{path}: truncated TIFF (first IFD past the end)")
    seen: dict[int, int] = {}
    while 0 < offset < size:
        if offset in seen:
            raise VirtualizeError([Problem(Location(path), "corrupt",
                                           f"the IFD chain loops: IFD {len(seen) - 1} points back "
                                           f"to IFD {seen[offset]} at byte offset {offset}")],
                                  f"{path}: corrupt TIFF (IFD chain loops)")
        seen[offset] = len(seen)
        fh.seek(offset)
        raw = fh.read(cnt_size)
        if len(raw) < cnt_size:
            break
        ntags = struct.unpack(cnt_fmt, raw)[0]
        if ntags > 4096:  # tifffile stops here too ("suspicious number of tags")
            break
        end = offset + cnt_size + ntags * tag_size + off_size
        if end > size:
            raise VirtualizeError([Problem(Location(path), "truncated",
                                           f"the file is truncated: image directory (IFD) "
                                           f"{len(seen) - 1} at byte {offset} holds {ntags} tags "
                                           f"and ends at byte {end}, past the end of the file "
                                           f"({size} bytes)")],
                                  f"{path}: truncated TIFF (an IFD past the end)")
        fh.seek(offset + cnt_size + ntags * tag_size)
        raw = fh.read(off_size)
        if len(raw) < off_size:
            break
        offset = struct.unpack(off_fmt, raw)[0]
    return len(seen)


# tifffile warnings that mean pages of the file are lost (an IFD offset past the end or
# inside garbage): the file holds more than the scan could see, so it is refused
LOST_PAGES = ("invalid page offset", "failed to read")


def _warning_problem(path: str, message: str) -> Problem:
    message = re.sub(r"<tifffile\.[^>]*>\s*", "", message).strip()  # not the object's repr
    if any(w in message.lower() for w in LOST_PAGES):
        return Problem(Location(path), "truncated",
                       f"tifffile could not follow the file's page chain ({message}): pages "
                       "after it are missing or damaged, so the image cannot be referenced whole")
    return Problem(Location(path), "tiff-warning", message, fatal=False)


@contextlib.contextmanager
def _tifffile_warnings():
    """Collect tifffile's logged warnings instead of printing them."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger("tifffile")
    handler, propagate = Collect(logging.WARNING), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


class _TiffScanner:
    source = None  # the scanned file object (scan_tiff sets it): its `pread` reads its bytes

    def __init__(self, path: str, tif: tifffile.TiffFile, size: int, reopen=None):
        self.path = path
        self.tif = tif
        self.reopen = reopen
        self.size = size
        self.problems: list[Problem] = []
        self.variables: dict[str, Variable] = {}
        self.groups: dict[str, dict[str, Any]] = {"": {}}
        self._chain: list = []  # the pages of the IFD chain (`run`)
        self._ifds: dict[int, int] = {}  # IFD offset -> its end, of the pages looked at

    def problem(self, var: str | None, kind: str, msg: str, fatal: bool = True,
                block: tuple[int, ...] | None = None) -> None:
        self.problems.append(Problem(Location(self.path, var, None, block), kind, msg, fatal))

    def run(self, mtime_ns: int) -> FileInventory:
        tif = self.tif
        fmt = "bigtiff" if tif.is_bigtiff else "tiff"
        pages = _pages(tif)  # tifffile parses the IFDs again on each walk of tif.pages
        self._chain = pages
        if self._damaged_pages(tif, pages):  # nothing of the file is described: it is refused
            return FileInventory(self.path, fmt, self.size, mtime_ns, self.groups, {},
                                 self.variables, self.problems)
        images, skipped, notes, conflicts = tiff_images(tif, self.reopen, pages)
        for conflict in conflicts:
            self.problem(None, "corrupt", conflict)  # the file's pages, not one variable
        if conflicts:
            return FileInventory(self.path, fmt, self.size, mtime_ns, self.groups, {},
                                 self.variables, self.problems)
        for _i, p in skipped:
            self.problem("image", "page-skipped",
                         f"page {p.index} ({p.shape} {p.dtype}, {_name(p.compression)}) differs "
                         f"from page {images['image'][0][0].index} (the image's first) and is "
                         "not part of the image (nor of another series)", fatal=False)
        for var, note in notes:
            self.problem(var, "tiff-series", note, fatal=False)
        stack, lead, lead_dims = images.pop("image")
        first = stack[0]
        desc = first.description
        if desc:
            self.groups[""]["ImageDescription"] = desc
        geo = _georeference(first)
        self._image("", "image", stack, geo, level=0)
        self._lead("image", len(stack), lead, lead_dims)
        for name, (pages, lead, lead_dims) in images.items():  # series/<k>/image
            group = name.rpartition("/")[0]
            self.groups.setdefault("series", {})
            self.groups[group] = {}
            self._image(group, "image", pages, None, level=0)
            self._lead(name, len(pages), lead, lead_dims)
        levels = self._levels(tif, first, len(stack))
        if levels:
            ms = [{"path": "image", "level": 0, "shape": list(first.shape)}]
            for k, page in enumerate(levels, start=1):
                self._image(f"overview/{k}", "image", [page], _scaled(geo, first, page), level=k)
                ms.append({"path": f"overview/{k}/image", "level": k, "shape": list(page.shape)})
                self.groups.setdefault("overview", {})
                self.groups[f"overview/{k}"] = {}
            self.groups[""]["multiscales"] = [{"name": "image", "datasets": ms}]
        if geo is not None:
            fmt = "geo" + fmt
        return FileInventory(self.path, fmt, self.size, mtime_ns, self.groups, {},
                             self.variables, self.problems)

    def _damaged_pages(self, tif, pages: list) -> bool:
        """Refuse (True) pages whose image directory is damaged in a way tifffile reads past:

        - a tag the page's layout or decoding depends on (`LAYOUT_TAGS`) that tifffile
          could not read (a damaged count, data type or value offset): it logs an error,
          leaves the tag out and reads the page with the tag's default;
        - a page without pixels (a width or length of 0: ImageWidth / ImageLength missing
          or damaged). tifffile leaves such pages out of its series (since 2026.11.8; before,
          such a page was a series of its own), so the image would silently lose the page
          and the pages after it would move up one place; libtiff refuses the directory.
        """
        try:  # SubIFDs: the levels of tifffile's series 0, as `_levels` takes them
            levels = [level.keyframe for level in tif.series[0].levels[1:]] if tif.series else []
        except Exception:
            levels = []
        offsets = {p.offset for p in pages}
        pages = pages + [p for p in levels
                         if isinstance(p, tifffile.TiffPage) and p.offset not in offsets]
        before = len(self.problems)
        for page in pages:
            where = f"page {page.index} (image directory at byte {page.offset})"
            lost = [(code, at) for code, at in _unread_tags(tif, page) if code in LAYOUT_TAGS]
            if lost:
                names = ", ".join(f"{_tag_name(code)} ({code}, entry at byte {at})"
                                  for code, at in lost)
                self.problem(None, "corrupt",
                             f"{where}: tifffile could not read the tag(s) {names} (a damaged "
                             f"count, data type or value offset) and reads the page without "
                             f"them, as {page.shape} {page.dtype}: the page's layout depends "
                             "on them, so it cannot be referenced as stored")
            elif 0 in page.shape and not (page.subfiletype & 0b100):
                stored = int(np.count_nonzero(np.asarray(page.databytecounts, dtype=np.uint64)))
                self.problem(None, "corrupt",
                             f"{where} has no pixels: tifffile reads its shape as {page.shape} "
                             f"(ImageWidth {page.imagewidth}, ImageLength {page.imagelength}: "
                             f"missing or damaged) and leaves it out of its series, though it "
                             f"lists {stored} stored strip(s)/tile(s); the file's pages cannot "
                             "be referenced whole")
        return len(self.problems) > before

    def _levels(self, tif, first, npages: int) -> list:
        try:
            levels = tif.series[0].levels[1:] if tif.series else []
        except Exception:
            levels = []
        out = []
        for level in levels:
            page = level.keyframe
            if page is None or not isinstance(page, tifffile.TiffPage):
                continue
            if npages > 1:
                self.problem("overview", "overviews-skipped",
                             "overviews of multi-page files are not virtualized", fatal=False)
                return []
            out.append(page)
            if page.subifds:  # SubIFDs of a SubIFD: not a level of tifffile's series
                self.problem("overview", "overviews-skipped",
                             f"level {len(out)} has {len(page.subifds)} SubIFD(s) of its own, "
                             "which tifffile's series do not include: not virtualized",
                             fatal=False)
        return out

    def _lead(self, name: str, npages: int, lead: tuple[int, ...], dims: tuple[str, ...]) -> None:
        """The pages of an image along the leading axes tifffile gives its series (an
        ImageJ hyperstack's (T, Z, C), a shaped file's leading shape): one page per block
        along them, so the block table is only reshaped."""
        v = self.variables.get(name)
        if v is not None and len(lead) == 1 and npages > 1:
            v.dims = (*dims, *v.dims[1:])  # 'page', or an OME series' page_z, page_t, ...
            return
        if v is None or (not lead and npages == 1):
            return  # already (page, ...) or one page
        base = v.shape[1:] if npages > 1 else v.shape
        bs = v.blocks.block_shape[1:] if npages > 1 else v.blocks.block_shape
        grid = v.blocks.refs.shape[1:] if npages > 1 else v.blocks.refs.shape
        v.shape = (*lead, *base)
        v.dims = (*dims, *(v.dims[1:] if npages > 1 else v.dims))
        v.blocks = BlockTable((1,) * len(lead) + tuple(bs), v.blocks.padded,
                              v.blocks.refs.reshape((*lead, *grid)))

    # -- one image (one level) ---------------------------------------------------------

    def _image(self, group: str, base: str, pages: list, geo: dict | None, level: int) -> None:
        name = f"{group}/{base}" if group else base
        page = pages[0]
        where = f"{name}" + (f" (level {level})" if level else "")
        if page.samplesperpixel < 1 or math.prod(page.shaped) != math.prod(page.shape):
            # a damaged tag tifffile decodes with (it cannot read such a page): refused
            self.problem(name, "corrupt", f"{where}: inconsistent tags: SamplesPerPixel "
                         f"{page.samplesperpixel}, shape {page.shape}, stored as {page.shaped}")
            return
        reason = _unsupported(page)
        if reason:
            self.problem(name, "unsupported-tiff", f"{where}: {reason}")
            return
        dtype = np.dtype(self.tif.byteorder + page.dtype.char) if page.dtype.itemsize > 1 \
            else np.dtype(page.dtype)
        codecs, why = tiff_codecs(page, dtype)
        if why:
            self.problem(name, "unsupported-compression", f"{where}: {why}")
            return
        dims, block_shape = _layout(page)
        grid = tuple(int(n) for n in page.chunked)
        shape = tuple(int(n) for n in page.shape)
        if len(grid) != len(shape):
            self.problem(name, "unsupported-tiff", f"{where}: block layout {page.chunked} does not "
                         f"match shape {page.shape}")
            return
        contiguous = np.asarray([bool(p.is_contiguous) and p.compression == C.NONE for p in pages])
        for k, p in enumerate(pages):
            # tifffile stands in for a missing or damaged byte-count tag (one count for the
            # whole image): only a contiguous uncompressed image reads right without it
            counts_tag = p.tags.get(325 if p.is_tiled else 279)
            if len(p.databytecounts) != len(p.dataoffsets) or (counts_tag is None
                                                               and not contiguous[k]):
                self.problem(name, "corrupt", f"{where}: page {k}: the "
                             f"{'TileByteCounts' if p.is_tiled else 'StripByteCounts'} tag is "
                             f"missing or damaged ({len(p.databytecounts)} counts for "
                             f"{len(p.dataoffsets)} offsets)")
                return
        offsets = np.asarray([p.dataoffsets for p in pages], dtype=np.uint64)
        counts = np.asarray([p.databytecounts for p in pages], dtype=np.uint64)
        if offsets.shape[1] != math.prod(grid):
            self.problem(name, "corrupt", f"{where}: {offsets.shape[1]} strips/tiles listed, "
                         f"{math.prod(grid)} expected for shape {shape}")
            return
        half = (offsets > 0) & (counts == 0) & ~contiguous[:, None]
        if half.any():
            # neither stored nor sparse (sparse is offset 0 and count 0): tifffile reads the
            # segments after such an entry from shifted positions when the others follow
            # each other in the file, so no reading of it is the library's: refused
            k, i = (int(x[0]) for x in np.nonzero(half))
            self.problem(name, "corrupt", f"{where}: page {k}: strip/tile {i} has offset "
                         f"{int(offsets[k, i])} but byte count 0",
                         block=tuple(int(b) for b in np.unravel_index(i, grid)))
            return
        if contiguous.any():
            # tifffile reads a contiguous image (one uncompressed strip, or strips that
            # follow each other) as nbytes from the first offset, whatever the byte counts
            # say (0, short or long): refer to exactly those bytes
            expected = _expected_bytes(page, dtype, shape, block_shape, grid).reshape(-1)
            starts = np.concatenate([[0], np.cumsum(expected)[:-1]]).astype(np.uint64)
            offsets[contiguous] = offsets[contiguous][:, :1] + starts
            counts[contiguous] = expected
        if not self._segments_placed(name, where, pages, offsets, counts, grid):
            return
        counts = self._check_segments(name, page, dtype, offsets, counts, block_shape, shape, grid)
        if counts is None:
            return
        refs = empty_refs((len(pages), *grid))
        # offset 0 / count 0: a sparse block, reads as fill (but tifffile reads a contiguous
        # image from its first offset even when that is 0)
        present = ((offsets > 0) | contiguous[:, None]) & (counts > 0)
        refs["offset"] = np.where(present, offsets, 0).reshape(refs.shape)
        refs["length"] = np.where(present, counts, 0).reshape(refs.shape)
        if len(pages) == 1:
            refs = refs[0]
        else:
            dims = ("page", *dims)
            shape = (len(pages), *shape)
            block_shape = (1, *block_shape)
        fill, fill_attr = self._nodata(name, page, dtype)
        attrs: dict[str, Any] = {"tiff_photometric": _name(page.photometric).lower()}
        if fill_attr is not None:
            attrs["_FillValue"] = fill_attr
        if geo is not None:
            attrs["grid_mapping"] = "spatial_ref"
        padded = bool(page.is_tiled)
        self.variables[name] = Variable(
            name=name, dtype=dtype, shape=shape, dims=dims, attrs=attrs, fill_value=fill,
            codecs=codecs, blocks=BlockTable(block_shape, padded=padded, refs=refs))
        if geo is not None:
            self._georeferencing(group, page, geo)

    def _segments_placed(self, name, where, pages, offsets, counts, grid) -> bool:
        """Every segment holding bytes (count > 0) lies past the TIFF header and outside
        every image directory (IFD): a StripOffsets of 0 made the cube read the header and
        the IFD as pixels (tifffile's page did too; `tifffile.imread` refuses, "failed to
        read"). Else `corrupt`, naming the page and block. (A segment past the end of the
        file is `truncated`: `_check_segments`.)"""
        t = self.tif.tiff
        header = 16 if t.is_bigtiff else 8
        spans = self._ifds
        for p in itertools.chain(self._chain, pages):
            at = getattr(p, "offset", None)
            if at is None or at in spans:
                continue
            if self.source is not None:
                raw = bytes(self.source.pread(t.tagnosize, at))
            else:
                self.tif.filehandle.seek(at)
                raw = self.tif.filehandle.read(t.tagnosize)
            n = struct.unpack(t.tagnoformat, raw)[0] if len(raw) == t.tagnosize else 0
            spans[at] = at + t.tagnosize + n * t.tagsize + t.offsetsize
        starts = np.asarray(sorted(spans), dtype=np.uint64)
        ends = np.asarray([spans[a] for a in sorted(spans)], dtype=np.uint64)
        held = counts > 0
        end = offsets + counts
        i = np.searchsorted(starts, end, side="left") - 1  # the last IFD starting before the end
        in_ifd = (i >= 0) & (ends[np.maximum(i, 0)] > offsets) if len(starts) else \
            np.zeros(offsets.shape, bool)
        bad = held & ((offsets < header) | in_ifd)
        if not bad.any():
            return True
        k, j = (int(x[0]) for x in np.nonzero(bad))
        off, n = int(offsets[k, j]), int(counts[k, j])
        if off < header:
            why = ("lies in the TIFF header: its bytes would be read as pixels" if off else
                   "has offset 0 (no data) but a byte count: the file's header would be read "
                   "as pixels (tifffile.imread refuses it)")
        else:
            at = int(starts[i[k, j]])
            why = f"overlaps the image directory (IFD) at byte {at}: it would be read as pixels"
        self.problem(name, "corrupt", f"{where}: page {k}: strip/tile {j} ({n} bytes at byte "
                     f"offset {off}) {why}; --drop {name} virtualizes the rest",
                     block=((k,) if len(pages) > 1 else ()) + tuple(
                         int(b) for b in np.unravel_index(j, grid)))
        return False

    def _check_segments(self, name, page, dtype, offsets, counts, block_shape, shape, grid):
        """Segments must lie inside the file; uncompressed ones hold exactly their pixels
        (a last strip stored at full height is trimmed: its tail is padding)."""
        end = offsets + counts
        bad = np.flatnonzero((end > self.size).reshape(-1) & (counts > 0).reshape(-1))
        if bad.size:
            i = int(bad[0])
            self.problem(name, "truncated", f"page {i // offsets.shape[1]}: segment "
                         f"{i % offsets.shape[1]} ends at byte {int(end.reshape(-1)[i])}, the "
                         f"file at {self.size}",
                         block=tuple(int(b) for b in np.unravel_index(i % offsets.shape[1], grid)))
            return None
        if page.compression != C.NONE:
            return counts
        expected = _expected_bytes(page, dtype, shape, block_shape, grid)
        expected = np.broadcast_to(expected.reshape(-1), counts.shape)
        short = (counts > 0) & (counts < expected)
        if short.any():
            i = int(np.flatnonzero(short.reshape(-1))[0]) % counts.shape[1]
            self.problem(name, "truncated", f"uncompressed segment {i} holds "
                         f"{int(counts.reshape(-1)[i])} bytes, {int(expected.reshape(-1)[i])} "
                         "expected", block=tuple(int(b) for b in np.unravel_index(i, grid)))
            return None
        return np.where(counts > 0, np.minimum(counts, expected), 0)

    def _nodata(self, name, page, dtype):
        """GDAL_NODATA → (fill value, _FillValue attribute); (0, None) without one."""
        zero = np.zeros((), dtype=dtype)[()]
        tag = page.tags.get("GDAL_NODATA")
        raw = tag.value if tag is not None else None
        if raw is None:
            return zero, None
        try:
            value = float(str(raw).strip().rstrip("\x00"))
        except ValueError:
            self.problem(name, "nodata-unfit", f"GDAL_NODATA {raw!r} is not a number: ignored",
                         fatal=False)
            return zero, None
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            if not value.is_integer() or not info.min <= value <= info.max:
                self.problem(name, "nodata-unfit",
                             f"GDAL_NODATA {raw!r} does not fit {dtype.newbyteorder('=').name}: "
                             "no fill value is set (sparse blocks read as 0)", fatal=False)
                return zero, None
            v = np.asarray(int(value), dtype=dtype)[()]
            return v, int(v)
        v = np.asarray(value, dtype=dtype)[()]
        return v, float(v)

    def _georeferencing(self, group: str, page, geo: dict) -> None:
        gname = f"{group}/spatial_ref" if group else "spatial_ref"
        self.variables[gname] = _inline_variable(gname, np.asarray(0, dtype="i8"), (), geo["attrs"])
        if geo.get("rotated"):
            self.problem(gname, "rotated-geotransform",
                         "the geotransform is rotated or sheared: no 1-D x/y coordinates "
                         "(GeoTransform is kept on spatial_ref)", fatal=False)
            return
        h, w = page.imagelength, page.imagewidth
        x0, dx, _, y0, _, dy = geo["transform"]
        xs = x0 + (np.arange(w) + 0.5) * dx
        ys = y0 + (np.arange(h) + 0.5) * dy
        geographic = geo.get("geographic", False)
        xattrs = ({"standard_name": "longitude", "units": "degrees_east", "axis": "X"}
                  if geographic else
                  {"standard_name": "projection_x_coordinate", "units": geo.get("units", "m"),
                   "axis": "X"})
        yattrs = ({"standard_name": "latitude", "units": "degrees_north", "axis": "Y"}
                  if geographic else
                  {"standard_name": "projection_y_coordinate", "units": geo.get("units", "m"),
                   "axis": "Y"})
        for nm, vals, attrs in (("x", xs, xattrs), ("y", ys, yattrs)):
            full = f"{group}/{nm}" if group else nm
            self.variables[full] = _inline_variable(full, vals, (nm,), attrs, coordinate=True)


# -- pure helpers --------------------------------------------------------------------

def _expected_bytes(page, dtype, shape, block_shape, grid) -> np.ndarray:
    """Bytes of each uncompressed block: rows along each axis, the last one short for strips."""
    expected = np.ones(grid, dtype=np.uint64) * dtype.itemsize
    for axis, (n, b, g) in enumerate(zip(shape, block_shape, grid)):
        lens = np.full(g, b, dtype=np.uint64)
        if not page.is_tiled and n % b:
            lens[-1] = n % b
        expected = expected * lens.reshape([-1 if i == axis else 1 for i in range(len(grid))])
    return expected


def _inline_variable(name, values, dims, attrs, coordinate=False) -> Variable:
    values = np.asarray(values)
    return Variable(name=name, dtype=values.dtype, shape=values.shape, dims=dims, attrs=attrs,
                    fill_value=None, codecs=[bytes_codec(values.dtype)], blocks=None,
                    values=values, is_coordinate=coordinate)


def _name(value) -> str:
    """An enumerated tag value's name (COMPRESSION.LZW -> 'LZW'); tifffile keeps a value
    its enumeration does not know (or a default of a missing tag) as a plain int."""
    return getattr(value, "name", None) or str(int(value))


# Tags a page's layout or decoding depends on: when tifffile cannot read one (it logs an
# error and leaves the tag out), it reads the page with the tag's default. The byte-count
# tags are not here: without them only a contiguous uncompressed image reads right, which
# `_TiffScanner._image` checks.
LAYOUT_TAGS = frozenset({
    254, 255,  # NewSubfileType, SubfileType: full resolution, reduced, mask
    256, 257, 258, 259, 262, 266,  # width, length, bits, compression, photometric, fill order
    273, 277, 278, 284, 317,  # strip offsets, samples, rows per strip, planar, predictor
    322, 323, 324, 330, 338, 339,  # tile width, length, offsets; SubIFDs; extra samples; format
    347, 530, 32997, 32998,  # JPEGTables, YCbCrSubSampling, ImageDepth, TileDepth
    33550, 33922, 34264, 34735, 34736, 34737, 42113,  # GeoTIFF, GDAL_NODATA
})


def _tag_name(code: int) -> str:
    try:
        return str(tifffile.TIFF.TAGS[code])
    except (KeyError, TypeError):
        return f"tag {code}"


def _unread_tags(tif: tifffile.TiffFile, page) -> list[tuple[int, int]]:
    """(code, entry offset) of the page's IFD entries tifffile did not read: it parses each
    entry at offset + tagnosize + i * tagsize and keeps the tags it could read, each with
    that offset, so an entry whose offset is not among them was dropped."""
    t = tif.tiff
    if page.offset is None:
        return []
    fh = tif.filehandle
    try:
        fh.seek(page.offset)
        raw = fh.read(t.tagnosize)
        ntags = struct.unpack(t.tagnoformat, raw)[0]
        start = page.offset + t.tagnosize
        entries = fh.read(ntags * t.tagsize)
    except (struct.error, OSError, ValueError):
        return []
    read = {tag.offset for tag in page.tags.values()}
    out = []
    for i in range(min(ntags, len(entries) // t.tagsize)):
        at = start + i * t.tagsize
        if at not in read:
            out.append((struct.unpack_from(tif.byteorder + "H", entries, i * t.tagsize)[0], at))
    return out


def _layout(page) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Dimension names and block shape of one page."""
    shape = page.shape
    chunks = tuple(int(c) for c in page.chunks)
    if page.samplesperpixel > 1 and page.planarconfig == tifffile.PLANARCONFIG.SEPARATE:
        dims = ("band", "y", "x")
        if len(chunks) == 2:
            chunks = (1, *chunks)
    elif page.samplesperpixel > 1:
        dims = ("y", "x", "band")
    else:
        dims = ("y", "x")
    if len(chunks) != len(shape) or len(dims) != len(shape):
        return (tuple(f"dim{i}" for i in range(len(shape))), chunks)
    return dims, chunks


def _unsupported(page) -> str | None:
    if page.dtype is None:
        return f"sample format {page.sampleformat} / {page.bitspersample} bits has no numpy type"
    if page.bitspersample != page.dtype.itemsize * 8:
        return (f"{page.bitspersample}-bit samples are packed, not whole bytes; they cannot be "
                "referenced as zarr chunks")
    if page.fillorder != 1:
        return "FillOrder 2 (bits reversed within bytes) has no zarr codec"
    if getattr(page, "imagedepth", 1) > 1:
        return "volumetric (ImageDepth > 1) TIFF is not supported"
    if page.photometric == tifffile.PHOTOMETRIC.YCBCR and page.compression != C.JPEG:
        return "YCbCr with chroma subsampling outside JPEG has no zarr codec"
    return None


def tiff_codecs(page, dtype: np.dtype) -> tuple[list[dict], str | None]:
    """The zarr v3 codecs that decode one strip/tile exactly as tifffile does, or why not."""
    comp = page.compression
    pred = int(page.predictor)
    samples_last = page.samplesperpixel > 1 and page.planarconfig != tifffile.PLANARCONFIG.SEPARATE
    axis = -2 if samples_last else -1
    if comp in IMAGE_CODECS:
        if pred != 1:
            return [], f"predictor {pred} with {_name(comp)} compression"
        if comp == C.JPEG:
            return _jpeg_codec(page)
        if comp == C.WEBP:
            if page.samplesperpixel == 4:
                # a WebP segment whose alpha is all opaque is stored without its alpha
                # channel (libwebp drops it); decode RGBA regardless, as tifffile does
                return [{"name": "imagecodecs_webp", "configuration": {"hasalpha": True}}], None
            return [{"name": "imagecodecs_webp", "configuration": {}}], None
        return [{"name": "imagecodecs_lerc", "configuration": {}}], None
    if comp not in BYTES_CODECS:
        return [], (f"compression {_name(comp)} ({int(comp)}) has no zarr codec that decodes it "
                    "exactly")
    codecs: list[dict] = []
    if pred == 2:
        codecs.append({"name": "imagecodecs_delta", "configuration": {"axis": axis, "dist": 1}})
        codecs.append(bytes_codec(dtype))
    elif pred == 3:
        # the predictor's byte planes are written most significant byte first whatever the
        # file's byte order, so one codec decodes both (tested on II and MM files)
        codecs.append({"name": "imagecodecs_floatpred", "configuration": {"axis": axis, "dist": 1}})
    elif pred == 1:
        codecs.append(bytes_codec(dtype))
    else:
        return [], f"predictor {pred} is not supported"
    make = BYTES_CODECS[comp]
    if make is not None:
        codecs.append(make())
    return codecs, None


def _jpeg_codec(page) -> tuple[list[dict], str | None]:
    """JPEG segments decoded with the colour spaces tifffile decodes them with
    (`tifffile.tifffile.jpeg_decode_colorspace`): with extra samples (RGB + alpha) the
    components are returned as stored; YCbCr becomes RGB; RGB without a JFIF marker is
    RGB (Adobe-style); planar-separate planes are single grey components."""
    P = tifffile.PHOTOMETRIC
    photometric = int(page.photometric)
    conf: dict[str, Any] = {}
    if page.jpegtables:
        import base64
        conf["tables"] = base64.b64encode(bytes(page.jpegtables)).decode()
    jpeg_cs: str | None = None
    data_cs: str | None = None
    if not page.extrasamples:
        if photometric == P.YCBCR:
            data_cs = "RGB"
        elif photometric == P.RGB:
            if not page.is_jfif:
                jpeg_cs = "RGB"
            data_cs = "RGB"
        elif photometric == P.SEPARATED:
            data_cs = "CMYK"
        elif photometric > 3:
            return [], f"JPEG with photometric {_name(page.photometric)} has no exact zarr decoding"
    if page.planarconfig != tifffile.PLANARCONFIG.CONTIG:
        data_cs = "GRAYSCALE"
    if jpeg_cs is not None:
        conf["colorspace_jpeg"] = jpeg_cs
    if data_cs is not None:
        conf["colorspace_data"] = data_cs
    return [{"name": "imagecodecs_jpeg", "configuration": conf}], None


def _georeference(page) -> dict | None:
    """GDAL's geotransform and CRS from GeoTIFF tags, or None for a plain TIFF."""
    tags = page.tags
    scale = tags.get("ModelPixelScaleTag")
    tie = tags.get("ModelTiepointTag")
    matrix = tags.get("ModelTransformationTag")
    keys = page.geotiff_tags or {}
    if matrix is not None:
        m = [float(v) for v in matrix.value]
        transform = [m[3], m[0], m[1], m[7], m[4], m[5]]
    elif scale is not None and tie is not None:
        sx, sy = float(scale.value[0]), float(scale.value[1])
        i, j, _, x, y, _ = (float(v) for v in tie.value[:6])
        transform = [x - i * sx, sx, 0.0, y + j * sy, 0.0, -sy]
    else:
        return None
    if int(keys.get("GTRasterTypeGeoKey", 1) or 1) == 2:  # PixelIsPoint: GDAL shifts by half a pixel
        transform[0] -= 0.5 * transform[1]
        transform[3] -= 0.5 * transform[5]
    attrs: dict[str, Any] = {"GeoTransform": " ".join(repr(float(v)) for v in transform)}
    epsg = None
    geographic = False
    for key in ("ProjectedCSTypeGeoKey", "GeographicTypeGeoKey"):
        v = keys.get(key)
        v = int(v) if v is not None and not isinstance(v, str) else None
        if v is not None and v != 32767:
            epsg = v
            geographic = key == "GeographicTypeGeoKey" and keys.get("ProjectedCSTypeGeoKey") is None
            break
    if epsg is not None:
        attrs["epsg"] = epsg
        wkt = _wkt(epsg)
        if wkt:
            attrs["crs_wkt"] = wkt
            attrs["spatial_ref"] = wkt
    if transform[2] or transform[4]:
        return {"transform": transform, "attrs": attrs, "rotated": True, "geographic": geographic}
    return {"transform": transform, "attrs": attrs, "geographic": geographic,
            "units": "degrees" if geographic else "m"}


def _wkt(epsg: int) -> str | None:
    try:
        import pyproj
    except ImportError:
        return None
    try:
        return pyproj.CRS.from_epsg(epsg).to_wkt()
    except Exception:
        return None


def _scaled(geo: dict | None, base, page) -> dict | None:
    """An overview's georeferencing: the same extent over fewer, larger pixels (GDAL)."""
    if geo is None or geo.get("rotated"):
        return None
    t = list(geo["transform"])
    t[1] *= base.imagewidth / page.imagewidth
    t[5] *= base.imagelength / page.imagelength
    attrs = dict(geo["attrs"], GeoTransform=" ".join(repr(float(v)) for v in t))
    return dict(geo, transform=t, attrs=attrs)
