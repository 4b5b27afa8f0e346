"""FITS files: primary and IMAGE extensions as arrays (docs/fits.md).

What this module promises:

- `scan_fits(path)` reads only the headers: 2880-byte blocks up to each HDU's END card,
  the cards parsed by astropy's header reader (`astropy.io.fits.Header.fromstring`); the
  data offset and size of every HDU follow from the FITS standard (4.0, section 4.4.1):
  the data start at the block after END and hold |BITPIX|/8 * GCOUNT * (PCOUNT +
  NAXIS1 * ... * NAXISn) bytes, padded to a whole block. Every image HDU (NAXIS > 0)
  is one stored block of big-endian values: zarr `bytes` with endian "big".
- Axes in numpy order (NAXISn ... NAXIS1, astropy's `hdu.data.shape`), dimensions named
  `naxisN` (`<array>_naxisN` when two images of the file differ in that axis' length).
- BSCALE / BZERO: the "unsigned" offsets astropy turns into unsigned types (BZERO =
  2**15, 2**31 for BITPIX 16, 32; BZERO = -128 for BITPIX 8 gives int8) are a
  `numcodecs.fixedscaleoffset` codec (float64 arithmetic, exact for every 8-, 16- and
  32-bit value); any other scaling, and BLANK, is the `virtualize.fitsscale` codec:
  astropy's `hdu.data` (its type and float32 arithmetic, NaN at BLANK) bit for bit.
- Tile-compressed integer images (a ZIMAGE binary table) with RICE_1, GZIP_1, GZIP_2 or
  lossless HCOMPRESS_1, and GZIP's lossless floats: one chunk per tile, located by the
  table's heap descriptors (`imagecodecs_rcomp`; `gzip` [+ `numcodecs.shuffle`] +
  big-endian `bytes`, or `virtualize.fitsgzip` when the tiles hold values of another size
  than ZBITPIX's; `imagecodecs_hcomp`), scaled as plain images are.
- What has no exact reference: other tile compressions (PLIO_1, lossy HCOMPRESS_1,
  quantized floats: per-tile ZSCALE / ZZERO), the uint64 offset (BZERO = 2**63: not exact
  in float64) are in the
  inventory without blocks, with a fatal `unsupported-compression` / `unsupported-scaling`
  that inlining resolves (the planner inlines them when small; astropy decodes them).
  Tables and random groups are skipped with a note.
- A damaged header (no END, a bad keyword value, a size past the end) raises
  `VirtualizeError` with one `corrupt` problem naming the file and byte offset.
"""

from __future__ import annotations

import importlib.util
import math
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import storage
from ..codec_core import FITSGZIP, FITSSCALE
from ..model import (
    BlockTable,
    Dimension,
    FileInventory,
    Location,
    Problem,
    Variable,
    VirtualizeError,
    empty_refs,
)
from ._io import missing_library, not_valid
from ._planning import finish
from ._values import Unrepresentable, bytes_codec, plain
from .base import Format

BLOCK = 2880
CARD = 80
MAGIC = b"SIMPLE  ="
END_CARD = b"END" + b" " * 77
KEYWORD_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"  # "ENDX": a keyword, not END
MAX_HEADER_BLOCKS = 10_000  # 28.8 MB of cards: past that, a header without END is corrupt
BITPIX = {8: np.dtype("u1"), 16: np.dtype(">i2"), 32: np.dtype(">i4"), 64: np.dtype(">i8"),
          -32: np.dtype(">f4"), -64: np.dtype(">f8")}
# BZERO of astropy's pseudo-unsigned integers (BSCALE 1): the type it reads them as
UNSIGNED = {8: (-128, np.dtype("i1")), 16: (1 << 15, np.dtype("u2")),
            32: (1 << 31, np.dtype("u4")), 64: (1 << 63, np.dtype("u8"))}
# keywords the cube's own metadata expresses (its codecs, fill value)
APPLIED = ("BSCALE", "BZERO", "BLANK")
EXTRA = "pip install 'virtualize[fits]'"


def _astropy_fits():
    try:
        from astropy.io import fits
    except ImportError:
        return None
    return fits


def _missing(path: str) -> VirtualizeError:
    return missing_library(path, "reading FITS needs astropy", EXTRA)


def corrupt(path: str, message: str) -> VirtualizeError:
    return not_valid(path, message, "FITS")


@dataclass
class Hdu:
    """One header-data unit as the headers lay it out."""

    index: int
    header: Any  # astropy.io.fits.Header
    header_offset: int
    data_offset: int
    nbytes: int  # data bytes (unpadded)
    kind: str  # "image", "compressed", "table", "groups", "empty"
    bitpix: int = 0
    shape: tuple[int, ...] = ()  # numpy order
    name: str = ""
    problems: list[Problem] = field(default_factory=list)
    past_end: bool = False  # its data run past the end of the file


