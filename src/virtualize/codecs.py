"""Zarr v3 codecs that decode two HDF5 filters' chunks exactly: h5py's LZF filter (32000)
and the bitshuffle filter (32008, as hdf5plugin / bitshuffle's `bshuf_h5filter.c` writes
it: plain, LZ4 or zstd), one GRIB message (`virtualize.grib`, decoded by ecCodes), and
a FITS image's BSCALE / BZERO / BLANK as astropy applies them (`virtualize.fitsscale`).
Registered with zarr by entry point (`zarr.codecs`: `virtualize.lzf`,
`virtualize.bitshuffle`, `virtualize.grib`, `virtualize.fitsscale`), so any zarr reader
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


def grib_decode(data: bytes, points: int) -> np.ndarray:
    """One GRIB message's values as ecCodes decodes them (`codes_get_values`: float64),
    the points its bit-map marks missing NaN (ecCodes' missingValue set to NaN before
    decoding, so a stored value equal to the default 9999 stays). A message of another
    number of points than `points` is an error, never reshaped."""
    try:
        eccodes = load_eccodes()
    except ImportError as e:
        raise ValueError(f"{GRIB}: decoding GRIB needs ecCodes: "
                         "pip install 'virtualize[grib]'") from e
    try:
        h = eccodes.codes_new_from_message(bytes(data))
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
    return values


@dataclass(frozen=True)
class GribCodec(_Codec):
    """One GRIB 1 or 2 message -> its values, float64 little-endian (followed by the
    `bytes` codec); no parameters: the message describes itself."""

    @classmethod
    def from_dict(cls, data):
        _, config = parse_named_configuration(data, GRIB, require_configuration=False)
        if config:
            raise ValueError(f"{GRIB} takes no configuration, got {config}")
        return cls()

    def to_dict(self):
        return {"name": GRIB}

    def _decode_sync(self, chunk_bytes, chunk_spec):
        values = grib_decode(chunk_bytes.to_bytes(), math.prod(chunk_spec.shape))
        return _out(chunk_spec, values.astype("<f8").tobytes())

    def _encode_sync(self, chunk_bytes, chunk_spec):
        raise NotImplementedError(f"{GRIB}: GRIB messages are not encoded (a chunk copied "
                                  "from a GRIB source cannot be stored as one)")


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


CODECS = {LZF: LZFCodec, BITSHUFFLE: BitshuffleCodec, GRIB: GribCodec, FITSSCALE: FitsScaleCodec}


def register() -> None:
    """Register the codecs with zarr by a call (the entry points do it for an installed
    virtualize; a source tree on PYTHONPATH has none)."""
    from zarr.registry import register_codec

    for name, cls in CODECS.items():
        register_codec(name, cls)


__all__ = ["BITSHUFFLE", "CODECS", "FITSSCALE", "GRIB", "LZF", "BitshuffleCodec",
           "FitsScaleCodec", "GribCodec", "LZFCodec", "bitshuffle_decode", "bitshuffle_encode",
           "fits_scale", "grib_decode", "lzf_decode", "lzf_encode", "register"]
