"""Reads that cost what their data costs: zarr arrays and groups whose absent chunks are
filled in one pass, only the chunks that exist going through zarr's codec pipeline.

zarr-python reads a selection chunk by chunk: a projection, a key, a store request and
a fill (or a decode) for every chunk it touches, present or not, about 0.1 ms each. A
GRIB cube of 372 messages in a (124, 124, 92, 7, 12) array has 1.4 million chunk cells
of which 372 exist: read whole, zarr spends minutes asking for chunks that are not
there. Every store virtualize's readers return can say which chunks of an array exist
(`chunks_present`), from the tables it holds (a cube's manifest, a parquet set's
records, a reference set's keys, an Icechunk snapshot's chunk coordinates): one
vectorised answer per selection, the same checks (each block of manifest rows against
the recorded sources) made as when the chunks were asked for one by one.

`Array` (zarr's `AsyncArray` with one method more) asks its store that once per
selection, fills the output with the array's fill value, and hands zarr's own
`_get_selection` (its batched, concurrent pipeline: the codecs, the store's reads, the
scatter into the output) only the chunks that exist, each projected by zarr's own
indexer. A selection touching fewer than `SPARSE_MIN` chunks, whose chunks all exist,
of a store that cannot say, or of a kind zarr's dimension-wise indexers do not give
(`vindex`), is read by zarr as it is. `Group` hands out such arrays (and groups);
`open_group` opens a store's root as one: `virtualize.open` and the xarray engine both
read through it.

The store protocol: `async chunks_present(array, axes, metadata) -> ndarray[bool] | None`,
where `array` is the array's path in the store, `axes` are, per dimension, the ascending
chunk indices a selection touches and `metadata` the array's zarr metadata (its chunk key
encoding); the answer is a boolean array over their outer product (`present[i, j, ...]`:
chunk (axes[0][i], axes[1][j], ...) exists), or None when the store cannot say cheaply.
A chunk said to exist that does not is read as zarr reads it (the fill value); a chunk
said to be absent is never read: a store answers False only for chunks its `get` would
answer None.
"""

from __future__ import annotations

import copy

import numpy as np
import zarr
from zarr.abc.store import Store
from zarr.core.array import AsyncArray
from zarr.core.buffer import default_buffer_prototype
from zarr.core.group import AsyncGroup
from zarr.core.indexing import BasicIndexer, BlockIndexer, OrthogonalIndexer

# A selection touching fewer chunks is read by zarr as it is (the store is asked nothing
# more): below this the per-chunk cost is a few milliseconds at most.
SPARSE_MIN = 64
# Chunks asked about at once: the first axis of a larger selection is asked in slabs, so
# the presence tables a read builds stay small whatever the selection's size.
SLAB_CHUNKS = 1 << 20


class Array(AsyncArray):
    """A zarr `AsyncArray` whose reads fill absent chunks at once (the module's account)."""

    async def _get_selection(self, indexer, *, prototype, out=None, fields=None):
        present = None
        if not fields and self.config.read_missing_chunks:  # (xarray passes fields=[])
            present = await self._present_chunks(indexer)
        if present is None:  # zarr's own way: every chunk asked for
            return await super()._get_selection(indexer, prototype=prototype, out=out,
                                                fields=fields)
        if out is None:
            out = prototype.nd_buffer.empty(shape=indexer.shape,
                                            dtype=self.metadata.dtype.to_native_dtype(),
                                            order=self.config.order)
        out.fill(self.metadata.fill_value)
        return await super()._get_selection(_Only(indexer, present), prototype=prototype,
                                            out=out)

    # zarr's asynchronous reads (xarray's `load_async`) call its module function, not the
    # method above: the same two selections routed through it
    async def getitem(self, selection, *, prototype=None):
        return await self._get_selection(
            BasicIndexer(selection, self.shape, self._chunk_grid),
            prototype=prototype or default_buffer_prototype())

    async def get_orthogonal_selection(self, selection, *, out=None, fields=None,
                                       prototype=None):
        return await self._get_selection(
            OrthogonalIndexer(selection, self.shape, self._chunk_grid), out=out,
            fields=fields, prototype=prototype or default_buffer_prototype())

    async def _present_chunks(self, indexer) -> list | None:
        """zarr's projections of the chunks of the selection that exist, or None: read it
        zarr's way (too few chunks, all of them there, or a store that cannot say)."""
        ask = getattr(self.store_path.store, "chunks_present", None)
        if ask is None or type(indexer) not in (BasicIndexer, OrthogonalIndexer, BlockIndexer):
            return None
        per_dim = [list(d) for d in indexer.dim_indexers]
        touched = int(np.prod([len(p) for p in per_dim], dtype=np.int64))
        if touched < SPARSE_MIN:
            return None
        axes = [np.fromiter((p.dim_chunk_ix for p in ps), dtype=np.int64, count=len(ps))
                for ps in per_dim]
        if any(len(a) > 1 and np.any(np.diff(a) <= 0) for a in axes):
            return None  # (zarr's indexers touch chunks in ascending order)
        found = []
        for lead, part in _slabs(axes):
            present = await ask(self.store_path.path, part, self.metadata)
            if present is None or present.shape != tuple(len(a) for a in part):
                return None
            where = np.nonzero(present)
            if lead:
                where = (where[0] + lead,) + where[1:]
            found.append(np.stack(where, axis=1))
        positions = np.concatenate(found)
        if len(positions) == touched:
            return None  # every chunk is there: nothing to skip
        # each present chunk projected by zarr's own indexer, narrowed to that chunk
        one = copy.copy(indexer)
        projections = []
        for pos in positions.tolist():
            object.__setattr__(one, "dim_indexers", [[per_dim[d][i]] for d, i in enumerate(pos)])
            projections.extend(one)
        return projections


