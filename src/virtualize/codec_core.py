"""The codecs virtualize names in its cubes, without zarr: their names, their
configurations (`grib_codec_config`) and what each does to a chunk's bytes, as plain
functions: h5py's LZF filter (`lzf_decode`), the HDF5 bitshuffle filter
(`bitshuffle_decode`), one GRIB field decoded by ecCodes (`grib_decode`, and where a
GRIB2 message's fields are: `grib2_fields`), a FITS image's BSCALE / BZERO / BLANK as
astropy applies them (`fits_scale`) and a FITS GZIP_1 / GZIP_2 tile (`fits_gzip_decode`).
Scanners import this module for what they emit, and the decode check decodes through it
(checks/decode.py); `codecs.py` wraps each as a zarr codec, for zarr's readers.

It imports only numpy (imagecodecs or eccodes when a chunk is decoded): zarr's import is
paid where a store is read or written, not by a scan.
"""

from __future__ import annotations

import sys

import numpy as np

LZF = "virtualize.lzf"
BITSHUFFLE = "virtualize.bitshuffle"
GRIB = "virtualize.grib"
FITSSCALE = "virtualize.fitsscale"
FITSGZIP = "virtualize.fitsgzip"
BITSHUFFLE_COMPRESSION = ("none", "lz4", "zstd")  # bshuf_h5filter.c's cd_values[4]: 0, 2, 3
BLOCKED_MULT = 8  # bitshuffle blocks hold a multiple of 8 elements
LZF_MAX_RATIO = 90  # an LZF stream decodes to at most ~88 times its length (3 bytes -> 264)


def lzf_decode(data: bytes, nbytes: int) -> bytes:
    """One chunk of h5py's LZF filter (lzf_filter.c, also hdf5plugin's): a raw LZF stream
    (no size header) of `nbytes` decoded bytes, decoded as that filter decodes it:

    - the whole stream is decoded (the filter starts with a buffer of the chunk's size and
      grows it while liblzf says E2BIG), and a stream liblzf finds invalid is an error
      (EINVAL: HDF5's read fails);
    - a stream decoding to more bytes than the chunk: its first `nbytes` (HDF5 copies one
      chunk's bytes out of the filter's larger buffer);
    - a stream decoding to fewer: an error. The filter returns the short length and HDF5
      leaves the rest of the chunk's buffer uninitialised (what h5py reads there changes
      from run to run), so there is no value to be exact to: never padded."""
    import imagecodecs

    data = bytes(data)
    size, limit = max(nbytes, 1), max(nbytes, len(data) * LZF_MAX_RATIO + 64)
    while True:
        try:
            out = imagecodecs.lzf_decode(data, header=False, out=size)
            break
        except Exception as e:  # (imagecodecs.LzfError: E2BIG or EINVAL, by its message)
            if "not large enough" in str(e) and size < limit:
                size = min(2 * size, limit)
                continue
            raise ValueError(f"{LZF}: the chunk is no valid LZF stream of at least {nbytes} "
                             f"bytes ({e}); HDF5's lzf filter fails on it too") from e
    if len(out) < nbytes:
        raise ValueError(f"{LZF}: the chunk decodes to {len(out)} bytes, fewer than a chunk's "
                         f"{nbytes}: HDF5's lzf filter leaves the rest of the chunk "
                         "uninitialised (no value to be exact to)")
    return bytes(out[:nbytes])


