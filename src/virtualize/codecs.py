"""Zarr v3 codecs that decode two HDF5 filters' chunks exactly: h5py's LZF filter (32000)
and the bitshuffle filter (32008, as hdf5plugin / bitshuffle's `bshuf_h5filter.c` writes
it: plain, LZ4 or zstd), one GRIB message (`virtualize.grib`, decoded by ecCodes),
a FITS image's BSCALE / BZERO / BLANK as astropy applies them (`virtualize.fitsscale`),
and a FITS GZIP_1 / GZIP_2 tile whose stored integers are not of the image's ZBITPIX size
(`virtualize.fitsgzip`, astropy's reading of such tiles). Registered with zarr by entry
point (`zarr.codecs`: `virtualize.lzf`, `virtualize.bitshuffle`, `virtualize.grib`,
`virtualize.fitsscale`, `virtualize.fitsgzip`), so any zarr reader
with virtualize installed finds them; `register()` does the same by a call. Encoding is
for `--materialize`'s copied chunks (not GRIB's: a message is never re-encoded).

This module sits below everything else in virtualize: it imports only numpy and zarr
(imagecodecs or eccodes when a chunk is decoded).
"""

from __future__ import annotations

import asyncio
import math
import sys
from dataclasses import dataclass

import numpy as np
from zarr.abc.codec import ArrayArrayCodec, BytesBytesCodec
from zarr.core.common import parse_named_configuration

LZF = "virtualize.lzf"
BITSHUFFLE = "virtualize.bitshuffle"
GRIB = "virtualize.grib"
FITSSCALE = "virtualize.fitsscale"
FITSGZIP = "virtualize.fitsgzip"
BITSHUFFLE_COMPRESSION = ("none", "lz4", "zstd")  # bshuf_h5filter.c's cd_values[4]: 0, 2, 3
_BLOCKED_MULT = 8  # bitshuffle blocks hold a multiple of 8 elements


def _nbytes(chunk_spec) -> int:
    """A whole chunk's decoded bytes (HDF5 stores edge chunks whole, padded)."""
    return math.prod(chunk_spec.shape) * chunk_spec.dtype.to_native_dtype().itemsize


