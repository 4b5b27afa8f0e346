"""Chunk-index readers of HDF5 datasets: HDF5's own `chunk_iter` walk, checked, and the
direct readers of a local file's v1 B-tree, fixed array, extensible array, v2 B-tree and
implicit index (one `np.frombuffer` per node, array block or page).
"""

from __future__ import annotations

import functools
import math
import os
import struct
from array import array

import h5py
import numpy as np

from ...model import MATERIALIZED
from .header import UNDEFINED as UNDEFINED_ADDRESS
from .header import Unexpected as _Unexpected
from .header import layout_message as _layout_message
from .header import (
    v2_records,
)

# Chunks per dataset beyond which no block table is built (dense references, 20 bytes each:
# 2**27 chunks are 2.5 GiB); a corrupt dataspace would otherwise ask for petabytes.
MAX_BLOCKS = 1 << 27


def _check_listed(offsets, chunks: tuple[int, ...], ordered: bool) -> None:
    """The chunks `chunk_iter` lists must be at whole chunks, each listed once, and
    (`ordered`) in increasing order of their coordinates: else keys of the index are
    damaged (two keys for one chunk, a key out of order) and HDF5's lookups, which search
    the index by key, read other chunks for them than the ones listed (`_Corrupt`)."""
    if not len(offsets):
        return
    c = np.asarray(chunks, dtype=np.int64)
    off = (offsets < 0).any(axis=1) | (offsets % c).any(axis=1)
    if off.any():
        i = int(np.flatnonzero(off)[0])
        raise _Corrupt(f"HDF5 lists a chunk at element offsets {tuple(int(x) for x in offsets[i])}, "
                       f"not at a whole chunk of {tuple(chunks)}")
    scaled = offsets // c
    if not ordered:
        scaled = scaled[np.lexsort(scaled.T[::-1])]
    bad = _first_not_increasing(scaled)
    if bad >= 0:
        a, b = (tuple(int(x) for x in scaled[j] * c) for j in (bad, bad + 1))
        block = tuple(int(x) for x in scaled[bad + 1])
        if a == b:
            raise _Corrupt(f"HDF5's index lists chunk {a} (element offsets) twice: two keys "
                           "for one chunk, HDF5 reads one of the chunks they point to for both",
                           block)
        raise _Corrupt(f"HDF5's index lists chunk {b} after {a}: its keys are out of order, so "
                       "HDF5's lookups look for chunks in the wrong place", block)


def _walk_chunk_index(dsid, ndim: int):
    """One `chunk_iter` pass over a dataset's chunk index, into flat typed buffers (no
    per-chunk Python objects kept): chunk element offsets (n, ndim), byte offsets, stored
    sizes, filter masks."""
    co, fm, bo, sz = array("q"), array("I"), array("Q"), array("Q")
    co_ext, fm_app, bo_app, sz_app = co.extend, fm.append, bo.append, sz.append

    def visit(info) -> None:
        c, m, o, s = info
        co_ext(c)
        fm_app(m)
        bo_app(o)
        sz_app(s)

    dsid.chunk_iter(visit)
    n = len(bo)
    return (np.frombuffer(co, dtype=np.int64).reshape(n, ndim), np.frombuffer(bo, dtype=np.uint64),
            np.frombuffer(sz, dtype=np.uint64), np.frombuffer(fm, dtype=np.uint32))


@functools.cache
def _chunk_iter_swizzles() -> bool | None:
    """Whether this HDF5's `chunk_iter` (and `get_chunk_info`, `get_chunk_info_by_coord`)
    misplace the chunks of an extensible array index whose unlimited axis is not the
    first. HDF5 numbers such a chunk with the unlimited axis moved first (`_earray_scaled`)
    but lists the array's elements giving the i-th the coordinates of the i-th grid cell
    counted row-major in the dataset's own axis order (H5D__earray_idx_iterate_cb, HDF5
    2.0.0 and before); reading data is right. Found once, on a file in memory: chunk (1, 0)
    of a (2, 1) dataset unlimited along axis 1 is element 1, listed at (0, 1) (True) or at
    (1, 0) (False); None: listed otherwise."""
    import threading

    name = f"virtualize-probe-{os.getpid()}-{threading.get_ident()}.h5"
    try:
        with h5py.File(name, "w", driver="core", backing_store=False, libver="latest") as f:
            d = f.create_dataset("p", shape=(2, 1), maxshape=(2, None), chunks=(1, 1), dtype="u1")
            d[1, 0] = 1
            got: list = []
            d.id.chunk_iter(lambda info: got.append(tuple(info.chunk_offset)))
    except Exception:
        return None
    return {((0, 1),): True, ((1, 0),): False}.get(tuple(got))


def _chunk_iter_renumbered(offsets, chunks: tuple[int, ...], k: int, grid: tuple[int, ...]):
    """The true offsets of the chunks `chunk_iter` lists for an extensible array whose
    unlimited axis `k` is not the first, where HDF5 misplaces them (`_chunk_iter_swizzles`):
    the elements are listed in their order, element i at the i-th grid cell counted
    row-major with axis k unbounded (the axes before it 0), so i is read back from those
    coordinates and placed as HDF5 numbers it (`_earray_scaled`)."""
    c = np.asarray(chunks, dtype=np.int64)
    scaled = offsets // c
    later = grid[k + 1:]
    if (offsets % c).any() or (scaled < 0).any() or (scaled[:, :k] != 0).any() \
            or (scaled[:, k + 1:] >= np.asarray(later, dtype=np.int64)).any():
        raise _Unexpected("chunk_iter's coordinates are not an extensible array's elements")
    index = scaled[:, k] * math.prod(later)
    if later:
        index = index + np.ravel_multi_index(tuple(scaled[:, k + 1:].T), later)
    if (np.diff(index) <= 0).any():
        raise _Unexpected("chunk_iter's chunks are not in an extensible array's order")
    return _earray_scaled(index, k, grid) * c


