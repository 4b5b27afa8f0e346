"""Stored blocks decoded through a variable's own zarr codecs at scan time, for the values a
scan takes from the format's library in place of references (inlined when a variable
cannot be referenced: docs/robustness.md, "Values read in place of references").

A library may return values for a damaged block that are no reading of it: HDF5's lzf
filter decodes a damaged chunk to fewer bytes than a chunk and HDF5 leaves the rest of
the chunk's buffer uninitialised, so h5py's read changes from run to run. Such values must
not be stored in a cube. The blocks a variable's codecs decode (those it would reference)
are decoded here, as a cube's reader would, and compared with the library's read: a block
that does not decode, or decodes to other values, is a located problem, and the library's
values are not used.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..model import MATERIALIZED, FileInventory, Location, Problem, Variable

# at most this many decoded bytes of blocks are checked per variable (inlined variables
# are small: `INLINE_VALUES_LIMIT`)
CHECK_LIMIT = 64 * 2**20


def filtered(v: Variable) -> bool:
    """Whether `v`'s codecs do more than lay out bytes (a filter or compressor whose output
    size follows from its input, not from the chunk)."""
    return any(c.get("name") not in ("bytes", "transpose") for c in v.codecs)


def checked_values(inv: FileInventory, v: Variable, values: np.ndarray) -> Problem | None:
    """None when every referenced block of `v` decodes through its codecs to the values the
    library read (`values`, at `v`'s shape); else the problem of the first that does not."""
    if v.blocks is None or not filtered(v) or not v.shape:
        return None
    refs, bs = v.blocks.refs, v.blocks.block_shape
    stored = (refs["length"] > 0) & (refs["path"] != MATERIALIZED)
    if not stored.any() or math.prod(bs) * v.dtype.itemsize * int(stored.sum()) > CHECK_LIMIT:
        return None
    decode = _decoder(v)
    if decode is None:
        return None
    from ..storage import read_range

    paths = [s.path for s in inv.sources()]
    for index in itertools.product(*(range(n) for n in refs.shape)):
        if not stored[index]:
            continue
        rec = refs[index]
        start = [i * b for i, b in zip(index, bs)]
        shape = bs if v.blocks.padded else tuple(min(b, n - s) for b, n, s in
                                                 zip(bs, v.shape, start))
        where = tuple(slice(s, min(s + b, n)) for s, b, n in zip(start, bs, v.shape))
        data = read_range(paths[int(rec["path"])], int(rec["offset"]), int(rec["length"]))
        try:
            got = decode(data, shape)
        except Exception as e:  # noqa: BLE001 - any codec's failure
            return Problem(Location(inv.path, v.name, None, index), "corrupt", (
                f"block {index} ({int(rec['length'])} bytes at byte offset {int(rec['offset'])}) "
                f"does not decode through its codecs ({type(e).__name__}: {e}), so the "
                f"library's read of it is no value to store in the cube; --drop {v.name} "
                "virtualizes the rest"))
        got = got[tuple(slice(0, w.stop - w.start) for w in where)]
        want = np.asarray(values)[where]
        if got.tobytes() != np.ascontiguousarray(want, dtype=got.dtype).tobytes():
            return Problem(Location(inv.path, v.name, None, index), "decode-mismatch", (
                f"block {index} ({int(rec['length'])} bytes at byte offset {int(rec['offset'])}) "
                "decodes through its codecs to other values than the library reads there: "
                f"neither is stored in the cube; --drop {v.name} virtualizes the rest"))
    return None


def _decoder(v: Variable):
    """decode(bytes, block shape) -> values, by zarr through `v`'s codecs; None when zarr
    has no data type for `v`'s."""
    from zarr.core.array_spec import ArrayConfig, ArraySpec
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.buffer.cpu import Buffer
    from zarr.core.dtype import parse_dtype
    from zarr.core.sync import sync
    from zarr.registry import get_pipeline_class

    try:
        dtype = parse_dtype(v.dtype.newbyteorder("="), zarr_format=3)
        pipeline = get_pipeline_class().from_codecs(_codecs(v.codecs))
    except Exception:  # noqa: BLE001 - a type or codec zarr does not know: not checked
        return None

    def decode(data: bytes, shape: tuple[int, ...]) -> np.ndarray:
        spec = ArraySpec(shape=shape, dtype=dtype, fill_value=dtype.default_scalar(),
                         config=ArrayConfig.from_dict({}),
                         prototype=default_buffer_prototype())
        (out,) = sync(pipeline.decode([(Buffer.from_bytes(data), spec)]))
        if out is None:
            raise ValueError("no values")
        return np.asarray(out.as_ndarray_like()).reshape(shape)

    return decode


def _codecs(dicts: list[dict]):
    from zarr.registry import get_codec_class

    out = []
    for d in dicts:
        cls = get_codec_class(d["name"])
        out.append(cls.from_dict(dict(d)))
    return out
