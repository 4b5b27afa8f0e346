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

Each codec is a thin zarr wrapper of its functions in `codec_core.py` (names,
configurations, decode and encode without zarr: what the scanners import). This module
sits below everything else in virtualize: it imports only numpy and zarr (imagecodecs or
eccodes when a chunk is decoded).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass

import numpy as np
from zarr.abc.codec import ArrayArrayCodec, BytesBytesCodec
from zarr.core.common import parse_named_configuration

from .codec_core import (
    BITSHUFFLE,
    BITSHUFFLE_COMPRESSION,
    BLOCKED_MULT,
    FITSGZIP,
    FITSSCALE,
    GRIB,
    LZF,
    ZBITPIX,
    bitshuffle_decode,
    bitshuffle_encode,
    fits_gzip_decode,
    fits_gzip_encode,
    fits_scale,
    grib2_fields,
    grib2_in_force,
    grib2_sections,
    grib_codec_config,
    grib_decode,
    grib_field_message,
    grib_to_yx,
    load_eccodes,
    lzf_decode,
    lzf_encode,
)


def _nbytes(chunk_spec) -> int:
    """A whole chunk's decoded bytes (HDF5 stores edge chunks whole, padded)."""
    return math.prod(chunk_spec.shape) * chunk_spec.dtype.to_native_dtype().itemsize


def _out(chunk_spec, data: bytes):
    return chunk_spec.prototype.buffer.from_bytes(data)


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
        if not isinstance(blocksize, int) or blocksize < 0 or blocksize % BLOCKED_MULT:
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


@dataclass(frozen=True)
class FitsGzipCodec(_Codec):
    """A FITS GZIP_1 / GZIP_2 tile (`shuffle`) of an image of ZBITPIX `bitpix`, decoded to
    ZBITPIX's big-endian bytes (followed by the `bytes` codec, endian "big"):
    `fits_gzip_decode`, whatever the size of the integers the tile stores."""

    bitpix: int = 16
    shuffle: bool = False

    def __init__(self, *, bitpix: int, shuffle: bool = False):
        if isinstance(bitpix, bool) or bitpix not in ZBITPIX:
            raise ValueError(f"{FITSGZIP}: bitpix must be one of {sorted(ZBITPIX)}")
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
           "grib_field_message", "grib_to_yx", "load_eccodes", "lzf_decode", "lzf_encode",
           "register"]