# -- the v1 B-tree chunk index, read directly ----------------------------------------------

def _native_chunk_index(pread, file_size: int, dsid, chunks: tuple[int, ...], num_chunks,
                        body: bytes | None = None):
    """The chunk index of a dataset whose chunks HDF5 indexes with a version 1 B-tree
    (layout message version 3: every file written for any library version, netCDF-C's
    default), a fixed array, an extensible array, a v2 B-tree or an implicit index (layout
    version 4 or 5, libver "latest": a fixed extent, one unlimited axis, two or more, no
    filters and space allocated early), read from the file's bytes with one `np.frombuffer`
    per B-tree node or array block or page instead of one Python call per chunk: the same
    four arrays as `_walk_chunk_index`, in the same order (an extensible array's chunks at
    their places where chunk_iter misplaces them: `_chunk_iter_swizzles`). None for any
    other index (and layout); `_Unexpected` for anything this reader
    does not expect (signatures, node types, levels, entry counts, sizes, addresses); the
    caller then uses `chunk_iter`. `num_chunks()`, HDF5's own count of the index's chunks
    (the caller has HDF5 walk the index first: that loads, and checks the checksums of,
    every structure read here), must equal what was read.

    `pread(n, offset)`: n bytes at offset (fewer at the end of the file). `body`: the
    layout message's body when the caller has it (the header reader read it: a file of
    8-byte addresses without a user block), else read here."""
    ndim = len(chunks)
    if body is None:
        fcpl = h5py.h5i.get_file_id(dsid).get_create_plist()
        if fcpl.get_sizes() != (8, 8) or fcpl.get_userblock() != 0:
            return None
        # the object header's address (`h5o.get_info` would also size the whole index)
        objno = h5py.h5g.get_objinfo(dsid, b".").objno
        if objno[1] != 0:
            return None
        body = _layout_message(pread, int(objno[0]), file_size)
    if body is None or len(body) < 2 or body[1] != 2:
        return None  # not chunked (as HDF5 stores it)
    if body[0] == 3:
        got = _v1_btree(pread, file_size, body, ndim)
    elif body[0] in (4, 5):  # HDF5 2.0 writes version 5, laid out as 4 for these fields
        got = _fixed_array(pread, file_size, body, dsid, chunks)
    else:
        return None
    if got is None:
        return None
    offsets, addrs, sizes, masks = got[:4]
    if len(got) == 5 and got[4]:  # unfiltered v2 B-tree records: every chunk's bytes are one chunk
        sizes = np.full(len(addrs), math.prod(chunks) * dsid.get_type().get_size(), np.uint64)
    if len(addrs) <= 16:  # (a few chunks: the same checks in Python, cheaper than numpy's)
        bad = any(a == UNDEFINED_ADDRESS or a >= file_size for a in addrs.tolist()) or any(
            v < 0 or v % c for row in offsets.tolist() for v, c in zip(row, chunks))
    else:
        bad = (addrs == UNDEFINED_ADDRESS).any() or (addrs >= file_size).any() \
            or (offsets < 0).any() or (offsets % np.asarray(chunks, dtype=np.int64)).any()
    if bad:
        raise _Unexpected("a chunk's offset or address out of place")
    counted = num_chunks()
    if len(addrs) != counted:
        raise _Unexpected(f"{len(addrs)} chunks read, HDF5 counts {counted}")
    return offsets, addrs, sizes, masks


