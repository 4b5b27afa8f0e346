"""The materialize remedy: chunks no stored block fits exactly are decoded from their
source, cut to their cell, and encoded again with the array's own codecs, so the cube
stores them natively beside its references."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator

import numpy as np
import zarr
from zarr.core.buffer import cpu
from zarr.storage import MemoryStore

from ..formats import SourceReader
from ..model import ArrayPlan, Location, Plan, Problem, VirtualizeError
from .metadata import CHUNK_KEY_ENCODING, array_doc, data_type, fill_json


def chunk_key(index: tuple[int, ...]) -> str:
    return "c" if not index else "c/" + "/".join(str(i) for i in index)


def materialized_chunks(plan: Plan, a: ArrayPlan) -> Iterator[tuple[str, bytes]]:
    """(chunk key, encoded bytes) of every materialized chunk of `a`. A chunk equal to the
    fill value everywhere is not yielded: missing, it reads as the fill value."""
    by_source: dict[int, list] = defaultdict(list)
    for index, cell in a.materialize.items():
        by_source[cell.source].append((index, cell))
    encoder = _Encoder(a)
    for source, cells in by_source.items():
        path = plan.sources[source].path
        with SourceReader(path) as reader:
            for index, cell in cells:
                values = np.asarray(reader.read(cell.variable, cell.region))
                data = encoder.encode(index, values, path)
                if data is not None:
                    yield chunk_key(index), data


class _Encoder:
    def __init__(self, a: ArrayPlan):
        self.a = a
        self.doc = dict(array_doc(a), data_type=data_type(a.dtype),
                        fill_value=fill_json(a.fill_value, a.dtype))

    def encode(self, index, values: np.ndarray, path: str) -> bytes | None:
        a = self.a
        return encode_chunk(self.doc, a.chunk_shape(index), values,
                            Location(path, a.name, None, tuple(index)),
                            a.fill_value if a.fill_value is not None else 0,
                            a.dtype.newbyteorder("="))


def encode_chunk(doc: dict, shape, values: np.ndarray, where: Location, fill=None,
                 dtype=None) -> bytes:
    """One chunk of `shape` of the array whose zarr.json is `doc`, holding `values` from its
    start (a source's region with fewer axes than the chunk: its last ones; the rest, past
    the array's end, `fill`: by default the array's fill value), encoded with the array's
    codecs; refused (`materialize-inexact`, at `where`) unless it decodes back identical."""
    shape = tuple(int(n) for n in shape)
    doc = dict(doc, shape=list(shape), chunk_key_encoding=CHUNK_KEY_ENCODING,
               chunk_grid={"name": "regular", "configuration": {"chunk_shape": list(shape)}})
    store_dict = {"zarr.json": cpu.Buffer.from_bytes(json.dumps(doc).encode())}
    arr = zarr.open_array(MemoryStore(store_dict), mode="r+",
                          config={"write_empty_chunks": True})
    if fill is None:
        fill = arr.fill_value if arr.fill_value is not None else 0
    chunk = np.full(shape, fill, dtype=dtype if dtype is not None else arr.dtype)
    values = values.reshape((1,) * (len(shape) - values.ndim) + values.shape)
    chunk[tuple(slice(0, n) for n in values.shape)] = values
    arr[...] = chunk
    data = store_dict[chunk_key((0,) * len(shape))].to_bytes()
    if not _identical(arr[...], chunk):
        raise VirtualizeError([Problem(where, "materialize-inexact",
                                       "encoding this chunk again with the array's codecs "
                                       "does not give back the same values")])
    return data


def _identical(x: np.ndarray, y: np.ndarray) -> bool:
    x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)
    if x.dtype.kind in "fc":
        return bool(np.array_equal(x.view(f"u{x.dtype.itemsize}"), y.view(f"u{y.dtype.itemsize}")))
    return bool(np.array_equal(x, y))