def lzf_encode(data: bytes) -> bytes:
    """A raw LZF stream of `data` (what `--materialize` stores; any stream decodes)."""
    import imagecodecs

    return bytes(imagecodecs.lzf_encode(data, header=False, out=len(data) + len(data) // 16 + 64))


def _default_block(elementsize: int) -> int:
    """bitshuffle's `bshuf_default_block_size` (items; fixed for all versions)."""
    return max(8192 // elementsize // BLOCKED_MULT * BLOCKED_MULT, 128)


def bitshuffle_encode(data: bytes, elementsize: int, blocksize: int = 0,
                      compression: str = "none") -> bytes:
    """`data` as the HDF5 bitshuffle filter stores it (`bitshuffle_decode` reverses it)."""
    import imagecodecs

    block = blocksize or _default_block(elementsize)
    shuffled = bytes(imagecodecs.bitshuffle_encode(data, itemsize=elementsize, blocksize=block))
    if compression == "none":
        return shuffled
    items = len(data) // elementsize
    last = items % block - items % block % BLOCKED_MULT
    lengths = [block * elementsize] * (items // block) + ([last * elementsize] if last else [])
    parts, at = [len(data).to_bytes(8, "big"), (block * elementsize).to_bytes(4, "big")], 0
    for n in lengths:
        piece = shuffled[at:at + n]
        at += n
        packed = bytes(imagecodecs.lz4_encode(piece, header=False) if compression == "lz4"
                       else imagecodecs.zstd_encode(piece))
        parts += [len(packed).to_bytes(4, "big"), packed]
    parts.append(shuffled[at:])
    return b"".join(parts)


def _be(data: bytes, at: int, size: int) -> int:
    if at + size > len(data):
        raise ValueError(f"{BITSHUFFLE}: the chunk ends inside a header ({len(data)} bytes)")
    return int.from_bytes(data[at:at + size], "big")


def bitshuffle_decode(data: bytes, nbytes: int, elementsize: int, blocksize: int = 0,
                      compression: str = "none") -> bytes:
    """One chunk of the HDF5 bitshuffle filter, decoded to `nbytes` bytes of
    `elementsize`-byte items. Plain: the chunk is bitshuffled in blocks of `blocksize`
    items (0: bitshuffle's default), no header. LZ4 / zstd: a 12-byte header (decoded size,
    8 bytes big-endian; block size in bytes, 4 bytes big-endian), then each block's
    compressed bytes after a 4-byte big-endian length: the full blocks, a last block of
    the remaining items rounded down to a multiple of 8, then the last (fewer than 8)
    items' bytes, stored as they are."""
    import imagecodecs

    if compression == "none":
        if len(data) != nbytes:
            raise ValueError(f"{BITSHUFFLE}: the chunk holds {len(data)} bytes, not {nbytes}")
        return bytes(imagecodecs.bitshuffle_decode(data, itemsize=elementsize,
                                                   blocksize=blocksize))
    if compression not in BITSHUFFLE_COMPRESSION:
        raise ValueError(f"{BITSHUFFLE}: unknown compression {compression!r}")
    size, block_bytes = _be(data, 0, 8), _be(data, 8, 4)
    if size != nbytes:
        raise ValueError(f"{BITSHUFFLE}: the chunk's header says {size} bytes, not {nbytes}")
    if block_bytes == 0 or block_bytes % (elementsize * BLOCKED_MULT):
        raise ValueError(f"{BITSHUFFLE}: block size {block_bytes} bytes is no multiple of "
                         f"{BLOCKED_MULT} {elementsize}-byte items")
    items, block = nbytes // elementsize, block_bytes // elementsize
    last = items % block - items % block % BLOCKED_MULT
    lengths = [block * elementsize] * (items // block) + ([last * elementsize] if last else [])
    at, parts = 12, []
    for n in lengths:
        stored = _be(data, at, 4)
        at += 4
        if at + stored > len(data):
            raise ValueError(f"{BITSHUFFLE}: a block runs past the chunk's end")
        piece = data[at:at + stored]
        at += stored
        try:
            got = (imagecodecs.lz4_decode(piece, header=False, out=n) if compression == "lz4"
                   else imagecodecs.zstd_decode(piece, out=n))
        except Exception as e:
            raise ValueError(f"{BITSHUFFLE}: a {compression} block does not decode ({e})") from e
        if len(got) != n:
            raise ValueError(f"{BITSHUFFLE}: a block decodes to {len(got)} bytes, not {n}")
        parts.append(bytes(got))
    left = nbytes % (BLOCKED_MULT * elementsize)
    if len(data) - at != left:
        raise ValueError(f"{BITSHUFFLE}: {len(data) - at} bytes follow the blocks, not {left}")
    parts.append(data[at:])
    # the blocks, decompressed, are the plain filter's layout with the header's block size
    return bytes(imagecodecs.bitshuffle_decode(b"".join(parts), itemsize=elementsize,
                                               blocksize=block))


def load_eccodes():
    """ecCodes' Python module (`import eccodes`, raising as it does), imported after pyproj
    when pyproj is installed and ecCodes is not loaded yet.

    Why the order: ecCodes' wheel loads every library of `eckitlib` RTLD_GLOBAL (findlibs),
    among them a copy of PROJ (eckitlib.libs/libproj-*.so). A PROJ loaded after it (pyproj's
    own copy) then binds its C++ globals (`osgeo::proj::common::UnitOfMeasure::METRE`, ...)
    to eckit's: both copies construct and register destructors for the same objects, and
    the process aborts at exit ("double free or corruption", docs/grib.md). pyproj's copy
    loaded first is private to pyproj (RTLD_LOCAL), so the two stay apart."""
    if "gribapi" not in sys.modules and "pyproj" not in sys.modules:
        try:
            import pyproj  # noqa: F401
        except Exception:  # noqa: BLE001 - no pyproj (or a broken one): nothing to order
            pass
    import eccodes
    return eccodes


def grib2_fields(data: bytes) -> list[tuple[list[tuple[int, int]], str | None]]:
    """Where each field of a GRIB2 message is: per field, the (offset, length) of the
    sections 1 to 7 in force for it (section 2 only where the message has one), in
    section order, and why it cannot be read as a message of its own (None: it can).
    A message repeats sections 2-7, 3-7 or 4-7 for each further field (WMO FM 92,
    regulation 92.9.4); a field keeps the last section of each number seen before its
    section 7, and a bit-map section whose indicator is 254 ("the bit-map defined
    previously") stands for the last bit-map section before it, as ecCodes'
    multi-field support (`grib_handle_new_multi`) reads it — only where that one
    defines a bit-map (indicator 0-253): after "no bit-map" (255), or with none before
    it, the field is not read (ecCodes would read it as having no bit-map). Raises
    ValueError for a message whose sections do not chain to its end marker."""
    return grib2_in_force(grib2_sections(data))


def grib2_sections(data: bytes) -> list[tuple[int, int, int, int | None]]:
    """A GRIB2 message's sections 1-7 in order: (number, offset, length, bit-map
    indicator for section 6, else None). Raises ValueError where they do not chain from
    section 0 to the end marker."""
    if data[:4] != b"GRIB" or len(data) < 20 or data[7] != 2:
        raise ValueError(f"{GRIB}: not a GRIB2 message")
    end = int.from_bytes(data[8:16], "big") - 4
    if end + 4 > len(data) or data[end:end + 4] != b"7777":
        raise ValueError(f"{GRIB}: the message's length does not lead to its end marker")
    pos, last, out = 16, 0, []
    while pos < end:
        n, number = int.from_bytes(data[pos:pos + 4], "big"), data[pos + 4]
        if n < 5 or pos + n > end or number not in range(1, 8) or \
                (number <= last and not (number in (2, 3, 4) and last == 7)):
            raise ValueError(f"{GRIB}: a damaged section header at byte {pos} of the message")
        out.append((number, pos, n, data[pos + 5] if number == 6 and n >= 6 else None))
        last, pos = number, pos + n
    if pos != end or last != 7:
        raise ValueError(f"{GRIB}: the message's sections do not end at its end marker")
    return out


def grib2_in_force(sections) -> list[tuple[list[tuple[int, int]], str | None]]:
    """`grib2_fields` of a message's `grib2_sections`."""
    now, bitmap, why, out = {}, None, None, []
    for number, pos, n, indicator in sections:
        now[number] = (pos, n)
        if indicator is not None:
            why = None
            if indicator != 254:
                bitmap = (pos, n) if indicator != 255 else None
            elif bitmap is not None:
                now[6] = bitmap
            else:
                why = ("its bit-map is the one defined previously (indicator 254) but no "
                       "field before it in the message defines one")
        if number == 7:
            out.append(([now[k] for k in sorted(now)], why))
    return out


def grib_field_message(data: bytes, k: int, strict: bool = True) -> bytes:
    """Field `k` of a GRIB2 message as a message of its own, as ecCodes' multi-field
    support builds it (`grib2_build_message`): section 0 with the new total length, the
    sections in force for the field (`grib2_fields`), then 7777. A message of one field
    is returned as it is. A field that cannot be read alone raises ValueError (with
    `strict` False: its sections as they are, for reading its keys)."""
    fields = grib2_fields(data)
    if not 0 <= k < len(fields):
        raise ValueError(f"{GRIB}: the message holds {len(fields)} field(s), not a field {k}")
    sections, why = fields[k]
    if why and strict:
        raise ValueError(f"{GRIB}: field {k}: {why}")
    if len(fields) == 1:
        return bytes(data)
    body = b"".join(data[at:at + n] for at, n in sections)
    total = 16 + len(body) + 4
    return bytes(data[:8]) + total.to_bytes(8, "big") + body + b"7777"


def grib_to_yx(values: np.ndarray, shape: tuple[int, int], columns: bool = False,
               alternate: bool = False) -> np.ndarray:
    """Values in ecCodes' order (the message's scanning order) as a (y, x) grid of
    `shape` = (Nj, Ni): with `columns` (jPointsAreConsecutive) the points run along
    columns, so they fill (Ni, Nj) and are transposed; with `alternate`
    (alternativeRowScanning) every second row (column, with `columns`) runs the other
    way, and is reversed (cfgrib's `get_values_in_order`). Each row then runs as the
    first does (iScansNegatively), each column as jScansPositively says, so the
    coordinates computed from the first and last points are the grid's."""
    nj, ni = shape
    grid = values.reshape((ni, nj) if columns else (nj, ni))
    if alternate:
        grid = grid.copy()
        grid[1::2] = grid[1::2, ::-1]
    return np.ascontiguousarray(grid.T if columns else grid)


def grib_decode(data: bytes, points: int, field: int = 0, columns: bool = False,
                alternate: bool = False, shape: tuple[int, int] | None = None) -> np.ndarray:
    """One GRIB field's values as ecCodes decodes them (`codes_get_values`: float64),
    the points its bit-map marks missing NaN (ecCodes' missingValue set to NaN before
    decoding, so a stored value equal to the default 9999 stays). `field`: which field
    of a GRIB2 message of several (`grib_field_message`). `columns` / `alternate`: the
    values rearranged into the (y, x) grid `shape` (`grib_to_yx`). A message of another
    number of points than `points` is an error, never reshaped."""
    try:
        eccodes = load_eccodes()
    except ImportError as e:
        raise ValueError(f"{GRIB}: decoding GRIB needs ecCodes: "
                         "pip install 'virtualize[grib]'") from e
    data = bytes(data)
    if field or (data[7:8] == b"\x02" and len(grib2_fields(data)) > 1):
        data = grib_field_message(data, field)
    try:
        h = eccodes.codes_new_from_message(data)
    except Exception as e:
        raise ValueError(f"{GRIB}: ecCodes cannot read the message ({e})") from e
    try:
        eccodes.codes_set(h, "missingValue", float("nan"))
        values = np.asarray(eccodes.codes_get_values(h), dtype=np.float64)
    except Exception as e:
        raise ValueError(f"{GRIB}: ecCodes cannot decode the message ({e})") from e
    finally:
        eccodes.codes_release(h)
    if values.size != points:
        raise ValueError(f"{GRIB}: the message holds {values.size} points, not {points}")
    if columns or alternate:
        if shape is None or shape[0] * shape[1] != points:
            raise ValueError(f"{GRIB}: a scanning order needs the grid's (Nj, Ni) shape")
        values = grib_to_yx(values, shape, columns, alternate).reshape(-1)
    return values


def grib_codec_config(field: int = 0, columns: bool = False, alternate: bool = False) -> dict:
    """The `virtualize.grib` codec's configuration: only what is not its default (a
    single-field message in (y, x) order has none, as cubes before it were written)."""
    return {**({"field": field} if field else {}),
            **({"jPointsAreConsecutive": True} if columns else {}),
            **({"alternativeRowScanning": True} if alternate else {})}


def fits_scale(stored: np.ndarray, scale, zero, blank, dtype) -> np.ndarray:
    """A FITS image's stored values scaled as astropy's `ImageHDU.data` scales them
    (astropy 5-8, `_scale_data`): converted to `dtype` (float32 for BITPIX 8 and 16, float64
    for 32 and 64, the stored type for -32 and -64), multiplied by BSCALE then BZERO added,
    each step in `dtype` (numpy's in-place operations with a Python scalar: float32
    arithmetic for float32), then NaN where the stored value is BLANK (integer images;
    astropy tests `if self._blank:`, so a BLANK of 0 marks nothing)."""
    dtype = np.dtype(dtype)
    out = np.array(stored, dtype=dtype)
    if scale != 1:
        np.multiply(out, scale, out)
    if zero != 0:
        out += zero
    if blank:
        out[stored == blank] = np.nan
    return out


# FITS ZBITPIX -> the stored type of a tile's values (big-endian, as the standard stores them)
ZBITPIX = {8: ">u1", 16: ">i2", 32: ">i4", 64: ">i8", -32: ">f4", -64: ">f8"}


def fits_gzip_decode(data: bytes, pixels: int, bitpix: int, shuffle: bool) -> bytes:
    """One GZIP_1 (`shuffle` False) or GZIP_2 tile of a FITS tile-compressed image (not
    quantized), decoded as astropy decodes it (astropy 6-8 `_tiled_compression`, after
    cfitsio's `imcomp_decompress_tile`): gunzipped (Python's `gzip.decompress`); for GZIP_2
    unshuffled with the item size the decoded length gives (bytes // pixels); the values'
    type taken from that length, not from ZBITPIX: 2 bytes a pixel big-endian int16, 4
    int32 (float32 for a floating-point ZBITPIX), 8 int64 (float64), else uint8 (older
    writers stored 16-bit images' tiles as 4-byte integers); then converted to ZBITPIX's
    type as numpy's assignment into astropy's image array converts (C casts: integers
    wrap, floats truncate). Returns the tile as ZBITPIX's big-endian bytes (for the `bytes`
    codec, endian "big"). A tile of any other length than its pixels' is an error, as in
    astropy."""
    import gzip

    if bitpix not in ZBITPIX or pixels < 1:
        raise ValueError(f"{FITSGZIP}: bitpix {bitpix}, {pixels} pixels")
    try:
        raw = gzip.decompress(bytes(data))
    except Exception as e:  # noqa: BLE001 - zlib.error, EOFError, BadGzipFile
        raise ValueError(f"{FITSGZIP}: the tile does not gunzip ({e})") from e
    size = len(raw)
    if shuffle:
        itemsize = size // pixels
        if itemsize < 1 or size % itemsize:
            raise ValueError(f"{FITSGZIP}: the tile decodes to {size} bytes for {pixels} pixels")
        raw = np.frombuffer(raw, np.uint8).reshape(itemsize, -1).T.tobytes()
    f = bitpix < 0  # (astropy's tests, in this order: 2, 4, 8 bytes a pixel, else bytes)
    kind = next((t for n, t in ((2, ">i2"), (4, ">f4" if f else ">i4"), (8, ">f8" if f else ">i8"))
                 if size == n * pixels), ">u1")
    values = np.frombuffer(raw, kind)
    if values.size != pixels:
        raise ValueError(f"{FITSGZIP}: the tile decodes to {size} bytes, not {pixels} pixels")
    return values.astype(ZBITPIX[bitpix]).tobytes()


def fits_gzip_encode(data: bytes, bitpix: int, shuffle: bool) -> bytes:
    """A tile as GZIP_1 / GZIP_2 stores it (ZBITPIX's big-endian bytes, gzipped; GZIP_2
    shuffled first): what `--materialize` writes; `fits_gzip_decode` reverses it."""
    import gzip

    itemsize = abs(bitpix) // 8
    if shuffle and itemsize > 1:
        data = np.frombuffer(data, np.uint8).reshape(-1, itemsize).T.tobytes()
    return gzip.compress(bytes(data), mtime=0)