def _int(path: str, header, key: str, at: int, default=None) -> int:
    try:
        value = header.get(key, default)
    except Exception as e:  # astropy parses a card's value when it is asked for
        raise corrupt(path, f"the {key} card of the header at byte offset {at} cannot be "
                            f"parsed ({type(e).__name__}: {e})") from None
    if value is None:
        raise corrupt(path, f"the header at byte offset {at} has no {key} card")
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise corrupt(path, f"{key} = {value!r} in the header at byte offset {at} is not an "
                            "integer")
    return int(value)


def _read_header(f, path: str, size: int, at: int, fits, notes: list[Problem]
                 ) -> tuple[Any, int]:
    """The header starting at byte `at` (astropy's parse) and its length in bytes."""
    raw = bytearray()
    for k in range(MAX_HEADER_BLOCKS):
        f.seek(at + k * BLOCK)
        block = f.read(BLOCK)
        if len(block) < BLOCK:
            raise corrupt(path, f"the header at byte offset {at} ends at byte "
                                f"{at + k * BLOCK + len(block)} (end of file) before its END card")
        raw += block
        for c in range(0, BLOCK, CARD):
            card = block[c:c + CARD]
            if card[:3] != b"END" or card[3:4] and card[3:4] in KEYWORD_CHARS:
                continue
            if card != END_CARD:  # astropy takes some of these for END, and some not
                raise corrupt(path, f"a damaged END card at byte offset {at + k * BLOCK + c} "
                                    f"({bytes(card).rstrip()!r})")
            text = bytes(raw[:k * BLOCK + c + CARD])
            try:
                with warnings.catch_warnings(record=True) as said:
                    warnings.simplefilter("always")
                    header = fits.Header.fromstring(text.decode("ascii"))
            except Exception as e:  # non-ASCII bytes, a card astropy cannot parse
                raise corrupt(path, f"the header at byte offset {at} cannot be parsed "
                                    f"({type(e).__name__}: {e})") from None
            for w in said:  # (cards astropy reads past; the report says so, once)
                notes.append(Problem(Location(path), "fits-warning",
                                     f"the header at byte offset {at}: {w.message}",
                                     fatal=False))
            return header, (k + 1) * BLOCK
    raise corrupt(path, f"the header at byte offset {at} has no END card in "
                        f"{MAX_HEADER_BLOCKS} blocks")