def _few_blocks(dtype: np.dtype, chunks, grid, pipeline, refs, got) -> list | None:
    """The scanner's `_blocks` for a few chunks (`got`: the index's four arrays) in Python,
    where every one is what `_blocks` takes without a question: inside the grid, stored
    with every filter (mask 0), each filter with its codec (`pipeline`: `_blocks`'),
    none of 0 bytes or (filters that keep the size) of a size other than a chunk's; `refs`
    filled, the filters' codecs returned. None for anything else (nothing done: `_blocks`
    decides). (Partial edge chunks left unfiltered: the caller's to tell first.)"""
    idx, offsets, sizes, masks = got
    if any(masks.tolist()) or any(codec is None for _c, _l, codec, _w in pipeline):
        return None
    rows = [tuple(v // c for v, c in zip(row, chunks)) for row in idx.tolist()]
    if not all(0 <= i < g for row in rows for i, g in zip(row, grid)):
        return None
    sizes = sizes.tolist()
    left = [code for code, *_rest in pipeline]
    full = math.prod(chunks) * dtype.itemsize
    exact = full + 4 * left.count(3) if set(left) <= {2, 3} else None
    if any(n == 0 or (exact is not None and n != exact) for n in sizes):
        return None
    for row, offset, n in zip(rows, offsets.tolist(), sizes):
        refs[row] = (0, offset, n)
    return [codec for _c, _l, codec, _w in pipeline]


def _masked_chunks(problem, name: str, view, flat, idx, masks, mask: int, full: int,
                   edges=None) -> None:
    """Chunks stored with a filter mask other than the dataset's usual one decode
    differently: they cannot be referenced. They are marked held (MATERIALIZED: no byte
    range; h5py, which honours the mask, reads their values) and refused as `filter-mask`
    problems (told to `problem`, the scanner's) whose remedy is to copy them
    (`--materialize`). `edges`: which of them are partial edge chunks a layout leaves
    unfiltered."""
    view["path"][flat] = MATERIALIZED
    view["offset"][flat] = 0
    view["length"][flat] = 0
    remedy = (f"materialize {len(flat)} block(s), {len(flat) * full} bytes decoded "
              "(--materialize)")
    for k, (b, m) in enumerate(list(zip(idx, masks))[:20]):
        how = ("this partial edge chunk is stored unfiltered (the dataset's layout leaves "
               "partial edge chunks unfiltered)" if edges is not None and edges[k] else
               f"this chunk was stored with filter mask {int(m):#x}")
        problem(name, "filter-mask",
                f"{how} where the others have filter mask {mask:#x} (part of the "
                "filter pipeline skipped), so it decodes differently from them",
                block=tuple(int(i) for i in b), remedy=remedy)
    if len(flat) > 20:
        problem(name, "filter-mask", f"... and {len(flat) - 20} more chunks with a "
                "different filter mask", remedy=remedy)


def _no_chunks(ndim: int):
    return (np.zeros((0, ndim), np.int64), np.zeros(0, np.uint64), np.zeros(0, np.uint64),
            np.zeros(0, np.uint32))


def _v1_btree(pread, file_size: int, body: bytes, ndim: int):
    """Layout message version 3: the chunks' v1 B-tree, walked a level at a time. Its keys
    are checked as HDF5's lookups use them (H5B_find, H5D__btree_cmp3): each node's keys
    strictly increasing, a child's within its parent's keys around it, and every chunk's
    key ending in a datatype offset of 0; HDF5 reads a chunk whose key breaks these at
    another place or not at all (the fill value) while its walk of the tree, `chunk_iter`,
    lists it: `_Corrupt`, the dataset is refused.

    Per node only its header is looked at in Python; a level's entries are then one
    `np.frombuffer` and every check one pass over them (`_v1_level`)."""
    dimensionality = body[2]
    if dimensionality != ndim + 1 or len(body) < 11 + 4 * dimensionality:
        raise _Unexpected(f"layout message of {dimensionality} dimensions for rank {ndim}")
    root = int.from_bytes(body[3:11], "little")
    if root == UNDEFINED_ADDRESS:
        return _no_chunks(ndim)
    entry = np.dtype([("size", "<u4"), ("mask", "<u4"), ("offset", "<u8", (dimensionality,)),
                      ("child", "<u8")])
    key_size = 8 + 8 * dimensionality
    pad = bytes(8)  # a node's last key, made a whole entry (its child: none)
    # a level's nodes: their addresses, and the parent's keys on their left and right
    nodes: list[int] = [root]
    lo = hi = None
    seams = np.zeros(0, np.int64)
    level, leaves = None, None
    seen = 0
    while nodes:
        blobs: list = []
        used: list[int] = []
        try:
            for node in nodes:
                seen += 1
                if seen > MAX_BLOCKS or not 0 < node < file_size:
                    raise _Unexpected(f"B-tree node address {node}")
                head = pread(24 + 65 * key_size + 64 * 8, node)
                if len(head) < 24 or head[:4] != b"TREE" or head[4] != 1:
                    raise _Unexpected(f"no chunk B-tree node at {node}")
                node_level, n = head[5], int.from_bytes(head[6:8], "little")
                if level is None:
                    level = node_level
                if node_level != level:
                    raise _Unexpected(f"B-tree node at {node} is at level {node_level}, "
                                      f"{level} expected")
                need = 24 + (n + 1) * key_size + n * 8
                if len(head) < need:
                    head = pread(need, node)
                    if len(head) < need:
                        raise _Unexpected(f"B-tree node at {node} ends past the end of the file")
                blobs += (head[24:need], pad)
                used.append(n)
        except _Unexpected:  # the nodes before it are checked first, as they were read
            if used:
                _v1_level(blobs, used, nodes, lo, hi, entry, body, ndim)
            raise
        if level == 0 and lo is None and used[0] <= 64:  # one leaf, the root: most datasets
            return _v1_leaf(blobs[0], used[0], nodes[0], body, ndim)
        entries, last = _v1_level(blobs, used, nodes, lo, hi, entry, body, ndim)
        inner = np.ones(len(entries), bool)
        inner[last] = False  # each node's entries, without its last key
        if level:
            at = np.flatnonzero(inner)
            keys = entries["offset"]
            nodes, lo, hi = entries["child"][at].tolist(), keys[at], keys[at + 1]
            level -= 1
        else:
            leaves = entries[inner]
            # where one leaf's chunks end and the next's begin (within a leaf the keys
            # are checked increasing)
            seams = np.cumsum(np.asarray(used[:-1], dtype=np.int64)) - 1
            nodes = []
    e = leaves if leaves is not None else np.zeros(0, entry)
    keys = e["offset"]
    typed = np.flatnonzero(keys[:, ndim] != 0)
    if typed.size:
        i = int(typed[0])
        raise _Corrupt(f"the key of chunk {_shown_key(keys[i], ndim)} has a datatype offset of "
                       f"{int(keys[i, ndim])}, not 0: HDF5 finds no chunk there (it reads the "
                       "fill value) while its index lists one", _scaled_key(keys[i], body, ndim))
    # every chunk's key after the one before it, across leaves too: the first that is not
    seams = seams[(seams >= 0) & (seams < len(keys) - 1)] if leaves is not None else seams[:0]
    wrong = seams[~_lex_less(keys[seams], keys[seams + 1])]
    bad = int(wrong[0]) if wrong.size else -1
    if bad >= 0:
        raise _Corrupt(_key_order(keys, bad, ndim), _scaled_key(keys[bad + 1], body, ndim))
    return (keys[:, :ndim].astype(np.int64), e["child"].astype(np.uint64),
            e["size"].astype(np.uint64), e["mask"].astype(np.uint32))


def _v1_leaf(blob, used: int, node: int, body: bytes, ndim: int):
    """A v1 B-tree that is one leaf (its root), read and checked as `_v1_btree` reads and
    checks a tree (the same results, the same refusals), in Python: for a few chunks
    numpy's cost per call is more than the work."""
    dimensionality = ndim + 1
    row = struct.Struct(f"<II{dimensionality}QQ")  # size, mask, the key's offsets, child
    rows = [row.unpack_from(blob, i * row.size) for i in range(used)]
    keys = [r[2:2 + dimensionality] for r in rows]
    keys.append(struct.unpack_from(f"<{dimensionality}Q", blob, used * row.size + 8))
    if any(not a < b for a, b in zip(keys, keys[1:])):
        _v1_node(node, np.array(keys, dtype=np.uint64), used, None, None, body, ndim)
    typed = next((k for k in keys[:used] if k[ndim] != 0), None)
    if typed is not None:
        raise _Corrupt(f"the key of chunk {_shown_key(typed, ndim)} has a datatype offset of "
                       f"{int(typed[ndim])}, not 0: HDF5 finds no chunk there (it reads the "
                       "fill value) while its index lists one", _scaled_key(typed, body, ndim))
    offsets = np.array([k[:ndim] for k in keys[:used]], dtype=np.uint64).reshape(used, ndim)
    return (offsets.astype(np.int64), np.array([r[-1] for r in rows], dtype=np.uint64),
            np.array([r[0] for r in rows], dtype=np.uint64),
            np.array([r[1] for r in rows], dtype=np.uint32))


def _v1_level(blobs: list, used: list[int], nodes: list[int], lo, hi, entry: np.dtype,
              body: bytes, ndim: int):
    """One level of a v1 B-tree: `blobs`, each node's keys and children (its last key
    padded to a whole entry), as one array of entries, and the position of each node's
    last key in it. Checked in one pass: each node's keys strictly increasing, and within
    its parent's keys around it (`lo`, `hi`: per node, None for the root); the first node
    that is not is refused as `_v1_node` says."""
    entries = np.frombuffer(b"".join(blobs), entry)
    counts = np.asarray(used, dtype=np.int64) + 1
    last = np.cumsum(counts) - 1
    first = last - counts + 1
    keys = entries["offset"]
    ordered = _sortable(keys)
    wrong = np.zeros(len(used), bool)
    if len(keys) > 1:
        # pairs of neighbouring keys in one node (not a node's last and the next's first)
        step = ordered[:-1] >= ordered[1:]
        step[last[:-1]] = False
        if step.any():
            wrong[np.searchsorted(last, np.flatnonzero(step))] = True
    if lo is not None:  # (lo, hi: the level's; `used`, the nodes read so far)
        lo, hi = lo[:len(used)], hi[:len(used)]
        wrong |= (ordered[first] < _sortable(lo)) | (_sortable(hi) < ordered[last])
    if wrong.any():
        k = int(np.flatnonzero(wrong)[0])
        _v1_node(nodes[k], keys[first[k]:last[k] + 1], used[k],
                 None if lo is None else lo[k], None if hi is None else hi[k], body, ndim)
    return entries, last


def _sortable(keys):
    """Rows of unsigned 64-bit keys as byte strings ordered as the rows are
    lexicographically (big-endian: one comparison a row)."""
    keys = np.ascontiguousarray(keys, dtype=">u8")
    return keys.view(f"S{8 * keys.shape[1]}").reshape(len(keys))


def _lex_less(a, b):
    """Per row, whether a's row is lexicographically less than b's (unsigned keys)."""
    return _sortable(a) < _sortable(b)


def _v1_node(node: int, keys, used: int, lo, hi, body: bytes, ndim: int) -> None:
    """The checks of one v1 B-tree node's keys, each with its own message (`_Corrupt`)."""
    bad = _first_not_increasing(keys)
    if bad >= 0:
        raise _Corrupt(f"B-tree node at byte offset {node}: {_key_order(keys, bad, ndim)}",
                       _scaled_key(keys[min(bad + 1, used - 1)], body, ndim))
    if lo is not None and not tuple(lo) <= tuple(keys[0]) or \
            hi is not None and not tuple(keys[used]) <= tuple(hi):
        raise _Corrupt(f"B-tree node at byte offset {node} holds keys "
                       f"{_shown_key(keys[0], ndim)} to {_shown_key(keys[used], ndim)}, "
                       f"outside its parent's {_shown_key(lo, ndim)} to "
                       f"{_shown_key(hi, ndim)}: HDF5 looks for its chunks elsewhere",
                       _scaled_key(keys[0], body, ndim) if used else None)


class _Corrupt(Exception):
    """A chunk index whose entries HDF5's reads would misplace (two keys for one chunk,
    keys out of order, ...): the dataset is refused (`corrupt`), not read by `chunk_iter`,
    which lists such chunks all the same. `block`: the chunk named (scaled coordinates)."""

    def __init__(self, message: str, block: tuple[int, ...] | None = None):
        super().__init__(message)
        self.block = block


def _first_not_increasing(rows) -> int:
    """The first i at which rows[i + 1] is not lexicographically greater than rows[i]
    (as HDF5 compares chunk coordinates), or -1."""
    if len(rows) < 2:
        return -1
    if len(rows) <= 64:  # a small index (most datasets): numpy's per-call cost is more
        t = rows.tolist()
        return next((i for i in range(len(t) - 1) if not t[i] < t[i + 1]), -1)
    a, b = rows[:-1], rows[1:]
    ne = a != b
    first = ne.argmax(axis=1)
    r = np.arange(len(a))
    bad = np.flatnonzero(~(ne.any(axis=1) & (b[r, first] > a[r, first])))
    return int(bad[0]) if bad.size else -1


def _shown_key(key, ndim: int) -> str:
    return "(none)" if key is None else "(" + ", ".join(str(int(x)) for x in key[:ndim]) + ")"


def _key_order(keys, i: int, ndim: int) -> str:
    """What is wrong where keys[i + 1] does not follow keys[i]."""
    a, b = keys[i], keys[i + 1]
    if (a == b).all() or (a[:ndim] == b[:ndim]).all():
        return (f"two keys for chunk {_shown_key(a, ndim)} (element offsets): HDF5 reads one "
                "of the chunks they point to for both")
    return (f"chunk key {_shown_key(b, ndim)} follows {_shown_key(a, ndim)}: the keys are out "
            "of order, so HDF5 looks for chunks in the wrong place")


def _scaled_key(key, body: bytes, ndim: int) -> tuple[int, ...] | None:
    """A v1 B-tree key's chunk (scaled coordinates), from the layout message's chunk
    dimensions (after the root address: 4 bytes each)."""
    dims = [int.from_bytes(body[11 + 4 * a:15 + 4 * a], "little") for a in range(ndim)]
    if not all(dims):
        return None
    return tuple(int(x) // d for x, d in zip(key[:ndim], dims))


def _implicit(addr: int, dsid, chunks: tuple[int, ...]):
    """Layout message version 4/5 with an implicit index (type 2: no filters, space
    allocated at creation): the chunks of the current extent, each at its row-major
    position in the grid of the maximum extent times one chunk's bytes from `addr`."""
    ndim = len(chunks)
    if addr == UNDEFINED_ADDRESS:
        return _no_chunks(ndim)
    space = dsid.get_space()
    shape = space.get_simple_extent_dims()
    maxshape = space.get_simple_extent_dims(maxdims=True)
    if any(m is None or m < 0 or m == h5py.h5s.UNLIMITED for m in maxshape):
        raise _Unexpected("implicit index with an unlimited axis")
    grid = tuple(-(-int(n) // c) for n, c in zip(shape, chunks))
    max_grid = tuple(-(-int(m) // c) for m, c in zip(maxshape, chunks))
    scaled = np.indices(grid, dtype=np.int64).reshape(ndim, -1)
    nbytes = math.prod(chunks) * dsid.get_type().get_size()
    index = np.ravel_multi_index(tuple(scaled), max_grid).astype(np.uint64)
    n = index.size
    return (scaled.T * np.asarray(chunks, dtype=np.int64), np.uint64(addr) + index * np.uint64(nbytes),
            np.full(n, nbytes, np.uint64), np.zeros(n, np.uint32))


def _v2_btree(pread, file_size: int, header: int, chunks: tuple[int, ...]):
    """Layout message version 4/5 with a v2 B-tree index (type 5): its header, then its
    nodes a level at a time; records (address, [size, filter mask,] scaled offsets) in the
    tree's order, by chunk coordinates."""
    ndim = len(chunks)
    widths = {}

    def record_of(tree_type, rec_size):
        filtered = tree_type == 11
        width = rec_size - 8 - 4 - 8 * ndim if filtered else 0
        if rec_size != (8 + width + 4 if filtered else 8) + 8 * ndim or \
                (filtered and not 1 <= width <= 8):
            raise _Unexpected("v2 B-tree header does not match the dataset")
        widths["w"] = width
        return np.dtype([("addr", "<u8"), ("filt", "u1", (width + 4,)), ("scaled", "<u8", (ndim,))]
                        if filtered else [("addr", "<u8"), ("scaled", "<u8", (ndim,))])

    tree_type, found = v2_records(pread, file_size, header, (10, 11), record_of, MAX_BLOCKS)
    if not found:
        return _no_chunks(ndim)
    filtered, width = tree_type == 11, widths["w"]
    e = np.concatenate(_in_order(found))
    if ndim:  # HDF5 searches the tree by key: they must increase in its order
        bad = _first_not_increasing(e["scaled"])
        if bad >= 0:
            a, b = (tuple(int(x) for x in e["scaled"][j]) for j in (bad, bad + 1))
            raise _Corrupt(f"the v2 B-tree holds two records for chunk {a} (scaled "
                           "coordinates): HDF5 reads one of the chunks they point to for both"
                           if a == b else f"the v2 B-tree's record for chunk {b} (scaled "
                           f"coordinates) follows the one for {a}: its records are out of "
                           "order, so HDF5 looks for chunks in the wrong place", b)
    if filtered:
        raw8 = np.zeros((len(e), 8), np.uint8)
        raw8[:, :width] = e["filt"][:, :width]
        sizes = raw8.view("<u8").reshape(-1).astype(np.uint64)
        masks = e["filt"][:, width:].copy().view("<u4").reshape(-1)
    else:
        sizes = np.zeros(len(e), np.uint64)  # filled in by the caller: one chunk's bytes
        masks = np.zeros(len(e), np.uint32)
    offsets = e["scaled"].astype(np.int64) * np.asarray(chunks, dtype=np.int64)
    return offsets, e["addr"].astype(np.uint64), sizes, masks.astype(np.uint32), not filtered


def _in_order(found: list) -> list:
    """The records of a v2 B-tree's nodes `found` a level at a time (`v2_records`: the
    root, then each level's nodes left to right, node i of a level having len(records) + 1
    children), in the tree's order: each child's records before its parent's record that
    follows it."""
    levels, i, width = [], 0, 1
    while i < len(found):
        levels.append(found[i:i + width])
        i += width
        width = sum(len(n) + 1 for n in levels[-1])
    if i != len(found):
        raise _Unexpected("v2 B-tree nodes do not form a tree")
    firsts = [np.concatenate([[0], np.cumsum([len(n) + 1 for n in level])]).tolist()
              for level in levels]
    out: list = []

    def visit(d: int, k: int) -> None:
        node = levels[d][k]
        if d == len(levels) - 1:
            out.append(node)
            return
        for j in range(len(node) + 1):
            visit(d + 1, firsts[d][k] + j)
            if j < len(node):
                out.append(node[j:j + 1])

    visit(0, 0)
    return out


def _fixed_array(pread, file_size: int, body: bytes, dsid, chunks: tuple[int, ...]):
    """Layout message version 4 with a fixed array index (type 3): its header, data
    block and pages. Element i is the chunk at row-major position i of the grid of the
    dataset's maximum extent; an undefined address is a chunk never written."""
    ndim = len(chunks)
    flags, dimensionality, width = body[2], body[3], body[4]
    pos = 5 + width * dimensionality
    if len(body) > pos and body[pos] == 5 and len(body) >= pos + 15:
        return _v2_btree(pread, file_size, int.from_bytes(body[pos + 7:pos + 15], "little"),
                         chunks)
    if len(body) > pos and body[pos] == 2 and len(body) >= pos + 9:
        return _implicit(int.from_bytes(body[pos + 1:pos + 9], "little"), dsid, chunks)
    if len(body) > pos and body[pos] == 4:
        return _extensible_array(pread, file_size, body, dsid, chunks)
    if len(body) > pos and body[pos] != 3:
        return None  # a single chunk: chunk_iter
    if dimensionality != ndim + 1 or not 1 <= width <= 8 or len(body) < pos + 10 or flags & ~3:
        raise _Unexpected("layout message (version 4) not understood")
    header = int.from_bytes(body[pos + 2:pos + 10], "little")
    h = pread(28, header)
    if len(h) < 28 or h[:4] != b"FAHD" or h[4] != 0 or h[5] not in (0, 1):
        raise _Unexpected(f"no fixed array header at {header}")
    filtered, entry_size, page_bits = h[5] == 1, h[6], h[7]
    n = int.from_bytes(h[8:16], "little")
    block = int.from_bytes(h[16:24], "little")
    maxshape = dsid.get_space().get_simple_extent_dims(maxdims=True)
    grid = tuple(-(-int(m) // c) for m, c in zip(maxshape, chunks))
    if n != math.prod(grid) or entry_size != (8 + (entry_size - 12) + 4 if filtered else 8) \
            or (filtered and not 1 <= entry_size - 12 <= 8) or page_bits > 32:
        raise _Unexpected("fixed array header does not match the dataset")
    if block == UNDEFINED_ADDRESS:
        return _no_chunks(ndim)
    page = 1 << page_bits
    npages = -(-n // page) if n > page else 0
    bitmap = (npages + 7) // 8
    prefix = 4 + 1 + 1 + 8 + bitmap
    if npages:
        head = pread(prefix, block)
        pages = [i for i in range(npages) if head[14 + i // 8] & (0x80 >> (i % 8))]
        start = block + prefix + 4  # then the prefix's checksum
        parts, where = [], []
        for i in pages:
            count = min(page, n - i * page)
            raw = pread(count * entry_size, start + i * (page * entry_size + 4))
            if len(raw) < count * entry_size:
                raise _Unexpected("fixed array page past the end of the file")
            parts.append(raw)
            where.append(np.arange(i * page, i * page + count, dtype=np.int64))
        raw = b"".join(parts)
        index = np.concatenate(where) if where else np.zeros(0, np.int64)
    else:
        head = pread(prefix + n * entry_size, block)
        raw = head[prefix:]
        if len(raw) < n * entry_size:
            raise _Unexpected("fixed array data block past the end of the file")
        index = np.arange(n, dtype=np.int64)
    if head[:4] != b"FADB" or head[4] != 0 or head[5] != h[5] \
            or int.from_bytes(head[6:14], "little") != header:
        raise _Unexpected(f"no fixed array data block at {block}")
    addrs, sizes, masks = _array_elements(raw, entry_size, filtered,
                                          math.prod(chunks) * dsid.get_type().get_size())
    used = addrs != UNDEFINED_ADDRESS
    index, addrs, sizes, masks = index[used], addrs[used], sizes[used], masks[used]
    offsets = np.stack(np.unravel_index(index, grid), axis=1).astype(np.int64) \
        * np.asarray(chunks, dtype=np.int64) if len(index) else np.zeros((0, ndim), np.int64)
    return offsets, addrs.astype(np.uint64), sizes, masks.astype(np.uint32)


def _array_elements(raw, entry_size: int, filtered: bool, nbytes: int):
    """The chunk addresses, stored sizes and filter masks of a fixed or extensible array's
    elements `raw`: an address, then (filtered) the stored size in `entry_size - 12` bytes
    and the filter mask; unfiltered chunks hold `nbytes`."""
    e = np.frombuffer(raw, np.uint8).reshape(-1, entry_size)
    addrs = e[:, :8].copy().view("<u8").reshape(-1)
    if filtered:
        sizes = np.zeros(len(e), np.uint64)
        for k in range(entry_size - 12):
            sizes |= e[:, 8 + k].astype(np.uint64) << np.uint64(8 * k)
        masks = e[:, entry_size - 4:].copy().view("<u4").reshape(-1)
    else:
        sizes = np.full(len(e), nbytes, np.uint64)
        masks = np.zeros(len(e), np.uint32)
    return addrs, sizes, masks


def _unlimited_axis(dsid, chunks: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    """The one unlimited axis of a dataset whose chunks an extensible array indexes, and the
    chunk grid of its maximum extent (0 on the unlimited axis)."""
    maxshape = dsid.get_space().get_simple_extent_dims(maxdims=True)
    unlimited = [a for a, m in enumerate(maxshape) if m == h5py.h5s.UNLIMITED]
    if len(unlimited) != 1 or len(maxshape) != len(chunks):
        raise _Unexpected(f"an extensible array index for {len(unlimited)} unlimited axes")
    k = unlimited[0]
    grid = tuple(0 if a == k else -(-int(m) // c) for a, (m, c) in enumerate(zip(maxshape, chunks)))
    return k, grid


def _earray_scaled(index, k: int, grid: tuple[int, ...]):
    """The scaled chunk coordinates (n, ndim) of the chunks an extensible array numbers
    `index`: HDF5 numbers a chunk row-major over the grid of the maximum extent with the
    unlimited axis `k` moved first, the others in their order (H5VM_swizzle_coords)."""
    index = np.asarray(index, dtype=np.int64)
    other = [a for a in range(len(grid)) if a != k]
    sizes = [grid[a] for a in other]
    per = math.prod(sizes)
    if per <= 0:
        raise _Unexpected("an extensible array over an empty maximum extent")
    out = np.empty((len(index), len(grid)), np.int64)
    out[:, k] = index // per
    for a, col in zip(other, np.unravel_index(index % per, sizes) if other else ()):
        out[:, a] = col
    return out


_EA_HEADER = 72  # bytes of an extensible array header (8-byte addresses and lengths)


def _extensible_array(pread, file_size: int, body: bytes, dsid, chunks: tuple[int, ...]):
    """Layout message version 4/5 with an extensible array index (type 4: one unlimited
    axis): its header, index block (the first elements, the first data blocks' addresses,
    the super blocks' addresses), super blocks (data block addresses, a bitmap of each
    paged data block's pages written), data blocks and their pages. Element i below the
    header's "max index set" (HDF5 reads no further) is the chunk numbered i
    (`_earray_scaled`); an undefined address, or a block or page never written, is a chunk
    never written. Every signature, version, array type, owning header, block offset and
    size is checked, and the header's counts and sizes of the blocks created must be those
    found."""
    ndim = len(chunks)
    flags, dimensionality, width = body[2], body[3], body[4]
    pos = 5 + width * dimensionality
    if dimensionality != ndim + 1 or not 1 <= width <= 8 or flags & ~3 or len(body) < pos + 14:
        raise _Unexpected("layout message (version 4) not understood")
    dims = tuple(int.from_bytes(body[5 + width * i:5 + width * (i + 1)], "little")
                 for i in range(dimensionality))
    itemsize = dsid.get_type().get_size()
    if dims != tuple(chunks) + (itemsize,):
        raise _Unexpected(f"layout message chunk dimensions {dims} for chunks {chunks}")
    # max elements bits, index block elements, min data block pointers of a super block,
    # min elements of a data block, page bits (the header stores the middle two swapped)
    max_bits, iblock_elmts, min_ptrs, min_elmts, page_bits = body[pos + 1:pos + 6]
    header = int.from_bytes(body[pos + 6:pos + 14], "little")
    k, grid = _unlimited_axis(dsid, chunks)
    if header == UNDEFINED_ADDRESS:
        return _no_chunks(ndim)
    if not 0 < header < file_size:
        raise _Unexpected(f"extensible array header address {header}")
    h = pread(_EA_HEADER, header)
    if len(h) < _EA_HEADER or h[:4] != b"EAHD" or h[4] != 0 or h[5] not in (0, 1) \
            or tuple(h[7:12]) != (max_bits, iblock_elmts, min_elmts, min_ptrs, page_bits):
        raise _Unexpected(f"no extensible array header at {header}")
    cls, entry_size = h[5], h[6]
    filtered = cls == 1
    if (not 13 <= entry_size <= 20 if filtered else entry_size != 8) \
            or not 0 < max_bits <= 64 or page_bits > max_bits \
            or min_elmts < 1 or min_elmts & (min_elmts - 1) \
            or min_ptrs < 2 or min_ptrs & (min_ptrs - 1):
        raise _Unexpected("extensible array header not understood")
    # the blocks created (super blocks, their bytes, data blocks, their bytes), one more
    # than the last element set, the elements of the blocks created, the index block
    (n_super, super_bytes, n_data, data_bytes, max_set, realized,
     iblock) = (int.from_bytes(h[12 + 8 * i:20 + 8 * i], "little") for i in range(7))
    if max_set == 0 and iblock == UNDEFINED_ADDRESS:
        return _no_chunks(ndim)
    if max_set > MAX_BLOCKS or not 0 < iblock < file_size:
        raise _Unexpected("extensible array header's element count or index block address")
    # what HDF5 derives from the header (H5EA__hdr_init, H5EA__iblock_alloc): the super
    # blocks (s: 2**(s//2) data blocks of min_elmts * 2**((s+1)//2) elements each), the
    # first ones' data block addresses held by the index block, the rest's super blocks
    n_sblocks = 1 + max_bits - (min_elmts.bit_length() - 1)
    ib_sblocks = 2 * (min_ptrs.bit_length() - 1)
    ib_dblocks = 2 * (min_ptrs - 1)
    if n_sblocks < ib_sblocks:
        raise _Unexpected("extensible array header not understood")
    off_size = (max_bits + 7) // 8  # bytes of a block's offset in the array
    page = 1 << page_bits  # elements of a data block page
    prefix = 14 + off_size  # signature, version, type, header address, block offset

    def block(addr: int, size: int, sig: bytes, what: str, offset: int | None):
        if not 0 < addr or addr + size > file_size:
            raise _Unexpected(f"extensible array {what} address {addr}")
        raw = pread(size, addr)
        if len(raw) < size or raw[:4] != sig or raw[4] != 0 or raw[5] != cls \
                or int.from_bytes(raw[6:14], "little") != header \
                or (offset is not None and int.from_bytes(raw[14:prefix], "little") != offset):
            raise _Unexpected(f"no extensible array {what} at {addr}")
        return raw

    elements = 14 + iblock_elmts * entry_size
    ib = block(iblock, elements + 8 * (ib_dblocks + n_sblocks - ib_sblocks) + 4, b"EAIB",
               "index block", None)
    parts = [(0, ib[14:elements])] if iblock_elmts else []
    ib_addrs = [int.from_bytes(ib[i:i + 8], "little")
                for i in range(elements, elements + 8 * (ib_dblocks + n_sblocks - ib_sblocks), 8)]
    found_super = found_data = super_size = data_size = 0
    held = iblock_elmts  # elements of the blocks found
    start = iblock_elmts  # the super block's first element
    before = 0  # data blocks before it
    for s in range(n_sblocks):
        nblocks, nelmts = 1 << (s // 2), min_elmts << ((s + 1) // 2)
        npages = nelmts // page if nelmts > page else 0
        if s < ib_sblocks:
            addrs, bitmap = ib_addrs[before:before + nblocks], b""
            if npages:
                raise _Unexpected("a paged data block in an extensible array's index block")
        else:
            addr = ib_addrs[ib_dblocks + s - ib_sblocks]
            if addr == UNDEFINED_ADDRESS:
                start += nblocks * nelmts
                before += nblocks
                continue
            if start >= max_set:
                raise _Unexpected(f"extensible array super block at {addr} past the last element")
            if npages and nelmts % page:
                raise _Unexpected("extensible array data blocks of a part of a page")
            bits = (npages + 7) // 8 * nblocks
            size = prefix + bits + 8 * nblocks + 4
            sb = block(addr, size, b"EASB", "super block", start - iblock_elmts)
            bitmap = sb[prefix:prefix + bits]
            addrs = [int.from_bytes(sb[i:i + 8], "little")
                     for i in range(prefix + bits, prefix + bits + 8 * nblocks, 8)]
            found_super += 1
            super_size += size
        for j, addr in enumerate(addrs):
            if addr == UNDEFINED_ADDRESS:
                continue
            first = start + j * nelmts
            if first >= max_set:
                raise _Unexpected(f"extensible array data block at {addr} past the last element")
            # the block's offset as HDF5 writes it: in a super block, of its first element
            # (after the index block's); in the index block, HDF5 counts its data blocks
            # from the index block's first (H5EA__lookup_elmt)
            offset = first - iblock_elmts if s >= ib_sblocks else \
                start - iblock_elmts + (before + j) * nelmts
            found_data += 1
            held += nelmts
            if not npages:
                size = prefix + nelmts * entry_size + 4
                raw = block(addr, size, b"EADB", "data block", offset)
                parts.append((first, raw[prefix:prefix + nelmts * entry_size]))
                data_size += size
                continue
            block(addr, prefix + 4, b"EADB", "data block", offset)
            step = page * entry_size + 4  # each page's elements, then its checksum
            data_size += prefix + 4 + npages * step
            for p in range(npages):
                bit = j * npages + p
                if not bitmap[bit // 8] & (0x80 >> (bit % 8)):
                    continue  # a page never written
                if first + p * page >= max_set:
                    raise _Unexpected(f"extensible array page at {addr} past the last element")
                raw = pread(page * entry_size, addr + prefix + 4 + p * step)
                if len(raw) < page * entry_size:
                    raise _Unexpected("extensible array page past the end of the file")
                parts.append((first + p * page, raw))
        start += nblocks * nelmts
        before += nblocks
    if (found_super, found_data, super_size, data_size, held) != (n_super, n_data, super_bytes,
                                                                 data_bytes, realized):
        raise _Unexpected("extensible array blocks found are not those its header counts")
    if not parts:
        return _no_chunks(ndim)
    index = np.concatenate([np.arange(first, first + len(raw) // entry_size, dtype=np.int64)
                            for first, raw in parts])
    addrs, sizes, masks = _array_elements(b"".join(raw for _first, raw in parts), entry_size,
                                          filtered, math.prod(chunks) * itemsize)
    used = (addrs != UNDEFINED_ADDRESS) & (index < max_set)
    index, addrs, sizes, masks = index[used], addrs[used], sizes[used], masks[used]
    offsets = _earray_scaled(index, k, grid) * np.asarray(chunks, dtype=np.int64)
    return offsets, addrs.astype(np.uint64), sizes, masks.astype(np.uint32)
