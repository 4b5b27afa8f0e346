"""HDF5 filters as zarr codecs, HDF5 types as zarr data types, fill values.
"""

from __future__ import annotations

import h5py
import numpy as np

# Why known filters without an exact codec are refused (the problem message says it).
NO_EXACT_CODEC = {
    4: "szip without its four parameters",
    5: "nbit packs values in fewer bits: no zarr codec unpacks HDF5's layout",
    6: "scaleoffset: no zarr codec undoes HDF5's scale-offset packing",
    32008: "bitshuffle with a compressor other than none, LZ4 or zstd (cd_values[4]), or "
           "parameters that do not match the data type",
    32026: "hdf5-blosc2 stores each chunk as a Blosc2 NDim frame: imagecodecs_blosc2 does not "
           "read frames and imagecodecs_b2nd decodes them to void items zarr cannot use",
    32013: "H5Z-ZFP keeps the zfp header in the filter's parameters, which imagecodecs_zfp "
           "cannot be given",
}


def hdf5_filter_codec(code: int, values: tuple[int, ...], dtype: np.dtype) -> dict | None:
    """The zarr v3 codec that decodes HDF5 filter `code` exactly, or None. Codecs named
    `imagecodecs_*` are imagecodecs' zarr 3 codecs: a reader registers them with
    `imagecodecs.zarr.register_codecs()` (`virtualize.open` does); `virtualize.*` ones are
    virtualize's own (`virtualize.codecs`, found by entry point)."""
    if code == h5py.h5z.FILTER_DEFLATE:  # HDF5 stores zlib streams (not gzip)
        return {"name": "numcodecs.zlib", "configuration": {"level": int(values[0]) if values else 1}}
    if code == h5py.h5z.FILTER_SHUFFLE:
        return {"name": "numcodecs.shuffle", "configuration": {"elementsize": int(dtype.itemsize)}}
    if code == h5py.h5z.FILTER_FLETCHER32:
        return {"name": "numcodecs.fletcher32", "configuration": {}}
    if code == 32015:  # zstd: plain zstd frames; the level (a C int, stored as unsigned) only
        # matters for encoding, but is written as the signed number it is
        level = int(np.array(values[0] if values else 0, dtype=np.uint32).view(np.int32))
        return {"name": "numcodecs.zstd", "configuration": {"level": level}}
    if code == 32001:  # blosc: standard blosc1 frames; parameters live in each frame
        return {"name": "numcodecs.blosc", "configuration": {}}
    if code == h5py.h5z.FILTER_SZIP and len(values) >= 4:
        # HDF5's szip framing: a 4-byte little-endian decoded size, then the AEC stream;
        # the parameters are the ones HDF5 stored after `set_local` (options mask with the
        # byte order flags, pixels per block, bits per pixel, pixels per scanline)
        return {"name": "imagecodecs_szip", "configuration": {
            "options_mask": int(values[0]), "pixels_per_block": int(values[1]),
            "bits_per_pixel": int(values[2]), "pixels_per_scanline": int(values[3]),
            "header": True}}
    if code == 32000:  # h5py's LZF: raw LZF, no size header (virtualize.codecs knows the size)
        return {"name": "virtualize.lzf"}
    if code == 32008 and len(values) >= 3:
        # bshuf_h5filter.c: cd_values = (major, minor, item size, block size, compressor, level)
        elem = int(values[2])
        block = int(values[3]) if len(values) > 3 else 0
        compression = {0: "none", 2: "lz4", 3: "zstd"}.get(int(values[4]) if len(values) > 4 else 0)
        if compression is None or elem != dtype.itemsize or block % 8:
            return None
        return {"name": "virtualize.bitshuffle", "configuration": {
            "elementsize": elem, "blocksize": block, "compression": compression}}
    if code == 32004:  # HDF5's LZ4 filter framing (sizes, then blocks): imagecodecs' lz4h5
        return {"name": "imagecodecs_lz4h5"}
    # nbit (5), scaleoffset (6), zfp (32013),
    # blosc2 (32026) and unknown filters have no exact zarr codec (NO_EXACT_CODEC says why).
    return None


def _numeric_dtype(dt: np.dtype) -> tuple[np.dtype | None, dict | None]:
    enum = h5py.check_enum_dtype(dt)
    if enum is not None:
        base = dt.base if dt.kind in "iub" else np.dtype(dt.str)
        if dt.kind == "b":
            return np.dtype(bool), None
        return np.dtype(base.str), dict(enum)
    if dt.kind in "biufc" and dt.fields is None and h5py.check_vlen_dtype(dt) is None:
        return np.dtype(dt.str if dt.kind != "b" else bool), None
    return None, None