def _out(chunk_spec, data: bytes):
    return chunk_spec.prototype.buffer.from_bytes(data)


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
    return max(8192 // elementsize // _BLOCKED_MULT * _BLOCKED_MULT, 128)


def bitshuffle_encode(data: bytes, elementsize: int, blocksize: int = 0,
                      compression: str = "none") -> bytes:
    """`data` as the HDF5 bitshuffle filter stores it (`bitshuffle_decode` reverses it)."""
    import imagecodecs

    block = blocksize or _default_block(elementsize)
    shuffled = bytes(imagecodecs.bitshuffle_encode(data, itemsize=elementsize, blocksize=block))
    if compression == "none":
        return shuffled
    items = len(data) // elementsize
    last = items % block - items % block % _BLOCKED_MULT
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
    if block_bytes == 0 or block_bytes % (elementsize * _BLOCKED_MULT):
        raise ValueError(f"{BITSHUFFLE}: block size {block_bytes} bytes is no multiple of "
                         f"{_BLOCKED_MULT} {elementsize}-byte items")
    items, block = nbytes // elementsize, block_bytes // elementsize
    last = items % block - items % block % _BLOCKED_MULT
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
    left = nbytes % (_BLOCKED_MULT * elementsize)
    if len(data) - at != left:
        raise ValueError(f"{BITSHUFFLE}: {len(data) - at} bytes follow the blocks, not {left}")
    parts.append(data[at:])
    # the blocks, decompressed, are the plain filter's layout with the header's block size
    return bytes(imagecodecs.bitshuffle_decode(b"".join(parts), itemsize=elementsize,
                                               blocksize=block))


class _Codec(BytesBytesCodec):
    is_fixed_size = False

    async def _decode_single(self, chunk_bytes, chunk_spec):
        return await asyncio.to_thread(self._decode_sync, chunk_bytes, chunk_spec)

    async def _encode_single(self, chunk_bytes, chunk_spec):
        # `--materialize` writes the chunks it copies with the array's codecs
        return await asyncio.to_thread(self._encode_sync, chunk_bytes, chunk_spec)

    def compute_encoded_size(self, _input_byte_length, _chunk_spec):
        raise NotImplementedError


@dataclass(frozen=True)
class LZFCodec(_Codec):
    """h5py's LZF filter (HDF5 filter 32000); no parameters."""

    @classmethod
    def from_dict(cls, data):
        _, config = parse_named_configuration(data, LZF, require_configuration=False)
        if config:
            raise ValueError(f"{LZF} takes no configuration, got {config}")
        return cls()

    def to_dict(self):
        return {"name": LZF}

    def _decode_sync(self, chunk_bytes, chunk_spec):
        return _out(chunk_spec, lzf_decode(chunk_bytes.to_bytes(), _nbytes(chunk_spec)))

    def _encode_sync(self, chunk_bytes, chunk_spec):
        return _out(chunk_spec, lzf_encode(chunk_bytes.to_bytes()))


@dataclass(frozen=True)
class BitshuffleCodec(_Codec):
    """The HDF5 bitshuffle filter (32008): `elementsize` (cd_values[2]), `blocksize` in
    items (cd_values[3]; 0: the default; LZ4 and zstd chunks carry theirs) and
    `compression` ("none", "lz4", "zstd": cd_values[4] 0, 2, 3)."""

    elementsize: int
    blocksize: int = 0
    compression: str = "none"

    def __init__(self, *, elementsize: int, blocksize: int = 0, compression: str = "none"):
        if not isinstance(elementsize, int) or elementsize < 1:
            raise ValueError(f"{BITSHUFFLE}: elementsize must be a positive int")
        if not isinstance(blocksize, int) or blocksize < 0 or blocksize % _BLOCKED_MULT:
            raise ValueError(f"{BITSHUFFLE}: blocksize must be 0 or a multiple of 8")
        if compression not in BITSHUFFLE_COMPRESSION:
            raise ValueError(f"{BITSHUFFLE}: compression must be one of {BITSHUFFLE_COMPRESSION}")
        object.__setattr__(self, "elementsize", elementsize)
        object.__setattr__(self, "blocksize", blocksize)
        object.__setattr__(self, "compression", compression)

    @classmethod
    def from_dict(cls, data):
        _, config = parse_named_configuration(data, BITSHUFFLE)
        return cls(**config)

    def to_dict(self):
        return {"name": BITSHUFFLE, "configuration": {
            "elementsize": self.elementsize, "blocksize": self.blocksize,
            "compression": self.compression}}

    def _decode_sync(self, chunk_bytes, chunk_spec):
        return _out(chunk_spec, bitshuffle_decode(
            chunk_bytes.to_bytes(), _nbytes(chunk_spec), self.elementsize, self.blocksize,
            self.compression))

    def _encode_sync(self, chunk_bytes, chunk_spec):
        return _out(chunk_spec, bitshuffle_encode(chunk_bytes.to_bytes(), self.elementsize,
                                                  self.blocksize, self.compression))


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


@dataclass(frozen=True)
class GribCodec(_Codec):
    """One GRIB 1 or 2 field -> its values, float64 little-endian (followed by the
    `bytes` codec), in (y, x) order. Configuration (each entry only where it is not its
    default): `field`, which field of a GRIB2 message of several (0: the first);
    `jPointsAreConsecutive`, `alternativeRowScanning` (ecCodes' keys: the message's
    points run along columns, every second row the other way), read into (y, x) over
    the chunk's last two axes. The message describes the rest itself."""

    field: int = 0
    jPointsAreConsecutive: bool = False
    alternativeRowScanning: bool = False

    def __init__(self, *, field: int = 0, jPointsAreConsecutive: bool = False,
                 alternativeRowScanning: bool = False):
        if isinstance(field, bool) or not isinstance(field, int) or field < 0:
            raise ValueError(f"{GRIB}: field must be a non-negative int, got {field!r}")
        for k, v in (("jPointsAreConsecutive", jPointsAreConsecutive),
                     ("alternativeRowScanning", alternativeRowScanning)):
            if not isinstance(v, bool):
                raise ValueError(f"{GRIB}: {k} must be true or false, got {v!r}")
        object.__setattr__(self, "field", field)
        object.__setattr__(self, "jPointsAreConsecutive", jPointsAreConsecutive)
        object.__setattr__(self, "alternativeRowScanning", alternativeRowScanning)

    @classmethod
    def from_dict(cls, data):
        _, config = parse_named_configuration(data, GRIB, require_configuration=False)
        known = {"field", "jPointsAreConsecutive", "alternativeRowScanning"}
        if set(config or {}) - known:
            raise ValueError(f"{GRIB}: unknown configuration {sorted(set(config) - known)}")
        return cls(**(config or {}))

    def to_dict(self):
        config = grib_codec_config(self.field, self.jPointsAreConsecutive,
                                   self.alternativeRowScanning)
        return {"name": GRIB, **({"configuration": config} if config else {})}

    def _decode_sync(self, chunk_bytes, chunk_spec):
        shape = tuple(chunk_spec.shape)
        values = grib_decode(chunk_bytes.to_bytes(), math.prod(shape), self.field,
                             self.jPointsAreConsecutive, self.alternativeRowScanning,
                             shape[-2:] if len(shape) >= 2 else None)
        return _out(chunk_spec, values.astype("<f8").tobytes())

    def _encode_sync(self, chunk_bytes, chunk_spec):
        raise NotImplementedError(f"{GRIB}: GRIB messages are not encoded (a chunk copied "
                                  "from a GRIB source cannot be stored as one)")


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


@dataclass(frozen=True)
class FitsScaleCodec(ArrayArrayCodec):
    """A FITS image's scaling (BSCALE `scale`, BZERO `zero`, integer BLANK `blank` or
    None) from the stored type `astype` (the bytes codec's, native order) to astropy's
    decoded type `dtype` (the array's): `fits_scale`, bit for bit astropy's values."""

    is_fixed_size = True
    scale: float = 1.0
    zero: float = 0.0
    blank: int | None = None
    dtype: str = "<f4"
    astype: str = "<i2"

    def __init__(self, *, scale=1.0, zero=0.0, blank=None, dtype: str, astype: str):
        for k, v in (("scale", scale), ("zero", zero)):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError(f"{FITSSCALE}: {k} must be a number, got {v!r}")
        if blank is not None and (isinstance(blank, bool) or not isinstance(blank, int)):
            raise ValueError(f"{FITSSCALE}: blank must be an int or null, got {blank!r}")
        if np.dtype(dtype).kind != "f" or np.dtype(astype).kind not in "iuf":
            raise ValueError(f"{FITSSCALE}: decodes numbers ({astype}) to floats, not {dtype}")
        object.__setattr__(self, "scale", scale)
        object.__setattr__(self, "zero", zero)
        object.__setattr__(self, "blank", blank)
        object.__setattr__(self, "dtype", np.dtype(dtype).str)
        object.__setattr__(self, "astype", np.dtype(astype).str)

    @classmethod
    def from_dict(cls, data):
        _, config = parse_named_configuration(data, FITSSCALE)
        return cls(**config)

    def to_dict(self):
        return {"name": FITSSCALE, "configuration": {
            "scale": self.scale, "zero": self.zero, "blank": self.blank, "dtype": self.dtype,
            "astype": self.astype}}

    def resolve_metadata(self, chunk_spec):
        from dataclasses import replace

        from zarr.core.dtype import parse_dtype

        return replace(chunk_spec, dtype=parse_dtype(np.dtype(self.astype), zarr_format=3),
                       fill_value=np.zeros((), self.astype)[()])

    def _decode_sync(self, chunk_array, chunk_spec):
        stored = chunk_array.as_ndarray_like()
        out = fits_scale(stored, self.scale, self.zero, self.blank, self.dtype)
        return chunk_spec.prototype.nd_buffer.from_ndarray_like(out)

    async def _decode_single(self, chunk_array, chunk_spec):
        return self._decode_sync(chunk_array, chunk_spec)

    async def _encode_single(self, chunk_array, chunk_spec):
        # (the scaling is not invertible in general: a copied chunk cannot be stored)
        raise NotImplementedError(f"{FITSSCALE}: scaled FITS values are not encoded")

    def compute_encoded_size(self, input_byte_length, _chunk_spec):
        return input_byte_length // np.dtype(self.dtype).itemsize * \
            np.dtype(self.astype).itemsize


# FITS ZBITPIX -> the stored type of a tile's values (big-endian, as the standard stores them)
_ZBITPIX = {8: ">u1", 16: ">i2", 32: ">i4", 64: ">i8", -32: ">f4", -64: ">f8"}


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

    if bitpix not in _ZBITPIX or pixels < 1:
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
    return values.astype(_ZBITPIX[bitpix]).tobytes()


def fits_gzip_encode(data: bytes, bitpix: int, shuffle: bool) -> bytes:
    """A tile as GZIP_1 / GZIP_2 stores it (ZBITPIX's big-endian bytes, gzipped; GZIP_2
    shuffled first): what `--materialize` writes; `fits_gzip_decode` reverses it."""
    import gzip

    itemsize = abs(bitpix) // 8
    if shuffle and itemsize > 1:
        data = np.frombuffer(data, np.uint8).reshape(-1, itemsize).T.tobytes()
    return gzip.compress(bytes(data), mtime=0)


@dataclass(frozen=True)
class FitsGzipCodec(_Codec):
    """A FITS GZIP_1 / GZIP_2 tile (`shuffle`) of an image of ZBITPIX `bitpix`, decoded to
    ZBITPIX's big-endian bytes (followed by the `bytes` codec, endian "big"):
    `fits_gzip_decode`, whatever the size of the integers the tile stores."""

    bitpix: int = 16
    shuffle: bool = False

    def __init__(self, *, bitpix: int, shuffle: bool = False):
        if isinstance(bitpix, bool) or bitpix not in _ZBITPIX:
            raise ValueError(f"{FITSGZIP}: bitpix must be one of {sorted(_ZBITPIX)}")
        if not isinstance(shuffle, bool):
            raise ValueError(f"{FITSGZIP}: shuffle must be true or false")
        object.__setattr__(self, "bitpix", bitpix)
        object.__setattr__(self, "shuffle", shuffle)

    @classmethod
    def from_dict(cls, data):
        _, config = parse_named_configuration(data, FITSGZIP)
        return cls(**config)

    def to_dict(self):
        return {"name": FITSGZIP, "configuration": {"bitpix": self.bitpix,
                                                    "shuffle": self.shuffle}}

    def _decode_sync(self, chunk_bytes, chunk_spec):
        return _out(chunk_spec, fits_gzip_decode(chunk_bytes.to_bytes(),
                                                 math.prod(chunk_spec.shape), self.bitpix,
                                                 self.shuffle))

    def _encode_sync(self, chunk_bytes, chunk_spec):
        return _out(chunk_spec, fits_gzip_encode(chunk_bytes.to_bytes(), self.bitpix,
                                                 self.shuffle))


CODECS = {LZF: LZFCodec, BITSHUFFLE: BitshuffleCodec, GRIB: GribCodec, FITSSCALE: FitsScaleCodec,
          FITSGZIP: FitsGzipCodec}


def register() -> None:
    """Register the codecs with zarr by a call (the entry points do it for an installed
    virtualize; a source tree on PYTHONPATH has none)."""
    from zarr.registry import register_codec

    for name, cls in CODECS.items():
        register_codec(name, cls)


__all__ = ["BITSHUFFLE", "CODECS", "FITSGZIP", "FITSSCALE", "GRIB", "LZF", "BitshuffleCodec",
           "FitsGzipCodec", "FitsScaleCodec", "GribCodec", "LZFCodec", "bitshuffle_decode",
           "bitshuffle_encode", "fits_gzip_decode", "fits_gzip_encode", "fits_scale",
           "grib2_fields", "grib2_in_force", "grib2_sections", "grib_codec_config", "grib_decode",
           "grib_field_message", "grib_to_yx", "lzf_decode", "lzf_encode", "register"]