def walk(f, path: str, size: int) -> list[Hdu]:
    """Every HDU of the file: its header and where its data lie."""
    fits = _astropy_fits()
    if fits is None:
        raise _missing(path)
    f.seek(0)
    if f.read(len(MAGIC)) != MAGIC:
        raise corrupt(path, "no SIMPLE card at byte offset 0")
    hdus: list[Hdu] = []
    notes: list[Problem] = []
    at = 0
    while at < size:
        if hdus:
            f.seek(at)
            head = f.read(9)
            if head != b"XTENSION=" and _a_header(f, at):
                # (a damaged XTENSION card: astropy reads on past it, into the HDUs after)
                raise corrupt(path, f"the header at byte offset {at} does not start with "
                                    f"an XTENSION card ({bytes(head)!r}): a damaged extension, "
                                    "the HDUs after it unknown")
            if head != b"XTENSION=":  # (astropy too stops at what is no extension)
                notes.append(Problem(
                    Location(path), "trailing-bytes",
                    f"{size - at} byte(s) after the last HDU (at byte offset {at}) are no "
                    "FITS extension: ignored", fatal=False))
                break
        header, hlen = _read_header(f, path, size, at, fits, notes)
        hdus.append(_layout(path, header, len(hdus), at, at + hlen))
        at = hdus[-1].data_offset + -(-hdus[-1].nbytes // BLOCK) * BLOCK
        # (the sizes the NAXISn, BITPIX, PCOUNT and GCOUNT cards give, checked against the
        # file before anything is allocated: NAXIS1 = 2**62 is no block to reference)
        hdus[-1].past_end = hdus[-1].data_offset + hdus[-1].nbytes > size
    hdus[0].problems += notes
    last = hdus[-1]
    if last.data_offset + last.nbytes <= size < at:  # (data cut short: `finish` says so)
        hdus[0].problems.append(Problem(
            Location(path), "truncated-padding",
            f"the file ends at byte {size}, inside the padding of its last HDU (which ends at "
            f"byte {at}): a truncated file? Its data are whole; HDUs after it, if it had "
            "any, are lost", fatal=False))
    return hdus


def _a_header(f, at: int, blocks: int = 16) -> bool:
    """Whether the bytes at `at` hold an END card at a card's place within a few blocks: a
    header (astropy reads one whatever its first card, non-ASCII bytes replaced by "?")."""
    f.seek(at)
    raw = f.read(blocks * BLOCK)
    return any(raw[c:c + CARD] == END_CARD for c in range(0, len(raw) - CARD + 1, CARD))


def _layout(path: str, header, index: int, at: int, data_offset: int) -> Hdu:
    bitpix = _int(path, header, "BITPIX", at)
    if bitpix not in BITPIX:
        raise corrupt(path, f"BITPIX = {bitpix} in the header at byte offset {at} is not one "
                            "of 8, 16, 32, 64, -32, -64")
    naxis = _int(path, header, "NAXIS", at)
    if not 0 <= naxis <= 999:
        raise corrupt(path, f"NAXIS = {naxis} in the header at byte offset {at}")
    axes = [_int(path, header, f"NAXIS{n}", at) for n in range(1, naxis + 1)]
    if any(n < 0 for n in axes):
        raise corrupt(path, f"a negative axis length {axes} in the header at byte offset {at}")
    pcount = _int(path, header, "PCOUNT", at, 0)
    gcount = _int(path, header, "GCOUNT", at, 1)
    if pcount < 0 or gcount < 0:
        raise corrupt(path, f"PCOUNT = {pcount}, GCOUNT = {gcount} in the header at byte "
                            f"offset {at}")
    groups = index == 0 and header.get("GROUPS") is True and naxis and axes[0] == 0
    elements = math.prod(axes[1:] if groups else axes) if naxis else 0
    nbytes = abs(bitpix) // 8 * gcount * (pcount + elements) if naxis else 0
    xtension = str(header.get("XTENSION", "")).strip().upper() if index else ""
    if groups:
        kind = "groups"
    elif xtension in ("BINTABLE", "TABLE", "A3DTABLE"):
        kind = "compressed" if xtension == "BINTABLE" and header.get("ZIMAGE") is True \
            else "table"
    elif index and xtension != "IMAGE":
        kind = "table" if xtension else "unknown"
    else:
        kind = "image" if naxis and all(axes) else "empty"
        if kind == "image" and (pcount, gcount) != (0, 1):
            kind = "unknown"  # (an image with a heap or groups: not the standard's)
    if kind == "image":
        for key in ("BSCALE", "BZERO"):
            value = header.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise corrupt(path, f"{key} = {value!r} in the header at byte offset {at} is "
                                    "not a number")
    return Hdu(index, header, at, data_offset, nbytes, kind, bitpix, tuple(reversed(axes)))


def _names(hdus: list[Hdu]) -> None:
    """Each array's name: its EXTNAME (with `_<EXTVER>` when the name repeats), `hdu<k>`
    when it has none, repeats without distinct EXTVERs (names compared without case),
    starts with `hdu` (any case), or is no zarr node name ('/' in it, '.', '..', a
    leading '__')."""
    arrays = [h for h in hdus if h.kind in ("image", "compressed")]

    def extname(h):
        v = h.header.get("EXTNAME")
        v = v.strip() if isinstance(v, str) else ""
        # (names a zarr node cannot have: '/', '.', '..', a leading '__')
        return v if v and "/" not in v and v not in (".", "..") and not v.startswith("__") \
            else None

    counts: dict[str, int] = {}
    for h in arrays:
        if extname(h):
            counts[extname(h)] = counts.get(extname(h), 0) + 1
    taken: set[str] = set()
    for h in arrays:
        name = extname(h)
        if name and counts[name] > 1:
            ver = h.header.get("EXTVER")
            name = f"{name}_{ver}" if isinstance(ver, int) and not isinstance(ver, bool) else None
        # (compared without case: a cube's nodes are directories, on file systems too
        # that do not tell SCI from sci)
        if not name or name.lower() in taken or name.lower().startswith("hdu"):
            name = f"hdu{h.index}"
        taken.add(name.lower())
        h.name = name


def _attrs(header, path: str, var: str | None, problems: list[Problem],
           applied: tuple[str, ...] = ()) -> dict[str, Any]:
    """The header's cards as attributes: COMMENT and HISTORY as lists of their lines, a
    keyword given twice by its first value (as astropy's `header[key]`), blank cards
    left out, and the keywords `applied` (what the array's codecs express)."""
    out: dict[str, Any] = {}
    for key, value in header.items():
        if not key:
            continue
        if key in ("COMMENT", "HISTORY"):
            out.setdefault(key, []).append(str(value))
            continue
        if key in out or key in applied:
            continue
        if type(value).__name__ == "Undefined":
            out[key] = None
            continue
        try:
            out[key] = plain(value)
        except Unrepresentable as e:
            problems.append(Problem(Location(path, var), "attribute-omitted",
                                    f"card {key}: {e}", fatal=False))
    return out


def _dims(images: list[Hdu]) -> dict[int, tuple[str, ...]]:
    """`naxisN` per axis, unless images of the file differ in that axis' length."""
    lengths: dict[int, set[int]] = {}
    for h in images:
        for n, size in enumerate(reversed(h.shape), 1):
            lengths.setdefault(n, set()).add(size)
    out = {}
    for h in images:
        ndim = len(h.shape)
        out[h.index] = tuple(
            f"naxis{n}" if len(lengths[n]) == 1 else f"{h.name}_naxis{n}"
            for n in range(ndim, 0, -1))
    return out


def _number(x) -> int | float:
    """A card's number as the Python number astropy holds (what its arithmetic uses)."""
    return int(x) if isinstance(x, (int, np.integer)) and not isinstance(x, bool) else float(x)


def _image_bitpix(h: Hdu) -> int:
    """The image's BITPIX (ZBITPIX for a tile-compressed image)."""
    return int(h.header.get("ZBITPIX", h.bitpix)) if h.kind == "compressed" else h.bitpix


def _scaling(h: Hdu) -> tuple[str, Any, Any, Any]:
    """How the image's values decode: ("raw" | "unsigned" | "cf" | "inexact", bscale,
    bzero, blank). A tile-compressed integer image without BLANK takes its ZBLANK card
    as BLANK (astropy's `_bintable_header_to_image_header`)."""
    bitpix = _image_bitpix(h)
    bscale = h.header.get("BSCALE", 1)
    bzero = h.header.get("BZERO", 0)
    blank = h.header.get("BLANK") if bitpix > 0 else None
    if blank is None and bitpix > 0 and h.kind == "compressed":
        blank = h.header.get("ZBLANK")
    if not isinstance(blank, (int, np.integer)) or isinstance(blank, bool):
        blank = None
    if bscale == 1 and bzero == 0:  # (astropy reads a BLANK image as floats, NaN at blanks)
        return ("raw" if blank is None else "cf"), bscale, bzero, blank
    if bitpix > 0 and bscale == 1 and bzero == UNSIGNED[bitpix][0]:
        return ("inexact" if bitpix == 64 else "unsigned"), bscale, bzero, blank
    return "cf", bscale, bzero, blank


def _variable(path: str, h: Hdu, dims: tuple[str, ...], problems: list[Problem], f=None
              ) -> Variable | None:
    loc = Location(path, h.name)
    if h.past_end:
        cards = ", ".join(f"NAXIS{n} = {x}" for n, x in enumerate(reversed(h.shape), 1))
        problems.append(Problem(loc, "truncated", (
            f"HDU {h.index}'s data ({h.nbytes} bytes from byte offset {h.data_offset}, as "
            f"its header at byte offset {h.header_offset} sizes them: BITPIX = {h.bitpix}, "
            f"{cards}) end past the end of the file: a truncated file, or damaged cards; "
            f"--drop {h.name} virtualizes the rest")))
        return None
    how, bscale, bzero, blank = _scaling(h)
    # the keywords the array's codecs apply (astropy ignores BLANK in
    # unsigned images: so does the cube, and the card stays)
    applied = {"raw": (), "cf": (*APPLIED, "ZBLANK"), "unsigned": ("BSCALE", "BZERO")}.get(
        how, ())
    attrs = _attrs(h.header, path, h.name, problems, applied)
    attrs["FITS_HDU"] = h.index
    shape = _decoded_shape(h)
    if h.kind == "compressed":
        attrs = {k: v for k, v in attrs.items() if not _compression_card(k)}
        try:
            tiles = _tiles(h, f)
        except Exception as e:  # a damaged ZNAXISn / ZTILEn card, tiles astropy cannot read
            problems.append(Problem(loc, "corrupt", f"the tile-compressed image of HDU "
                                    f"{h.index} cannot be read ({type(e).__name__}: {e})"))
            return None
        if isinstance(tiles, str):
            return _held(path, h, dims, attrs, problems, "unsupported-compression",
                         f"a tile-compressed image ({h.header.get('ZCMPTYPE', '?')}): "
                         f"{tiles}")
        blocks, codecs = tiles
    else:
        refs = empty_refs((1,) * len(h.shape))
        refs[(0,) * len(h.shape)] = (0, h.data_offset, h.nbytes)
        blocks = BlockTable(h.shape, padded=False, refs=refs)
        codecs = [bytes_codec(BITPIX[h.bitpix])]
    if how == "inexact":
        return _held(path, h, dims, attrs, problems, "unsupported-scaling",
                     "BZERO = 2**63 (uint64): its offset is not exact in the float64 "
                     "arithmetic of a zarr scale-offset codec")
    stored = BITPIX[_image_bitpix(h)]
    dtype, fill = stored, np.zeros((), stored)[()]
    if how == "unsigned":
        dtype = UNSIGNED[_image_bitpix(h)][1].newbyteorder("=")
        codecs = [{"name": "numcodecs.fixedscaleoffset", "configuration": {
            "offset": int(bzero), "scale": 1, "dtype": dtype.str,
            "astype": stored.newbyteorder("=").str}}, *codecs]
    elif how == "cf":
        # astropy's `hdu.data`: its type and arithmetic (float32 for BITPIX 8 / 16, -32),
        # NaN at BLANK, by the `virtualize.fitsscale` codec (CF attributes would be decoded
        # in float64 by xarray: not astropy's float32 values)
        dtype = _astropy_dtype(h)
        fill = dtype.type(np.nan)
        codecs = [{"name": FITSSCALE, "configuration": {
            "scale": _number(bscale), "zero": _number(bzero),
            "blank": int(blank) if blank else None, "dtype": dtype.str,
            "astype": stored.newbyteorder("=").str}}, *codecs]
    return Variable(name=h.name, dtype=dtype, shape=shape, dims=dims, attrs=attrs,
                    fill_value=fill, codecs=codecs, blocks=blocks)


# tile compressions with an exact zarr decoding of one tile (integer images, and GZIP's
# lossless floats: quantized floats have per-tile ZSCALE / ZZERO); the bytes codec's dtype
# is ZBITPIX's
TILE_CODECS = ("RICE_1", "GZIP_1", "GZIP_2", "HCOMPRESS_1")
QUANTIZED = "quantized floating-point tiles (per-tile ZSCALE / ZZERO columns{}): each tile " \
    "decodes with its own scale and zero{}, which one zarr codec configuration (one per " \
    "array) cannot carry"


def _tiles(h: Hdu, f) -> tuple[BlockTable, list[dict]] | str:
    """(block table, codecs) of a tile-compressed image whose every tile is one
    COMPRESSED_DATA heap entry of an exact codec; else why not (a sentence). Reads the
    table's descriptors (8 or 16 bytes per tile: its chunk index), not the tiles (but for
    GZIP the gzip trailers of the first and last tile: their decoded sizes)."""
    hd = h.header
    ctype = str(hd.get("ZCMPTYPE", "")).strip()
    zbitpix = hd.get("ZBITPIX")
    columns = [str(hd.get(f"TTYPE{k}", "")).strip() for k in range(1, int(hd.get("TFIELDS", 0)) + 1)]
    if ctype not in TILE_CODECS:
        return f"no zarr codec decodes {ctype or 'unnamed'} tiles as astropy does"
    if zbitpix not in BITPIX:
        return f"ZBITPIX = {zbitpix!r}"
    if "ZSCALE" in columns or "ZZERO" in columns:
        dither = str(hd.get("ZQUANTIZ", "NO_DITHER")).strip()
        return QUANTIZED.format(
            f", ZQUANTIZ {dither}",
            "" if dither == "NO_DITHER" else f" and a dither that depends on its row "
            f"(ZDITHER0 = {hd.get('ZDITHER0', 0)})")
    if columns != ["COMPRESSED_DATA"]:
        return f"columns {columns}: tiles other than one COMPRESSED_DATA entry per row " \
            "(GZIP_COMPRESSED_DATA / UNCOMPRESSED_DATA fall-backs, per-tile ZBLANK)"
    if zbitpix < 0 and not ctype.startswith("GZIP"):
        return f"floating-point {ctype} tiles without ZSCALE / ZZERO"
    if zbitpix < 0 and "ZBLANK" in hd:
        return "a floating-point image with ZBLANK (astropy turns tile values equal to it " \
            "into NaN)"
    if ctype == "RICE_1" and zbitpix == 64:
        return "64-bit RICE_1 tiles"
    if f is None:
        return "no file to read the tile table from"
    form = str(hd.get("TFORM1", "")).strip().upper()
    if form[:3] not in ("1PB", "1QB", "PB(", "QB("):
        return f"TFORM1 = {form!r} (not bytes)"
    width, rows = int(hd["NAXIS1"]), int(hd["NAXIS2"])
    desc = np.dtype(">i4" if "P" in form[:2] else ">i8")
    if width != 2 * desc.itemsize:
        return f"NAXIS1 = {width} for a {form} descriptor"
    n = int(hd.get("ZNAXIS", 0))
    axes = [int(hd.get(f"ZNAXIS{k}", 0)) for k in range(1, n + 1)]
    tile = [int(hd.get(f"ZTILE{k}", axes[0] if k == 1 else 1)) for k in range(1, n + 1)]
    if not n or not all(axes) or not all(t > 0 for t in tile):
        return f"ZNAXISn {axes}, ZTILEn {tile}"
    grid = [-(-a // t) for a, t in zip(axes, tile)]
    if math.prod(grid) != rows:  # (damaged ZNAXISn / ZTILEn: each tile is a row)
        raise ValueError(f"ZNAXISn {axes} in tiles of ZTILEn {tile} are {math.prod(grid)} "
                         f"tiles, but its table holds {rows} rows (one per tile)")
    if rows * width > h.nbytes:
        return f"a table of {rows} rows of {width} bytes in {h.nbytes} bytes of data"
    f.seek(h.data_offset)
    raw = f.read(rows * width)
    if len(raw) != rows * width:  # (a truncated file: the extent check says so)
        return "the tile table is cut short"
    table = np.frombuffer(raw, dtype=desc).reshape(rows, 2)
    theap = hd.get("THEAP", rows * width)
    if not isinstance(theap, int) or theap < rows * width:
        return f"THEAP = {theap!r}"
    heap = h.data_offset + theap
    counts, offsets = table[:, 0].astype(np.int64), table[:, 1].astype(np.int64)
    if (counts <= 0).any() or (offsets < 0).any() or \
            (offsets + counts > h.nbytes - (heap - h.data_offset)).any():
        return "a tile of no bytes, or past the heap"
    stored = BITPIX[zbitpix]
    names = {str(hd.get(f"ZNAME{k}", "")).strip().upper(): hd.get(f"ZVAL{k}")
             for k in range(1, 10) if f"ZNAME{k}" in hd}
    if ctype == "HCOMPRESS_1":
        # lossless only (SCALE 0; SMOOTH 0): the decoder is cfitsio's, as astropy's
        if names.get("SCALE", 0) != 0 or names.get("SMOOTH", 0) != 0:
            return f"lossy HCOMPRESS_1 (SCALE {names.get('SCALE', 0)}, SMOOTH " \
                f"{names.get('SMOOTH', 0)}): not proven against astropy"
        if n < 2 or any(t != 1 for t in tile[2:]):
            return f"HCOMPRESS_1 tiles of {tile} (not 2-D)"
        codecs = [{"name": "imagecodecs_hcomp"}]
    elif ctype == "RICE_1":
        if names.get("BYTEPIX", 4) != stored.itemsize:
            return f"RICE_1 with BYTEPIX {names.get('BYTEPIX', 4)} for ZBITPIX {zbitpix}"
        codecs = [{"name": "imagecodecs_rcomp",
                   "configuration": {"nblock": int(names.get("BLOCKSIZE", 32))}}]
    else:
        codecs = _gzip_codecs(f, ctype, zbitpix, heap + offsets, counts, axes, tile, grid)
    refs = empty_refs(tuple(reversed(grid)))
    flat = refs.reshape(-1)
    flat["offset"], flat["length"] = heap + offsets, counts
    # one chunk per tile (ZTILEn reversed; the edge tiles short)
    return BlockTable(tuple(reversed(tile)), padded=False, refs=refs), codecs


def _gzip_codecs(f, ctype: str, zbitpix: int, starts, counts, axes, tile, grid) -> list[dict]:
    """GZIP_1 / GZIP_2 tiles: numcodecs' `gzip` (+ `numcodecs.shuffle`) and `bytes`
    big-endian when the first and the last tile (read: their gzip trailers' ISIZE) decode
    to ZBITPIX-sized values; else `virtualize.fitsgzip`, which types each tile by its
    decoded size as astropy does (writers that stored 16-bit images' tiles as 4-byte
    integers). (A middle tile of another size than these two: the plain chain fails to
    decode it, an error, never other values.)"""
    stored = BITPIX[zbitpix]
    last = [a - (g - 1) * t for a, t, g in zip(axes, tile, grid)]
    for row, shape in ((0, [min(a, t) for a, t in zip(axes, tile)]), (len(counts) - 1, last)):
        f.seek(int(starts[row] + counts[row]) - 4)
        trailer = f.read(4)
        if len(trailer) != 4 or counts[row] < 18 or \
                int.from_bytes(trailer, "little") != math.prod(shape) * stored.itemsize:
            return [bytes_codec(stored), {"name": FITSGZIP, "configuration": {
                "bitpix": zbitpix, "shuffle": ctype == "GZIP_2"}}]
    codecs = [bytes_codec(stored)]
    if ctype == "GZIP_2" and stored.itemsize > 1:
        codecs.append({"name": "numcodecs.shuffle",
                       "configuration": {"elementsize": stored.itemsize}})
    codecs.append({"name": "gzip", "configuration": {"level": 1}})
    return codecs


def _compression_card(key: str) -> bool:
    """The binary table's own cards (the compressed image's header keeps the image's)."""
    return key in ("XTENSION", "BITPIX", "NAXIS", "NAXIS1", "NAXIS2", "PCOUNT", "GCOUNT",
                   "TFIELDS", "THEAP", *ZCARDS) or key[:5] in ("TTYPE", "TFORM") or \
        key.rstrip("0123456789") in ("ZNAXIS", "ZTILE", "ZNAME", "ZVAL")


ZCARDS = ("ZIMAGE", "ZCMPTYPE", "ZBITPIX", "ZNAXIS", "ZMASKCMP", "ZSIMPLE", "ZTENSION",
          "ZEXTEND", "ZBLOCKED", "ZPCOUNT", "ZGCOUNT", "ZHECKSUM", "ZDATASUM", "ZQUANTIZ",
          "ZDITHER0", "ZBLANK")


def _held(path: str, h: Hdu, dims, attrs, problems, kind: str, why: str) -> Variable:
    """An image with no exact reference: in the inventory without blocks, with a fatal
    problem that inlining resolves (the planner inlines it when small, `--inline-threshold`;
    else `--inline NAME` or `--drop NAME`); its values are astropy's (`read_fits_region`),
    of the type astropy gives them (`_astropy_dtype`)."""
    problems.append(Problem(Location(path, h.name), kind, why))
    attrs = {k: v for k, v in attrs.items() if not _compression_card(k)}
    return Variable(name=h.name, dtype=_astropy_dtype(h), shape=_decoded_shape(h), dims=dims,
                    attrs=attrs, fill_value=None, codecs=[], blocks=None)


def _decoded_shape(h: Hdu) -> tuple[int, ...]:
    if h.kind == "compressed":
        n = int(h.header.get("ZNAXIS", 0) or 0)
        return tuple(int(h.header.get(f"ZNAXIS{k}", 0) or 0) for k in range(n, 0, -1))
    return h.shape


def _astropy_dtype(h: Hdu) -> np.dtype:
    """The type of astropy's `hdu.data` (its `_dtype_for_bitpix` rule): the stored type
    unscaled; the unsigned types of the offsets; else float32 for BITPIX 8 / 16, float64
    for 32 / 64 (floats stay floats). A read of another type is refused (`_read`)."""
    bitpix = _image_bitpix(h)
    raw = BITPIX[bitpix].newbyteorder("=")
    how = _scaling(h)[0]
    if how == "raw":
        return raw
    if how in ("unsigned", "inexact"):
        return UNSIGNED[bitpix][1]
    return np.dtype("f8") if bitpix > 16 else np.dtype("f4") if bitpix > 0 else raw


def scan_fits(path: str) -> FileInventory:
    """Scan one FITS file. Content problems are returned; a broken header raises."""
    st = storage.stat(path)
    with storage.open_source(path, st.st_size) as f:
        hdus = walk(f, path, st.st_size)
        inv = _inventory(path, st, f, hdus)
        inv.bytes_read, inv.requests = f.bytes_read, f.requests
    return inv


def _inventory(path: str, st, f, hdus: list[Hdu]) -> FileInventory:
    problems: list[Problem] = list(hdus[0].problems)
    _names(hdus)
    for h in hdus:
        if h.kind in ("table", "groups", "unknown"):
            what = {"groups": "random groups",
                    "unknown": "an unknown extension (or an image with PCOUNT / GCOUNT)"}.get(
                h.kind, f"a {str(h.header.get('XTENSION', '')).strip()} table")
            problems.append(Problem(Location(path, f"hdu{h.index}"), "unsupported-object",
                                    f"HDU {h.index} (at byte offset {h.header_offset}) is "
                                    f"{what}: skipped", fatal=False))
    images = [h for h in hdus if h.kind in ("image", "compressed")]
    dims = _dims([h for h in images if h.kind == "image"])
    for h in images:
        if h.kind == "compressed":
            dims[h.index] = tuple(f"{h.name}_naxis{n}" for n in range(len(_decoded_shape(h)), 0, -1))
    variables: dict[str, Variable] = {}
    dimensions: dict[str, Dimension] = {}
    for h in images:
        v = _variable(path, h, dims[h.index], problems, f)
        if v is None:
            continue
        variables[h.name] = v
        for d, n in zip(v.dims, v.shape):
            dimensions[d] = Dimension(d, n)
    # the primary header describes the whole file (DATE-OBS, TELESCOP, OBSERVER): its cards
    # are the root group's attributes too when the primary holds an image (a stack of
    # exposures takes its axis from them: `--coord time=attr:DATE-OBS`)
    gattrs = _attrs(hdus[0].header, path, None,
                    problems if hdus[0].kind != "image" else [])
    inv = FileInventory(path, "fits", st.st_size, st.st_mtime_ns, {"": gattrs}, dimensions,
                        variables, problems)
    inv.etag = st.etag
    return inv


# -- reading values with astropy -------------------------------------------------------------

def _find(path: str, name: str) -> tuple[Hdu, str]:
    size = storage.stat(path).st_size
    with storage.open_source(path, size) as f:
        hdus = walk(f, path, size)
    _names(hdus)
    for h in hdus:
        if h.name == name and h.kind in ("image", "compressed"):
            how, _, _, blank = _scaling(h) if h.kind == "image" else ("compressed",) * 4
            return h, ("blank" if how == "raw" and blank is not None else how)
    raise KeyError(f"{path}: no image {name!r}")


def read_fits_region(path: str, name: str,
                     region: tuple[tuple[int, int], ...] | None = None) -> np.ndarray:
    """Values of image `name` as astropy reads them (`hdu.data`: scaled, NaN at BLANK),
    the whole image or `region`."""
    fits = _astropy_fits()
    if fits is None:
        raise _missing(path)
    from astropy.utils.exceptions import AstropyWarning

    h, how = _find(path, name)
    sel = tuple(slice(a, b) for a, b in region) if region is not None else ()
    kw: dict = {}
    with warnings.catch_warnings():  # (what astropy warns of, the scan reported)
        warnings.simplefilter("ignore", AstropyWarning)
        return _read(fits, path, h, how, sel, kw)


def _read(fits, path: str, h: Hdu, how: str, sel, kw) -> np.ndarray:
    if h.kind == "compressed":
        # (the HDUs before it read as the binary tables they are, and this one made the
        # CompImageHDU astropy's `fits.open` makes of it, with its arguments: a file of
        # many tile-compressed extensions is not made into images up to this one for
        # each region the decode check reads)
        kw = {**kw, "disable_image_compression": True}
    if storage.is_url(path):
        with storage.open_source(path) as fobj, \
                fits.open(fobj, memmap=False, lazy_load_hdus=True, **kw) as hdul:
            return _checked(h, how, np.array(_hdu(fits, hdul, h)[sel]))
    # (astropy maps only images it neither scales nor blanks; those are read whole)
    with fits.open(os.fspath(path), memmap=how == "raw", lazy_load_hdus=True,
                   **kw) as hdul:
        return _checked(h, how, np.array(_hdu(fits, hdul, h)[sel]))


def _hdu(fits, hdul, h: Hdu):
    """HDU `h`'s data as `fits.open` gives them: a tile-compressed image opened with
    `disable_image_compression` made the CompImageHDU astropy's HDUList makes (its
    `_read_next_hdu`: `CompImageHDU(bintable=hdu, uint=...)`, uint as `fits.open`'s
    default, `conf.enable_uint`)."""
    hdu = hdul[h.index]
    if h.kind == "compressed" and not isinstance(hdu, fits.CompImageHDU):
        if not fits.CompImageHDU.match_header(hdu.header):
            raise ValueError(f"HDU {h.index} is no tile-compressed image to astropy")
        hdu = fits.CompImageHDU(bintable=hdu, uint=fits.conf.enable_uint)
    return hdu.data


def _checked(h: Hdu, how: str, values: np.ndarray) -> np.ndarray:
    """Values of a compressed or uint64 image must have the type the scan gave the array
    (the planner stores inlined values at that type): another is an error, not a cast."""
    if how in ("compressed", "inexact", "cf") and values.dtype.newbyteorder("=") != _astropy_dtype(h):
        raise ValueError(f"astropy reads HDU {h.index} as {values.dtype}, not "
                         f"{_astropy_dtype(h)} as its header says")
    return values


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError, AttributeError):  # (a module blocked in sys.modules)
        return False


class Fits(Format):
    name = "fits"
    title = "FITS"
    suffixes = (".fits", ".fit", ".fts")
    inventory_formats = ("fits",)
    # (astropy preloaded by a new scan worker when installed: 0.3 s not in a scan's time)
    modules = (__name__, *(("astropy.io.fits",) if _installed("astropy") else ()))

    def sniff(self, head: bytes, f=None) -> bool:
        return head[:8] == MAGIC[:8]

    def scan(self, path: str, hint=None) -> FileInventory:
        return finish(scan_fits(path), hint)

    def read_region(self, path: str, name: str, region=None):
        return read_fits_region(path, name, region)


FORMAT = Fits()