def _type_words(dt: np.dtype) -> str:
    """An HDF5 type h5py reads as numpy `dt`, in words: 'vlen sequence of int32',
    'object reference', 'region reference', 'opaque (2 bytes)'."""
    vlen = h5py.check_vlen_dtype(dt)
    if vlen is not None:
        return f"vlen sequence of {vlen}"
    ref = h5py.check_ref_dtype(dt)
    if ref is not None:
        return "region reference" if ref is h5py.RegionReference else "object reference"
    if dt.kind == "V" and dt.names is None and dt.subdtype is None:
        return f"opaque ({dt.itemsize} bytes)"
    return str(dt)


def stored_type_differs(tid, dtype: np.dtype) -> str | None:
    """Why the bytes HDF5 stores for type `tid` are not the bytes of numpy `dtype` (so a
    zarr `bytes` codec would misread them), or None when they are. h5py maps types by
    class and size and lets HDF5 convert on read: a bfloat16 (2 bytes, 8-bit exponent)
    reads as float32, a 12-bit integer in 2 bytes as int16; neither is what its stored
    bytes decode to as a zarr data type."""
    dtype = np.dtype(dtype)
    cls = tid.get_class()
    if cls == h5py.h5t.ENUM:
        tid = tid.get_super()
        cls = tid.get_class()
    if cls == h5py.h5t.COMPOUND and dtype.kind == "c":  # h5py's complex: {r, i}
        half = dtype.itemsize // 2
        if tid.get_size() != dtype.itemsize or tid.get_nmembers() != 2:
            return f"complex stored as a {tid.get_size()}-byte compound, not {dtype.itemsize} bytes"
        for i in range(2):
            why = stored_type_differs(tid.get_member_type(i), np.dtype(f"{dtype.byteorder}f{half}"))
            if why or tid.get_member_offset(i) != i * half:
                return f"complex parts are not two adjacent IEEE floats ({why or 'offsets'})"
        return None
    if cls == h5py.h5t.BITFIELD:  # h5py reads a bitfield as the unsigned integer of its size
        if tid.get_size() != dtype.itemsize:
            return f"a {tid.get_size()}-byte bitfield read as {dtype}"
        return None
    if cls not in (h5py.h5t.INTEGER, h5py.h5t.FLOAT):
        return None
    size, precision, offset = tid.get_size(), tid.get_precision(), tid.get_offset()
    if cls == h5py.h5t.FLOAT:
        std = {2: h5py.h5t.IEEE_F16LE, 4: h5py.h5t.IEEE_F32LE, 8: h5py.h5t.IEEE_F64LE}.get(size)
        layout = (tid.get_fields(), tid.get_ebias(), tid.get_norm(), precision, offset)
        if std is None or layout != (std.get_fields(), std.get_ebias(), std.get_norm(),
                                     std.get_precision(), std.get_offset()):
            _spos, _epos, esize, _mpos, msize = tid.get_fields()
            what = " (bfloat16)" if (size, esize, msize) == (2, 8, 7) else ""
            return (f"a {8 * size}-bit float with {esize} exponent and {msize} mantissa bits"
                    f"{what} is not an IEEE float zarr has a data type for (h5py "
                    f"reads it as {dtype}, HDF5 converting each value)")
    if size != dtype.itemsize:
        return (f"HDF5 stores {size} byte(s) per value, but h5py reads it as {dtype} "
                f"({dtype.itemsize} bytes; HDF5 converts each value on read): zarr has no data "
                "type for the stored values")
    if precision != 8 * size or offset != 0:
        return (f"a {precision}-bit number at bit offset {offset} in {size} byte(s) (h5py reads "
                f"it as {dtype}, HDF5 converting each value): zarr has no such data type")
    if tid.get_order() not in (h5py.h5t.ORDER_LE, h5py.h5t.ORDER_BE, h5py.h5t.ORDER_NONE):
        return "byte order is neither little- nor big-endian"
    return None


def _fill_value(ds: h5py.Dataset, dtype: np.dtype, stored: bytes | None = None):
    """The dataset's fill value as h5py reads it (`ds.fillvalue`), as `dtype`; `stored`:
    its bytes from the header (b"": none defined, zeros), None to ask h5py."""
    if stored is not None and len(stored) in (0, ds.dtype.itemsize) and ds.dtype.kind in "iuf" \
            and ds.dtype.metadata is None:
        fv = np.frombuffer(stored, ds.dtype)[0] if stored else None
    else:
        try:
            fv = ds.fillvalue
        except Exception:
            fv = None
    if fv is None:
        return np.zeros((), dtype=dtype)[()]
    return np.asarray(fv).astype(dtype)[()]