class _Only:
    """An indexer of zarr's (shape, drop axes) yielding only the given chunk projections."""

    def __init__(self, indexer, projections: list):
        self.shape = indexer.shape
        self.drop_axes = indexer.drop_axes
        self._projections = projections

    def __iter__(self):
        return iter(self._projections)


def _slabs(axes: list[np.ndarray]):
    """(offset along the first axis, axes) of parts of the outer product of `axes` of at
    most about SLAB_CHUNKS chunks each, cut along the first axis."""
    if not axes:
        yield 0, axes
        return
    rest = int(np.prod([len(a) for a in axes[1:]], dtype=np.int64))
    step = max(1, SLAB_CHUNKS // max(rest, 1))
    for i in range(0, len(axes[0]), step):
        yield i, [axes[0][i:i + step], *axes[1:]]


class Group(AsyncGroup):
    """A zarr `AsyncGroup` whose members are `Array`s and `Group`s."""

    def _getitem_consolidated(self, store_path, key, prefix):
        return _ours(super()._getitem_consolidated(store_path, key, prefix))

    async def getitem(self, key):
        return _ours(await super().getitem(key))


def _ours(node):
    if isinstance(node, AsyncGroup) and not isinstance(node, Group):
        return Group(metadata=node.metadata, store_path=node.store_path)
    if isinstance(node, AsyncArray) and not isinstance(node, Array) and \
            node.metadata.zarr_format == 3:
        return Array(metadata=node.metadata, store_path=node.store_path, config=node.config)
    return node


def open_group(store: Store) -> zarr.Group:
    """The root group of `store` (zarr format 3, read-only) handing out `Array`s."""
    root = zarr.open_group(store, mode="r", zarr_format=3)
    return zarr.Group(_ours(root._async_group))


def present_in_table(axes: list[np.ndarray], shape: tuple[int, ...], rows_present
                     ) -> np.ndarray:
    """`chunks_present`'s answer from a table of rows in C order over the grid `shape` (a
    cube's manifest, a parquet set's records): `rows_present(flat)` says which of the
    ascending flat indices `flat` hold a chunk; chunks beyond `shape` hold none."""
    out = np.zeros(tuple(len(a) for a in axes), dtype=bool)
    inside = [a < n for a, n in zip(axes, shape)]
    local = [a[ok] for a, ok in zip(axes, inside)]
    if out.size == 0 or any(not len(a) for a in local):
        return out
    flat = np.ravel_multi_index(np.ix_(*local), shape).ravel()
    out[np.ix_(*inside)] = rows_present(flat).reshape(tuple(len(a) for a in local))
    return out


def blocks(flat: np.ndarray, size: int):
    """(start, stop, block) of the runs of ascending flat indices `flat` falling in one
    block of `size` rows (block k: rows k*size .. (k+1)*size - 1)."""
    if not len(flat):
        return
    first, last = int(flat[0]) // size, int(flat[-1]) // size
    bounds = np.searchsorted(flat, np.arange(first, last + 2) * size).tolist()
    for k, (s, e) in enumerate(zip(bounds, bounds[1:])):
        if e > s:
            yield s, e, first + k


def present_among(coords: np.ndarray, axes: list[np.ndarray]) -> np.ndarray:
    """`chunks_present`'s answer from the coordinates of the chunks that exist (an
    (n, ndim) integer array): which of the outer product of `axes` they are."""
    present = np.zeros(tuple(len(a) for a in axes), dtype=bool)
    if not len(coords) or present.size == 0:
        return present
    ok = np.ones(len(coords), dtype=bool)
    where = []
    for d, a in enumerate(axes):
        i = np.searchsorted(a, coords[:, d])
        ok &= i < len(a)
        i = np.minimum(i, len(a) - 1)
        ok &= a[i] == coords[:, d]
        where.append(i)
    present[tuple(i[ok] for i in where)] = True
    return present


def coordinates(keys, ndim: int, decode) -> np.ndarray:
    """The chunk coordinates of an array's chunk keys (`decode`: its chunk key encoding's
    `decode_chunk_key`); keys that are not chunk keys of an `ndim`-dimensional array are
    left out. O(the chunks that exist), never O(the grid)."""
    out = []
    for key in keys:
        try:
            c = decode(key)
        except (ValueError, TypeError):
            continue
        if len(c) == ndim:
            out.append(c)
    return np.array(out, dtype=np.int64).reshape(len(out), ndim)
