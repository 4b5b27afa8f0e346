"""Sparse reads (outputs/sparse.py): an array whose chunks are mostly absent reads, through
`virtualize.open` and the xarray engine, exactly as zarr's own chunk-by-chunk read of the
same store and as h5py reads the source, for every output kind; absent chunks are never
asked for."""

from __future__ import annotations

import asyncio
import importlib.util

import h5py
import numpy as np
import pytest
import zarr

import virtualize
from virtualize.open import open_store
from virtualize.outputs.base import rectilinear_enabled

# HDF5 leaves the chunks never written unallocated: they read as the fill value and are
# absent from the cube. 15 x 10 chunks, 7 of them written (one partial along the edge).
SHAPE, CHUNKS, WRITTEN = (30, 19, 8), (2, 2, 8), [(0, 0), (3, 4), (7, 9), (14, 0), (14, 9),
                                                   (5, 5), (6, 5)]
KINDS = {"cube": "s.zarr", "kerchunk": "s.json", "parquet": "s.parq", "icechunk": "s.icechunk"}
NEEDS = {"parquet": "pyarrow", "icechunk": "icechunk"}

SELECTIONS = [
    ("whole", lambda a: a[...]),
    ("slices with steps", lambda a: a[1:29:3, 2:19:2, 1:7]),
    ("an index", lambda a: a[:, 9]),
    ("orthogonal lists", lambda a: a.oindex[[0, 1, 7, 14, 28, 29], :, [0, 5]]),
    ("a mask", lambda a: a.oindex[np.arange(SHAPE[0]) % 3 != 1, 1:, :]),
    ("blocks", lambda a: a.blocks[2:15, :]),
    ("coordinates", lambda a: a.vindex[[0, 7, 14, 29], [0, 9, 18, 18], [0, 1, 2, 3]]),
]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("sparse")
    src = d / "s.h5"
    rng = np.random.default_rng(7)
    with h5py.File(src, "w") as f:
        ds = f.create_dataset("t", shape=SHAPE, chunks=CHUNKS, dtype="f4", fillvalue=-9.5,
                              compression="gzip")
        for i, j in WRITTEN:
            block = ds[2 * i:2 * i + 2, 2 * j:2 * j + 2]
            ds[2 * i:2 * i + 2, 2 * j:2 * j + 2] = rng.random(block.shape, dtype="f4")
        expected = ds[...]
    made = {}
    for kind, name in KINDS.items():
        if kind in NEEDS and importlib.util.find_spec(NEEDS[kind]) is None:
            continue
        virtualize.virtualize([src], d / name)
        made[kind] = d / name
    return made, expected


def _plain(path) -> zarr.Array:
    """The array as zarr-python reads the same store: every chunk asked for."""
    with rectilinear_enabled(codecs=False):
        g = zarr.open_group(open_store(path), mode="r", zarr_format=3)
    a = g["t"]
    assert type(a._async_array) is zarr.AsyncArray  # (zarr's own, not the sparse one)
    return a


@pytest.mark.parametrize("kind", list(KINDS))
def test_sparse_read_equals_zarrs_and_h5pys(outputs, kind):
    made, expected = outputs
    if kind not in made:
        pytest.skip(f"{NEEDS[kind]} is not installed")
    a = virtualize.open(made[kind])["t"]
    plain = _plain(made[kind])
    assert not np.array_equal(expected, np.full(SHAPE, -9.5, "f4"))
    np.testing.assert_array_equal(a[...], expected)
    for what, select in SELECTIONS:
        got, want = select(a), select(plain)
        assert got.dtype == want.dtype and got.shape == want.shape, what
        assert got.tobytes() == want.tobytes(), what  # bit for bit
        assert got.tobytes() == select(zarr.array(expected, chunks=CHUNKS)).tobytes(), what


@pytest.mark.parametrize("kind", ["cube", "kerchunk"])
def test_absent_chunks_are_never_asked_for(outputs, kind, monkeypatch):
    """A whole read asks the store for the written chunks only (zarr asks for all 150)."""
    made, expected = outputs
    a = virtualize.open(made[kind])["t"]
    store = a.store_path.store
    asked = []
    get = type(store).get

    async def counting(self, key, *args, **kw):
        if key.startswith("t/c"):
            asked.append(key)
        return await get(self, key, *args, **kw)

    monkeypatch.setattr(type(store), "get", counting)
    np.testing.assert_array_equal(a[...], expected)
    assert sorted(asked) == sorted(f"t/c/{i}/{j}/0" for i, j in WRITTEN)


def test_xarray_engine_reads_sparse_arrays(outputs):
    xr = pytest.importorskip("xarray")
    made, expected = outputs
    for kind, path in made.items():
        t = xr.open_dataset(path, engine="virtualize")["t"]
        assert t.values.tobytes() == expected.tobytes(), kind
        part = t[10:30, [0, 9, 18]].values  # (xarray's orthogonal indexing)
        assert part.tobytes() == expected[10:30][:, [0, 9, 18]].tobytes(), kind
        lazy = xr.open_dataset(path, engine="virtualize")["t"][5:20]
        loaded = asyncio.run(lazy.load_async())  # (zarr's asynchronous reads)
        assert loaded.values.tobytes() == expected[5:20].tobytes(), kind
